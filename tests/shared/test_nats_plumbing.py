"""NATS plumbing against a real nats-server: pub/sub, JetStream helpers, surviving a restart."""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import (
    NATS,
    connect,
    drain,
    ensure_kv,
    ensure_stream,
    flush,
    headers_msg_id,
    is_connected,
    jetstream,
    redact,
)
from gpuscale.wire import SampleBatch

from ..waiting import eventually, holds_for
from .wire_factories import NOW, batch

pytestmark = pytest.mark.integration


async def test_publish_and_subscribe_a_typed_message(nats_client: NATS) -> None:
    received: asyncio.Queue[SampleBatch] = asyncio.Queue()

    async def on_msg(msg: object) -> None:
        await received.put(codec.decode(msg.data, SampleBatch, NOW))  # type: ignore[attr-defined]  # nats Msg

    await nats_client.subscribe(subjects.SAMPLES_ALL, cb=on_msg)
    await nats_client.publish(subjects.samples("gpu-node-1"), codec.encode(batch()))
    assert await asyncio.wait_for(received.get(), 5) == batch()


async def test_subscription_survives_a_server_restart_on_the_same_port(nats_server: EmbeddedNats) -> None:
    metrics = ServiceMetrics("test")
    nc = await connect([nats_server.url], metrics, name="restart-test", reconnect_wait_s=0.1)
    got: list[bytes] = []

    async def on_msg(msg: object) -> None:
        got.append(msg.data)  # type: ignore[attr-defined]  # nats Msg

    await nc.subscribe("t.>", cb=on_msg)
    await nc.publish("t.before", b"1")
    await eventually(lambda: got == [b"1"])

    nats_server.stop()
    await eventually(lambda: not nc.is_connected)
    assert is_connected(nc)[0] is False
    nats_server.start()
    await eventually(lambda: nc.is_connected, timeout_s=15)

    # A separate publisher proves the server really routes to the old subscription.
    publisher = await connect([nats_server.url], ServiceMetrics("pub"), name="pub")
    await eventually(lambda: nc.is_connected)

    async def routed() -> bool:
        # The re-subscription reaches the server shortly after the reconnect.
        await publisher.publish("t.after", b"2")
        await flush(publisher)
        return b"2" in got

    await eventually(routed, what="a message on the old subscription")
    assert metrics.nats_reconnects._value.get() >= 1
    assert metrics.nats_disconnects._value.get() >= 1
    await drain(publisher)
    await drain(nc)


async def test_first_connect_waits_for_a_server_that_comes_later(nats_server: EmbeddedNats) -> None:
    nats_server.stop()
    task = asyncio.create_task(
        connect([nats_server.url], ServiceMetrics("late"), name="late", reconnect_wait_s=0.1)
    )
    # With no server, connect keeps trying: 0.5 s is five reconnect attempts.
    await holds_for(lambda: not task.done(), 0.5, what="connect still waiting")
    nats_server.start()
    nc = await asyncio.wait_for(task, 15)
    assert nc.is_connected
    await drain(nc)


async def test_connect_gives_up_when_asked_to_stop(nats_server: EmbeddedNats) -> None:
    nats_server.stop()
    stop = asyncio.Event()
    task = asyncio.create_task(
        connect([nats_server.url], ServiceMetrics("x"), name="x", reconnect_wait_s=0.1, stop=stop)
    )
    await asyncio.sleep(0.3)  # a few failed attempts first, so stop interrupts a retry loop
    stop.set()
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever nats-py raised last is re-raised
        await asyncio.wait_for(task, 5)


async def test_jetstream_helpers_are_idempotent_and_deduplicate(nats_client: NATS) -> None:
    js = jetstream(nats_client)
    for _ in range(2):
        await ensure_stream(js, subjects.DECISIONS_STREAM, [subjects.DECISIONS_ALL], max_age_s=3600)
    subject = "gpuscale.v1.decisions.default.Deployment.bert"
    await js.publish(subject, b"a", headers=headers_msg_id("d-1"))
    await js.publish(subject, b"a", headers=headers_msg_id("d-1"))
    info = await js.stream_info(subjects.DECISIONS_STREAM)
    assert info.state.messages == 1

    kv = await ensure_kv(js, "gpuscale_test_state")
    await kv.put("k", b"v")
    kv_again = await ensure_kv(js, "gpuscale_test_state")
    assert (await kv_again.get("k")).value == b"v"


