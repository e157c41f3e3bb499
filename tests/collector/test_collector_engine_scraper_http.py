"""The engine scraper against real HTTP servers (aiohttp): good, slow, dead,
broken and oversized endpoints, all in one round; backoff, recovery,
bounded concurrency, stale readings, pods that leave. No mocks: each pod is a
real listening socket on 127.0.0.1 named by its pod's annotation."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from gpuscale.wire import EngineSignals
from gpuscale_collector.core.engines import FAILURES_BEFORE_BACKOFF
from gpuscale_collector.core.workloads import PodInfo
from gpuscale_collector.engine_scraper import MAX_BODY_BYTES, EngineScraper
from gpuscale_collector.kube_pods import pod_info_of

from ..waiting import eventually

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_metrics"
VLLM = (
    (SAMPLES / "vllm_v0.txt")
    .read_text()
    .replace(
        'vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 0.0',
        'vllm:num_requests_waiting{model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 6.0',
    )
)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def serving(handler: Handler, path: str = "/metrics") -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]  # the bound port
    try:
        yield int(port)
    finally:
        await runner.cleanup()


def closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pod(name: str, port: int, *, ready: bool | None = True, path: str | None = None) -> PodInfo:
    notes = {"gpuscale.io/metrics-port": str(port)}
    if path is not None:
        notes["gpuscale.io/metrics-path"] = path
    return PodInfo(
        uid=f"uid-{name}", namespace="llm", name=name, ready=ready, ip="127.0.0.1", annotations=notes
    )


def scraper(registry: CollectorRegistry, *, timeout_s: float = 0.3, concurrency: int = 16) -> EngineScraper:
    return EngineScraper(
        node="node-a", interval_s=1.0, timeout_s=timeout_s, concurrency=concurrency, registry=registry
    )


def count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def settled(s: EngineScraper) -> None:
    """Until the round's scrapes have finished (each ends by its timeout)."""
    await eventually(lambda: not s._in_flight, 5.0, "the round's scrapes to finish")


async def text(_request: web.Request) -> web.Response:
    return web.Response(text=VLLM, content_type="text/plain")


