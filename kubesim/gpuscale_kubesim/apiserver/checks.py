"""What the API server does to a write before it stores it. Pure.

1. decode: the body against the kind's type (built-in kinds: typed, a 400
   for a wrong type; custom resources: their CRD's structural schema) with
   undeclared fields dropped and reported, as ``fieldValidation`` asks:
   ``Strict`` makes them a 400, ``Warn`` (the default) a ``Warning`` header,
   ``Ignore`` nothing;
2. default (the schema's ``default``s for custom resources);
3. validate: the kind's validation, or the CRD schema and its CEL rules,
   as one 422 ``Invalid`` with every field error.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuscale_kubesim.apiserver import cel, structural, typed, validation
from gpuscale_kubesim.apiserver import fielderrors as fe
from gpuscale_kubesim.apiserver.errors import ApiError, bad_request
from gpuscale_kubesim.apiserver.fielderrors import FieldError
from gpuscale_kubesim.apiserver.resources import ResourceDef

Obj = dict[str, Any]
FIELD_VALIDATIONS = ("Strict", "Warn", "Ignore")
CRD_GROUP = "apiextensions.k8s.io"


@dataclass
class WriteOptions:
    """One write's ``fieldValidation`` and the warnings it collects for the answer."""

    field_validation: str = "Warn"
    warnings: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.field_validation not in FIELD_VALIDATIONS:
            raise bad_request(
                f'fieldValidation parameter unsupported: "{self.field_validation}". '
                'Supported values: "Strict", "Warn", "Ignore"'
            )


def report_unknown(rd: ResourceDef, unknown: list[str], opts: WriteOptions) -> None:
    if not unknown or opts.field_validation == "Ignore":
        return
    words = [f'unknown field "{path}"' for path in unknown]
    if opts.field_validation == "Strict":
        raise ApiError(
            400,
            f'{rd.kind} in version "{rd.version}" cannot be handled as a {rd.kind}: '
            f"strict decoding error: {', '.join(words)}",
            "BadRequest",
        )
    opts.warnings.extend(words)


def decode(rd: ResourceDef, obj: Obj, opts: WriteOptions) -> None:
    """Step 1 on a request body in ``rd``'s version (before conversion to storage)."""
    if rd.custom:
        unknown = typed.decode_meta(obj)
        if rd.schema is not None:
            unknown += structural.prune(rd.schema, obj)
    else:
        unknown = typed.decode(rd.group, rd.version, rd.kind, obj)
    report_unknown(rd, unknown, opts)


def default(rd: ResourceDef, obj: Obj) -> None:
    if rd.custom and rd.schema is not None:
        structural.apply_defaults(rd.schema, obj)


_CEL_BLOCKING = frozenset(
    {
        "FieldValueNotSupported",
        "FieldValueRequired",
        "FieldValueTooLong",
        "FieldValueTooMany",
        "FieldValueTypeInvalid",
    }
)
_CEL_NOT_CHECKED = fe.FieldError(
    "FieldValueInvalid",
    "<nil>",
    fe.GoLiteral('"null"'),
    "some validation rules were not checked because the object was invalid; "
    "correct the existing errors to complete validation",
)


def validate(rd: ResourceDef, obj: Obj, old: Obj | None, *, events_api: bool = False) -> None:
    """Step 3 on the object as it would be stored; raises the 422."""
    errors: list[FieldError] = []
    if rd.custom:
        meta = obj.get("metadata") or {}
        errors += validation.validate_object_meta(meta, rd.namespaced, validation.name_is_dns_subdomain)
        if rd.schema is not None:
            errors += structural.validate(rd.schema, obj)
            # As the apiextensions-apiserver (hasBlockingErr): after a wrong type, a missing
            # required field, an unsupported value or a too long/many, CEL rules are not run.
            if any(e.type in _CEL_BLOCKING for e in errors):
                errors.append(_CEL_NOT_CHECKED)
            else:
                errors += cel.validate(rd.schema, obj, cel.ABSENT if old is None else old)
    elif rd.store_key == "events":
        errors += validation.validate_event(obj, events_api)
    elif rd.group == CRD_GROUP and rd.kind == "CustomResourceDefinition":
        errors += validate_crd(obj)
    else:
        errors += validation.validate_builtin(rd.group, rd.kind, obj)
        if old is not None:
            errors += validation.validate_update(rd.group, rd.kind, obj, old)
    if errors:
        raise fe.invalid_error(rd.kind, rd.group, str((obj.get("metadata") or {}).get("name") or ""), errors)


