"""What a caller sent, cut to fit a log line or a status detail."""

from __future__ import annotations

from typing import Final

__all__ = ["DETAIL_MAX", "cut"]

# Caller text in a log line or a status detail is cut to this.
DETAIL_MAX: Final = 500


def cut(text: object, limit: int = DETAIL_MAX) -> str:
    raw = str(text)
    return raw if len(raw) <= limit else f"{raw[:limit]}... (+{len(raw) - limit} more)"
