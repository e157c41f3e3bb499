"""Kubernetes label selectors as strings. Purely computational."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
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


class SelectorError(ValueError):
    """A selector string the API server would not parse."""


_KEY = r"[A-Za-z0-9_./-]+"
_EQUALITY = re.compile(rf"^\s*({_KEY})\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")
_SET_BASED = re.compile(rf"^\s*(!?)\s*({_KEY})\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def holds(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op in ("=", "in"):
            return value in self.values
        if self.op in ("!=", "notin"):
            return value not in self.values
        if self.op == "exists":
            return self.key in labels
        return self.key not in labels


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """A parsed selector string (``app=x,tier!=db,env in (a,b),!canary``);
    the empty selector matches everything, as the API server's does."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.holds(labels) for r in self.requirements)


def _terms(text: str) -> list[str]:
    """Split on the commas outside parentheses."""
    terms: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        if ch == "," and depth == 0:
            terms.append("".join(current))
            current = []
        else:
            current.append(ch)
    terms.append("".join(current))
    return [t for t in terms if t.strip()]


def parse_selector(text: str) -> LabelSelector:
    """A selector string as a Scale's ``status.selector`` holds it, or SelectorError."""
    requirements: list[Requirement] = []
    for term in _terms(text):
        eq = _EQUALITY.match(term)
        if eq:
            key, op, value = eq.groups()
            requirements.append(Requirement(key, "=" if op == "==" else op, frozenset({value})))
            continue
        match = _SET_BASED.match(term)
        if not match:
            raise SelectorError(f"unable to parse requirement {term.strip()!r}")
        negate, key, op, values = match.groups()
        if op:
            if negate:
                raise SelectorError(f"unable to parse requirement {term.strip()!r}")
            requirements.append(
                Requirement(key, op, frozenset(v.strip() for v in values.split(",") if v.strip()))
            )
        else:
            requirements.append(Requirement(key, "!" if negate else "exists"))
    return LabelSelector(tuple(requirements))
