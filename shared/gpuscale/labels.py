"""Kubernetes label selectors as strings. Purely computational."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def selector_string(selector: Mapping[str, Any] | None) -> str:
    """A LabelSelector object in its string form, as a Scale's ``status.selector`` holds it."""
    if not selector:
        return ""
    parts = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
        if op == "In":
            parts.append(f"{key} in ({','.join(sorted(values))})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(sorted(values))})")
        elif op == "Exists":
            parts.append(key)
        elif op == "DoesNotExist":
            parts.append(f"!{key}")
    return ",".join(parts)
