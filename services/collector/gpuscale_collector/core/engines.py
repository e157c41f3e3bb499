"""Inference-engine gauges and finished-request counters from a pod's metrics page. Pure.

Only the lines of the families read are kept before parsing: a whole page costs more than
the collector's CPU budget. The series table is :mod:`~gpuscale_collector.core.engine_series`."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol

from gpuscale.quoting import quoted
from gpuscale.wire import EngineSignals

# The table and the page reader live beside this module; callers import them from here.
from gpuscale_collector.core.engine_page import DEFAULT_MAX_LABEL_BYTES as DEFAULT_MAX_LABEL_BYTES
from gpuscale_collector.core.engine_page import DEFAULT_MAX_PAGE_BYTES as DEFAULT_MAX_PAGE_BYTES
from gpuscale_collector.core.engine_page import DEFAULT_MAX_PAGE_LINES as DEFAULT_MAX_PAGE_LINES
from gpuscale_collector.core.engine_page import DEFAULT_MAX_SERIES as DEFAULT_MAX_SERIES
from gpuscale_collector.core.engine_page import DEFAULT_MAX_SERIES_BYTES as DEFAULT_MAX_SERIES_BYTES
from gpuscale_collector.core.engine_page import DEFAULT_PARSE_BUDGET_S as DEFAULT_PARSE_BUDGET_S
from gpuscale_collector.core.engine_page import PAGE_REFUSALS as PAGE_REFUSALS
from gpuscale_collector.core.engine_page import PageLimits as PageLimits
from gpuscale_collector.core.engine_page import PageReader as PageReader
from gpuscale_collector.core.engine_page import PageRefused as PageRefused
from gpuscale_collector.core.engine_page import select_lines as select_lines
from gpuscale_collector.core.engine_series import FINISHED
from gpuscale_collector.core.engine_series import FINISHED_BY_FAMILY as FINISHED_BY_FAMILY
from gpuscale_collector.core.engine_series import SERIES as SERIES
from gpuscale_collector.core.engine_series import FinishedCounter as FinishedCounter
from gpuscale_collector.core.engine_series import Series as Series
from gpuscale_collector.core.engine_series import Signal as Signal

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
# A longer port or path annotation is refused: the pod watch keeps one character more, no more.
MAX_ANNOTATION_CHARS: Final = 1024
# How much of a bad annotation a problem quotes (its log line, once per pod).
QUOTED_MAX: Final = 100


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
    """The URL of a pod's metrics endpoint, from its annotations; None when it names no port or has no IP."""
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
    # int() refuses "²" (a digit, not decimal) and 4300 digits: either ended every pod's round.
    if not port_text.isdecimal() or len(port_text) > MAX_ANNOTATION_CHARS or not 1 <= int(port_text) <= 65535:
        return TargetProblem(
            "bad_port", f"{source}={quoted(port_text, QUOTED_MAX)} is not a port number (1-65535)"
        )
    path = notes.get(PATH_ANNOTATION) or notes.get(PROMETHEUS_PATH) or DEFAULT_PATH
    if len(path) > MAX_ANNOTATION_CHARS:
        return TargetProblem(
            "bad_path",
            f"metrics path {quoted(path, QUOTED_MAX)} is longer than {MAX_ANNOTATION_CHARS} characters",
        )
    path = path.strip()
    if not path.startswith("/") or any(c.isspace() or ord(c) < 32 or c == "#" for c in path):
        return TargetProblem(
            "bad_path", f"metrics path {quoted(path, QUOTED_MAX)} must start with / and hold no spaces or #"
        )
    host = f"[{ip}]" if ":" in ip else ip
    return ScrapeTarget(f"http://{host}:{int(port_text)}{path}", source)


# A fraction a little above 1 is rounding in the engine (e.g. 1.0000001); more is not a fraction.
_FRACTION_SLACK: Final = 1e-6


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
# The finished-request samples of requests not served: whole families, or samples with a label.
_UNSERVED_SAMPLES: Final = frozenset(c.sample for c in FINISHED if not c.served)
_UNSERVED_LABELS: Final = {c.sample: c.unserved_label for c in FINISHED if c.unserved_label is not None}


class Flows(NamedTuple):
    """Requests/s between two scrapes of a pod; None where they cannot be told."""

    arrival: float | None = None
    completion: float | None = None  # served: requests that failed or gave up arrived, but were not served


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
    """Requests/s that finished and that arrived between two successful scrapes of one pod.

    Empty where the counters are missing, went down (a restart) or the engines changed."""
    elapsed = current_at - previous_at
    before, after = previous.requests_finished, current.requests_finished
    if before is None or after is None or elapsed <= 0.0 or previous.engines != current.engines:
        return Flows()
    now = dict(current.finished_series)
    for key, value in previous.finished_series:
        if now.get(key, -1.0) < value:
            return Flows()
    departed = max(0.0, after - before) / elapsed
    completion = max(0.0, _served(current) - _served(previous)) / elapsed
    if not (math.isfinite(departed) and math.isfinite(completion)):
        return Flows()  # a counter that leapt by ~1e308 in a moment is no rate (the wire takes finite values)
    held_before = _in_pod(previous)
    held_after = _in_pod(current)
    arrival = None
    if held_before is not None and held_after is not None:
        arrival = max(0.0, departed + (held_after - held_before) / elapsed)
    return Flows(arrival if arrival is not None and math.isfinite(arrival) else None, completion)


def _served(reading: EngineReading) -> float:
    """The finished-request series that count requests served, summed (not those that failed or gave up)."""
    return _sum(value for key, value in reading.finished_series if not _unserved(key))


def _unserved(key: CounterKey) -> bool:
    if key[0] in _UNSERVED_SAMPLES:
        return True
    label = _UNSERVED_LABELS.get(key[0])
    return label is not None and label in key[1]


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
        elif family.name in FINISHED_BY_FAMILY:
            counters.append((FINISHED_BY_FAMILY[family.name], family))
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
