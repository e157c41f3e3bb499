"""What a peer can do to the aggregator with sound-looking traffic, through nats-server:
an oversized workload is reported by name while the others keep flowing, and
thousands of bad messages on thousands of subjects make a line a minute per
reason, not one per subject."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gpuscale import natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, drain

from ..waiting import eventually
from .aggregator_builders import batch, gpu, owner
from .aggregator_harness import MetricsInbox, counter, publish_batch, running_aggregator

pytestmark = pytest.mark.integration

SMALL_PAYLOAD = 64 * 1024


@pytest.fixture
def small_nats(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """A server whose max_payload (64 KB) a workload of 600 pods exceeds."""
    (tmp_path / "nats").mkdir()
    server = EmbeddedNats(store_dir=str(tmp_path / "nats"), config_text=f"max_payload: {SMALL_PAYLOAD}\n")
    server.start()
    try:
        yield server
    finally:
        server.close()


async def test_a_workload_too_large_to_publish_is_named_and_counted_while_others_flow(
    small_nats: EmbeddedNats,
) -> None:
    nc: NATS = await connect([small_nats.url], ServiceMetrics("test"), name="test")
    try:
        inbox = await MetricsInbox().start(nc)
        with capture_logs() as logs:
            async with running_aggregator(small_nats.url) as service:
                await eventually(lambda: service.replay_done, what="replay")
                # 600 pods of "huge", 100 per node (each batch fits in 64 KB), and "small".
                for n in range(6):
                    node = f"node-{n}"
                    owners = [owner(f"huge-{n}-{i:03d}", "huge") for i in range(100)]
                    gpus = [gpu(g, *owners[g * 25 : (g + 1) * 25], node=node) for g in range(4)]
                    await publish_batch(nc, batch(*gpus, node=node, ts=time.time(), seq=1))
                await publish_batch(
                    nc, batch(gpu(0, owner("small-0", "small"), node="node-s"), node="node-s", ts=time.time())
                )
                await eventually(
                    lambda: inbox.latest("small") is not None, what="the small workload's metrics"
                )
                await eventually(
                    lambda: counter(service, "gpuscale_aggregator_metrics_too_large_total") >= 2,
                    what="the huge workload counted, cycle after cycle",
                )
                assert counter(service, "gpuscale_aggregator_workloads_too_large") == 1
                assert inbox.latest("huge") is None
                assert service.nc is not None
                assert service.nc.is_connected  # the server never cut it off
    finally:
        await drain(nc)
    (line,) = [e for e in logs if e["event"] == "metrics_too_large"]  # once a minute, not per cycle
    assert line["workload"] == "default/Deployment/huge"
    assert line["pods"] == 600
    assert line["bytes"] > line["max_payload"] == SMALL_PAYLOAD


async def test_bad_messages_on_thousands_of_subjects_log_once_per_reason(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    with capture_logs() as logs:
        async with running_aggregator(nats_server.url) as service:
            await eventually(lambda: service.replay_done, what="replay")
            for i in range(2000):
                await nats_client.publish(subjects.samples(f"node-{i}"), b"\xc1 not msgpack")
            for i in range(500):
                b = batch(gpu(0, owner(f"p-{i}"), node=f"other-{i}"), node=f"other-{i}", ts=time.time())
                await publish_batch(nats_client, b, subject_node=f"victim-{i}")  # payload names another node
            await natsio.flush(nats_client)
            await eventually(lambda: counter(service, "gpuscale_messages_in_total", kind="samples") == 2500)
    rejected = counter(service, "gpuscale_messages_rejected_total", kind="samples", reason="undecodable")
    mismatched = counter(service, "gpuscale_messages_rejected_total", kind="samples", reason="node_mismatch")
    assert (rejected, mismatched) == (2000, 500)
    lines = [e for e in logs if e["event"] == "batch_rejected"]
    assert sorted(e["reason"] for e in lines) == ["node_mismatch", "undecodable"]


async def test_window_requests_are_checked_counted_and_bounded(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    """A window request moves what a workload is averaged over. Bad
    bytes, a payload naming another workload than its subject, a window past
    --max-window and a flood of workloads are each refused or clamped with a
    reason, counted and logged once; a sound request is taken."""
    from gpuscale import codec
    from gpuscale.wire import WindowRequest

    def request(name: str, window_s: float, subject_name: str | None = None) -> tuple[str, bytes]:
        key = subjects.WorkloadKey("default", "Deployment", subject_name or name)
        message = WindowRequest(
            ts=time.time(), namespace="default", kind="Deployment", name=name, window_s=window_s, recent_s=3.0
        )
        return subjects.windows(key), codec.encode(message)

    with capture_logs() as logs:
        async with running_aggregator(nats_server.url, max_window_s=120.0) as service:
            # 50 workloads with a window of their own, not 100,000: the bound is reached in a test.
            service.core.store.config = dataclasses.replace(service.core.store.config, max_requests=50)
            await eventually(lambda: service.replay_done, what="replay")
            for i in range(300):
                await nats_client.publish(
                    subjects.windows(subjects.WorkloadKey("default", "Deployment", f"x{i}")), b"\xc1"
                )
            await nats_client.publish(*request("victim", 10.0, subject_name="mine"))
            await nats_client.publish(*request("bert", 3600.0))
            await nats_client.publish(*request("llama", 10.0))
            for i in range(100):
                await nats_client.publish(*request(f"flood-{i}", 10.0))
            await nats_client.publish("gpuscale.v1.windows.too.few", b"\xc1")
            await natsio.flush(nats_client)
            await eventually(lambda: counter(service, "gpuscale_messages_in_total", kind="windows") == 404)
    store = service.core.store
    assert counter(service, "gpuscale_messages_rejected_total", kind="windows", reason="undecodable") == 300
    assert (
        counter(service, "gpuscale_messages_rejected_total", kind="windows", reason="subject_mismatch") == 1
    )
    assert counter(service, "gpuscale_messages_rejected_total", kind="windows", reason="bad_subject") == 1
    assert ("default", "Deployment", "victim") not in store.wanted
    assert store.wanted[("default", "Deployment", "bert")].window_s == 120.0
    assert counter(service, "gpuscale_aggregator_window_requests_total", result="clamped") == 1
    assert store.wanted[("default", "Deployment", "llama")].window_s == 10.0
    assert len(store.wanted) == 50
    assert counter(service, "gpuscale_aggregator_window_requests_total", result="too_many_workloads") == 52
    assert store.span_s == 120.0
    refused = [e for e in logs if e["event"] in ("window_request_rejected", "window_request_refused")]
    assert sorted(e["reason"] for e in refused) == [
        "bad_subject",
        "subject_mismatch",
        "too_many_workloads",
        "undecodable",
    ]
