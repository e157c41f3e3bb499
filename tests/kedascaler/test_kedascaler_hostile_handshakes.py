"""The external metrics API's port (6443) against a pod that holds no client certificate.

The port is open to any pod by its NetworkPolicy (the API server's address matches no
selector), so the TLS handshake is the only gate. Before: asyncio gave every accepted
connection its TLS state and a 256 KiB read buffer at once (~300 KiB each, measured) and kept a
silent one 60 s, with no bound on how many: 1,000 connections that never send a byte held
+300 MiB, past the pod's 256 Mi limit, so the keda-scaler (KEDA's gRPC for every team, and the
HPA's external metrics) was OOM-killed by a pod that only calls connect()."""

from __future__ import annotations

import asyncio
import gc
import ssl
from asyncio import sslproto
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale_kedascaler import metricsapi

from ..waiting import eventually
from .certs import shared_pki
from .harness import RunningScaler, running_scaler
from .test_kedascaler_external_metrics import BASE, api_settings, client, get

pytestmark = pytest.mark.integration

MAX_HANDSHAKES = metricsapi.MAX_HANDSHAKES
SILENT = 400  # each ~300 KiB on the server while its handshake is under way


@pytest.fixture
async def scaler(nats_server: EmbeddedNats) -> AsyncIterator[RunningScaler]:
    async with running_scaler(api_settings(nats_server.url)) as running:
        yield running


def refused(scaler: RunningScaler, outcome: str) -> float:
    return scaler.counter(
        "gpuscale_kedascaler_requests_total", api="external_metrics", method="handshake", outcome=outcome
    )


def handshakes_held() -> int:
    """TLS states alive in this process (the server's: a client here holds none by then)."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, sslproto.SSLProtocol))


async def test_silent_connections_cannot_pile_up(scaler: RunningScaler) -> None:
    port = scaler.service.api_port
    closed = 0

    async def silent() -> None:
        nonlocal closed
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            await reader.read()  # b"" or a reset: the server closed it
        except OSError:
            pass
        finally:
            closed += 1
            writer.close()

    tasks = []
    for _ in range(SILENT):
        tasks.append(asyncio.create_task(silent()))
        await asyncio.sleep(0)
    try:
        # Past the bound, the oldest are closed at once, not 60 s later.
        await eventually(lambda: closed >= SILENT - MAX_HANDSHAKES, 30, "the oldest handshakes to be closed")
        assert handshakes_held() <= MAX_HANDSHAKES + 8
        assert refused(scaler, "too_many_handshakes") >= SILENT - MAX_HANDSHAKES
        code, _ = await get(scaler, BASE)  # the API server's own handshake still gets in
        assert code == 200
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_silent_handshake_is_closed_after_the_timeout(
    nats_server: EmbeddedNats, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(metricsapi, "HANDSHAKE_TIMEOUT_S", 1.0)
    async with running_scaler(api_settings(nats_server.url)) as scaler:
        reader, writer = await asyncio.open_connection("127.0.0.1", scaler.service.api_port)
        try:
            # asyncio's own timeout was 60 s; generous against 1 s on a busy machine.
            assert await asyncio.wait_for(reader.read(), 20) == b""
        finally:
            writer.close()
        await eventually(lambda: refused(scaler, "handshake_timeout") == 1, 15, "the timeout counted")
        assert handshakes_held() == 0


async def _answer(port: int, who: tuple[Path, Path] | None) -> bytes:
    """What a GET over TLS with ``who``'s certificate gets back: b"" when refused."""
    try:
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client(who), server_hostname="localhost"
        )
    except (ssl.SSLError, OSError):
        return b""
    try:  # TLS 1.3: the server's refusal comes after the client's handshake is done
        writer.write(f"GET {BASE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return await asyncio.wait_for(reader.read(), 20)
    except (ssl.SSLError, OSError):
        return b""
    finally:
        writer.close()


async def test_a_refused_certificate_is_counted_and_the_connection_freed(scaler: RunningScaler) -> None:
    for who in (None, shared_pki().stranger):
        assert await _answer(scaler.service.api_port, who) == b""
    await eventually(lambda: refused(scaler, "handshake_failed") == 2, 15, "both refusals counted")
    assert handshakes_held() == 0
    assert (await _answer(scaler.service.api_port, shared_pki().front_proxy)).startswith(b"HTTP/1.1 200")