@pytest.mark.serial  # it times a round to 50 ms: alone, not beside another worker's test
async def test_one_round_over_good_slow_dead_broken_and_huge_endpoints() -> None:
    hang = asyncio.Event()

    async def slow(_r: web.Request) -> web.Response:
        await hang.wait()
        return web.Response(text=VLLM)

    async def error(_r: web.Request) -> web.Response:
        return web.Response(status=503, text="loading model")

    async def huge(_r: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse()
        await resp.prepare(_r)
        chunk = b"# " + b"x" * 65534 + b"\n"
        for _ in range(MAX_BODY_BYTES // len(chunk) + 2):
            await resp.write(chunk)
        return resp

    async def plain(_r: web.Request) -> web.Response:
        return web.Response(text="# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 1\n")

    async def garbled(_r: web.Request) -> web.Response:
        return web.Response(
            text='# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{a="1" 3\n'
        )

    registry = CollectorRegistry()
    s = scraper(registry)
    async with (
        serving(text) as good,
        serving(slow) as slow_port,
        serving(error) as error_port,
        serving(huge) as huge_port,
        serving(plain) as plain_port,
        serving(garbled) as garbled_port,
        serving(text, "/custom/stats") as custom,
    ):
        pods = {
            ("llm", p.name): p
            for p in (
                pod("good", good),
                pod("custom", custom, path="/custom/stats"),
                pod("slow", slow_port),
                pod("error", error_port),
                pod("huge", huge_port),
                pod("plain", plain_port),
                pod("garbled", garbled_port),
                pod("dead", closed_port()),
                pod("loading", good, ready=False),  # not ready: not scraped
            )
        }
        loop = asyncio.get_running_loop()
        with capture_logs() as logs:
            started = loop.time()
            s.round(pods, started)
            assert loop.time() - started < 0.05  # a round only starts the scrapes
            await settled(s)
        elapsed = loop.time() - started
        hang.set()
        await s.close()

    # Concurrent: the slow one's 0.3 s timeout bounds the round, not the sum.
    assert elapsed < 1.5
    now = loop.time()
    assert s.current(now) == {
        ("llm", "good"): EngineSignals("vllm", 6.0, 0.0, 0.0),
        ("llm", "custom"): EngineSignals("vllm", 6.0, 0.0, 0.0),
    }
    outcomes = {o: count(registry, "gpuscale_collector_engine_scrapes_total", outcome=o) for o in (
        "ok", "timeout", "http_error", "too_large", "no_engine_metrics", "parse_error", "connect_error"
    )}  # fmt: skip
    assert outcomes == {
        "ok": 2,
        "timeout": 1,
        "http_error": 1,
        "too_large": 1,
        "no_engine_metrics": 1,
        "parse_error": 1,
        "connect_error": 1,
    }
    failed = {(e["pod"], e["outcome"]) for e in logs if e["event"] == "engine_scrape_failed"}
    assert failed == {
        ("slow", "timeout"),
        ("error", "http_error"),
        ("huge", "too_large"),
        ("plain", "no_engine_metrics"),
        ("garbled", "parse_error"),
        ("dead", "connect_error"),
    }
    found = [e for e in logs if e["event"] == "engine_metrics_found"]
    assert {e["pod"] for e in found} == {"good", "custom"}
    assert found[0]["engine"] == "vllm"
    assert "vllm:num_requests_waiting" in found[0]["series"]
    assert (
        registry.get_sample_value(
            "gpuscale_collector_engine_info",
            {"namespace": "llm", "pod": "good", "engine": "vllm", "series": ",".join(found[0]["series"])},
        )
        == 1.0
    )
    assert count(registry, "gpuscale_collector_engine_targets") == 8


async def test_a_dead_pod_backs_off_logs_once_and_recovers() -> None:
    registry = CollectorRegistry()
    s = scraper(registry)
    port = closed_port()
    pods = {("llm", "p"): pod("p", port)}
    loop = asyncio.get_running_loop()
    with capture_logs() as logs:
        attempts = 0
        for _ in range(FAILURES_BEFORE_BACKOFF + 3):
            s.round(pods, loop.time())  # rounds back to back: well inside the first backoff
            await settled(s)
            attempts = int(
                count(registry, "gpuscale_collector_engine_scrapes_total", outcome="connect_error")
            )
        # Every round until the backoff starts, then it waits (2, 4 … intervals).
        assert attempts == FAILURES_BEFORE_BACKOFF
        assert count(registry, "gpuscale_collector_engine_scrapes_skipped_total", reason="backoff") == 3
        assert [e["event"] for e in logs].count("engine_scrape_failed") == 1
        assert s.current(loop.time()) == {}

        # The server comes up on that port; once the backoff is over, the pod is read again.
        app = web.Application()
        app.router.add_get("/metrics", text)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        try:
            s.round(pods, loop.time() + 1000)
            await settled(s)
            assert ("llm", "p") in s.current(loop.time())
        finally:
            await runner.cleanup()
            await s.close()
    events = [e["event"] for e in logs]
    assert "engine_scrape_recovered" in events
    assert count(registry, "gpuscale_collector_engine_targets_failing") == 1  # as the last round saw it


async def test_concurrency_is_bounded() -> None:
    inside = 0
    most = 0
    release = asyncio.Event()

    async def held(_r: web.Request) -> web.Response:
        nonlocal inside, most
        inside += 1
        most = max(most, inside)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(release.wait(), 0.2)
        inside -= 1
        return web.Response(text=VLLM)

    registry = CollectorRegistry()
    s = scraper(registry, timeout_s=0.9, concurrency=2)
    async with serving(held) as port:
        pods = {("llm", f"p{i}"): pod(f"p{i}", port) for i in range(6)}
        s.round(pods, asyncio.get_running_loop().time())
        await settled(s)
        await s.close()
    assert most == 2
    assert count(registry, "gpuscale_collector_engine_scrapes_total", outcome="ok") == 6


async def test_readings_age_out_and_pods_that_leave_are_forgotten() -> None:
    registry = CollectorRegistry()
    s = scraper(registry)
    async with serving(text) as port:
        pods = {("llm", "a"): pod("a", port), ("llm", "b"): pod("b", port)}
        s.round(pods, asyncio.get_running_loop().time())
        await settled(s)
        now = asyncio.get_running_loop().time()
        assert set(s.current(now)) == {("llm", "a"), ("llm", "b")}
        # Nothing stale is published: two intervals later without a new scrape, nothing.
        assert s.current(now + 2.1) == {}
        s.round({("llm", "a"): pods[("llm", "a")]}, now)
        await settled(s)
        await s.close()
    assert set(s.found()) == {("llm", "a")}
    assert (
        registry.get_sample_value(
            "gpuscale_collector_engine_info",
            {
                "namespace": "llm",
                "pod": "b",
                "engine": "vllm",
                "series": ",".join(s.found()[("llm", "a")].series),
            },
        )
        is None
    )


async def test_a_bad_annotation_is_counted_and_said_once() -> None:
    registry = CollectorRegistry()
    s = scraper(registry)
    bad = PodInfo(
        uid="u", namespace="llm", name="bad", ip="127.0.0.1", annotations={"gpuscale.io/metrics-port": "http"}
    )
    with capture_logs() as logs:
        for i in range(3):
            s.round({("llm", "bad"): bad}, float(i))
    assert count(registry, "gpuscale_collector_engine_scrapes_skipped_total", reason="bad_annotation") == 3
    (line,) = [e for e in logs if e["event"] == "engine_scrape_target_invalid"]
    assert "not a port number" in line["detail"]
    await s.close()


async def test_a_bad_annotation_at_the_api_size_limit_logs_one_short_line() -> None:
    """Annotations may hold 256 KiB: its pods quoted whole, a team logged ~1 MiB (repr of control
    characters) per pod it started. Cut like every other detail; another pod is scraped as before."""
    registry = CollectorRegistry()
    s = scraper(registry)
    notes = {
        "gpuscale.io/metrics-port": "8000",
        "gpuscale.io/metrics-path": "/m " + "\x1b" * (256 * 1024 - 8),
    }
    bad = pod_info_of({"metadata": {"uid": "u", "namespace": "b", "name": "bad", "annotations": notes},
                       "status": {"podIP": "127.0.0.1"}})  # fmt: skip
    async with serving(text) as port:
        with capture_logs() as logs:
            s.round({("b", "bad"): bad, ("llm", "a"): pod("a", port)}, asyncio.get_running_loop().time())
            await settled(s)
        await s.close()
    (line,) = [e for e in logs if e["event"] == "engine_scrape_target_invalid"]
    assert line["detail"].endswith("(+925 more) is longer than 1024 characters"), line["detail"]
    assert len(repr(line)) < 1000, len(repr(line))
    assert set(s.found()) == {("llm", "a")}


@pytest.mark.parametrize("status", [301, 404])
async def test_redirects_are_not_followed_and_other_answers_are_http_errors(status: int) -> None:
    async def answer(_r: web.Request) -> web.Response:
        return web.Response(status=status, headers={"Location": "http://169.254.169.254/"})

    registry = CollectorRegistry()
    s = scraper(registry)
    async with serving(answer) as port:
        s.round({("llm", "r"): pod("r", port)}, asyncio.get_running_loop().time())
        await settled(s)
        await s.close()
    assert count(registry, "gpuscale_collector_engine_scrapes_total", outcome="http_error") == 1
