"""Exponential backoff with full jitter, for the KubeErrors that may pass (429, 5xx, unreachable)."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube.errors import KubeError, Throttled

T = TypeVar("T")


def backoff_delay(attempt: int, base_s: float, cap_s: float, unit_random: float) -> float:
    """Full jitter (AWS architecture blog): uniform in [0, min(cap, base * 2^attempt)].

    ``attempt`` counts from 0; ``unit_random`` is in [0, 1).
    """
    return unit_random * min(cap_s, base_s * (2.0 ** min(attempt, 30)))


async def retry_with_backoff(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int = 6,
    base_s: float = 0.2,
    cap_s: float = 5.0,
    stop: asyncio.Event | None = None,
    on_retry: Callable[[KubeError, int, float], None] | None = None,
    rand: Callable[[], float] = random.random,
) -> T:
    """Call ``fn`` until it succeeds; retry only retryable KubeErrors (429, 5xx,
    unreachable), at most ``attempts`` calls in all. A 429's Retry-After is a
    floor for the wait. ``stop`` cuts a wait short and re-raises the last error."""
    attempt = 0
    while True:
        try:
            return await fn()
        except KubeError as e:
            attempt += 1
            if not e.retryable or attempt >= attempts or (stop is not None and stop.is_set()):
                raise
            delay = backoff_delay(attempt - 1, base_s, cap_s, rand())
            if isinstance(e, Throttled) and e.retry_after_s is not None:
                delay = max(delay, min(e.retry_after_s, cap_s))
            if on_retry is not None:
                on_retry(e, attempt, delay)
            if stop is None:
                await asyncio.sleep(delay)
            elif await sleep_unless_stopped(stop, delay):
                raise
