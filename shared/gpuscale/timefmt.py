"""Times and durations as people and the Kubernetes API write them. Pure."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Final

DURATION_EXAMPLES: Final = "30, 30s, 500ms or 2m"
_DURATION: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def format_time(unix_s: float) -> str:
    """A Kubernetes Time: RFC 3339 in UTC, whole seconds."""
    return _format_second(math.floor(unix_s))


@lru_cache(maxsize=256)
def _format_second(second: int) -> str:
    # A status names the same few seconds over and over (now, the last scale): format each once.
    return datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(unix_s: float) -> str:
    """A Kubernetes MicroTime: RFC 3339 in UTC with microseconds."""
    return datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: Any) -> float | None:
    """Unix seconds from an RFC 3339 (Micro)Time string, or None when it is not one."""
    if not isinstance(text, str) or not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_duration(text: str) -> float:
    """Seconds from ``30``, ``30s``, ``500ms``, ``2m``, ``1h``: finite and > 0,
    else ValueError with a short reason."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError(f"expected a duration such as {DURATION_EXAMPLES}")
    value = float(m.group(1)) * _UNITS[m.group(2)]
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be greater than zero")
    return value