async def test_drain_is_safe_twice_and_on_none(nats_client: NATS) -> None:
    await drain(None)
    await drain(nats_client)
    await drain(nats_client)


def test_redact_hides_passwords_and_keeps_the_rest() -> None:
    assert redact("nats://collector:s3cret@nats.gpuscale:4222") == "nats://collector:***@nats.gpuscale:4222"
    assert redact("tls://nats.gpuscale:4222") == "tls://nats.gpuscale:4222"
    assert redact("nats://only-user@host") == "nats://only-user@host"


async def test_credentials_in_the_url_never_reach_the_logs(nats_server: EmbeddedNats) -> None:
    import io

    from gpuscale.logging import configure

    out = io.StringIO()
    configure("test", "debug", stream=out)
    try:
        url = nats_server.url.replace("nats://", "nats://collector:s3cret-password@")
        metrics = ServiceMetrics("redact")
        nc = await connect([url], metrics, name="redact", reconnect_wait_s=0.1)
        nats_server.restart()  # disconnect and reconnect are logged too
        await eventually(lambda: metrics.nats_reconnects._value.get() >= 1, what="a reconnect")
        await drain(nc)
    finally:
        configure("test", "info")
    text = out.getvalue()
    assert "nats_connected" in text
    assert "nats_reconnected" in text
    assert "collector:***@" in text
    assert "s3cret-password" not in text


async def test_an_outage_logs_each_error_once_and_counts_every_one(nats_server: EmbeddedNats) -> None:
    import io

    from gpuscale.logging import configure

    out = io.StringIO()
    configure("test", "info", stream=out)
    metrics = ServiceMetrics("outage")
    try:
        nc = await connect([nats_server.url], metrics, name="outage", reconnect_wait_s=0.05)
        nats_server.stop()

        def errors() -> float:
            return sum(
                s.value
                for m in metrics.registry.collect()
                if m.name == "gpuscale_nats_errors"
                for s in m.samples
                if s.name.endswith("_total")
            )

        await eventually(lambda: errors() >= 5, what="several failed reconnects")
        nats_server.start()
        await eventually(lambda: nc.is_connected, what="reconnected")
        await drain(nc)
    finally:
        configure("test", "info")
    records = [json.loads(line) for line in out.getvalue().splitlines() if line.startswith("{")]
    logged = [r["error"].split(":")[0] for r in records if r["event"] == "nats_error"]
    assert logged, records
    assert len(logged) == len(set(logged)) <= 2, logged  # once per kind of error, not once per attempt


def _messages_in(server: EmbeddedNats, name: str) -> int:
    """What the server has counted in from the connection named ``name`` (its /connz)."""
    with urllib.request.urlopen(f"http://{server.host}:{server.monitor_port}/connz", timeout=5) as r:
        connections = json.load(r)["connections"]
    return sum(c["in_msgs"] for c in connections if c.get("name") == name)


async def test_a_flush_returns_once_the_server_has_counted_what_was_published_before_it(
    nats_server: EmbeddedNats,
) -> None:
    # nats-py's own flush sends its PING ahead of publishes still in its buffer: large ones are
    # still arriving when that PONG comes back.
    nc = await connect([nats_server.url], ServiceMetrics("test"), name="flush-order")
    try:
        for round_ in range(1, 4):
            for _ in range(8):
                await nc.publish("t.flush", b"x" * 1_000_000)
            await flush(nc, 10.0)
            assert await asyncio.to_thread(_messages_in, nats_server, "flush-order") == 8 * round_
    finally:
        await drain(nc)


async def test_a_flush_returns_while_another_task_keeps_publishing(nats_server: EmbeddedNats) -> None:
    # The client's buffer never empties while others publish: a flush still ends, and covers
    # what was published before it.
    nc = await connect([nats_server.url], ServiceMetrics("test"), name="flush-busy")
    stop = asyncio.Event()

    async def chatter() -> None:
        while not stop.is_set():
            await nc.publish("t.chatter", b"y" * 1_000)
            await asyncio.sleep(0)

    busy = asyncio.create_task(chatter())
    try:
        await asyncio.sleep(0.1)
        counted_before = await asyncio.to_thread(_messages_in, nats_server, "flush-busy")
        for _ in range(8):
            await nc.publish("t.flush", b"x" * 1_000_000)
        await flush(nc, 5.0)  # a wait for an empty buffer would time out here
        assert await asyncio.to_thread(_messages_in, nats_server, "flush-busy") >= counted_before + 8
    finally:
        stop.set()
        await busy
        await drain(nc)
