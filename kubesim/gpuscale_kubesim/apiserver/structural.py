"""A CRD's structural schema at work: pruning, defaulting, validation. Pure.

What the apiextensions API server does to a custom resource on every write:

1. :func:`prune` drops every field the schema does not declare (unless
   ``x-kubernetes-preserve-unknown-fields``) and reports its path, which
   becomes the ``unknown field "spec.foo"`` warning (or the 400 of
   ``fieldValidation=Strict``);
2. :func:`apply_defaults` fills ``default`` values in and drops ``null``
   where the schema is not ``nullable``;
3. :func:`validate` checks the OpenAPI v3 value validations (type, enum,
   format, bounds, lengths, items, required, ...) and words each failure
   as kube-openapi does (``spec.minReplicas in body should be greater than
   or equal to 0``), as field errors with kube-openapi's paths (array items
   as ``spec.metrics.0``).

CEL rules (``x-kubernetes-validations``) are in :mod:`gpuscale_kubesim.apiserver.cel`.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import re
import uuid
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from gpuscale_kubesim.apiserver import fielderrors as fe
from gpuscale_kubesim.apiserver.fielderrors import FieldError

Obj = dict[str, Any]
PRESERVE = "x-kubernetes-preserve-unknown-fields"
EMBEDDED = "x-kubernetes-embedded-resource"
INT_OR_STRING = "x-kubernetes-int-or-string"

# What metadata keeps (ObjectMeta's fields); anything else under metadata is unknown.
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)


def json_type(value: Any) -> str:
    """The JSON type name kube-openapi reports for a value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def is_integer(value: Any) -> bool:
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and value.is_integer())


def _matches_type(value: Any, wanted: str) -> bool:
    if wanted == "object":
        return isinstance(value, dict)
    if wanted == "array":
        return isinstance(value, list)
    if wanted == "string":
        return isinstance(value, str)
    if wanted == "integer":
        return is_integer(value)
    if wanted == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if wanted == "boolean":
        return isinstance(value, bool)
    return True


# --- pruning ---------------------------------------------------------------------


def child_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def prune(schema: Obj, obj: Any, *, root: bool = True) -> list[str]:
    """Drop undeclared fields of ``obj`` in place; return their paths (``spec.metrics[0].foo``)."""
    unknown: list[str] = []
    _prune(schema, obj, "", root, unknown)
    return unknown


def _prune(schema: Obj, value: Any, path: str, root: bool, unknown: list[str]) -> None:
    if isinstance(value, dict):
        props: Obj = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        preserve = bool(schema.get(PRESERVE))
        keep_meta = root or bool(schema.get(EMBEDDED))
        for key in list(value):
            sub = child_path(path, key)
            if keep_meta and key in ("apiVersion", "kind"):
                continue
            if keep_meta and key == "metadata":
                _prune_metadata(value[key], sub, root, unknown)
                continue
            if key in props:
                _prune(props[key], value[key], sub, False, unknown)
            elif isinstance(additional, dict):
                _prune(additional, value[key], sub, False, unknown)
            elif additional is True or preserve:
                continue
            else:
                unknown.append(sub)
                del value[key]
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _prune(items, item, f"{path}[{i}]", False, unknown)


def _prune_metadata(meta: Any, path: str, root: bool, unknown: list[str]) -> None:
    if not isinstance(meta, dict):
        return
    allowed = (
        OBJECT_META_FIELDS
        if root
        else frozenset({"name", "namespace", "labels", "annotations", "finalizers"})
    )
    for key in list(meta):
        if key not in allowed:
            unknown.append(child_path(path, key))
            del meta[key]


# --- defaulting --------------------------------------------------------------------


def apply_defaults(schema: Obj, value: Any) -> None:
    """Fill ``default`` into missing fields; drop nulls the schema does not allow."""
    if isinstance(value, dict):
        props: Obj = schema.get("properties") or {}
        for key, sub in props.items():
            if key in value and value[key] is None and not sub.get("nullable"):
                if "default" in sub:
                    value[key] = copy.deepcopy(sub["default"])
                else:
                    del value[key]
            elif key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                apply_defaults(sub, value[key])
        additional = schema.get("additionalProperties")
        if isinstance(additional, dict):
            for key in [k for k in value if k not in props]:
                apply_defaults(additional, value[key])
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            for item in value:
                apply_defaults(items, item)


