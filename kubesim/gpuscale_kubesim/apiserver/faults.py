"""Fault injection: make the next N matching requests fail or wait."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Fault:
    method: str | None  # None: any method
    path_regex: str
    status: int | None  # None: only delay
    remaining: int | None  # None: forever
    delay_s: float = 0.0
    hits: int = 0
    pattern: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.pattern = re.compile(self.path_regex)

    def matches(self, method: str, path: str) -> bool:
        if self.remaining is not None and self.remaining <= 0:
            return False
        if self.method is not None and self.method.upper() != method.upper():
            return False
        return self.pattern.search(path) is not None

    def describe(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "path_regex": self.path_regex,
            "status": self.status,
            "count": self.remaining,
            "delay_s": self.delay_s,
            "hits": self.hits,
        }


class Faults:
    """Rules tried in order; the first that matches a request takes one from its count."""

    def __init__(self) -> None:
        self.rules: list[Fault] = []

    def add(
        self,
        method: str | None,
        path_regex: str,
        status: int | None = None,
        count: int | None = 1,
        delay_s: float = 0.0,
    ) -> Fault:
        if status is not None and not 400 <= status <= 599:
            raise ValueError("status must be an HTTP error code (400-599) or None for a delay only")
        if delay_s < 0:
            raise ValueError("delay_s must not be negative")
        if count is not None and count < 1:
            raise ValueError("count must be at least 1, or None for every request")
        try:
            fault = Fault(method.upper() if method else None, path_regex, status, count, float(delay_s))
        except re.error as e:
            raise ValueError(f"path_regex is not a regular expression: {e}") from None
        self.rules.append(fault)
        return fault

    def take(self, method: str, path: str) -> Fault | None:
        for fault in self.rules:
            if fault.matches(method, path):
                fault.hits += 1
                if fault.remaining is not None:
                    fault.remaining -= 1
                self.rules = [f for f in self.rules if f.remaining is None or f.remaining > 0]
                return fault
        return None

    def clear(self) -> None:
        self.rules.clear()

    def describe(self) -> list[dict[str, Any]]:
        return [f.describe() for f in self.rules]
