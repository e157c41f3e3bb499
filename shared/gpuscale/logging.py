"""structlog set-up: JSON lines off a terminal, readable console on one.

Every record carries ``service``. Event names are snake_case facts
(``decision_published``) with context bound as keys, never prose.
"""

from __future__ import annotations

import logging
import sys
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
    """Log a repeated fault once per key (source, reason), count the rest.

    Consumers see the same bad producer many times a second; one line per
    source is what an operator can read.
    """

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
