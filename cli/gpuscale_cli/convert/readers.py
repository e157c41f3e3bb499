"""Small readers for ``gpuscale convert``: Kubernetes quantities, YAML values as the user wrote them, an object's identity. Pure."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any, Final

# --- small readers ------------------------------------------------------------------------------------

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_SUFFIX: Final = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


_PLAIN = re.compile(r"[A-Za-z0-9_./-]+")


def flow(value: Any) -> str:
    """A value as the user wrote it in YAML (flow style), never a Python repr in a note."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{flow(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, str):
        return value if _PLAIN.fullmatch(value) else '"' + value.replace('"', '\\"') + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity (``20``, ``"500m"``, ``"2Gi"``, ``1e3``) as a float, or ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        number = float(value)
    else:
        m = _QUANTITY.match(str(value).strip())
        if m is None:
            raise ValueError(f"{value!r} is not a quantity")
        number = float(m.group(1))
        try:
            if m.group(2):
                number *= 10.0 ** int(m.group(2)[1:])
            elif m.group(3):
                number *= _SUFFIX[m.group(3)]
        except OverflowError:
            raise ValueError(f"{value!r} is not finite") from None
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not finite")
    return number


def fmt(value: float) -> str:
    return f"{value:g}"


def clean(value: float) -> int | float:
    """Whole numbers as ints (``target: 70``, not ``70.0`` or ``70.00000000000001`` from 0.7 / 0.01);
    others with the float noise of unit conversions rounded away (12 significant digits)."""
    whole = round(value)
    if abs(value - whole) <= 1e-9 * max(1.0, abs(value)):
        return int(whole)
    return float(f"{value:.12g}")


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def identity(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    meta = as_map(obj.get("metadata"))
    name = meta.get("name")
    ns = meta.get("namespace")
    return (
        name if isinstance(name, str) and name else "<unnamed>",
        ns if isinstance(ns, str) and ns else None,
    )


def source_of(obj: Mapping[str, Any]) -> str:
    name, ns = identity(obj)
    where = f"{ns}/{name}" if ns else name
    return f"{obj.get('kind')} {where} ({obj.get('apiVersion')})"
