"""One pod's /metrics page cannot hurt the node: what a page may
cost in bytes, lines, series and label bytes, and in CPU to parse, each bound
refused with its reason, counted, backed off and logged once; non-finite values
counted, not logged per value. Against real HTTP servers (aiohttp): small pages
in this process, the big attack pages from a server process of their own so
that serving them costs the collector under test nothing."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import itertools
import json
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from structlog.testing import capture_logs

from gpuscale.wire import EngineSignals
from gpuscale_collector.core import engines as core
from gpuscale_collector.core.engines import FAILURES_BEFORE_BACKOFF, PageLimits, PageReader, PageRefused
from gpuscale_collector.core.workloads import PodInfo
from gpuscale_collector.engine_scraper import EngineScraper

from ..k8s_objects import gpu_workload, vllm_annotations
from ..waiting import eventually

# Pages are parsed within a CPU budget and the sampling is timed: alone, not beside another
# worker's test (a busy neighbour inflates both).
pytestmark = pytest.mark.serial

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_metrics"
REAL_PAGES = sorted(p.name for p in SAMPLES.glob("*.txt"))
VLLM = (SAMPLES / "vllm_v0.txt").read_text()
SMALL_VLLM = (
    "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n"
    "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
)
MIB = 2**20
# The collector's deployed memory limit (deploy/base/collector.yaml) and its RSS at rest
# (bench/collector_bench.py, bench/engine_page_attack.py: ~49 MiB).
DEPLOYED_LIMIT_MIB = 128
AT_REST_MIB = 49


# --- helpers --------------------------------------------------------------------------


def lines_page(line: str, count: int, head: str = "") -> str:
    """``head`` then ``count`` lines made from ``line`` (``{i}`` numbers them)."""
    return head + "".join(line.format(i=i) + "\n" for i in range(count))


def read(text: str | bytes, limits: PageLimits | None = None, chunk: int = 65536) -> list[bytes]:
    """A page through the reader in ``chunk``-byte pieces, as it streams in."""
    body = text.encode() if isinstance(text, str) else text
    reader = PageReader(limits or PageLimits())
    for i in range(0, len(body), chunk):
        reader.feed(body[i : i + chunk])
    return reader.finish()


def refusal(text: str, limits: PageLimits | None = None) -> str:
    with pytest.raises(PageRefused) as caught:
        read(text, limits)
    return caught.value.reason


@contextlib.asynccontextmanager
async def serving(body: bytes, headers: dict[str, str] | None = None) -> AsyncIterator[int]:
    """``body`` at /metrics on 127.0.0.1, streamed (no Content-Length to refuse it by)."""

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers=headers or {})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):  # a page refused part-way: the scraper hung up
            for i in range(0, len(body), 65536):
                await resp.write(body[i : i + 65536])
            await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]  # the bound port
    finally:
        await runner.cleanup()


# A server process: every GET /metrics on 0.0.0.0 (any pod address of the loopback
# block) gets the page named on its command line, streamed; it prints its port.
SERVER = textwrap.dedent(
    """
    import asyncio, json, socket, sys
    from aiohttp import web
    body = "".join(line.format(i=i) + "\\n" for line, count in json.loads(sys.argv[1]) for i in range(count)).encode()

    async def handler(request):
        resp = web.StreamResponse()
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            for i in range(0, len(body), 65536):
                await resp.write(body[i : i + 65536])
            await resp.write_eof()
        except ConnectionError:
            pass
        return resp

    async def main():
        app = web.Application()
        app.router.add_get("/metrics", handler)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "0.0.0.0", 0)
        await site.start()
        print(site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
    """
)


@contextlib.contextmanager
def page_server(*parts: tuple[str, int]) -> Iterator[int]:
    """A server process serving the ``lines_page(line, count)`` of each part in turn; yields its port."""
    child = subprocess.Popen(
        [sys.executable, "-c", SERVER, json.dumps(parts)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        yield int(child.stdout.readline())
    finally:
        child.terminate()
        child.wait(10)


# The attack pages, each just under the old 4 MiB cap.
COUNTER_SERIES = ('vllm:request_success_total{{i="{i}"}} 1', 104_000)  # 4.15 MB
GAUGE_SERIES = ('vllm:num_requests_waiting{{engine="{i}"}} 1', 94_000)  # 4.12 MB
# The costliest page the default bounds accept: ~680 series read (~64 KiB), among
# unread lines up to ~1 MiB and ~20k lines.
WORST_ACCEPTED = (
    ('vllm:num_requests_waiting{{engine="{i}",model_name="' + "x" * 40 + '"}} 1', 680),
    ('attack_bucket{{i="{i}",le="' + "9" * 10 + '"}} 1' + " " * 8, 19_200),
)


def pod(name: str, port: int, namespace: str = "tenant-a") -> PodInfo:
    return PodInfo(
        uid=f"uid-{name}",
        namespace=namespace,
        name=name,
        ready=True,
        ip="127.0.0.1",
        annotations={"gpuscale.io/metrics-port": str(port)},
    )


def scraper(registry: CollectorRegistry, **options: Any) -> EngineScraper:
    options.setdefault("timeout_s", 5.0)
    return EngineScraper(node="node-a", interval_s=1.0, concurrency=16, registry=registry, **options)


def count(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def settled(s: EngineScraper) -> None:
    await eventually(lambda: not s._in_flight, 30.0, "the round's scrapes to finish")


# --- the reader: each bound, and real pages untouched -------------------------------


@pytest.mark.parametrize("name", REAL_PAGES)
def test_real_pages_keep_the_same_lines_in_any_chunking(name: str) -> None:
    text = (SAMPLES / name).read_text()
    want = core.select_lines(text).encode().split(b"\n")
    for chunk in (1, 7, 100, 65536):
        assert read(text, chunk=chunk) == [w for w in want if w]


@pytest.mark.parametrize(
    ("page", "limits", "reason"),
    [
        (lines_page(COUNTER_SERIES[0], 2_000), PageLimits(), "too_many_series"),
        (lines_page('attack{{i="{i}"}} 1', 30_000), PageLimits(), "too_many_lines"),
        (lines_page("# " + "a" * 100, 11_000), PageLimits(), "too_large"),
        ('vllm:num_requests_waiting{m="' + "x" * 3000 + '"} 1\n', PageLimits(), "label_bytes"),
        (
            lines_page('vllm:num_requests_waiting{{i="{i}",m="' + "x" * 100 + '"}} 1', 900),
            PageLimits(),
            "label_bytes",
        ),
        # A long line that is kept, split over chunks: refused before it is whole.
        ('vllm:num_requests_waiting{m="' + "x" * 200_000 + '"} 1\n', PageLimits(), "label_bytes"),
    ],
    ids=["series", "lines", "bytes", "line_labels", "total_labels", "long_kept_line"],
)
def test_a_page_over_a_bound_is_refused_with_its_reason(page: str, limits: PageLimits, reason: str) -> None:
    assert refusal(page, limits) == reason


def test_long_lines_that_are_not_read_cost_nothing_kept() -> None:
    """A HELP line or an info gauge with many labels may be long: not read, not held."""
    page = "# HELP x " + "y" * 300_000 + "\n" + 'vllm:lora_requests_info{a="' + "z" * 50_000 + '"} 1\n' + VLLM
    reader = PageReader(PageLimits())
    body = page.encode()
    for i in range(0, len(body), 4096):
        reader.feed(body[i : i + 4096])
        assert len(reader._tail) <= PageLimits().max_series_bytes  # never a whole long line held
    assert reader.finish() == read(VLLM)


def test_problems_are_counted_by_reason_and_only_the_first_few_kept_in_words() -> None:
    page = lines_page(
        'vllm:num_requests_waiting{{engine="{i}"}} NaN',
        500,
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 2\nvllm:num_requests_waiting -1\n",
    )
    from prometheus_client.parser import text_string_to_metric_families

    kept = b"\n".join(read(page)).decode()
    reading = core.recognise(text_string_to_metric_families(kept))
    assert reading.found
    assert reading.requests_running == 2.0
    assert dict(reading.rejected) == {"non_finite": 500, "negative": 1}
    assert len(reading.problems) == core.MAX_PROBLEM_TEXTS


# --- the scraper over real HTTP ------------------------------------------------------


@pytest.mark.parametrize(
    ("page", "options", "outcome"),
    [
        (lines_page(*COUNTER_SERIES), {}, "too_many_series"),
        (lines_page('attack{{i="{i}"}} 1', 30_000), {}, "too_many_lines"),
        (lines_page('vllm:num_requests_waiting{{i="{i}",m="' + "x" * 100 + '"}} 1', 900), {}, "label_bytes"),
        (lines_page("# pad " + "p" * 1000, 1_100), {}, "too_large"),
        # Within every bound but over a (tiny) CPU budget: given up, not parsed on.
        # (~12 ms of CPU here; the other pod's vLLM page ~0.3 ms.)
        (
            lines_page('vllm:num_requests_waiting{{i="{i}",m="' + "x" * 10 + '"}} 1', 950),
            {"parse_budget_s": 0.003},
            "parse_time",
        ),
    ],
    ids=["series", "lines", "labels", "bytes", "cpu"],
)
async def test_a_page_over_a_bound_is_refused_counted_backed_off_and_logged_once(
    page: str, options: dict[str, Any], outcome: str
) -> None:
    registry = CollectorRegistry()
    s = scraper(registry, **options)
    loop = asyncio.get_running_loop()
    # The other tenant's page is a small one: under the tiny CPU budget of the "cpu" case with
    # room to spare on a busy machine (a real vLLM page's first parse is ~0.6 ms of CPU).
    async with serving(page.encode()) as hostile, serving(SMALL_VLLM.encode()) as good:
        pods = {
            ("tenant-a", "hostile"): pod("hostile", hostile),
            ("tenant-b", "good"): pod("good", good, "tenant-b"),
        }
        with capture_logs() as logs:
            for round_ in range(1, FAILURES_BEFORE_BACKOFF + 4):
                s.round(pods, loop.time())  # back to back: well inside the first backoff
                await settled(s)
                # The other tenant's pod is read every round meanwhile (counted: not read
                # back by age, which a stalled test process could outlast).
                assert count(registry, "gpuscale_collector_engine_scrapes_total", outcome="ok") == round_
                assert s.found()[("tenant-b", "good")].requests_waiting == 0.0
        await s.close()
    assert (
        count(registry, "gpuscale_collector_engine_scrapes_total", outcome=outcome) == FAILURES_BEFORE_BACKOFF
    )
    assert count(registry, "gpuscale_collector_engine_scrapes_skipped_total", reason="backoff") == 3
    assert (
        count(registry, "gpuscale_collector_engine_scrapes_total", outcome="ok")
        == FAILURES_BEFORE_BACKOFF + 3
    )
    failed = [e for e in logs if e["event"] == "engine_scrape_failed"]
    assert [(e["pod"], e["outcome"]) for e in failed] == [("hostile", outcome)]
    assert ("tenant-a", "hostile") not in s.current(loop.time())


async def test_a_page_of_nan_samples_is_counted_per_value_and_logged_once() -> None:
    nan_page = lines_page(
        'vllm:num_requests_waiting{{engine="{i}"}} NaN',
        900,
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n# TYPE vllm:num_requests_waiting gauge\n",
    )
    registry = CollectorRegistry()
    s = scraper(registry)
    loop = asyncio.get_running_loop()
    rounds = 6
    async with serving(nan_page.encode()) as nan_port, serving(VLLM.encode()) as good:
        pods = {
            ("tenant-a", "nan"): pod("nan", nan_port),
            ("tenant-b", "good"): pod("good", good, "tenant-b"),
        }
        with capture_logs() as logs:
            for _ in range(rounds):
                s.round(pods, loop.time())
                await settled(s)
        await s.close()
    about_nan = [e for e in logs if e.get("pod") == "nan"]
    assert [e["event"] for e in about_nan] == ["engine_metrics_found"]
    assert len(json.dumps(about_nan[0], default=str)) < 2048  # a line, not the page
    assert about_nan[0]["ignored_total"] == 900
    # The running gauge is still read; every NaN counted, none sent.
    assert s.current(loop.time())[("tenant-a", "nan")] == EngineSignals("vllm", None, 1.0, None)
    assert (
        count(registry, "gpuscale_collector_engine_values_rejected_total", reason="non_finite")
        == 900 * rounds
    )


async def test_a_page_that_flips_between_outcomes_is_logged_once_a_minute() -> None:
    flip = [0]

    async def handler(_request: web.Request) -> web.Response:
        flip[0] += 1
        if flip[0] % 2:
            return web.Response(text=VLLM)
        return web.Response(text=lines_page(*COUNTER_SERIES[:1], 2_000))

    app = web.Application()
    app.router.add_get("/metrics", handler)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = int(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]  # the bound port
    registry = CollectorRegistry()
    s = scraper(registry)
    loop = asyncio.get_running_loop()
    try:
        with capture_logs() as logs:
            for _ in range(10):
                s.round({("tenant-a", "flip"): pod("flip", port)}, loop.time())
                await settled(s)
    finally:
        await s.close()
        await runner.cleanup()
    assert [e["event"] for e in logs].count("engine_scrape_failed") == 1
    assert count(registry, "gpuscale_collector_engine_scrapes_total", outcome="too_many_series") == 5


async def test_a_compressed_answer_is_refused_not_inflated() -> None:
    """Asked for identity; a page that comes gzipped anyway (a bomb inflates 1000:1) is not read."""
    bomb = gzip.compress(b"# " + b"0" * (16 * MIB))
    registry = CollectorRegistry()
    s = scraper(registry)
    loop = asyncio.get_running_loop()
    async with serving(bomb, {"Content-Encoding": "gzip", "Content-Type": "text/plain"}) as port:
        s.round({("tenant-a", "bomb"): pod("bomb", port)}, loop.time())
        await settled(s)
        await s.close()
    assert count(registry, "gpuscale_collector_engine_scrapes_total", outcome="http_error") == 1


class PeakRss:
    """This process's RSS, sampled every few ms on a thread of its own."""

    def __init__(self) -> None:
        self._proc = psutil.Process()
        self.start = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self._proc.memory_info().rss)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def growth_mib(self) -> float:
        return (self.peak - self.start) / MIB