# --- validation --------------------------------------------------------------------


def validate(schema: Obj, value: Any, path: str = "") -> list[FieldError]:
    """Every value validation that fails, as kube-openapi reports it."""
    errors: list[FieldError] = []
    _validate(schema, value, path, errors, root=not path)
    return errors


def _in_body(path: str) -> str:
    return f"{path or 'body'} in body"


def _validate(schema: Obj, value: Any, path: str, errors: list[FieldError], root: bool = False) -> None:
    if value is None:
        if schema.get("nullable") or not schema.get("type"):
            return
        errors.append(
            fe.type_invalid(path, "null", f'{_in_body(path)} must be of type {schema["type"]}: "null"')
        )
        return
    if schema.get(INT_OR_STRING):
        if not (is_integer(value) or isinstance(value, str)):
            errors.append(
                fe.type_invalid(
                    path,
                    json_type(value),
                    f'{_in_body(path)} must be of type integer,string: "{json_type(value)}"',
                )
            )
            return
    elif (wanted := schema.get("type")) and not _matches_type(value, str(wanted)):
        actual = json_type(value)
        errors.append(fe.type_invalid(path, actual, f'{_in_body(path)} must be of type {wanted}: "{actual}"'))
        return
    enum = schema.get("enum")
    if enum is not None and not any(_json_equal(value, option) for option in enum):
        options = [o if isinstance(o, str) else json.dumps(o) for o in enum]
        errors.append(fe.not_supported(path, value, options))
    if isinstance(value, str):
        _validate_string(schema, value, path, errors)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _validate_number(schema, value, path, errors)
    elif isinstance(value, list):
        _validate_array(schema, value, path, errors)
    elif isinstance(value, dict):
        _validate_object(schema, value, path, errors, root)
    _validate_combinators(schema, value, path, errors)


def _json_equal(a: Any, b: Any) -> bool:
    if is_integer(a) and is_integer(b):
        return int(a) == int(b)
    return bool(type(a) is type(b) and a == b) or (
        isinstance(a, int | float)
        and isinstance(b, int | float)
        and not isinstance(a, bool)
        and not isinstance(b, bool)
        and a == b
    )


def _validate_string(schema: Obj, value: str, path: str, errors: list[FieldError]) -> None:
    length = len(value)  # go-openapi counts runes, as Python counts code points
    if (max_length := schema.get("maxLength")) is not None and length > max_length:
        errors.append(fe.too_long_schema(path, value, int(max_length)))
    if (min_length := schema.get("minLength")) is not None and length < min_length:
        errors.append(
            fe.invalid(path, value, f"{_in_body(path)} should be at least {int(min_length)} chars long")
        )
    if (pattern := schema.get("pattern")) is not None and _compiled(str(pattern)).search(value) is None:
        errors.append(fe.invalid(path, value, f"{_in_body(path)} should match '{pattern}'"))
    fmt = schema.get("format")
    if fmt and (check := FORMATS.get(str(fmt))) is not None and not check(value):
        errors.append(fe.type_invalid(path, value, f'{_in_body(path)} must be of type {fmt}: "{value}"'))


@lru_cache(maxsize=512)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def _number_text(value: Any) -> str:
    return fe.go_value(value)


def _validate_number(schema: Obj, value: float, path: str, errors: list[FieldError]) -> None:
    maximum = schema.get("maximum")
    if maximum is not None:
        exclusive = bool(schema.get("exclusiveMaximum"))
        if value > maximum or (exclusive and value == maximum):
            word = "less than" if exclusive else "less than or equal to"
            errors.append(
                fe.invalid(path, value, f"{_in_body(path)} should be {word} {_number_text(maximum)}")
            )
    minimum = schema.get("minimum")
    if minimum is not None:
        exclusive = bool(schema.get("exclusiveMinimum"))
        if value < minimum or (exclusive and value == minimum):
            word = "greater than" if exclusive else "greater than or equal to"
            errors.append(
                fe.invalid(path, value, f"{_in_body(path)} should be {word} {_number_text(minimum)}")
            )
    multiple = schema.get("multipleOf")
    if multiple and (value / multiple) != int(value / multiple):
        errors.append(
            fe.invalid(path, value, f"{_in_body(path)} should be a multiple of {_number_text(multiple)}")
        )


