"""The aggregator service against a real nats-server (JetStream included)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gpuscale import natsio
from gpuscale.codec import encode_raw
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.natsio import NATS
from gpuscale.steadyclock import SteadyClock
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import WindowConfig

from ..waiting import eventually, eventually_sync, holds_for
from .aggregator_builders import batch, gpu, one_pod_batch, owner
from .aggregator_harness import MetricsInbox, counter, publish_batch, running_aggregator

pytestmark = pytest.mark.integration

# 3 nodes, 2 workloads: "bert" has a pod on each node, "llama" two pods
# sharing node-c's GPU 1 with per-process values.
UTIL = {"bert-0": 20.0, "bert-1": 40.0, "bert-2": 90.0}


def fleet_batches(ts: float, seq: int) -> list[dict[str, Any]]:
    out = []
    for i, node in enumerate(("node-a", "node-b", "node-c")):
        gpus = [gpu(0, owner(f"bert-{i}"), util=UTIL[f"bert-{i}"], node=node)]
        if node == "node-c":
            gpus.append(
                gpu(
                    1,
                    owner("llama-0", "llama", sm_util=30.0),
                    owner("llama-1", "llama", sm_util=50.0),
                    util=70.0,
                    node=node,
                )
            )
        out.append(batch(*gpus, node=node, ts=ts, seq=seq))
    return out


async def publish_fleet(nc: NATS, ticks: int, start_seq: int = 0) -> list[dict[str, Any]]:
    sent = []
    now = time.time()
    for k in range(ticks):
        for b in fleet_batches(now - (ticks - 1 - k) * 1.0, start_seq + k):
            await publish_batch(nc, b)
            sent.append(b)
    await natsio.flush(nc)
    return sent


async def test_three_nodes_two_workloads(nats_server: EmbeddedNats, nats_client: NATS) -> None:
    inbox = await MetricsInbox().start(nats_client)
    async with running_aggregator(nats_server.url) as service:
        await eventually(lambda: service.replay_done, what="replay")
        await publish_fleet(nats_client, ticks=3)
        await eventually(
            lambda: (
                (m := inbox.latest("bert")) is not None
                and m.pods_fresh == 3
                and inbox.latest("llama") is not None
            ),
            what="metrics for both workloads",
        )
        await eventually(lambda: counter(service, "gpuscale_aggregator_gpu_samples_total") == 12)
        cycles = counter(service, "gpuscale_aggregator_publish_cycle_seconds_count")
        inbox.messages.clear()
        # A publish cycle that started after the last batch: both workloads in it.
        await eventually(
            lambda: (
                counter(service, "gpuscale_aggregator_publish_cycle_seconds_count") >= cycles + 2
                and inbox.latest("bert") is not None
                and inbox.latest("llama") is not None
            ),
            what="a publish cycle after the last batch",
        )
    bert, llama = inbox.latest("bert"), inbox.latest("llama")
    assert bert is not None
    assert llama is not None
    assert bert.averages["gpu_util"] == pytest.approx(50.0)
    assert {p.pod: p.values["gpu_util"] for p in bert.pods} == UTIL
    assert (llama.pods_fresh, llama.pods_stale) == (2, 0)
    assert llama.averages["sm_util"] == pytest.approx(40.0)
    assert llama.averages["gpu_util"] == pytest.approx(70.0)


async def test_restart_replays_the_window(nats_server: EmbeddedNats, nats_client: NATS) -> None:
    async with running_aggregator(nats_server.url) as first:
        await eventually(lambda: first.replay_done, what="replay")
        sent = await publish_fleet(nats_client, ticks=5)
        await eventually(lambda: counter(first, "gpuscale_aggregator_gpu_samples_total") == 20)
    inbox = await MetricsInbox().start(nats_client)
    async with running_aggregator(nats_server.url) as second:
        await eventually(lambda: len(inbox.messages) >= 2, what="first metrics after the restart")
        assert counter(second, "gpuscale_aggregator_replayed_batches_total") == len(sent)
    # The first messages equal what an aggregator that never restarted would publish,
    # but for when each pod was last seen: the replay places a batch at the time the
    # stream stored it, the reference at the node's own stamp.
    reference = Aggregator(WindowConfig(window_s=30.0))
    for b in sent:
        reference.ingest(encode_raw(b), b["ts"], subject_node=b["node"])
    first_by_name: dict[str, Any] = {}
    for m in inbox.messages:
        first_by_name.setdefault(m.name, m)
    assert sorted(first_by_name) == ["bert", "llama"]
    for name, got in first_by_name.items():
        expected = {m.name: m for m in reference.snapshot(got.ts)}[name]
        assert got.averages == expected.averages
        assert (got.pods_fresh, got.pods_stale) == (expected.pods_fresh, expected.pods_stale)
        assert [(p.pod, p.values) for p in got.pods] == [(p.pod, p.values) for p in expected.pods]
        for p, e in zip(got.pods, expected.pods, strict=True):
            assert e.last_seen <= p.last_seen <= got.ts


async def test_bad_duplicate_and_out_of_order_batches_are_counted(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    inbox = await MetricsInbox().start(nats_client)
    async with running_aggregator(nats_server.url) as service:
        await eventually(lambda: service.replay_done, what="replay")
        now = time.time()
        good = batch(gpu(0, owner("bert-0"), util=60.0), node="node-a", ts=now, seq=10)
        await publish_batch(nats_client, good)
        await publish_batch(nats_client, good)  # duplicate
        await publish_batch(nats_client, {**good, "seq": 9, "ts": now - 1})  # out of order
        await publish_batch(nats_client, {**good, "seq": 11}, subject_node="node-b")  # node mismatch
        await publish_batch(nats_client, {**good, "v": 7, "seq": 12})  # wrong version
        await publish_batch(nats_client, {**good, "seq": 13, "ts": float("nan")})  # impossible value
        await nats_client.publish("gpuscale.v1.samples.node-a", b"\xc1\xc1 not msgpack")
        await nats_client.publish("gpuscale.v1.samples.node-a", b"")
        await natsio.flush(nats_client)
        rejected = "gpuscale_messages_rejected_total"
        ignored = "gpuscale_aggregator_batches_ignored_total"
        await eventually(lambda: counter(service, "gpuscale_messages_in_total", kind="samples") == 8)
        assert counter(service, ignored, reason="duplicate") == 1
        assert counter(service, ignored, reason="out_of_order") == 1
        assert counter(service, rejected, kind="samples", reason="node_mismatch") == 1
        assert counter(service, rejected, kind="samples", reason="wrong_version") == 1
        assert counter(service, rejected, kind="samples", reason="not_finite") == 1
        assert counter(service, rejected, kind="samples", reason="undecodable") == 2
        # Still alive and still right: the good batch alone is in the window.
        await publish_batch(nats_client, {**good, "seq": 14, "ts": now + 0.5})
        await eventually(lambda: (m := inbox.latest("bert")) is not None and m.averages["gpu_util"] == 60.0)
        # ... and all of it is on /metrics.
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"http://127.0.0.1:{service.ctx.http.port}/metrics") as resp,
        ):
            text = await resp.text()
        assert 'gpuscale_aggregator_batches_ignored_total{reason="duplicate"} 1.0' in text
        assert "gpuscale_aggregator_workloads 1.0" in text


async def test_survives_a_nats_restart(nats_server: EmbeddedNats, nats_client: NATS) -> None:
    inbox = await MetricsInbox().start(nats_client)
    async with running_aggregator(nats_server.url) as service:
        await eventually(lambda: service.replay_done, what="replay")
        await publish_fleet(nats_client, ticks=1)
        await eventually(lambda: inbox.latest("bert") is not None, what="metrics before the outage")
        nats_server.stop()
        await eventually(lambda: service.nc is not None and not service.nc.is_connected, what="outage seen")
        cycles = counter(service, "gpuscale_aggregator_publish_cycle_seconds_count")
        # Publish cycles while NATS is away must not hurt.
        await eventually(
            lambda: counter(service, "gpuscale_aggregator_publish_cycle_seconds_count") >= cycles + 2,
            what="publish cycles during the outage",
        )
        nats_server.start()
        await eventually(
            lambda: nats_client.is_connected and service.nc is not None and service.nc.is_connected
        )
        inbox.messages.clear()
        await publish_fleet(nats_client, ticks=1, start_seq=1)
        await eventually(
            lambda: (m := inbox.latest("bert")) is not None and m.pods_fresh == 3, what="resumed"
        )
        await eventually(
            lambda: counter(service, "gpuscale_nats_reconnects_total") >= 1, 20, "the reconnect counted"
        )


@pytest.mark.slow
def test_process_stops_gracefully_on_sigterm(nats_server: EmbeddedNats, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "GPUSCALE_NATS_URL": nats_server.url, "GPUSCALE_HTTP_PORT": str(port)}
    cli = Path(sys.executable).parent / "gpuscale"
    log = (tmp_path / "aggregator.log").open("wb")
    proc = subprocess.Popen(
        [str(cli), "aggregator", "--publish-interval", "0.5"], env=env, stdout=log, stderr=log
    )
    try:

        def ready() -> bool:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
                return bool(resp.status == 200)

        eventually_sync(ready, timeout_s=20, what="the aggregator ready")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert time.monotonic() - started < 6
        assert "service_stopped" in (tmp_path / "aggregator.log").read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        log.close()


class MovedClock:
    """The aggregator's clock, moved only by the test: where each batch lands and when
    a message is due do not depend on how busy the machine is."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.start = self.now = time.time()
        self.clock = SteadyClock(wall=lambda: self.now, monotonic=lambda: self.now)
        self.seq: dict[str, int] = {}
        self.sent = 0

    def move(self, dt: float) -> None:
        self.now = self.start + dt

    @contextlib.asynccontextmanager
    async def aggregator(self, url: str) -> AsyncIterator[Any]:
        """An aggregator on this clock, replayed, its publish interval a minute: no message
        within a test is one a deadline made due."""
        async with running_aggregator(
            url, clock=self.clock, window_s=60.0, publish_interval_s=60.0
        ) as service:
            await eventually(lambda: service.replay_done, what="replay")
            yield service

    async def batch(self, service: Any, dt: float, pod: str, util: float, node: str = "node-a") -> None:
        """One pod's batch at ``dt`` (the clock moved there first), taken in before it returns."""
        self.move(dt)
        self.seq[node] = self.seq.get(node, -1) + 1
        await publish_batch(self.nc, one_pod_batch(pod, util, node=node, ts=self.now, seq=self.seq[node]))
        await natsio.flush(self.nc)
        self.sent += 1
        await eventually(lambda: counter(service, "gpuscale_messages_in_total", kind="samples") == self.sent)


