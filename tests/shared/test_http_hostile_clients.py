"""The probe/metrics server (9400–9403) against a pod on the network that means harm.

No NetworkPolicy holds these ports, so any pod reaches them. Before: a request's headers
could be 128 × 8 KiB, held for an hour while unfinished (100 such connections: +200 MiB,
the collector's limit is 128 Mi); connections were unbounded; every malformed request
logged a 9-line traceback, and its read chunk (up to 256 KiB) stayed in a reference cycle
until a full GC (1,000 such requests: 612 MiB)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging

import pytest

from gpuscale.http import MAX_CONNECTIONS, ServiceHttp, _drop_tracebacks
from gpuscale.metrics import ServiceMetrics

BIG_HEADERS = b"".join(b"X-A%d: %s\r\n" % (i, b"a" * 8000) for i in range(127))  # ~1 MiB, each < 8190


async def _server() -> ServiceHttp:
    http = ServiceHttp(ServiceMetrics("collector"), host="127.0.0.1", port=0)
    await http.start()
    return http


async def _get(port: int, path: str) -> int:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    try:
        w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        await w.drain()
        head = await asyncio.wait_for(r.readline(), 10)
        return int(head.split()[1])
    finally:
        w.close()


def _refused(http: ServiceHttp, reason: str) -> float:
    return http.metrics.registry.get_sample_value("gpuscale_http_refused_total", {"reason": reason}) or 0.0


async def test_unfinished_requests_cannot_pile_up() -> None:
    """Slowloris with the biggest headers aiohttp took: bounded in size and in number."""
    http = await _server()
    writers = []
    try:
        for _ in range(100):
            _, w = await asyncio.open_connection("127.0.0.1", http.port)
            w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + BIG_HEADERS)  # never the blank line
            writers.append(w)
            await asyncio.sleep(0)
        await asyncio.sleep(1.0)
        assert http._runner is not None
        assert http._runner.server is not None
        assert len(http._runner.server.connections) <= MAX_CONNECTIONS
        assert await _get(http.port, "/healthz") == 200  # a probe still gets in
        assert _refused(http, "bad_request") + _refused(http, "too_many_connections") >= 100 - MAX_CONNECTIONS
    finally:
        for w in writers:
            w.close()
        await http.stop()


async def test_many_idle_connections_leave_room_for_the_probe() -> None:
    http = await _server()
    writers = []
    try:
        for _ in range(MAX_CONNECTIONS * 3):
            _, w = await asyncio.open_connection("127.0.0.1", http.port)
            writers.append(w)
        await asyncio.sleep(0.5)
        assert http._runner is not None
        assert http._runner.server is not None
        assert len(http._runner.server.connections) <= MAX_CONNECTIONS
        assert await _get(http.port, "/healthz") == 200
        assert await _get(http.port, "/readyz") == 200
        # Each connection past the bound closes one (the probes' two may close two more).
        assert MAX_CONNECTIONS * 2 <= _refused(http, "too_many_connections") <= MAX_CONNECTIONS * 2 + 2
    finally:
        for w in writers:
            w.close()
        await http.stop()


async def test_a_burst_of_connections_counts_each_closed_once() -> None:
    """Connections accepted in one turn of the loop: one closed already is still listed until
    its task ends, and was closed and counted again for each newer one."""
    http = await _server()
    writers = []
    try:
        for _ in range(MAX_CONNECTIONS):
            _, w = await asyncio.open_connection("127.0.0.1", http.port)
            writers.append(w)
        await asyncio.sleep(0.2)
        burst = await asyncio.gather(*(asyncio.open_connection("127.0.0.1", http.port) for _ in range(20)))
        writers += [w for _, w in burst]
        for _ in range(100):  # until every one is accepted (a busy machine takes its time)
            if _refused(http, "too_many_connections") >= 20:
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.2)
        assert _refused(http, "too_many_connections") == 20  # before: up to 20 × 21 / 2
    finally:
        for w in writers:
            w.close()
        await http.stop()


async def test_oversized_headers_are_refused() -> None:
    """A probe or a scrape sends a few hundred bytes: 8 KiB a header is an attack."""
    http = await _server()
    try:
        r, w = await asyncio.open_connection("127.0.0.1", http.port)
        w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 6000 + b"\r\n\r\n")
        await w.drain()
        head = await asyncio.wait_for(r.readline(), 10)
        w.close()
        assert int(head.split()[1]) == 400
        many = b"".join(b"X-%d: a\r\n" % i for i in range(100))
        r, w = await asyncio.open_connection("127.0.0.1", http.port)
        w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + many + b"\r\n")
        await w.drain()
        head = await asyncio.wait_for(r.readline(), 10)
        w.close()
        assert int(head.split()[1]) == 400
        # What kube-probe and Prometheus send still works.
        r, w = await asyncio.open_connection("127.0.0.1", http.port)
        w.write(
            b"GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:9400\r\nUser-Agent: Prometheus/2.53.0\r\n"
            b"Accept: application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
            b"application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;"
            b"escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2\r\n"
            b"Accept-Encoding: gzip\r\nX-Prometheus-Scrape-Timeout-Seconds: 10\r\n"
            b"Authorization: Bearer " + b"e" * 1500 + b"\r\nConnection: close\r\n\r\n"
        )
        await w.drain()
        head = await asyncio.wait_for(r.readline(), 10)
        w.close()
        assert int(head.split()[1]) == 200
    finally:
        await http.stop()


async def test_bad_requests_are_counted_not_traced(caplog: pytest.LogCaptureFixture) -> None:
    http = await _server()
    try:
        with caplog.at_level(logging.DEBUG, logger="aiohttp.server"):
            for _ in range(50):
                r, w = await asyncio.open_connection("127.0.0.1", http.port)
                w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 9000 + b"\r\n\r\n")
                await w.drain()
                await asyncio.wait_for(r.read(), 10)
                w.close()
        assert _refused(http, "bad_request") == 50
        assert [rec for rec in caplog.records if rec.name == "aiohttp.server"] == []
    finally:
        await http.stop()


async def test_refused_requests_free_what_they_read() -> None:
    """Without a full collection, what a refused request read must not stay behind."""
    http = await _server()
    gc.collect()
    gc.disable()
    try:
        for i in range(30):
            r, w = await asyncio.open_connection("127.0.0.1", http.port)
            w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Too-Long: " + b"a" * 9000 + BIG_HEADERS)
            if i % 2:  # half hang up before the answer
                await asyncio.sleep(0.02)
            else:
                with contextlib.suppress(ConnectionError, OSError):  # the answer, or a reset
                    await asyncio.wait_for(r.read(), 10)
            w.close()
        await asyncio.sleep(0.5)
        held = [
            o
            for o in gc.get_referents(*gc.get_objects())
            if isinstance(o, (bytes, bytearray)) and len(o) > 64 * 1024
        ]
        assert sum(len(b) for b in held) < 4 * 1024 * 1024, f"{len(held)} chunks held"
    finally:
        gc.enable()
        await http.stop()


def test_a_refused_request_s_tracebacks_are_cut_along_every_chain_even_a_looping_one() -> None:
    try:
        try:
            raise ValueError("the parser's")
        except ValueError as inner:
            raise KeyError("ours") from inner
    except KeyError as outer:
        error = outer
    cause = error.__cause__
    assert cause is not None
    cause.__context__ = error  # a chain that loops back
    _drop_tracebacks(error)
    assert (error.__traceback__, cause.__traceback__) == (None, None)
