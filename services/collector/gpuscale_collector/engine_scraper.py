"""Scrapes the inference-server metrics of this node's GPU pods: the I/O shell.

Pages stream through :class:`core.engines.PageReader` within bounds and parse on one thread:
one pod's page cannot hurt the node (docs/ARCHITECTURE.md#fault-model)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import random
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final, TextIO, cast

import aiohttp
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_fd_to_metric_families
from prometheus_client.registry import Collector

from gpuscale.aio import sleep_unless_stopped
from gpuscale.logging import LogThrottle, get_logger
from gpuscale.wire import EngineSignals
from gpuscale_collector.core import engines as core
from gpuscale_collector.core.schedule import next_tick
from gpuscale_collector.core.workloads import PodInfo

PodKey = tuple[str, str]  # (namespace, pod)
# The default page size cap (--engine-max-page-bytes).
MAX_BODY_BYTES: Final = core.DEFAULT_MAX_PAGE_BYTES
CHUNK_BYTES: Final = 65536
FLAP_LOG_S: Final = 60.0
MAX_DETAIL_CHARS: Final = 200
# The text format Prometheus asks for (0.0.4): every engine serves it.
ACCEPT: Final = "text/plain;version=0.0.4;q=1,*/*;q=0.1"
OUTCOMES: Final = (
    "ok",
    "no_engine_metrics",
    "timeout",
    "connect_error",
    "http_error",
    "parse_error",
    *core.PAGE_REFUSALS,
)


class EngineMetrics:
    """The scraper's own counters, on the collector's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.scrapes = Counter(
            "gpuscale_collector_engine_scrapes_total",
            "Scrapes of GPU pods' inference-server metrics, by outcome",
            ["outcome"],
            registry=registry,
        )
        self.skipped = Counter(
            "gpuscale_collector_engine_scrapes_skipped_total",
            "Scrapes not made: backoff (the pod keeps failing), in_flight (the last is still "
            "running), bad_annotation (its metrics port or path cannot work)",
            ["reason"],
            registry=registry,
        )
        self.seconds = Histogram(
            "gpuscale_collector_engine_scrape_duration_seconds",
            "Time to fetch and read one pod's metrics",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0),
            registry=registry,
        )
        self.targets = Gauge(
            "gpuscale_collector_engine_targets",
            "GPU pods on this node that name a metrics port (the last round)",
            registry=registry,
        )
        self.failing = Gauge(
            "gpuscale_collector_engine_targets_failing",
            "Of those, pods whose last scrape failed",
            registry=registry,
        )
        self.values_rejected = Counter(
            "gpuscale_collector_engine_values_rejected_total",
            "Values of the engine series read that were left out (NaN or infinite, negative, a "
            "fraction over 1, a family of the wrong type, a sum past the largest number)",
            ["reason"],
            registry=registry,
        )
        for outcome in OUTCOMES:
            self.scrapes.labels(outcome=outcome)
        for reason in core.REJECTED_REASONS:
            self.values_rejected.labels(reason=reason)
        for reason in ("backoff", "in_flight", "bad_annotation"):
            self.skipped.labels(reason=reason)


@dataclass(frozen=True, slots=True)
class Reading:
    at: float  # monotonic: when the answer came
    reading: core.EngineReading
    flows: core.Flows  # since the pod's previous successful scrape


class EngineInfo(Collector):
    """``gpuscale_collector_engine_info{namespace,pod,engine,series} 1`` per pod read lately."""

    def __init__(self, found: Callable[[], Mapping[PodKey, core.EngineReading]]) -> None:
        self._found = found

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("gpuscale_collector_engine_info", "")

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "gpuscale_collector_engine_info",
            "What was found on each GPU pod's metrics endpoint: engine(s) and the series read",
            labels=["namespace", "pod", "engine", "series"],
        )
        for (namespace, pod), reading in sorted(self._found().items()):
            family.add_metric([namespace, pod, "+".join(reading.engines), ",".join(reading.series)], 1.0)
        yield family