async def test_a_workload_s_message_follows_its_pods_batches_not_the_publish_interval(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    """Once every fresh pod of a workload has reported since its last message, the
    message goes out: at most once per bucket (1 s), however fast batches come. The
    publish interval here is a minute of the test's clock, which moves only when told,
    so every message within the test is one its pods' batches made due."""
    moved = MovedClock(nats_client)
    inbox = await MetricsInbox().start(nats_client)
    async with moved.aggregator(nats_server.url) as service:
        await moved.batch(service, 0.0, "bert-0", 40.0)
        await moved.batch(service, 0.3, "bert-1", 60.0, node="node-b")
        moved.move(1.0)  # a new workload is due a bucket after its first sample
        first = await eventually(lambda: inbox.latest("bert"), what="the first message")
        assert first.pods_fresh == 2
        await moved.batch(service, 1.5, "bert-0", 40.0)
        await moved.batch(service, 1.6, "bert-0", 40.0)  # heard twice: bert-1 is still awaited
        # Each batch was taken in before this: a message it made due would be out within 0.5 s.
        await holds_for(lambda: len(inbox.messages) == 1, 0.5, "no message while bert-1 is awaited")
        await moved.batch(service, 2.1, "bert-1", 80.0, node="node-b")
        second = await eventually(lambda: len(inbox.messages) == 2 and inbox.messages[1], what="the tick")
        assert [p.last_seen for p in second.pods] == pytest.approx([moved.start + 1.6, moved.start + 2.1])
        # Complete again within a bucket of that message: due only once the bucket has passed.
        await moved.batch(service, 2.2, "bert-0", 40.0)
        await moved.batch(service, 2.3, "bert-1", 80.0, node="node-b")
        # As above; and the clock stands still, so the bucket never passes by itself.
        await holds_for(lambda: len(inbox.messages) == 2, 0.5, "no second message within the bucket")
        moved.move(3.1)
        await eventually(lambda: len(inbox.messages) == 3, what="the next message once the bucket passed")
        published = "gpuscale_aggregator_messages_published_total"
        assert counter(service, published, why="complete") == 3
        assert counter(service, published, why="deadline") == 0
