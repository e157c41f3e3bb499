"""Against a real nats-server: one tenant's GPUScaler asking for a long
window (its decider's window requests) grows its own pods' rings only, gives
them back when the requests stop, and another tenant's pods, means and metrics
messages go on as before."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.wire import WindowRequest

from ..waiting import eventually
from .aggregator_builders import batch, gpu, owner
from .aggregator_harness import MetricsInbox, counter, publish_batch, running_aggregator

pytestmark = pytest.mark.integration

TENANT = ("team-a", "Deployment", "llm")
OTHER = ("team-b", "Deployment", "bert")
OTHER_UTIL = {"bert-0": 20.0, "bert-1": 40.0, "bert-2": 90.0}
SHARED = 31  # the shared rings' length: a 30 s window of 1 s buckets


@contextlib.asynccontextmanager
async def collectors(nc: NATS) -> AsyncIterator[None]:
    """Five nodes sending a batch every 0.25 s: two of the tenant's pods, three of the other's."""

    async def send() -> None:
        seq = 0
        while True:
            seq += 1
            now = time.time()
            for i in range(2):
                node = f"node-a{i}"
                b = batch(
                    gpu(0, owner(f"llm-{i}", "llm", namespace="team-a"), util=50.0, node=node), node=node
                )
                await publish_batch(nc, {**b, "ts": now, "seq": seq, "interval_s": 0.25})
            for pod, util in OTHER_UTIL.items():
                node = f"node-{pod}"
                b = batch(gpu(0, owner(pod, "bert", namespace="team-b"), util=util, node=node), node=node)
                await publish_batch(nc, {**b, "ts": now, "seq": seq, "interval_s": 0.25})
            await asyncio.sleep(0.25)

    task = asyncio.create_task(send())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@contextlib.asynccontextmanager
async def asking(nc: NATS, window_s: float, ttl_s: float) -> AsyncIterator[None]:
    """The tenant's decider repeating its window request, as it does, until the block ends."""
    key = subjects.WorkloadKey(*TENANT)

    async def repeat() -> None:
        while True:
            request = WindowRequest(
                ts=time.time(),
                namespace=key.namespace,
                kind=key.kind,
                name=key.name,
                window_s=window_s,
                ttl_s=ttl_s,
            )
            await nc.publish(subjects.windows(key), codec.encode(request))
            await asyncio.sleep(ttl_s / 4)

    task = asyncio.create_task(repeat())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_a_tenants_long_window_costs_only_its_own_pods_and_is_given_back(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    inbox = await MetricsInbox().start(nats_client)
    async with running_aggregator(nats_server.url, max_window_s=300.0) as service, collectors(nats_client):
        store = service.core.store
        await eventually(
            lambda: (m := inbox.latest("bert")) is not None and m.pods_fresh == 3 and inbox.latest("llm"),
            what="both tenants' metrics",
        )
        async with asking(nats_client, 300.0, ttl_s=2.0):
            await eventually(
                lambda: counter(service, "gpuscale_aggregator_pods_with_own_ring") == 2,
                what="the tenant's two pods on rings of their own",
            )
            await eventually(lambda: (m := inbox.latest("llm")) is not None and m.window_s == 300.0)
            assert {store.ring_of(TENANT, f"llm-{i}") for i in range(2)} == {301}
            # The other tenant's pods stay on the shared rings, and every publish cycle
            # since carries its message with its own window and its unchanged means.
            assert {store.ring_of(OTHER, pod) for pod in OTHER_UTIL} == {SHARED}
            inbox.messages.clear()
            cycles = counter(service, "gpuscale_aggregator_publish_cycle_seconds_count")
            await eventually(
                lambda: counter(service, "gpuscale_aggregator_publish_cycle_seconds_count") >= cycles + 5,
                what="five publish cycles while the tenant asks",
            )
            others = [m for m in inbox.messages if m.name == "bert"]
            assert len(others) >= 4  # (the first cycle may have begun before the clear)
            for m in others:
                assert m.window_s == 30.0
                assert m.pods_fresh == 3
                assert m.averages["gpu_util"] == pytest.approx(50.0)
                assert {p.pod: p.values["gpu_util"] for p in m.pods} == pytest.approx(OTHER_UTIL)
        # The requests stop: they lapse, the tenant's window goes back to the default and
        # its pods give their rings back as their next buckets open.
        await eventually(lambda: (m := inbox.latest("llm")) is not None and m.window_s == 30.0)
        await eventually(
            lambda: counter(service, "gpuscale_aggregator_pods_with_own_ring") == 0,
            what="the rings given back",
        )
        assert {store.ring_of(TENANT, f"llm-{i}") for i in range(2)} == {SHARED}
        assert store.span_s == 30.0
        assert counter(service, "gpuscale_aggregator_window_span_seconds") == 30.0
