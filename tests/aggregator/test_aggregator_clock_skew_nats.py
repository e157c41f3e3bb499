"""Collectors on clocks that disagree with the aggregator's, through nats-server.

Each fake collector stamps its batches with its own clock (the real clock
plus a skew) and publishes on its cadence; the aggregator service runs
as in production. Freshness and placement are the aggregator's: every pod
reads fresh with its true value, the offsets are on /metrics and logged once,
and a node whose clock steps by 30 s loses at most one batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_aggregator.app import AggregatorService

from ..waiting import eventually
from .aggregator_builders import batch, gpu, owner
from .aggregator_harness import MetricsInbox, counter, publish_batch, running_aggregator

pytestmark = pytest.mark.integration

INTERVAL_S = 0.25


class FakeCollector:
    """Publishes one pod's batch every ``INTERVAL_S``, stamped on its own clock."""

    def __init__(self, nc: NATS, node: str, skew_s: float, util: float) -> None:
        self.nc, self.node, self.skew_s, self.util = nc, node, skew_s, util
        self.sent = 0

    async def run(self, stop: asyncio.Event) -> None:
        pod = owner(f"{self.node}-pod", workload=self.node)
        while not stop.is_set():
            self.sent += 1
            b = batch(
                gpu(0, pod, util=self.util, node=self.node),
                node=self.node,
                ts=time.time() + self.skew_s,
                seq=self.sent,
                interval_s=INTERVAL_S,
            )
            await publish_batch(self.nc, b)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), INTERVAL_S)


@contextlib.asynccontextmanager
async def collectors(*fleet: FakeCollector) -> AsyncIterator[None]:
    stop = asyncio.Event()
    tasks = [asyncio.create_task(c.run(stop)) for c in fleet]
    try:
        yield
    finally:
        stop.set()
        await asyncio.gather(*tasks)


def fresh_with(inbox: MetricsInbox, name: str, util: float) -> bool:
    m = inbox.latest(name)
    return (
        m is not None
        and (m.pods_fresh, m.pods_stale) == (1, 0)
        and m.pods[0].values["gpu_util"] == pytest.approx(util)
    )


def offset(service: AggregatorService, node: str) -> float:
    return counter(service, "gpuscale_aggregator_node_clock_offset_seconds", node=node)


async def test_collectors_behind_and_ahead_read_fresh_with_their_true_values(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    inbox = await MetricsInbox().start(nats_client)
    fleet = [
        FakeCollector(nats_client, "behind-2s5", -2.5, 20.0),
        FakeCollector(nats_client, "behind-10s", -10.0, 40.0),
        FakeCollector(nats_client, "ahead-10s", 10.0, 60.0),
    ]
    with capture_logs() as logs:
        async with running_aggregator(nats_server.url) as service:
            await eventually(lambda: service.replay_done, what="replay")
            async with collectors(*fleet):
                for c in fleet:
                    await eventually(lambda c=c: fresh_with(inbox, c.node, c.util), what=f"{c.node} fresh")
                await eventually(
                    lambda: 9.0 < offset(service, "behind-10s") < 11.0, what="offset on /metrics"
                )
                assert -11.0 < offset(service, "ahead-10s") < -9.0
                # A synchronised node is told apart from a skewed one by its offset alone.
                assert 2.0 < offset(service, "behind-2s5") < 3.5
                service.clock_watch.check()
                service.clock_watch.check()  # once per node while it stays off
    warned = sorted(e["node"] for e in logs if e["event"] == "clock_offset_large")
    assert warned == ["ahead-10s", "behind-10s", "behind-2s5"]


@pytest.mark.parametrize("step_s", [30.0, -30.0], ids=["steps-ahead", "steps-back"])
async def test_a_30s_clock_step_costs_at_most_one_batch(
    nats_server: EmbeddedNats, nats_client: NATS, step_s: float
) -> None:
    inbox = await MetricsInbox().start(nats_client)
    node = FakeCollector(nats_client, "stepping", 0.0, 30.0)
    async with running_aggregator(nats_server.url) as service:
        await eventually(lambda: service.replay_done, what="replay")
        async with collectors(node):
            await eventually(lambda: fresh_with(inbox, "stepping", 30.0), what="fresh before the step")
            node.skew_s, node.util = step_s, 80.0
            stepped_at = node.sent
            await eventually(
                lambda: (
                    inbox.latest("stepping") is not None
                    and inbox.latest("stepping").pods[0].values["gpu_util"] > 30.0
                ),  # type: ignore[union-attr]
                what="samples after the step in the window",
            )
            await eventually(lambda: abs(offset(service, "stepping") + step_s) < 1.0, what="new offset")
            await eventually(lambda: node.sent >= stepped_at + 6, what="a few batches after the step")
            lost = counter(service, "gpuscale_aggregator_batches_ignored_total", reason="too_old")
            m: Any = inbox.latest("stepping")
    assert lost <= 1
    assert (m.pods_fresh, m.pods_stale) == (1, 0)
    assert m.pods[0].last_seen <= m.ts  # nothing placed in the aggregator's future


async def test_a_batch_delayed_in_transit_beyond_the_bound_counts_stale(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    """A node on time, then silent, then one batch that spent 4 s in transit
    (more than 3 intervals of 1 s): it lands 4 s in the past, stale."""
    inbox = await MetricsInbox().start(nats_client)
    pod = owner("late-pod", workload="late")
    async with running_aggregator(nats_server.url) as service:
        await eventually(lambda: service.replay_done, what="replay")
        for seq in range(1, 4):
            await publish_batch(
                nats_client, batch(gpu(0, pod, util=10.0, node="late"), node="late", ts=time.time(), seq=seq)
            )
            await asyncio.sleep(0.2)
        await eventually(lambda: fresh_with(inbox, "late", 10.0), what="fresh while on time")
        taken = time.time()
        await eventually(
            lambda: (m := inbox.latest("late")) is not None and m.pods_stale == 1 and m.ts > taken + 3.0,
            what="stale after 3 s of silence",
        )
        await publish_batch(
            nats_client, batch(gpu(0, pod, util=90.0, node="late"), node="late", ts=taken, seq=4)
        )
        await eventually(lambda: counter(service, "gpuscale_aggregator_gpu_samples_total") == 4)
        await eventually(
            lambda: (m := inbox.latest("late")) is not None and m.pods[0].values["gpu_util"] > 10.0,
            what="the late batch in the window",
        )
        m: Any = inbox.latest("late")
    assert (m.pods_fresh, m.pods_stale) == (0, 1)
    assert m.pods[0].last_seen < m.ts - 3.0
