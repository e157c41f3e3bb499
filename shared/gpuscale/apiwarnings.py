"""Warnings the Kubernetes API server sends back (the ``Warning`` response header).

The API server drops undeclared fields and says so only there; ``strict`` makes that an error."""

from __future__ import annotations

import os
import re
import threading
from dataclasses import dataclass, field
from typing import Final

from gpuscale.logging import OncePerKey, get_logger

STRICT_ENV: Final = "GPUSCALE_KUBE_WARNINGS"  # "error": dropped fields raise; anything else: log and count
_WARNING = re.compile(r'^\s*(\d{3})\s+\S+\s+"((?:[^"\\]|\\.)*)"')
_DROPPED = ("unknown field", "duplicate field")


def parse_warning_header(value: str) -> str:
    """The text of one ``Warning`` header (RFC 7234: ``299 - "text"``), unescaped."""
    m = _WARNING.match(value)
    if m is None:
        return value.strip()
    return re.sub(r"\\(.)", r"\1", m.group(2))


def drops_fields(text: str) -> bool:
    """Whether the server says it did not keep part of what was sent."""
    return text.startswith(_DROPPED)


@dataclass(frozen=True)
class ApiWarning:
    method: str
    path: str
    text: str

    @property
    def kind(self) -> str:
        return "dropped_field" if drops_fields(self.text) else "other"


@dataclass
class ApiWarnings:
    strict: bool = field(default_factory=lambda: os.environ.get(STRICT_ENV, "").lower() == "error")
    counts: dict[str, int] = field(default_factory=dict)
    dropped: list[ApiWarning] = field(default_factory=list)  # the latest ones, for tests and debugging
    _once: OncePerKey = field(default_factory=OncePerKey)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, method: str, path: str, texts: list[str]) -> list[ApiWarning]:
        """Count and log ``texts``; returns those that say fields were dropped."""
        log = get_logger(component="kube_api")
        out: list[ApiWarning] = []
        for text in texts:
            warning = ApiWarning(method, path, text)
            with self._lock:
                self.counts[warning.kind] = self.counts.get(warning.kind, 0) + 1
                if warning.kind == "dropped_field":
                    self.dropped = [*self.dropped[-99:], warning]
            if warning.kind == "dropped_field":
                out.append(warning)
                if self._once.first(method, path, text):
                    log.error("kube_api_dropped_field", method=method, path=path, warning=text)
            elif self._once.first(method, path, text):
                log.warning("kube_api_warning", method=method, path=path, warning=text)
        return out

    def take_dropped(self) -> list[ApiWarning]:
        with self._lock:
            taken, self.dropped = self.dropped, []
        return taken


API_WARNINGS: Final = ApiWarnings()
