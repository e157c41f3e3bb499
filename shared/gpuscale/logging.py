"""structlog set-up: JSON lines off a terminal, readable console on one; every record carries ``service``."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure(service: str, level: str = "info", stream: TextIO | None = None) -> None:
    stream = stream or sys.stderr
    renderer: Any
    if stream.isatty():
        renderer = structlog.dev.ConsoleRenderer(colors=True)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _add_service(service),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(stream),
        cache_logger_on_first_use=False,
    )
    # Libraries (aiohttp access log, nats, kubernetes_asyncio) log through stdlib.
    logging.basicConfig(stream=stream, level=max(_LEVELS.get(level, logging.INFO), logging.WARNING))


def _add_service(service: str) -> Any:
    def processor(_logger: Any, _name: str, event: dict[str, Any]) -> dict[str, Any]:
        event.setdefault("service", service)
        return event

    return processor


def get_logger(**bound: Any) -> Any:
    return structlog.get_logger().bind(**bound)


class OncePerKey:
    """Log a repeated fault once per key (source, reason), count the rest."""

    def __init__(self, limit: int = 10_000) -> None:
        self._seen: set[tuple[str, ...]] = set()
        self._limit = limit

    def first(self, *key: str) -> bool:
        if key in self._seen:
            return False
        if len(self._seen) >= self._limit:  # bounded: a flood of new keys can't grow memory
            self._seen.clear()
        self._seen.add(key)
        return True

    def forget(self, *key: str) -> None:
        self._seen.discard(key)


class LogThrottle:
    """At most one line per key per ``period_s``; the lines held back are counted on the next one.

    Key by our own words, never by what a sender names, so a flood makes one line a minute."""

    def __init__(
        self, period_s: float = 60.0, clock: Callable[[], float] = time.monotonic, limit: int = 1_000
    ) -> None:
        self.period_s = period_s
        self._clock = clock
        self._limit = limit
        self._next: dict[tuple[str, ...], float] = {}
        self._held: dict[tuple[str, ...], int] = {}

    def allow(self, *key: str) -> int | None:
        """None: stay quiet. Otherwise log now, saying how many were held back."""
        now = self._clock()
        due = self._next.get(key)
        if due is not None and now < due:
            self._held[key] = self._held.get(key, 0) + 1
            return None
        if due is None and len(self._next) >= self._limit:  # bounded even if a caller errs
            self._next.clear()
            self._held.clear()
        self._next[key] = now + self.period_s
        return self._held.pop(key, 0)
