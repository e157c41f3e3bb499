"""Inference-engine gauges and finished-request counters from a pod's metrics
endpoint: where to scrape, which engine answered, which series it has, what
they add up to, and the request flows between two scrapes. Pure.

The shell fetches the text and hands it to ``prometheus_client``'s parser
(this module does not import it: a core does no I/O and imports no I/O
library); :func:`recognise` takes the parsed families as values. Before
parsing, :func:`select_lines` keeps only the lines of the families read here:
a real vLLM or SGLang exposition is mostly histograms (tens of KB a scrape),
and parsing all of it eight times a second would cost more than the
collector's whole CPU budget. The kept lines are parsed, never picked apart
here. :class:`PageReader` does the same selection on the bytes as they stream
in, within :class:`PageLimits` (a page is a tenant's: what it may cost is
bounded, docs/ARCHITECTURE.md#fault-model).

What is read (the names as the engines' own sources and docs spell them;
samples in tests/fixtures/engine_metrics):

| engine | requests_waiting | requests_running | kv_cache_usage (0-1 fraction → %) | requests_finished (counters) |
|---|---|---|---|---|
| vLLM (V1 and V0) | ``vllm:num_requests_waiting`` | ``vllm:num_requests_running`` | ``vllm:kv_cache_usage_perc``, else the deprecated ``vllm:gpu_cache_usage_perc`` | ``vllm:request_success_total`` (every ``finished_reason``: stop, length, abort) |
| SGLang | ``sglang:num_queue_reqs`` | ``sglang:num_running_reqs`` | ``sglang:token_usage`` | ``sglang:e2e_request_latency_seconds_count`` (one observation per finished request) |
| TGI | ``tgi_queue_size`` | ``tgi_batch_current_size`` | (none: TGI exposes no KV gauge) | ``tgi_request_success`` + ``tgi_request_failure`` |
| Triton | ``nv_inference_pending_request_count`` | | | ``nv_inference_request_success`` + ``nv_inference_request_failure`` |
| Triton + TensorRT-LLM | ``nv_trt_llm_request_metrics{request_type="waiting"}`` | ``…{request_type="active"}`` | ``nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`` | (Triton's) |

Queue and running counts are summed over every series of the family (one
per vLLM engine under data parallelism, one per Triton model, and over the
engines of a pod that runs several); KV-cache usage is the mean over the
engines' series (each engine has its own pool).

The gauges say how much work is in the pod now, not how much is coming: a
pod that keeps up holds a short queue at any load. Demand is a flow, so the
counters of finished requests are read too (summed like the queues; a Triton
ensemble counts a request once in each model it passes through), and
:func:`flows` turns two scrapes of a pod into requests/s: finished (the
counters' rate) and arrived (finished plus the growth of waiting + running).
Only the ``_count`` line of SGLang's histogram is kept for the parser, not
its buckets. The parser names a counter's family without ``_total`` and its
samples with it, whichever way the engine wrote them; both spellings are read.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal, NamedTuple, Protocol

from gpuscale.wire import EngineSignals

# --- where to scrape -------------------------------------------------------------

PORT_ANNOTATION: Final = "gpuscale.io/metrics-port"
PATH_ANNOTATION: Final = "gpuscale.io/metrics-path"
PROMETHEUS_PORT: Final = "prometheus.io/port"
PROMETHEUS_PATH: Final = "prometheus.io/path"
PROMETHEUS_SCRAPE: Final = "prometheus.io/scrape"
# The annotations the pod watch keeps (nothing else of a pod's metadata is needed).
SCRAPE_ANNOTATIONS: Final = (
    PORT_ANNOTATION,
    PATH_ANNOTATION,
    PROMETHEUS_PORT,
    PROMETHEUS_PATH,
    PROMETHEUS_SCRAPE,
)
DEFAULT_PATH: Final = "/metrics"


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    url: str
    source: str  # the annotation the port came from


@dataclass(frozen=True, slots=True)
class TargetProblem:
    """A pod that asks to be scraped in a way that cannot work; ``reason`` is a bounded label."""

    reason: str  # bad_port | bad_path
    detail: str


def scrape_target(ip: str, annotations: Mapping[str, str] | None) -> ScrapeTarget | TargetProblem | None:
    """The URL of a pod's metrics endpoint, from its annotations; None when the
    pod names no port (it serves no engine metrics we know of) or has no IP yet.

    ``gpuscale.io/metrics-port`` / ``-path`` first, then Prometheus' common
    ``prometheus.io/port`` / ``/path`` (each on its own); a pod that says
    ``prometheus.io/scrape: "false"`` and names no gpuscale port is left alone.
    """
    notes = annotations or {}
    port_text = notes.get(PORT_ANNOTATION)
    source = PORT_ANNOTATION
    if port_text is None:
        if notes.get(PROMETHEUS_SCRAPE, "").strip().lower() == "false":
            return None
        port_text = notes.get(PROMETHEUS_PORT)
        source = PROMETHEUS_PORT
    if port_text is None or not ip:
        return None
    port_text = port_text.strip()
    if not port_text.isdigit() or not 1 <= int(port_text) <= 65535:
        return TargetProblem("bad_port", f"{source}={port_text!r} is not a port number (1-65535)")
    path = notes.get(PATH_ANNOTATION) or notes.get(PROMETHEUS_PATH) or DEFAULT_PATH
    path = path.strip()
    if not path.startswith("/") or any(c.isspace() or ord(c) < 32 or c == "#" for c in path):
        return TargetProblem("bad_path", f"metrics path {path!r} must start with / and hold no spaces or #")
    host = f"[{ip}]" if ":" in ip else ip
    return ScrapeTarget(f"http://{host}:{int(port_text)}{path}", source)


# --- what is read ---------------------------------------------------------------------


class Signal(StrEnum):
    WAITING = "requests_waiting"
    RUNNING = "requests_running"
    KV = "kv_cache_usage"


@dataclass(frozen=True, slots=True)
class Series:
    """One family read here: which engine, which signal, and how."""

    engine: str
    signal: Signal
    fraction: bool = False  # a 0-1 fraction (reported as %)
    label: tuple[str, str] | None = None  # only samples with this label value
    fallback_for: str | None = None  # read only when this family is absent


SERIES: Final[Mapping[str, tuple[Series, ...]]] = {
    "vllm:num_requests_waiting": (Series("vllm", Signal.WAITING),),
    "vllm:num_requests_running": (Series("vllm", Signal.RUNNING),),
    "vllm:kv_cache_usage_perc": (Series("vllm", Signal.KV, fraction=True),),
    "vllm:gpu_cache_usage_perc": (
        Series("vllm", Signal.KV, fraction=True, fallback_for="vllm:kv_cache_usage_perc"),
    ),
    "sglang:num_queue_reqs": (Series("sglang", Signal.WAITING),),
    "sglang:num_running_reqs": (Series("sglang", Signal.RUNNING),),
    "sglang:token_usage": (Series("sglang", Signal.KV, fraction=True),),
    "tgi_queue_size": (Series("tgi", Signal.WAITING),),
    "tgi_batch_current_size": (Series("tgi", Signal.RUNNING),),
    "nv_inference_pending_request_count": (Series("triton", Signal.WAITING),),
    "nv_trt_llm_request_metrics": (
        Series("triton", Signal.WAITING, label=("request_type", "waiting")),
        Series("triton", Signal.RUNNING, label=("request_type", "active")),
    ),
    "nv_trt_llm_kv_cache_block_metrics": (
        Series("triton", Signal.KV, fraction=True, label=("kv_cache_block_type", "fraction")),
    ),
}


@dataclass(frozen=True, slots=True)
class FinishedCounter:
    """A family that counts finished requests: a counter, or a histogram whose
    ``_count`` gains one per finished request."""

    engine: str
    family: str  # as the parser names it from its TYPE line (a counter's without ``_total``)
    kind: Literal["counter", "histogram"] = "counter"

    @property
    def sample(self) -> str:
        """The samples summed, as the parser names them."""
        return self.family + ("_total" if self.kind == "counter" else "_count")


FINISHED: Final = (
    FinishedCounter("vllm", "vllm:request_success"),  # every finished_reason: stop, length, abort
    FinishedCounter("sglang", "sglang:e2e_request_latency_seconds", kind="histogram"),
    FinishedCounter("tgi", "tgi_request_success"),
    FinishedCounter("tgi", "tgi_request_failure"),
    FinishedCounter("triton", "nv_inference_request_success"),
    FinishedCounter("triton", "nv_inference_request_failure"),
)
# Without a TYPE line the parser names the family after its samples as written
# (``vllm:request_success_total``, TGI's bare ``tgi_request_success``).
_FINISHED_BY_FAMILY: Final[Mapping[str, FinishedCounter]] = {
    name: spec for spec in FINISHED for name in (spec.family, spec.sample)
}
# A fraction a little above 1 is rounding in the engine (e.g. 1.0000001); more is not a fraction.
_FRACTION_SLACK: Final = 1e-6
# Lines the shell hands to the parser: the samples of these families and their
# TYPE lines (a sample line starts with its family's name: gauges have no suffix,
# counters ``_total`` or none). Of a histogram only ``_count``: its buckets are
# most of the page.
_LINE_PREFIXES: Final = (
    tuple(SERIES)
    + tuple(f"# TYPE {name}" for name in SERIES)
    + tuple(spec.family if spec.kind == "counter" else spec.sample for spec in FINISHED)
    + tuple(f"# TYPE {spec.family}" for spec in FINISHED)
)


def select_lines(text: str) -> str:
    """The lines of ``text`` that belong to the families read here (and their
    TYPE lines), for the parser. Others may share a prefix
    (``vllm:num_requests_waiting_by_priority``): they parse as families of
    their own names, which :func:`recognise` does not read. A histogram
    family with only its ``_count`` parses as that histogram."""
    return "\n".join(line for line in text.splitlines() if line.startswith(_LINE_PREFIXES))


# --- what a page may cost ---------------------------------------------------------------

# Defaults, each far above what a real engine serves (tests/fixtures/engine_metrics:
# 3-10 KiB, 9-115 lines, 1-24 lines kept, lines of at most 322 bytes; a vLLM pod
# with 8 data-parallel engines ~4k lines, a Triton pod of 100 models ~700 kept).
DEFAULT_MAX_PAGE_BYTES: Final = 2**20
DEFAULT_MAX_PAGE_LINES: Final = 20_000
DEFAULT_MAX_SERIES: Final = 1_000
DEFAULT_MAX_SERIES_BYTES: Final = 2_048
DEFAULT_MAX_LABEL_BYTES: Final = 64 * 1024
# A net for parse costs the other bounds miss, never met by a page they accept (~9 ms idle;
# over 50 ms was seen on a node whose cores were all busy).
DEFAULT_PARSE_BUDGET_S: Final = 0.25
PAGE_REFUSALS: Final = ("too_large", "too_many_lines", "too_many_series", "label_bytes", "parse_time")


@dataclass(frozen=True, slots=True)
class PageLimits:
    """What one pod's page may cost: the page (bytes, lines), and what is kept of it
    for the parser (series, bytes of one series' line, bytes of them all)."""

    max_bytes: int = DEFAULT_MAX_PAGE_BYTES
    max_lines: int = DEFAULT_MAX_PAGE_LINES
    max_series: int = DEFAULT_MAX_SERIES
    max_series_bytes: int = DEFAULT_MAX_SERIES_BYTES
    max_label_bytes: int = DEFAULT_MAX_LABEL_BYTES


class PageRefused(Exception):
    """A page over one of its limits; ``reason`` is a bounded label (PAGE_REFUSALS)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_BYTE_PREFIXES: Final = tuple(p.encode() for p in _LINE_PREFIXES)
_LONGEST_PREFIX: Final = max(len(p) for p in _BYTE_PREFIXES)


class PageReader:
    """A page read as it streams in: only the lines :func:`select_lines` would keep
    are held, so memory does not grow with the page, and the page is refused at the
    first limit it passes. Bytes in, bytes out (the shell decodes what is kept)."""

    def __init__(self, limits: PageLimits) -> None:
        self.limits = limits
        self.size = 0
        self.lines = 0
        self.kept: list[bytes] = []
        self.kept_bytes = 0
        self._tail = b""  # the line the last chunk ended in
        self._skipping = False  # inside a long line that is not kept: drop it as it comes

    def feed(self, chunk: bytes) -> None:
        limits = self.limits
        self.size += len(chunk)
        if self.size > limits.max_bytes:
            raise PageRefused("too_large", f"more than {limits.max_bytes} bytes")
        if self._skipping:
            end = chunk.find(b"\n")
            if end < 0:
                return
            chunk = chunk[end + 1 :]
            self._skipping = False
            self._count(1)
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()
        self._count(len(lines))
        self._keep([line for line in lines if line.startswith(_BYTE_PREFIXES)])
        if len(self._tail) > max(limits.max_series_bytes, _LONGEST_PREFIX):
            if self._tail.startswith(_BYTE_PREFIXES):
                self._too_long()
            self._tail = b""
            self._skipping = True

    def finish(self) -> list[bytes]:
        """The kept lines, once the page has ended."""
        if self._tail and not self._skipping:
            self._count(1)
            if self._tail.startswith(_BYTE_PREFIXES):
                self._keep([self._tail])
        self._tail = b""
        return self.kept

    def _count(self, lines: int) -> None:
        self.lines += lines
        if self.lines > self.limits.max_lines:
            raise PageRefused("too_many_lines", f"more than {self.limits.max_lines} lines")

    def _keep(self, lines: list[bytes]) -> None:
        if not lines:
            return
        limits = self.limits
        if len(self.kept) + len(lines) > limits.max_series:
            raise PageRefused(
                "too_many_series", f"more than {limits.max_series} lines of the engine series read"
            )
        if max(map(len, lines)) > limits.max_series_bytes:
            self._too_long()
        self.kept_bytes += sum(map(len, lines))
        if self.kept_bytes > limits.max_label_bytes:
            raise PageRefused(
                "label_bytes", f"the engine series read hold more than {limits.max_label_bytes} bytes"
            )
        self.kept.extend(lines)

    def _too_long(self) -> None:
        raise PageRefused(
            "label_bytes", f"a line of an engine series longer than {self.limits.max_series_bytes} bytes"
        )


class SampleLike(Protocol):
    """A parsed sample (``prometheus_client.samples.Sample`` fits)."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def value(self) -> float: ...


class FamilyLike(Protocol):
    """A parsed family (``prometheus_client.metrics_core.Metric`` fits)."""

    @property
    def name(self) -> str: ...
    @property
    def type(self) -> str: ...
    @property
    def samples(self) -> Sequence[SampleLike]: ...


# One counter series: its sample name and labels (sorted).
CounterKey = tuple[str, tuple[tuple[str, str], ...]]


class Flows(NamedTuple):
    """Requests/s between two scrapes of a pod; None where they cannot be told."""

    arrival: float | None = None
    completion: float | None = None


@dataclass(frozen=True, slots=True)
class EngineReading:
    """What one scrape of one pod said."""

    engines: tuple[str, ...] = ()  # sorted: which engines answered
    series: tuple[str, ...] = ()  # the families read, sorted
    requests_waiting: float | None = None
    requests_running: float | None = None
    kv_cache_usage: float | None = None  # %
    requests_finished: float | None = None  # the finished-request counters, summed
    # Each counter series on its own: a reset of one can hide in the sum.
    finished_series: tuple[tuple[CounterKey, float], ...] = ()
    problems: tuple[str, ...] = ()  # series left out, and why (for the log): the first few
    # Values left out, by reason (REJECTED_REASONS), however many: for the counters.
    rejected: tuple[tuple[str, int], ...] = ()

    @property
    def found(self) -> bool:
        return bool(self.engines)

    def signals(self, rates: Flows | None = None) -> EngineSignals | None:
        """The wire form; ``rates`` from :func:`flows` against the pod's previous scrape."""
        if not self.engines:
            return None
        return EngineSignals(
            "+".join(self.engines),
            requests_waiting=self.requests_waiting,
            requests_running=self.requests_running,
            kv_cache_usage=self.kv_cache_usage,
            request_arrival_rate=rates.arrival if rates is not None else None,
            request_completion_rate=rates.completion if rates is not None else None,
        )


def flows(previous: EngineReading, previous_at: float, current: EngineReading, current_at: float) -> Flows:
    """Requests/s that finished and that arrived between two successful scrapes
    of one pod (``*_at`` in seconds on one clock).

    Completion is the rate of the finished-request counters; arrival is
    completion plus the growth of waiting + running (what came in either
    finished or is still in the pod), never below 0, and only when both scrapes
    have both gauges. Nothing when either scrape lacks the counters, time did
    not move forward, the engines changed (the sums are not of the same
    counters), or a counter series went down or went away (a restart: the next
    round counts from the new values)."""
    elapsed = current_at - previous_at
    before, after = previous.requests_finished, current.requests_finished
    if before is None or after is None or elapsed <= 0.0 or previous.engines != current.engines:
        return Flows()
    now = dict(current.finished_series)
    for key, value in previous.finished_series:
        if now.get(key, -1.0) < value:
            return Flows()
    completion = max(0.0, after - before) / elapsed
    if not math.isfinite(completion):
        return Flows()  # a counter that leapt by ~1e308 in a moment is no rate (the wire takes finite values)
    held_before = _in_pod(previous)
    held_after = _in_pod(current)
    arrival = None
    if held_before is not None and held_after is not None:
        arrival = max(0.0, completion + (held_after - held_before) / elapsed)
    return Flows(arrival if arrival is not None and math.isfinite(arrival) else None, completion)


def _sum(values: Iterable[float]) -> float:
    """Exact sum of finite values; inf when it passes the largest double (fsum raises there)."""
    try:
        return math.fsum(values)
    except OverflowError:
        return math.inf


def _in_pod(reading: EngineReading) -> float | None:
    """Requests waiting or running, when the engine says both."""
    if reading.requests_waiting is None or reading.requests_running is None:
        return None
    held = reading.requests_waiting + reading.requests_running
    return held if math.isfinite(held) else None


# Why a value or series was left out: the label values of the rejected-values counter.
REJECTED_REASONS: Final = ("non_finite", "negative", "not_fraction", "wrong_type", "overflow")
# Problems kept in words per reading (for its log line); the rest are only counted.
MAX_PROBLEM_TEXTS: Final = 5


class _Problems:
    """What was left out: every one counted by reason, the first few in words."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.texts: list[str] = []

    def add(self, reason: str, text: str) -> None:
        self.counts[reason] = self.counts.get(reason, 0) + 1
        if len(self.texts) < MAX_PROBLEM_TEXTS:
            self.texts.append(text)


def _bad_value(value: float) -> str:
    return "negative" if math.isfinite(value) else "non_finite"


def recognise(families: Iterable[FamilyLike]) -> EngineReading:
    """The engine gauges among parsed families, summed (queues) or averaged (KV),
    and the finished-request counters, summed."""
    by_name: dict[str, list[FamilyLike]] = {}
    counters: list[tuple[FinishedCounter, FamilyLike]] = []
    for family in families:
        if family.name in SERIES:
            by_name.setdefault(family.name, []).append(family)
        elif family.name in _FINISHED_BY_FAMILY:
            counters.append((_FINISHED_BY_FAMILY[family.name], family))
    sums: dict[Signal, float] = {}
    kv: list[float] = []
    engines: set[str] = set()
    used: set[str] = set()
    problems = _Problems()
    for name, found in by_name.items():
        for spec in SERIES[name]:
            if spec.fallback_for is not None and spec.fallback_for in by_name:
                continue
            values = _values(name, spec, found, problems)
            if not values:
                continue
            engines.add(spec.engine)
            used.add(name)
            if spec.signal is Signal.KV:
                kv.extend(values)
            else:
                sums[spec.signal] = sums.get(spec.signal, 0.0) + _sum(values)
    for signal in [s for s, total in sums.items() if not math.isfinite(total)]:
        problems.add("overflow", f"{signal.value} adds up past the largest number")
        del sums[signal]
    finished = _finished(counters, engines, used, problems)
    requests_finished = _sum(finished.values()) if finished is not None else None
    if finished is not None and not math.isfinite(requests_finished or 0.0):
        problems.add("overflow", "the finished-request counters add up past the largest number")
        finished = requests_finished = None
    return EngineReading(
        engines=tuple(sorted(engines)),
        series=tuple(sorted(used)),
        requests_waiting=sums.get(Signal.WAITING),
        requests_running=sums.get(Signal.RUNNING),
        kv_cache_usage=min(100.0, math.fsum(kv) / len(kv)) if kv else None,
        requests_finished=requests_finished,
        finished_series=tuple(sorted(finished.items())) if finished is not None else (),
        problems=tuple(problems.texts),
        rejected=tuple(sorted(problems.counts.items())),
    )


def _finished(
    counters: list[tuple[FinishedCounter, FamilyLike]],
    engines: set[str],
    used: set[str],
    problems: _Problems,
) -> dict[CounterKey, float] | None:
    """Each finished-request counter series' value; None when there are none, or
    when one is unusable (the sum without it would look like a reset, or a
    burst when it comes back)."""
    values: dict[CounterKey, float] = {}
    read: set[FinishedCounter] = set()
    unusable = False
    for spec, family in counters:
        if family.type not in (spec.kind, "untyped", "unknown"):
            problems.add("wrong_type", f"{family.name} is a {family.type[:40]}, not a {spec.kind}")
            continue
        # A counter without a TYPE line keeps the name it was written with.
        names = (spec.sample, spec.family) if spec.kind == "counter" else (spec.sample,)
        for sample in family.samples:
            if sample.name not in names:
                continue
            value = float(sample.value)
            if not math.isfinite(value) or value < 0.0:
                problems.add(_bad_value(value), f"{sample.name}={value} is not a count of requests")
                unusable = True
                continue
            key = (spec.sample, tuple(sorted(sample.labels.items())))
            values[key] = values.get(key, 0.0) + value
            read.add(spec)
    if not values or unusable:
        return None
    engines.update(spec.engine for spec in read)
    used.update(spec.sample for spec in read)
    return values


def _values(name: str, spec: Series, families: list[FamilyLike], problems: _Problems) -> list[float]:
    """The usable sample values of one family for one series (fractions as %)."""
    out: list[float] = []
    for family in families:
        if family.type not in ("gauge", "untyped", "unknown"):
            problems.add("wrong_type", f"{name} is a {family.type[:40]}, not a gauge")
            continue
        for sample in family.samples:
            if sample.name != name:
                continue
            if spec.label is not None and sample.labels.get(spec.label[0]) != spec.label[1]:
                continue
            value = float(sample.value)
            if not math.isfinite(value) or value < 0.0:
                problems.add(_bad_value(value), f"{name}={value} is not a count or fraction")
                continue
            if spec.fraction:
                if value > 1.0 + _FRACTION_SLACK:
                    problems.add("not_fraction", f"{name}={value:g} is not a 0-1 fraction")
                    continue
                value = min(value, 1.0) * 100.0
            out.append(value)
    return out


# --- when to try a failing pod again --------------------------------------------------

FAILURES_BEFORE_BACKOFF: Final = 3
MAX_BACKOFF_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class Health:
    """A pod's run of failed scrapes, and when to try it next (monotonic seconds)."""

    failures: int = 0
    retry_at: float = 0.0
    reason: str = ""  # the last failure's reason

    def due(self, now: float) -> bool:
        return now >= self.retry_at


def failed(health: Health, reason: str, now: float, interval_s: float, jitter: float) -> Health:
    """After a failure: try again next round until ``FAILURES_BEFORE_BACKOFF`` in a
    row, then wait ``interval × 2^k`` (k = failures beyond that, up to
    ``MAX_BACKOFF_S``), stretched by ``jitter`` in [0, 1) × half of it, so that a
    node of dead endpoints does not knock every round nor in step."""
    failures = health.failures + 1
    if failures < FAILURES_BEFORE_BACKOFF:
        return Health(failures, now, reason)
    wait = min(MAX_BACKOFF_S, interval_s * 2.0 ** (failures - FAILURES_BEFORE_BACKOFF + 1))
    return Health(failures, now + wait * (1.0 + 0.5 * jitter), reason)
