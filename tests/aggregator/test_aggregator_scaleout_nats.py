"""Two aggregator instances split the workloads: each is owned by exactly one.

Uses its own nats-server, configured with the partition mapping
(gpuscale.subjects.aggregator_partition_mapping).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscale import natsio
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain
from gpuscale.subjects import aggregator_partition_mapping

from ..waiting import eventually
from .aggregator_builders import batch, gpu, owner
from .aggregator_harness import MetricsInbox, counter, publish_batch, running_aggregator

pytestmark = pytest.mark.integration

NODES = ("node-a", "node-b", "node-c")
WORKLOADS = [f"svc-{i}" for i in range(8)]


@pytest.fixture
def partitioned_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(store_dir=str(tmp_path), config_text=aggregator_partition_mapping(2))
    server.start()
    try:
        yield server
    finally:
        server.close()


async def test_two_instances_split_the_workloads(partitioned_nats: EmbeddedNats) -> None:
    nc = await connect([partitioned_nats.url], ServiceMetrics("test"), name="test", reconnect_wait_s=0.2)
    try:
        inbox = await MetricsInbox().start(nc)
        async with (
            running_aggregator(partitioned_nats.url, partition=(0, 2)) as first,
            running_aggregator(partitioned_nats.url, partition=(1, 2)) as second,
        ):
            await eventually(lambda: first.replay_done and second.replay_done, what="replay")
            now = time.time()
            # Every workload has one pod on every node: a workload spans nodes.
            for seq in range(2):
                for n, node in enumerate(NODES):
                    gpus = [
                        gpu(i, owner(f"{w}-{n}", w), util=10.0 * (n + 1), node=node)
                        for i, w in enumerate(WORKLOADS)
                    ]
                    await publish_batch(nc, batch(*gpus, node=node, ts=now - 1 + seq, seq=seq))
            await natsio.flush(nc)
            await eventually(
                lambda: all(
                    (m := inbox.latest(w)) is not None and m.pods_fresh == len(NODES) for w in WORKLOADS
                ),
                what="every workload with all its pods",
            )
            owned_first = set(first.core.store.workloads)
            owned_second = set(second.core.store.workloads)
            # Each workload handled by exactly one instance, and both take a share.
            assert owned_first.isdisjoint(owned_second)
            assert {w[2] for w in owned_first | owned_second} == set(WORKLOADS)
            assert owned_first
            assert owned_second

            # The queue group split each node batch once: one sub-batch per workload per batch.
            def split_in() -> float:
                return counter(first, "gpuscale_messages_in_total", kind="samples") + counter(
                    second, "gpuscale_messages_in_total", kind="samples"
                )

            expected = 2 * len(NODES) * len(WORKLOADS)
            await eventually(lambda: split_in() >= expected, what="every sub-batch")
            assert split_in() == expected
        for w in WORKLOADS:
            m = inbox.latest(w)
            assert m is not None
            assert m.averages["gpu_util"] == pytest.approx(20.0)  # mean of 10, 20, 30 over the nodes

        # A restarted instance replays only its own partition and sees it whole.
        inbox.messages.clear()
        async with running_aggregator(partitioned_nats.url, partition=(0, 2)) as again:
            await eventually(lambda: again.replay_done, what="replay")
            assert set(again.core.store.workloads) == owned_first
    finally:
        await drain(nc)
