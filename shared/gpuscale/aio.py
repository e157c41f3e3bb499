"""Small asyncio helpers shared by every service."""

from __future__ import annotations

import asyncio
import contextlib


async def sleep_unless_stopped(stop: asyncio.Event, delay_s: float) -> bool:
    """Sleep ``delay_s``, waking early when ``stop`` is set. Returns whether it is set.

    Every wait goes through this, so shutdown never waits for a backoff to run out."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, delay_s))
    return stop.is_set()