@pytest.mark.parametrize(
    ("page", "outcome"),
    [((COUNTER_SERIES,), "too_many_series"), ((GAUGE_SERIES,), "too_many_series"), (WORST_ACCEPTED, "ok")],
    ids=["counters", "gauges", "worst_accepted"],
)
async def test_eight_pods_of_worst_pages_keep_the_collector_within_its_memory_limit(
    page: tuple[tuple[str, int], ...], outcome: str
) -> None:
    """Every GPU of an 8-GPU node held by a pod serving a ~4 MiB page of ~100k engine
    series (each took ~180 MiB to parse whole), or the costliest page the bounds
    accept: the scrapes cost a few MiB. What the scrapes may add is the deployed
    limit less the collector at rest and 20 MiB for the interpreter's own growth."""
    registry = CollectorRegistry()
    # Memory is measured here, not the CPU budget, which a busy machine may overrun.
    s = scraper(registry, parse_budget_s=10.0)
    loop = asyncio.get_running_loop()
    with page_server(*page) as port:
        pods = {("tenant-a", f"p{i}"): pod(f"p{i}", port) for i in range(8)}
        with PeakRss() as rss:
            for i in range(3):
                s.round(pods, loop.time() + 1000.0 * i)  # past any backoff: every pod read every round
                await settled(s)
        await s.close()
    assert rss.growth_mib < DEPLOYED_LIMIT_MIB - AT_REST_MIB - 20, f"{rss.growth_mib:.1f} MiB"
    assert count(registry, "gpuscale_collector_engine_scrapes_total", outcome=outcome) == 24


