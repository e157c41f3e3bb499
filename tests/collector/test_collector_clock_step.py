"""The collector's own wall clock stepping (chrony's makestep, a VM resumed):
samples are stamped on the wall clock as it is, and a step is no tick skipped.
Set forward an hour at 2 Hz, the grid's slots counted 7,200 skipped ticks
(gpuscale_collector_ticks_skipped_total, which an operator alerts on)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from gpuscale_collector.app import make_backend


class SteppingWall:
    def __init__(self) -> None:
        self.ahead_s = 0.0

    def __call__(self) -> float:
        return time.time() + self.ahead_s


async def test_a_wall_clock_set_forward_an_hour_stamps_on_and_skips_no_tick(kit: Any) -> None:
    wall = SteppingWall()
    async with kit.running(kit.settings(interval_s=0.5), wall=wall) as rc:
        collector = rc.collector
        await kit.wait_for(lambda: collector.seq >= 2, what="ticks before the step")
        wall.ahead_s = 3600.0
        stepped_at = collector.seq
        await kit.wait_for(lambda: collector.seq >= stepped_at + 3, what="ticks after the step")
        skipped = rc.ctx.metrics.registry.get_sample_value("gpuscale_collector_ticks_skipped_total")
        last = collector.last_batch
    assert last is not None
    assert last.ts > time.time() + 3590.0
    assert (skipped or 0.0) < 10.0  # a loaded machine may miss a slot or two, never thousands


class OneSlowRead:
    """The sim backend, but its third read takes 1.3 s (an NVML call stuck for a while)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.reads = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def read(self) -> Any:
        self.reads += 1
        if self.reads == 3:
            await asyncio.sleep(1.3)
        return await self._backend.read()


async def test_a_tick_that_overruns_its_slots_counts_them_skipped(kit: Any) -> None:
    """The control for the test above: the counter still counts what it is for."""
    settings = kit.settings(interval_s=0.5)
    backend = OneSlowRead(make_backend(settings))
    async with kit.running(settings, backend=backend) as rc:
        await kit.wait_for(lambda: rc.collector.seq >= 4, what="ticks past the slow one")
        skipped = rc.ctx.metrics.registry.get_sample_value("gpuscale_collector_ticks_skipped_total")
    assert (skipped or 0.0) >= 2.0  # 1.3 s of a 0.5 s grid: at least two slots without a tick
