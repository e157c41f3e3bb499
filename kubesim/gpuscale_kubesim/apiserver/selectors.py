"""Label and field selectors, parsed as the API server parses them. Pure."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gpuscale_kubesim.apiserver.errors import ApiError, bad_request

Obj = dict[str, Any]
Predicate = Callable[[Obj], bool]

_SET_EXPR = re.compile(r"^\s*(!?)([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_EXPR = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_./-]*)\s*$")


def _split_terms(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


def _requirement_holds(labels: dict[str, str], key: str, op: str, values: frozenset[str]) -> bool:
    if op in ("=", "=="):
        return labels.get(key) in values
    if op == "!=":
        return labels.get(key) not in values
    if op == "in":
        return labels.get(key) in values
    if op == "notin":
        return labels.get(key) not in values
    if op == "exists":
        return key in labels
    return key not in labels  # "!": does not exist


def label_selector(text: str | None) -> Predicate:
    """``app=x,tier!=db,env in (a,b),!canary,gpu``."""
    if not text or not text.strip():
        return lambda _obj: True
    requirements: list[tuple[str, str, frozenset[str]]] = []
    for term in _split_terms(text):
        eq = _EQ_EXPR.match(term)
        if eq:
            key, op, value = eq.groups()
            requirements.append((key, op, frozenset({value})))
            continue
        match = _SET_EXPR.match(term)
        if not match:
            raise bad_request(f"unable to parse requirement: {term.strip()!r}")
        negate, key, op, values_text = match.groups()
        if op:
            values = frozenset(v.strip() for v in values_text.split(",") if v.strip())
            requirements.append((key, op, values))
        else:
            requirements.append((key, "!" if negate else "exists", frozenset()))

    def predicate(obj: Obj) -> bool:
        labels = obj.get("metadata", {}).get("labels") or {}
        return all(_requirement_holds(labels, key, op, values) for key, op, values in requirements)

    return predicate


def field_value(obj: Obj, path: str) -> str | None:
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, dict) or part not in current:
            return None
        current = current[part]
    if current is None:
        return None
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def field_selector(text: str | None) -> Predicate:
    """``spec.nodeName=gpu-node-1,status.phase!=Succeeded,metadata.name==x``."""
    if not text or not text.strip():
        return lambda _obj: True
    checks: list[tuple[str, bool, str]] = []
    for term in text.split(","):
        if not term.strip():
            continue
        match = re.match(r"^\s*([A-Za-z0-9_.]+)\s*(==|!=|=)\s*(.*?)\s*$", term)
        if not match:
            raise ApiError(400, f"invalid selector: {text!r}; can't understand {term!r}", "BadRequest")
        path, op, value = match.groups()
        checks.append((path, op == "!=", value))

    def predicate(obj: Obj) -> bool:
        for path, negate, value in checks:
            actual = field_value(obj, path)
            # An absent field compares as the empty string, as the server's field sets do.
            equal = (actual if actual is not None else "") == value
            if equal == negate:
                return False
        return True

    return predicate
