"""``/openapi/v2`` in the protobuf form client-go asks for first. Pure.

kubectl's client-side validation (where the server cannot validate a kind,
such as a custom resource whose CRD is missing) reads the swagger-2.0
document as a gnostic ``openapi.v2.Document`` message
(``application/com.github.proto-openapi.spec.v2@v1.0+protobuf``). This
writes that message straight in the protobuf wire format: the document's
info and definitions (each Schema with the fields validation uses, vendor
extensions as YAML), with the field numbers of gnostic's OpenAPIv2 schema.
"""

from __future__ import annotations

import json
import struct
from typing import Any, Final

Obj = dict[str, Any]
ACCEPT: Final = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"  # what clients ask for
CONTENT_TYPE: Final = (
    "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"  # what the API server answers
)

# Field numbers of openapi.v2.Schema.
_REF, _FORMAT, _TITLE, _DESCRIPTION, _DEFAULT = 1, 2, 3, 4, 5
_MULTIPLE_OF, _MAXIMUM, _EXCLUSIVE_MAXIMUM, _MINIMUM, _EXCLUSIVE_MINIMUM = 6, 7, 8, 9, 10
_MAX_LENGTH, _MIN_LENGTH, _PATTERN, _MAX_ITEMS, _MIN_ITEMS, _UNIQUE_ITEMS = 11, 12, 13, 14, 15, 16
_MAX_PROPERTIES, _MIN_PROPERTIES, _REQUIRED, _ENUM = 17, 18, 19, 20
_ADDITIONAL_PROPERTIES, _TYPE, _ITEMS, _ALL_OF, _PROPERTIES, _VENDOR_EXTENSION = 21, 22, 23, 24, 25, 31


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # negative int64s are ten-byte two's complement
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _key(field: int, wire: int) -> bytes:
    return _varint(field << 3 | wire)


def _bytes(field: int, data: bytes) -> bytes:
    return _key(field, 2) + _varint(len(data)) + data


def _string(field: int, text: str) -> bytes:
    return _bytes(field, text.encode()) if text else b""


def _int(field: int, value: Any) -> bytes:
    return _key(field, 0) + _varint(int(value)) if value is not None else b""


def _bool(field: int, value: Any) -> bytes:
    return _key(field, 0) + b"\x01" if value else b""


def _double(field: int, value: Any) -> bytes:
    return _key(field, 1) + struct.pack("<d", float(value)) if value is not None else b""


def _any_yaml(value: Any) -> bytes:
    """openapi.v2.Any with its ``yaml`` field (JSON is YAML)."""
    return _string(2, json.dumps(value, separators=(",", ":"), sort_keys=True))


def _named(field: int, name: str, value: bytes) -> bytes:
    return _bytes(field, _string(1, name) + _bytes(2, value))


def schema(node: Obj) -> bytes:
    out = bytearray()
    out += _string(_REF, str(node.get("$ref") or ""))
    out += _string(_FORMAT, str(node.get("format") or ""))
    out += _string(_TITLE, str(node.get("title") or ""))
    out += _string(_DESCRIPTION, str(node.get("description") or ""))
    if "default" in node:
        out += _bytes(_DEFAULT, _any_yaml(node["default"]))
    out += _double(_MULTIPLE_OF, node.get("multipleOf"))
    out += _double(_MAXIMUM, node.get("maximum"))
    out += _bool(_EXCLUSIVE_MAXIMUM, node.get("exclusiveMaximum"))
    out += _double(_MINIMUM, node.get("minimum"))
    out += _bool(_EXCLUSIVE_MINIMUM, node.get("exclusiveMinimum"))
    out += _int(_MAX_LENGTH, node.get("maxLength"))
    out += _int(_MIN_LENGTH, node.get("minLength"))
    out += _string(_PATTERN, str(node.get("pattern") or ""))
    out += _int(_MAX_ITEMS, node.get("maxItems"))
    out += _int(_MIN_ITEMS, node.get("minItems"))
    out += _bool(_UNIQUE_ITEMS, node.get("uniqueItems"))
    out += _int(_MAX_PROPERTIES, node.get("maxProperties"))
    out += _int(_MIN_PROPERTIES, node.get("minProperties"))
    for name in node.get("required") or []:
        out += _string(_REQUIRED, str(name))
    for option in node.get("enum") or []:
        out += _bytes(_ENUM, _any_yaml(option))
    additional = node.get("additionalProperties")
    if isinstance(additional, dict):
        out += _bytes(_ADDITIONAL_PROPERTIES, _bytes(1, schema(additional)))
    elif isinstance(additional, bool):
        out += _bytes(_ADDITIONAL_PROPERTIES, _key(2, 0) + (b"\x01" if additional else b"\x00"))
    kinds = node.get("type")
    if kinds:
        values = kinds if isinstance(kinds, list) else [kinds]
        out += _bytes(_TYPE, b"".join(_string(1, str(v)) for v in values))
    items = node.get("items")
    if isinstance(items, dict):
        out += _bytes(_ITEMS, _bytes(1, schema(items)))
    for sub in node.get("allOf") or []:
        out += _bytes(_ALL_OF, schema(sub))
    props = node.get("properties")
    if isinstance(props, dict) and props:
        out += _bytes(_PROPERTIES, b"".join(_named(1, k, schema(v)) for k, v in props.items()))
    for key, value in node.items():
        if key.startswith("x-"):
            out += _named(_VENDOR_EXTENSION, key, _any_yaml(value))
    return bytes(out)


def document(doc: Obj) -> bytes:
    """An ``openapi.v2.Document``: swagger, info and definitions (paths are read from v3)."""
    info = doc.get("info") or {}
    out = bytearray()
    out += _string(1, str(doc.get("swagger") or "2.0"))
    out += _bytes(2, _string(1, str(info.get("title") or "")) + _string(2, str(info.get("version") or "")))
    definitions = doc.get("definitions") or {}
    out += _bytes(9, b"".join(_named(1, name, schema(s)) for name, s in definitions.items()))
    return bytes(out)
