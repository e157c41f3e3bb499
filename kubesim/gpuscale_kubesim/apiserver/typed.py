"""Built-in kinds decoded as the API server's Go types would decode them. Pure.

The schemas are Kubernetes' own OpenAPI definitions (``data/builtin-
openapi.json.gz``, written by ``kubesim/tools/gen_builtin_schemas.py``).
Decoding a request body against them gives what a real server gives:

- a value of the wrong JSON type is a 400 ``BadRequest`` (``json: cannot
  unmarshal string into Go struct field DeploymentSpec.spec.replicas of type
  int32``), as is a Time or MicroTime that does not parse (a MicroTime needs
  its six fractional digits) or a malformed quantity;
- a field the type does not have is dropped and reported
  (``spec.template.spec.containers[0].foo``): the caller turns it into a
  ``Warning`` header, or a 400 with ``fieldValidation=Strict``.
"""

from __future__ import annotations

import base64
import datetime as dt
import gzip
import importlib.resources
import json
import re
from dataclasses import dataclass
from functools import cache
from typing import Any

from gpuscale_kubesim.apiserver.errors import ApiError
from gpuscale_kubesim.apiserver.structural import is_integer, json_type

Obj = dict[str, Any]
DATA_FILE = "data/builtin-openapi.json.gz"
META = "io.k8s.apimachinery.pkg.apis.meta.v1."
TIME = META + "Time"
MICRO_TIME = META + "MicroTime"
_QUANTITY = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?)$")
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$")
_RFC3339_MICRO = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}(Z|[+-]\d{2}:\d{2})$")
_INT_RANGES = {"int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1)}


@dataclass(frozen=True)
class OpenAPIDefinitions:
    version: str
    definitions: dict[str, Obj]
    by_gvk: dict[tuple[str, str, str], str]

    def name_for(self, group: str, version: str, kind: str) -> str | None:
        return self.by_gvk.get((group, version, kind))


@cache
def definitions() -> OpenAPIDefinitions:
    raw = importlib.resources.files("gpuscale_kubesim").joinpath(DATA_FILE).read_bytes()
    doc = json.loads(gzip.decompress(raw))
    defs: dict[str, Obj] = doc["definitions"]
    by_gvk: dict[tuple[str, str, str], str] = {}
    for name, schema in defs.items():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            by_gvk.setdefault((gvk.get("group", ""), gvk["version"], gvk["kind"]), name)
    return OpenAPIDefinitions(str(doc["kubernetesVersion"]), defs, by_gvk)


class DecodeError(Exception):
    """The body cannot be decoded into the kind's Go type."""


def decode(group: str, version: str, kind: str, obj: Obj) -> list[str]:
    """Check ``obj`` against the kind's type; drop unknown fields in place and return their paths.

    Raises :class:`ApiError` 400 as the server's decoder does. A kind without
    a definition (none is served) is left alone.
    """
    defs = definitions()
    name = defs.name_for(group, version, kind)
    if name is None:
        return []
    unknown: list[str] = []
    try:
        _decode_object(defs.definitions, name, obj, "", unknown)
    except DecodeError as e:
        raise ApiError(
            400, f'{kind} in version "{version}" cannot be handled as a {kind}: {e}', "BadRequest"
        ) from None
    return unknown


def _resolve(defs: dict[str, Obj], schema: Obj) -> tuple[Obj, str | None]:
    ref = schema.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        return defs[name], name
    return schema, None


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _go_type(defs: dict[str, Obj], schema: Obj) -> str:
    resolved, name = _resolve(defs, schema)
    if name is not None and resolved.get("type") == "object":
        return f"{name.rsplit('.', 2)[-2]}.{_short(name)}"
    kind = resolved.get("type")
    if kind == "array":
        items = resolved.get("items")
        return "[]" + (_go_type(defs, items) if isinstance(items, dict) else "interface {}")
    if kind == "object":
        additional = resolved.get("additionalProperties")
        inner = _go_type(defs, additional) if isinstance(additional, dict) else "interface {}"
        return f"map[string]{inner}"
    if kind == "integer":
        return str(resolved.get("format") or "int64")
    if kind == "number":
        return "float64"
    if kind == "boolean":
        return "bool"
    if kind == "string":
        if name is not None:
            return f"{name.rsplit('.', 2)[-2]}.{_short(name)}"
        return "string"
    return "interface {}"


def _unmarshal_error(value: Any, struct: str, path: str, go_type: str) -> DecodeError:
    what = json_type(value)
    what = "number" if what == "integer" else "bool" if what == "boolean" else what
    if what in ("number",) and go_type.startswith("int"):
        what = f"number {value}"
    return DecodeError(
        f"json: cannot unmarshal {what} into Go struct field {struct}.{path} of type {go_type}"
    )


def _decode_object(defs: dict[str, Obj], name: str, obj: Any, path: str, unknown: list[str]) -> None:
    schema = defs[name]
    props: Obj = schema.get("properties") or {}
    struct = _short(name)
    for key in list(obj):
        sub_path = f"{path}.{key}" if path else key
        if key not in props:
            unknown.append(sub_path)
            del obj[key]
            continue
        _decode_value(defs, props[key], obj[key], sub_path, struct, unknown)


def _plain(path: str) -> str:
    """Go's struct-field path: no list indexes."""
    return re.sub(r"\[\d+\]", "", path)


def _decode_value(
    defs: dict[str, Obj], schema: Obj, value: Any, path: str, struct: str, unknown: list[str]
) -> None:
    if value is None:
        return  # JSON null leaves the Go zero value
    resolved, name = _resolve(defs, schema)
    if name in (TIME, MICRO_TIME):
        _decode_time(name, value, path, struct)
        return
    fmt = resolved.get("format")
    if fmt == "int-or-string":
        if not (isinstance(value, str) or is_integer(value)):
            raise _unmarshal_error(value, struct, _plain(path), "intstr.IntOrString")
        return
    if fmt == "quantity":
        text = str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value
        if not isinstance(text, str) or not _QUANTITY.match(text):
            raise DecodeError(
                "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
            )
        return
    kind = resolved.get("type")
    if kind is None:
        return  # any JSON (runtime.RawExtension, apiextensions JSON)
    go_type = _go_type(defs, schema)
    if kind == "object":
        if not isinstance(value, dict):
            raise _unmarshal_error(value, struct, _plain(path), go_type)
        if resolved.get("properties") is not None and name is not None:
            _decode_object(defs, name, value, path, unknown)
            return
        additional = resolved.get("additionalProperties")
        if isinstance(additional, dict):
            for key, item in value.items():
                _decode_value(defs, additional, item, f"{path}.{key}", struct, unknown)
        return
    if kind == "array":
        if not isinstance(value, list):
            raise _unmarshal_error(value, struct, _plain(path), go_type)
        items = resolved.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _decode_value(defs, items, item, f"{path}[{i}]", struct, unknown)
        return
    if kind == "string":
        if not isinstance(value, str):
            raise _unmarshal_error(value, struct, _plain(path), go_type)
        if fmt == "byte":
            try:
                base64.b64decode(value, validate=True)
            except ValueError:
                raise DecodeError(f"illegal base64 data in {_plain(path)}") from None
        return
    if kind == "integer":
        if not is_integer(value):
            raise _unmarshal_error(value, struct, _plain(path), go_type)
        low, high = _INT_RANGES.get(str(fmt or "int64"), _INT_RANGES["int64"])
        if not low <= int(value) <= high:
            raise _unmarshal_error(value, struct, _plain(path), go_type)
        return
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _unmarshal_error(value, struct, _plain(path), go_type)
        return
    if kind == "boolean" and not isinstance(value, bool):
        raise _unmarshal_error(value, struct, _plain(path), go_type)


def _decode_time(name: str, value: Any, path: str, struct: str) -> None:
    if not isinstance(value, str):
        raise _unmarshal_error(value, struct, _plain(path), "v1." + _short(name))
    if name == MICRO_TIME:
        layout, ok = "2006-01-02T15:04:05.000000Z07:00", bool(_RFC3339_MICRO.match(value))
    else:
        layout, ok = "2006-01-02T15:04:05Z07:00", bool(_RFC3339.match(value))
    if ok:
        try:
            dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            ok = False
    if not ok:
        raise DecodeError(f'parsing time "{value}" as "{layout}": cannot parse "{value}" as "{layout}"')


def decode_meta(obj: Obj) -> list[str]:
    """A custom resource's ``metadata`` as ObjectMeta (the rest is its CRD schema's business)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return []
    unknown: list[str] = []
    try:
        _decode_object(definitions().definitions, META + "ObjectMeta", meta, "metadata", unknown)
    except DecodeError as e:
        kind, version = str(obj.get("kind") or ""), str(obj.get("apiVersion") or "").rpartition("/")[2]
        raise ApiError(
            400, f'{kind} in version "{version}" cannot be handled as a {kind}: {e}', "BadRequest"
        ) from None
    return unknown