def require_resource_version(rd: ResourceDef, name: str, given: Any) -> None:
    """A PUT without resourceVersion, where the kind's strategy forbids unconditional updates."""
    if rd.unconditional_update or given not in (None, "", "0", 0):
        return
    raise fe.invalid_error(
        rd.kind,
        rd.group,
        name,
        [fe.invalid("metadata.resourceVersion", fe.GoLiteral("0x0"), "must be specified for an update")],
    )


# --- CustomResourceDefinitions ------------------------------------------------------


def validate_crd(crd: Obj) -> list[FieldError]:
    """The CRD rules a hand-written CRD most often breaks (apiextensions validation)."""
    errors = validation.validate_object_meta(
        crd.get("metadata") or {}, False, validation.name_is_dns_subdomain
    )
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = str(spec.get("group") or "")
    plural = str(names.get("plural") or "")
    name = str((crd.get("metadata") or {}).get("name") or "")
    if not group:
        errors.append(fe.required("spec.group"))
    elif "." not in group:
        errors.append(fe.invalid("spec.group", group, "should be a domain with at least one dot"))
    if name != f"{plural}.{group}":
        errors.append(fe.invalid("metadata.name", name, 'must be spec.names.plural+"."+spec.group'))
    for key in ("plural", "kind"):
        if not names.get(key):
            errors.append(fe.required(f"spec.names.{key}"))
    scopes = ["Cluster", "Namespaced"]
    if spec.get("scope") not in scopes:
        errors.append(fe.not_supported("spec.scope", spec.get("scope") or "", scopes))
    versions = spec.get("versions") or []
    if not versions:
        errors.append(
            fe.invalid(
                "spec.versions", fe.GoLiteral("[]"), "must have exactly one version marked as storage version"
            )
        )
    elif sum(1 for v in versions if v.get("storage")) != 1:
        errors.append(
            fe.invalid(
                "spec.versions",
                fe.GoLiteral("[...]"),
                "must have exactly one version marked as storage version",
            )
        )
    for i, version in enumerate(versions):
        where = f"spec.versions[{i}]"
        if not version.get("name"):
            errors.append(fe.required(f"{where}.name"))
        schema = (version.get("schema") or {}).get("openAPIV3Schema")
        if not isinstance(schema, dict):
            errors.append(fe.required(f"{where}.schema.openAPIV3Schema", "schemas are required"))
            continue
        errors += _structural_errors(schema, f"{where}.schema.openAPIV3Schema", root=True)
        for bad in cel.compile_errors(schema, f"{where}.schema.openAPIV3Schema"):
            if bad.message == "Required value":
                errors.append(fe.required(bad.path))
            else:
                errors.append(fe.invalid(bad.path, bad.rule, bad.message))
    return errors


def _structural_errors(schema: Obj, path: str, *, root: bool = False) -> list[FieldError]:
    """A structural schema names a type for every node (or says int-or-string / preserve)."""
    errors: list[FieldError] = []
    typed_node = schema.get("type") or schema.get(structural.INT_OR_STRING) or schema.get(structural.PRESERVE)
    if not typed_node:
        words = "must not be empty at the root" if root else "must not be empty for specified object fields"
        errors.append(fe.required(f"{path}.type", words))
    elif root and schema.get("type") != "object":
        errors.append(fe.invalid(f"{path}.type", schema.get("type"), 'must be "object" at the root'))
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            errors += _structural_errors(sub, f"{path}.properties[{key}]")
    items = schema.get("items")
    if isinstance(items, dict):
        errors += _structural_errors(items, f"{path}.items")
    elif schema.get("type") == "array":
        errors.append(fe.required(f"{path}.items", "must be specified"))
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        errors += _structural_errors(additional, f"{path}.additionalProperties")
    return errors
