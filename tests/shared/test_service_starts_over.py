"""A connection the NATS server closes for good is not the end of a service.

nats-server answers some protocol errors (here: a subject longer than its
4 KiB control line) with -ERR and closes the connection, and nats-py does not
reconnect after that. The service starts over by itself (``ctx.reopen``),
and if starting over keeps failing /healthz says so, so Kubernetes restarts
the pod."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest

from gpuscale import runtime
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import connect, drain
from gpuscale.runtime import ServiceContext, run_async

from ..waiting import eventually

pytestmark = pytest.mark.integration


class Settings:
    http_port = 0


async def healthz(port: int) -> tuple[int, dict[str, Any]]:
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/healthz") as r:
        return r.status, json.loads(await r.text())


async def test_a_connection_closed_by_the_server_makes_the_service_start_over(
    nats_server: EmbeddedNats,
) -> None:
    runs: list[ServiceContext] = []

    async def serve(ctx: ServiceContext) -> None:
        runs.append(ctx)
        nc = await connect([nats_server.url], ctx.metrics, name="t", stop=ctx.stop, on_closed=ctx.reopen)
        if len(runs) == 1:
            # A subject over the server's control line limit: -ERR, and the server closes us.
            await nc.publish("x." + "a" * 5000, b"")
        await ctx.stop.wait()
        await drain(nc)

    task = asyncio.create_task(run_async("t", Settings(), serve, http_port=0))
    await eventually(lambda: len(runs) == 2, what="the service to start over")
    assert runs[0].reopened
    assert runs[0].metrics.nats_connection_lost._value.get() == 1
    await eventually(lambda: runs[1].metrics.nats_connected._value.get() == 1, what="connected again")
    status, body = await healthz(runs[1].http.port)
    assert status == 200, body
    runs[1].stop.set()  # as a signal would: the service ends
    assert await asyncio.wait_for(task, 10) == 0
    assert len(runs) == 2


async def test_healthz_fails_when_starting_over_keeps_failing(
    nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime, "_NOT_LIVE_AFTER_S", 1.0)
    monkeypatch.setattr(runtime, "_REOPEN_FIRST_S", 0.05)
    runs: list[ServiceContext] = []

    async def serve(ctx: ServiceContext) -> None:
        runs.append(ctx)
        nc = await connect([nats_server.url], ctx.metrics, name="t", stop=ctx.stop, on_closed=ctx.reopen)
        await nc.publish("x." + "a" * 5000, b"")  # every run loses its connection at once
        await ctx.stop.wait()
        await drain(nc)

    task = asyncio.create_task(run_async("t", Settings(), serve, http_port=0))
    await eventually(lambda: len(runs) >= 1)

    async def not_live() -> bool:
        status, body = await healthz(runs[-1].http.port)
        return status == 503 and not body["checks"]["service"]["ok"]

    await eventually(not_live, what="/healthz to report the failing start-overs")
    runs[-1].stop.set()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
