"""Why a payload was rejected: msgspec's validation messages as :data:`~gpuscale.wire_limits.ERROR_CODES`, and the fields a reader does not know.

Purely computational: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import cache
from typing import Any, Final

import msgspec
from msgspec import Struct

from gpuscale.wire_limits import WIRE_VERSION, WireError

# --- rejections: msgspec's error, as our reason codes ------------------------------

# msgspec's messages: "Expected `int`, got `str` - at `$.seq`",
# "Expected `float` >= 0.0 - at `$.ts`", "Object missing required field `id`",
# "Invalid enum value 'maybe' - at `$.outcome`", "Invalid value 2 - at `$.v`".
_AT = re.compile(r"^(?P<what>.*?)(?: - at `(?P<path>[^`]*)`)?$", re.DOTALL)
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]*)`")
_CONSTRAINT = re.compile(r"^Expected `[^`]*` (?:of length )?(?:>=|<=|>|<)")
_PATH_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[(\d+)\]")


def rejection(message: str, payload: Callable[[], Any]) -> WireError:
    """A msgspec validation message about a whole payload, as a :class:`WireError`.

    ``payload`` decodes it without a schema, only on this path: the envelope is judged first."""
    raw = payload()
    if not isinstance(raw, dict):
        return WireError("not_a_map", f"payload must be a map, got {_type_name(raw)}", "$")
    if "v" not in raw:
        return WireError("missing_field", "$.v is missing", "$.v")
    v = raw["v"]
    if type(v) is not int or v != WIRE_VERSION:
        return WireError("wrong_version", f"v={v!r}, this consumer speaks v{WIRE_VERSION}", "$.v")
    return classify(message, raw)


def classify(message: str, raw: Any, base: str = "$") -> WireError:
    """One msgspec validation message as our code. ``raw`` is the value the
    message's path starts from; ``base`` is that value's own path in the payload
    (``$.gpus[3]`` for one GPU entry checked alone). A value out of range that
    is NaN or infinite is ``not_finite``."""
    m = _AT.match(message)
    what, where = (m.group("what"), m.group("path") or "$") if m else (message, "$")
    path = base + where[1:]
    missing = _MISSING.match(what)
    if missing:
        path = f"{path}.{missing.group('field')}"
        return WireError("missing_field", f"{path} is missing", path)
    if what.startswith("Expected `") and ", got `" in what:
        return WireError("wrong_type", f"{path}: {what}", path)
    if _CONSTRAINT.match(what) or what.startswith("Invalid enum value"):
        value = _at(raw, where)
        if isinstance(value, float) and not math.isfinite(value):
            return WireError("not_finite", f"{path} must be finite, got {value}", path)
        return WireError("out_of_range", f"{path}: {what}", path)
    return WireError("invalid", f"{path}: {what}", path)


_TYPE_NAMES: Final[dict[type, str]] = {dict: "map", list: "array", str: "string", bytes: "bytes"}


def _type_name(value: Any) -> str:
    return _TYPE_NAMES.get(type(value), type(value).__name__)


def _at(raw: Any, path: str) -> Any:
    """The value at a msgspec path (``$.gpus[0].util``) in an untyped payload, or None."""
    node = raw
    for name, index in _PATH_STEP.findall(path):
        try:
            node = node[name] if name else node[int(index)]
        except (KeyError, IndexError, TypeError):
            return None
    return node


# --- fields and metric names this reader does not know -----------------------------


@cache
def _known_fields(cls: type[Struct]) -> tuple[frozenset[str], dict[str, type[Struct]]]:
    """A Struct's wire names, and the Structs nested under its fields (lists included)."""
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    names = {f.encode_name for f in info.fields}
    if info.tag_field is not None:
        names.add(info.tag_field)
    nested: dict[str, type[Struct]] = {}
    for f in info.fields:
        t: Any = f.type
        while True:
            if isinstance(t, msgspec.inspect.UnionType):
                structs = [x for x in t.types if isinstance(x, msgspec.inspect.StructType)]
                t = structs[0] if structs else None
            elif isinstance(t, msgspec.inspect.ListType | msgspec.inspect.VarTupleType):
                t = t.item_type
            else:
                break
        if isinstance(t, msgspec.inspect.StructType):
            nested[f.encode_name] = t.cls
    return frozenset(names), nested


def unknown_fields(payload: Any, cls: type[Struct], prefix: str = "") -> set[str]:
    """Keys of an untyped payload that ``cls`` does not know, as dotted paths
    without list indexes (``gpus.owners.vendor``, ``averages.tokens_per_s``).
    Free-form maps (a decision's ``inputs``) are not looked into."""
    out: set[str] = set()
    if not isinstance(payload, dict):
        return out
    names, nested = _known_fields(cls)
    for key, value in payload.items():
        if key not in names:
            out.add(f"{prefix}{key}")
            continue
        child = nested.get(key)
        if child is None:
            continue
        if isinstance(value, list):
            for item in value:
                out |= unknown_fields(item, child, f"{prefix}{key}.")
        else:
            out |= unknown_fields(value, child, f"{prefix}{key}.")
    return out
