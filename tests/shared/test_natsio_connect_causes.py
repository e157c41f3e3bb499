"""A failed NATS connect is named by its cause, with a remedy and no password,
and a service still waiting for NATS says so, and why, while it waits."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import structlog

from gpuscale import natsio
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NatsUnreachable, connect, connect_once, is_connected

from ..secret_nats import PASSWORD
from ..waiting import eventually


def closed_port() -> int:
    """A loopback port nothing listens on (picked, then let go)."""
    return free_port("127.0.0.1")


@pytest.fixture
async def http_port() -> AsyncIterator[int]:
    """A port that answers, but as an HTTP server does."""

    async def answer(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        w.write(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        with contextlib.suppress(Exception):
            await w.drain()
            w.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    try:
        yield int(server.sockets[0].getsockname()[1])
    finally:
        server.close()


async def cause_of(url: str) -> NatsUnreachable:
    with pytest.raises(NatsUnreachable) as caught:
        await connect_once([url], name="test", timeout_s=4.0)
    assert PASSWORD not in str(caught.value)
    assert "\n" not in str(caught.value)
    return caught.value


async def test_a_refused_port_is_called_refused() -> None:
    e = await cause_of(f"nats://app:{PASSWORD}@127.0.0.1:{closed_port()}")
    assert e.problem.cause == "refused"
    assert "connection refused" in str(e)
    assert "nats://app:***@127.0.0.1" in str(e)


async def test_an_unknown_host_is_called_unknown() -> None:
    e = await cause_of(f"nats://app:{PASSWORD}@no-such-host.invalid:4222")
    assert e.problem.cause == "unknown_host"
    assert "unknown host" in str(e)


async def test_a_wrong_password_is_called_an_authorization_failure(nats_with_password: EmbeddedNats) -> None:
    port = nats_with_password.port
    e = await cause_of(f"nats://app:wrong-{PASSWORD}@127.0.0.1:{port}")
    assert e.problem.cause == "auth"
    assert "refused the credentials" in str(e)
    # The right password still gets in: the server is fine, only the credentials were not.
    nc = await connect_once([f"nats://app:{PASSWORD}@127.0.0.1:{port}"], name="test")
    await nc.close()


async def test_a_port_that_answers_something_else_is_called_not_nats(http_port: int) -> None:
    e = await cause_of(f"nats://127.0.0.1:{http_port}")
    assert e.problem.cause == "not_nats"
    assert "not as a NATS server does" in str(e)


async def test_a_silent_port_is_called_a_timeout(silent_port: int) -> None:
    e = await cause_of(f"nats://127.0.0.1:{silent_port}")
    assert e.problem.cause == "timeout"


async def test_a_service_waiting_for_nats_says_why_in_readiness_and_again_in_its_log(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(natsio, "WAITING_LOG_EVERY_S", 0.5)
    url = f"nats://app:{PASSWORD}@127.0.0.1:{closed_port()}"
    stop = asyncio.Event()
    with structlog.testing.capture_logs() as logs:
        task = asyncio.create_task(
            connect(
                [url], ServiceMetrics("waiting-test"), name="waiting-test", reconnect_wait_s=0.1, stop=stop
            )
        )
        try:
            await eventually(
                lambda: "connection refused" in is_connected(None)[1], what="readiness saying why"
            )
            await eventually(
                lambda: any(e["event"] == "nats_still_waiting" for e in logs),
                timeout_s=30.0,
                what="a second 'still waiting' line",
            )
        finally:
            stop.set()
            with contextlib.suppress(Exception):
                await task
    waiting = [e for e in logs if e["event"] in ("nats_connect_failed", "nats_still_waiting")]
    assert waiting[0]["event"] == "nats_connect_failed"
    assert all(e["cause"] == "refused" and e["remedy"] for e in waiting)
    assert PASSWORD not in repr(logs)
    # The per-attempt nats-py errors are not logged beside it, once per kind, before the first connect.
    assert not [e for e in logs if e["event"] == "nats_error"]


async def test_a_connect_loop_that_stops_leaves_no_reason_behind() -> None:
    # Readiness shows why a service is waiting only while it waits: a stopped loop's stale
    # reason would be shown for another connect in the same process.
    stop = asyncio.Event()
    url = f"nats://127.0.0.1:{closed_port()}"
    task = asyncio.create_task(connect([url], ServiceMetrics("stops-test"), name="stops", stop=stop))
    await eventually(lambda: natsio.waiting_reason("stops-test"), what="a reason while waiting")
    stop.set()
    with contextlib.suppress(Exception):
        await task
    assert natsio.waiting_reason("stops-test") is None
