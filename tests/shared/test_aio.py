"""sleep_unless_stopped: the one wait every service uses, so shutdown never waits out a delay."""

from __future__ import annotations

import asyncio
import time

from gpuscale.aio import sleep_unless_stopped


async def test_sleeps_the_delay_when_not_stopped() -> None:
    stop = asyncio.Event()
    started = time.monotonic()
    assert await sleep_unless_stopped(stop, 0.2) is False
    assert time.monotonic() - started >= 0.19


async def test_wakes_at_once_when_stopped_meanwhile() -> None:
    stop = asyncio.Event()
    asyncio.get_running_loop().call_later(0.05, stop.set)
    started = time.monotonic()
    assert await sleep_unless_stopped(stop, 30.0) is True
    assert time.monotonic() - started < 5.0


async def test_negative_delay_is_no_wait() -> None:
    stop = asyncio.Event()
    assert await sleep_unless_stopped(stop, -1.0) is False