def _validate_array(schema: Obj, value: list[Any], path: str, errors: list[FieldError]) -> None:
    items = schema.get("items")
    if isinstance(items, dict):
        for i, item in enumerate(value):
            _validate(items, item, f"{path}.{i}", errors)
    if (min_items := schema.get("minItems")) is not None and len(value) < min_items:
        errors.append(
            fe.invalid(path, value, f"{_in_body(path)} should have at least {int(min_items)} items")
        )
    if (max_items := schema.get("maxItems")) is not None and len(value) > max_items:
        errors.append(fe.too_many(path, len(value), int(max_items)))
    list_type = schema.get("x-kubernetes-list-type")
    if schema.get("uniqueItems") and len({_canonical(v) for v in value}) != len(value):
        errors.append(fe.invalid(path, value, f"{_in_body(path)} shouldn't contain duplicates"))
    elif list_type == "set":
        seen: set[str] = set()
        for i, item in enumerate(value):
            key = _canonical(item)
            if key in seen:
                errors.append(fe.duplicate(f"{path}[{i}]", item))
            seen.add(key)
    elif list_type == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: set[str] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            key_value = {k: item.get(k) for k in keys}
            key = _canonical(key_value)
            if key in seen_keys:
                errors.append(fe.duplicate(f"{path}[{i}]", key_value))
            seen_keys.add(key)


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def _validate_object(schema: Obj, value: Obj, path: str, errors: list[FieldError], root: bool) -> None:
    for name in schema.get("required") or []:
        if name not in value:
            errors.append(fe.required(child_path(path, name)))
    props: Obj = schema.get("properties") or {}
    additional = schema.get("additionalProperties")
    for key, item in value.items():
        if root and key == "metadata":
            continue  # ObjectMeta is validated as ObjectMeta, not by the schema
        sub = props.get(key)
        if sub is None and isinstance(additional, dict):
            sub = additional
        if sub is not None:
            _validate(sub, item, child_path(path, key), errors)
    if (min_props := schema.get("minProperties")) is not None and len(value) < min_props:
        errors.append(
            fe.invalid(path, value, f"{_in_body(path)} should have at least {int(min_props)} properties")
        )
    if (max_props := schema.get("maxProperties")) is not None and len(value) > max_props:
        errors.append(fe.too_many(path, len(value), int(max_props)))


def _validate_combinators(schema: Obj, value: Any, path: str, errors: list[FieldError]) -> None:
    for sub in schema.get("allOf") or []:
        _validate(sub, value, path, errors)
    any_of = schema.get("anyOf")
    if any_of and not any(not validate(s, value, path) for s in any_of):
        errors.append(fe.invalid(path, value, f'"{path}" must validate at least one schema (anyOf)'))
    one_of = schema.get("oneOf")
    if one_of and sum(1 for s in one_of if not validate(s, value, path)) != 1:
        errors.append(fe.invalid(path, value, f'"{path}" must validate one and only one schema (oneOf)'))
    not_schema = schema.get("not")
    if isinstance(not_schema, dict) and not validate(not_schema, value, path):
        errors.append(fe.invalid(path, value, f'"{path}" must not validate the schema (not)'))


# --- formats -----------------------------------------------------------------------


def is_date_time(text: str) -> bool:
    """strfmt's DateTime: RFC 3339 with optional fractional seconds (a ``Z`` or an offset)."""
    if not _DATE_TIME.match(text):
        return False
    try:
        dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        return False
    return True


_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def _is_date(text: str) -> bool:
    try:
        dt.date.fromisoformat(text)
    except ValueError:
        return False
    return len(text) == 10


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return len(text) == 36


def _is_byte(text: str) -> bool:
    try:
        base64.b64decode(text, validate=True)
    except ValueError:
        return False
    return True


FORMATS: dict[str, Callable[[str], bool]] = {
    "date-time": is_date_time,
    "date": _is_date,
    "uuid": _is_uuid,
    "byte": _is_byte,
}
