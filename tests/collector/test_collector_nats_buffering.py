"""A simulated collector against a real nats-server, through an outage.

A JetStream stream records what the server receives (its file store survives
the restart); the batches published before, during (buffered) and after the
outage must arrive in order, with no gap in ``seq`` beyond what the bounded
buffer dropped, and the drop count must be on /metrics.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import time
from typing import Any

import aiohttp
import pytest

from gpuscale import codec, natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain, ensure_stream, jetstream
from gpuscale.wire import SampleBatch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

STREAM = "TEST_COLLECTOR_SAMPLES"


async def stream_batches(url: str) -> list[SampleBatch]:
    nc = await connect([url], ServiceMetrics("reader"), name="reader")
    try:
        js = jetstream(nc)
        info = await js.stream_info(STREAM)
        out = []
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(STREAM, seq)
            assert msg.data is not None
            out.append(codec.decode(msg.data, SampleBatch, now=time.time()))
        return out
    finally:
        await drain(nc)


async def stream_count(url: str) -> int:
    nc = await connect([url], ServiceMetrics("reader"), name="reader")
    try:
        return int((await jetstream(nc).stream_info(STREAM)).state.messages)
    finally:
        await drain(nc)


async def scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as resp:
        assert resp.status == 200
        return await resp.text()


def metric(text: str, name: str) -> float:
    m = re.search(rf"^{name} (\S+)$", text, re.MULTILINE)
    assert m is not None, f"{name} not on /metrics"
    return float(m.group(1))


async def test_outage_buffers_in_order_and_counts_drops(nats_server: EmbeddedNats, kit: Any) -> None:
    nc = await connect([nats_server.url], ServiceMetrics("setup"), name="setup")
    await ensure_stream(jetstream(nc), STREAM, [subjects.SAMPLES_ALL], storage="file")
    await drain(nc)

    settings = kit.settings(nats_url=nats_server.url, interval_s="0.1", buffer_batches=8, sim_gpus=2)
    async with kit.running(settings) as rc:
        await kit.wait_for(lambda: rc.collector.seq >= 5, what="first batches")
        await kit.wait_for(lambda: len(rc.collector.publisher.buffer) == 0, what="first flush")
        assert await stream_count(nats_server.url) >= 5

        await asyncio.to_thread(nats_server.stop)
        seq_at_stop = rc.collector.seq
        # The collector keeps sampling during the outage: 24 ticks against a buffer of 8
        # drop at least 16 batches.
        await kit.wait_for(lambda: rc.collector.seq - seq_at_stop >= 24, what="ticks during the outage")
        assert len(rc.collector.publisher.buffer) == 8
        during = await scrape(rc.url)
        assert metric(during, "gpuscale_collector_buffer_batches") == 8.0
        assert metric(during, "gpuscale_collector_buffer_dropped_total") >= 5

        await asyncio.to_thread(nats_server.start)
        await kit.wait_for(
            lambda: len(rc.collector.publisher.buffer) <= 1, timeout_s=20, what="buffer flushed"
        )
        resumed = rc.collector.seq
        await kit.wait_for(lambda: rc.collector.seq >= resumed + 5, what="batches after the outage")
        await kit.wait_for(lambda: len(rc.collector.publisher.buffer) <= 1, what="steady state")
        text = await scrape(rc.url)
        dropped = metric(text, "gpuscale_collector_buffer_dropped_total")
        last_published = rc.collector.seq - len(rc.collector.publisher.buffer)

    batches = await stream_batches(nats_server.url)
    seqs = [b.seq for b in batches]
    assert seqs[0] == 1
    assert seqs == sorted(set(seqs)), "in order, each once"
    gaps = sum(b - a - 1 for a, b in itertools.pairwise(seqs))
    assert 0 < gaps <= dropped, (gaps, dropped)
    assert dropped >= 15
    assert seqs[-1] >= last_published - 1
    assert all(b.node == "node-a" and len(b.gpus) == 2 for b in batches)
    # The batches after the gap are the newest ones of the outage, then live ones.
    assert seqs[-1] - seqs[0] + 1 == len(seqs) + gaps


async def test_publishes_decodable_batches(nats_server: EmbeddedNats, kit: Any) -> None:
    nc = await connect([nats_server.url], ServiceMetrics("sub"), name="sub")
    got: list[SampleBatch] = []

    async def on_msg(msg: Any) -> None:
        got.append(codec.decode(msg.data, SampleBatch, now=time.time()))

    await nc.subscribe(subjects.samples("node-a"), cb=on_msg)
    await natsio.flush(nc)
    settings = kit.settings(nats_url=nats_server.url, interval_s="0.1", sim_gpus=3, sim_source="constant:75")
    try:
        async with kit.running(settings) as rc:
            await kit.wait_for(lambda: len(got) >= 3, what="three batches")
            async with aiohttp.ClientSession() as session, session.get(f"{rc.url}/readyz") as resp:
                assert resp.status == 200
    finally:
        await drain(nc)
    first = got[0]
    assert [g.index for g in first.gpus] == [0, 1, 2]
    assert all(g.util == 75.0 and g.health == "ok" for g in first.gpus)
    assert first.interval_s == pytest.approx(0.1)
    assert [b.seq for b in got[:3]] == [got[0].seq, got[0].seq + 1, got[0].seq + 2]
    # One batch per tick, in time order. Where ticks fall (the node's phase grid)
    # is pinned by the schedule's table tests: a busy machine runs them late.
    assert got[0].ts < got[1].ts < got[2].ts


async def test_not_ready_without_nats(kit: Any) -> None:
    async with kit.running(kit.settings()) as rc:
        await kit.wait_for(lambda: rc.collector.backend_ready, what="backend")
        async with aiohttp.ClientSession() as session, session.get(f"{rc.url}/readyz") as resp:
            assert resp.status == 503
            body = await resp.json()
        assert body["checks"]["nats"]["ok"] is False
        assert body["checks"]["backend"]["ok"] is True