class EngineScraper:
    def __init__(
        self,
        *,
        node: str,
        interval_s: float,
        timeout_s: float,
        concurrency: int,
        registry: CollectorRegistry,
        limits: core.PageLimits | None = None,
        parse_budget_s: float = core.DEFAULT_PARSE_BUDGET_S,
    ) -> None:
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.limits = limits or core.PageLimits()
        self.parse_budget_s = parse_budget_s
        self.max_age_s = 2.0 * interval_s
        self.metrics = EngineMetrics(registry)
        registry.register(EngineInfo(self.found))
        self._sem = asyncio.Semaphore(concurrency)
        self._concurrency = concurrency
        self._session: aiohttp.ClientSession | None = None
        # One parser thread per node: however many pods serve heavy pages, one page at a time.
        self._parser: concurrent.futures.ThreadPoolExecutor | None = None
        self._latest: dict[PodKey, Reading] = {}  # published: dropped when a scrape fails
        self._last_ok: dict[PodKey, Reading] = {}  # what the next flows are counted from
        self._health: dict[PodKey, core.Health] = {}
        self._in_flight: dict[PodKey, asyncio.Task[None]] = {}
        self._logged: dict[PodKey, set[str]] = {}
        self._what: dict[PodKey, tuple[tuple[str, ...], tuple[str, ...]]] = {}
        self._rng = random.Random()  # noqa: S311 - backoff jitter, not security
        # A pod whose page flips between outcomes gets a line a minute, not one a scrape.
        self._flaps = LogThrottle(FLAP_LOG_S)
        self._log = get_logger(component="engine_scraper", node=node)

    # --- reading out (the tick) -----------------------------------------------------

    def current(self, now: float) -> dict[PodKey, EngineSignals]:
        """The pods' signals read within the last ``max_age`` (monotonic ``now``)."""
        out: dict[PodKey, EngineSignals] = {}
        for key, r in self._latest.items():
            if now - r.at <= self.max_age_s:
                signals = r.reading.signals(r.flows)
                if signals is not None:
                    out[key] = signals
        return out

    def found(self) -> dict[PodKey, core.EngineReading]:
        return {key: r.reading for key, r in self._latest.items()}

    # --- rounds ---------------------------------------------------------------------------

    async def run(
        self, stop: asyncio.Event, targets: Callable[[], Mapping[PodKey, PodInfo]], phase: float
    ) -> None:
        """A round every interval, half an interval off the tick's ``phase``."""
        offset = (phase + self.interval_s / 2) % self.interval_s
        try:
            while not stop.is_set():
                if await sleep_unless_stopped(
                    stop, next_tick(time.time(), self.interval_s, offset) - time.time()
                ):
                    return
                try:
                    self.round(targets(), asyncio.get_running_loop().time())
                except Exception as e:  # noqa: BLE001 - a bad pod object must not end scraping
                    self._log.error("engine_round_failed", error=f"{type(e).__name__}: {e}", exc_info=e)
        finally:
            await self.close()

    def round(self, pods: Mapping[PodKey, PodInfo], now: float) -> None:
        """Start this round's scrapes (they finish on their own); forget pods that left."""
        wanted: dict[PodKey, core.ScrapeTarget] = {}
        misconfigured: set[PodKey] = set()
        for key, pod in pods.items():
            if pod.ready is False:
                continue  # loading its model: its server may not answer yet, and it is not counted
            target = core.scrape_target(pod.ip, pod.annotations)
            if target is None:
                continue
            if isinstance(target, core.TargetProblem):
                misconfigured.add(key)
                self.metrics.skipped.labels(reason="bad_annotation").inc()
                self._once(key, target.reason, "engine_scrape_target_invalid", detail=target.detail)
                continue
            wanted[key] = target
        self._forget(wanted.keys() | misconfigured)
        self.metrics.targets.set(len(wanted))
        self.metrics.failing.set(sum(1 for h in self._health.values() if h.failures))
        for key, target in wanted.items():
            if key in self._in_flight:
                self.metrics.skipped.labels(reason="in_flight").inc()
                continue
            health = self._health.get(key)
            if health is not None and not health.due(now):
                self.metrics.skipped.labels(reason="backoff").inc()
                continue
            task = asyncio.create_task(self._scrape(key, target))
            self._in_flight[key] = task
            task.add_done_callback(lambda _t, k=key: self._in_flight.pop(k, None))  # type: ignore[misc]  # default binds the key

    def _forget(self, keep: set[PodKey]) -> None:
        tables: tuple[dict[PodKey, Any], ...] = (
            self._latest,
            self._last_ok,
            self._health,
            self._logged,
            self._what,
        )
        for table in tables:
            for key in [k for k in table if k not in keep]:
                del table[key]

    # --- one scrape ----------------------------------------------------------------------

    async def _scrape(self, key: PodKey, target: core.ScrapeTarget) -> None:
        async with self._sem:
            loop = asyncio.get_running_loop()
            started = loop.time()
            outcome, detail, reading, answered = await self._fetch_and_read(target.url)
            finished = loop.time()
        self.metrics.seconds.observe(finished - started)
        self.metrics.scrapes.labels(outcome=outcome).inc()
        if reading is not None:
            for reason, n in reading.rejected:
                self.metrics.values_rejected.labels(reason=reason).inc(n)
        if reading is not None and reading.found:
            self._succeeded(key, target, reading, answered)
        else:
            self._failed(key, target, outcome, detail, finished)

    async def _fetch_and_read(self, url: str) -> tuple[str, str, core.EngineReading | None, float]:
        """Outcome, detail, reading, and when the answer came (monotonic: the
        counters' values are of that moment, not of when they were parsed)."""
        loop = asyncio.get_running_loop()
        page = core.PageReader(self.limits)
        try:
            await asyncio.wait_for(self._fetch(url, page), self.timeout_s)
            kept = page.finish()
        except TimeoutError:
            return "timeout", f"no answer within {self.timeout_s:g} s", None, loop.time()
        except core.PageRefused as e:
            return e.reason, e.detail, None, loop.time()
        except _HttpStatus as e:
            return "http_error", str(e), None, loop.time()
        except (aiohttp.ClientConnectionError, OSError) as e:
            return "connect_error", f"{type(e).__name__}: {e}", None, loop.time()
        except aiohttp.ClientError as e:
            return "http_error", f"{type(e).__name__}: {e}", None, loop.time()
        answered = loop.time()
        try:
            # Off the loop that ticks, one page at a time, within its CPU budget (no wall
            # clock: waiting behind another pod's page costs this one nothing).
            if self._parser is None:
                self._parser = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="engine-parse")
            reading = await loop.run_in_executor(self._parser, _parse, kept, self.parse_budget_s)
        except _OverBudget:
            return "parse_time", f"more than {self.parse_budget_s:g} s of CPU to parse", None, answered
        except (ValueError, TypeError, IndexError, KeyError) as e:
            return "parse_error", f"{type(e).__name__}: {e}", None, answered
        if not reading.found:
            return (
                "no_engine_metrics",
                "answered, with none of the engine series gpuscale reads",
                reading,
                answered,
            )
        return "ok", "", reading, answered

    async def _fetch(self, url: str, page: core.PageReader) -> None:
        session = self._session
        if session is None:
            session = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self._concurrency, keepalive_timeout=max(15.0, 3 * self.interval_s)
                ),
                # Uncompressed only: a compressed page's size says nothing of what it inflates to.
                headers={"Accept": ACCEPT, "Accept-Encoding": "identity", "User-Agent": "gpuscale-collector"},
                auto_decompress=False,
            )
        async with session.get(url, allow_redirects=False) as resp:
            if resp.status != 200:
                raise _HttpStatus(f"HTTP {resp.status}")
            encoding = resp.headers.get("Content-Encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise _HttpStatus(f"Content-Encoding {encoding[:40]!r}, not asked for")
            if (resp.content_length or 0) > self.limits.max_bytes:
                raise core.PageRefused("too_large", f"more than {self.limits.max_bytes} bytes")
            # Each chunk is filtered as it comes (bytes operations, ~1 ms per 64 KiB):
            # only the lines of the series read are kept.
            async for chunk in resp.content.iter_chunked(CHUNK_BYTES):
                page.feed(chunk)

    def _succeeded(
        self, key: PodKey, target: core.ScrapeTarget, reading: core.EngineReading, at: float
    ) -> None:
        last = self._last_ok.get(key)
        flows = core.flows(last.reading, last.at, reading, at) if last is not None else core.Flows()
        self._latest[key] = self._last_ok[key] = Reading(at, reading, flows)
        was = self._health.pop(key, None)
        if was is not None and was.failures >= core.FAILURES_BEFORE_BACKOFF:
            self._pod_line("info", "engine_scrape_recovered", key, after_failures=was.failures)
        self._logged.pop(key, None)  # a new failure is worth a line again
        what = (reading.engines, reading.series)
        if self._what.get(key) != what:
            self._what[key] = what
            self._pod_line(
                "info",
                "engine_metrics_found",
                key,
                url=target.url,
                engine="+".join(reading.engines),
                series=list(reading.series),
                ignored=list(reading.problems),
                ignored_total=sum(n for _, n in reading.rejected),
            )

    def _failed(self, key: PodKey, target: core.ScrapeTarget, outcome: str, detail: str, at: float) -> None:
        self._latest.pop(key, None)  # nothing stale is published
        health = core.failed(
            self._health.get(key, core.Health()), outcome, at, self.interval_s, self._rng.random()
        )
        self._health[key] = health
        self._once(
            key,
            outcome,
            "engine_scrape_failed",
            url=target.url,
            outcome=outcome,
            detail=detail[:MAX_DETAIL_CHARS],  # it may quote the page
            retry_in_s=round(max(0.0, health.retry_at - at), 1),
        )

    def _once(self, key: PodKey, reason: str, event: str, **context: Any) -> None:
        """Log ``event`` once per pod and reason while the pod is a target."""
        seen = self._logged.setdefault(key, set())
        if reason in seen:
            return
        seen.add(reason)
        self._pod_line("warning", event, key, **context)

    def _pod_line(self, level: str, event: str, key: PodKey, **context: Any) -> None:
        """One line about a pod, at most one a minute per pod and event (the rest counted)."""
        held = self._flaps.allow(event, *key)
        if held is None:
            return
        if held:
            context["suppressed"] = held
        getattr(self._log, level)(event, namespace=key[0], pod=key[1], **context)

    async def close(self) -> None:
        tasks = list(self._in_flight.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        if self._session is not None:
            await self._session.close()
            self._session = None
        if self._parser is not None:
            self._parser.shutdown(wait=False, cancel_futures=True)
            self._parser = None


class _HttpStatus(Exception):
    pass


class _OverBudget(Exception):
    pass


# How often (lines) the parser looks at the CPU it has spent on a page.
_BUDGET_EVERY_LINES: Final = 8


def _parse(kept: list[bytes], budget_s: float) -> core.EngineReading:
    """The kept lines parsed and recognised, on the parser thread; _OverBudget past
    ``budget_s`` of this thread's CPU time."""
    started = time.thread_time()

    def lines() -> Iterator[str]:
        for i, line in enumerate(kept):
            if i % _BUDGET_EVERY_LINES == 0 and time.thread_time() - started > budget_s:
                raise _OverBudget
            yield line.decode("utf-8", errors="replace")

    reading = core.recognise(text_fd_to_metric_families(cast(TextIO, lines())))
    if time.thread_time() - started > budget_s:
        raise _OverBudget
    return reading
