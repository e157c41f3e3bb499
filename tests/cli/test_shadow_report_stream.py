"""`gpuscale shadow-report` against a real nats-server with JetStream.
Advice it cannot read (bytes that are no decision, a subject naming no workload,
a payload for another workload than its subject) is skipped, counted and said,
and every other workload's report comes out as ever, exit 0; and the stream is
read READ_AHEAD messages a round trip, so two weeks of advice take seconds even
where each round trip is slow."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import sys
import time
from collections.abc import AsyncIterator

import pytest

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, declare_stream, drain, jetstream
from gpuscale.wire import Decision
from gpuscale_cli.shadow.app import READ_AHEAD, read_advice

pytestmark = pytest.mark.integration
BERT = subjects.WorkloadKey("team-a", "Deployment", "bert")
LLAMA = subjects.WorkloadKey("team-b", "Deployment", "llama")


def advice(key: subjects.WorkloadKey, ts: float, before: int, after: int) -> Decision:
    return Decision(
        id=f"{key.name}-{ts}",
        ts=ts,
        namespace=key.namespace,
        kind=key.kind,
        name=key.name,
        from_replicas=before,
        to_replicas=after,
        reason=f"shadow mode: would scale {before} -> {after}",
        inputs={},
    )


async def store(nc: NATS, items: list[tuple[str, bytes]]) -> None:
    """Into the advice stream, acknowledged (a few hundred in flight at a time)."""
    js = jetstream(nc)
    await declare_stream(js, subjects.ADVICE)
    for start in range(0, len(items), 500):
        await asyncio.gather(*(js.publish(subject, data) for subject, data in items[start : start + 500]))


async def report(nats_url: str, output: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuscale_cli.main",
        "shadow-report",
        "--nats-url",
        nats_url,
        "--output",
        output,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_advice_that_cannot_be_read_is_skipped_counted_and_the_report_goes_on(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    now = time.time()
    await store(
        nats_client,
        [
            (subjects.advice(BERT), codec.encode(advice(BERT, now - 300, 2, 4))),
            (subjects.advice(LLAMA), codec.encode(advice(LLAMA, now - 290, 1, 2))),
            # In the middle: bytes that are no decision, a subject that names no
            # workload, a decision on another workload's subject.
            (subjects.advice(BERT), b"\xc1 not msgpack"),
            ("gpuscale.v1.advice.team-a", codec.encode(advice(BERT, now - 250, 4, 9))),
            (subjects.advice(LLAMA), codec.encode(advice(BERT, now - 240, 4, 9))),
            (subjects.advice(BERT), codec.encode(advice(BERT, now - 200, 4, 4))),
            (subjects.advice(LLAMA), codec.encode(advice(LLAMA, now - 100, 2, 1))),
        ],
    )
    rc, out, err = await report(nats_server.url, "json")
    assert rc == 0, err
    reports = {r["workload"]["name"]: r for r in json.loads(out)}
    assert sorted(reports) == ["bert", "llama"]
    assert [(a["from_replicas"], a["to_replicas"]) for a in reports["bert"]["advised"]] == [(2, 4)]
    assert [(a["from_replicas"], a["to_replicas"]) for a in reports["llama"]["advised"]] == [(1, 2), (2, 1)]
    assert "3 advice messages could not be read and were skipped" in err
    assert "bad_subject 1" in err
    assert "subject_mismatch 1" in err
    assert "undecodable 1" in err
    # As text the count comes after the reports.
    rc, out, err = await report(nats_server.url, "text")
    assert rc == 0, err
    assert out.rstrip().endswith(
        "3 advice messages could not be read and were skipped (bad_subject 1, subject_mismatch 1, undecodable 1)"
    )
    assert "team-a/Deployment/bert" in out
    assert "team-b/Deployment/llama" in out


@contextlib.asynccontextmanager
async def slow_link(upstream_port: int, delay_s: float) -> AsyncIterator[int]:
    """A TCP relay that delivers every byte ``delay_s`` late each way (a far-away
    server), in order, at full throughput: a round trip costs 2 × ``delay_s``."""
    loop = asyncio.get_running_loop()
    tasks: set[asyncio.Task[None]] = set()

    async def pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await queue.get()
                if not data:
                    writer.close()
                    return
                await asyncio.sleep(max(0.0, due - loop.time()))
                writer.write(data)
                await writer.drain()

        sender = asyncio.create_task(deliver())
        try:
            while data := await reader.read(65536):
                queue.put_nowait((loop.time() + delay_s, data))
        finally:
            queue.put_nowait((0.0, b""))
            with contextlib.suppress(Exception):
                await sender

    async def on_client(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        server_reader, server_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        for task in (
            asyncio.create_task(pump(client_reader, server_writer)),
            asyncio.create_task(pump(server_reader, client_writer)),
        ):
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    port = free_port()
    server = await asyncio.start_server(on_client, "127.0.0.1", port)
    try:
        yield port
    finally:
        server.close()
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.serial  # it times the rounds against the round trips: alone, not beside another worker's test
async def test_a_large_stream_is_read_in_rounds_not_one_round_trip_per_message(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    count, delay_s = 20_000, 0.01
    now = time.time()
    await store(
        nats_client,
        [
            (subjects.advice(key), codec.encode(advice(key, now - count + i, 2 + i % 2, 2 + (i + 1) % 2)))
            for i in range(count)
            for key in ((BERT, LLAMA)[i % 2],)
        ],
    )
    upstream = int(nats_server.url.rsplit(":", 1)[1])
    async with slow_link(upstream, delay_s) as port:
        nc = await connect([f"nats://127.0.0.1:{port}"], ServiceMetrics("shadow-test"), name="shadow-test")
        try:
            started = time.monotonic()
            read = await read_advice(nc, None, None, time.time())
            took = time.monotonic() - started
        finally:
            await drain(nc)
    assert sum(map(len, read.advice.values())) == count
    assert not read.skipped
    assert read.rounds == math.ceil(count / READ_AHEAD)
    # One round trip per message would take count × 2 × delay_s = 400 s over this link.
    assert took < 0.3 * count * 2 * delay_s, f"{took:.1f} s"