# --- through the app shell: sampling keeps its interval -----------------------------

NODE = "gpu-node-1"


@pytest.mark.integration
async def test_sampling_keeps_its_interval_while_every_other_pod_serves_an_attack_page(
    kube_sim: Any, kit: Any, nats_server: Any, nats_client: Any
) -> None:
    """Seven pods of one tenant on the node serve ~4 MiB pages of engine gauges; a
    vLLM pod of another tenant shares the node. Batches keep coming at the interval
    (a page parsed on the sampling loop stalled it for seconds), the victim's queue
    rides on them, and the hostile pages are refused and counted."""
    from gpuscale import codec, subjects
    from gpuscale.wire import SampleBatch

    interval = 0.25
    with page_server(GAUGE_SERIES) as port:
        await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "tenant-a"}})
        hostile = gpu_workload("hostile", 7, namespace="tenant-a", node=NODE)
        hostile["spec"]["template"]["metadata"]["annotations"] = {"gpuscale.io/metrics-port": str(port)}
        await kube_sim.create(hostile)
        await kube_sim.create(gpu_workload("victim", 1, node=NODE, pod_annotations=vllm_annotations(18110)))
        settings = kit.settings(
            node_name=NODE,
            sim_source="kube-sim",
            kubeconfig=kube_sim.kubeconfig_path,
            interval_s=str(interval),
            nats_url=nats_server.url,
        )
        arrivals: list[tuple[float, SampleBatch]] = []

        async def on_batch(msg: Any) -> None:
            arrivals.append((time.monotonic(), codec.decode(msg.data, SampleBatch, time.time())))

        await nats_client.subscribe(subjects.samples(NODE), cb=on_batch)
        async with kit.running(settings) as rc:
            registry = rc.ctx.metrics.registry

            def refused() -> float:
                return sum(
                    registry.get_sample_value("gpuscale_collector_engine_scrapes_total", {"outcome": o}) or 0
                    for o in core.PAGE_REFUSALS
                )

            def scrapes() -> float:
                return (
                    registry.get_sample_value("gpuscale_collector_engine_scrape_duration_seconds_count") or 0
                )

            await kit.wait_for(lambda: scrapes() >= 8, 30, "every pod scraped once")
            start, first = time.monotonic(), len(arrivals)
            # Three rounds of every page (the first three refusals of each come back to back).
            await kit.wait_for(
                lambda: scrapes() >= 24 and time.monotonic() - start >= 3.0, 60, "3 s of attack"
            )
            window = arrivals[first:]
            elapsed = time.monotonic() - start
            hostile_refused = refused()
    due = elapsed / interval
    assert len(window) >= 0.5 * due, f"{len(window)} batches in {elapsed:.1f} s, {due:.0f} due"
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(window)]
    assert max(gaps) < 6 * interval, f"a gap of {max(gaps):.2f} s"
    victim = [
        e.signals
        for _, batch in window
        for e in batch.engines or ()
        if e.pod_uid in {o.pod_uid for g in batch.gpus for o in g.owners if o.workload.name == "victim"}
    ]
    assert len(victim) >= 0.5 * len(window)
    assert hostile_refused >= 14
