"""A request trace turned into GPU demand, for ``bench/scenarios.py --trace-file``.

The trace is a CSV with one row per request, as Azure's public LLM inference
traces are written: ``TIMESTAMP`` (when the request arrived: an ISO 8601 time, as
the 2023 traces write it or the 2024 ones with their offset, or seconds),
``ContextTokens`` (input) and ``GeneratedTokens`` (output). Rows may come in any
order; a row that is no request (a bad time, a negative count) is skipped and
counted. The 2024 traces cover a week: they are read in one pass into a bin per
second, never held as rows. One such trace is
"Azure LLM inference trace 2023" (code), from the Azure Public Dataset,
https://github.com/Azure/AzurePublicDataset (``data/AzureLLMInferenceTrace_code.csv``),
CC-BY 4.0, by Patel et al., "Splitwise: Efficient generative LLM inference
using phase splitting", ISCA 2024. The bench reads it from the path given;
nothing of it is copied here.

**Tokens to GPU work.** A request costs ``input / P + output / D`` GPU-seconds,
where one GPU prefills ``P`` input tokens a second and decodes ``D`` output
tokens a second in aggregate over its batch (``--prefill-tokens-per-gpu-s``,
``--decode-tokens-per-gpu-s``; the defaults, 12,000 and 2,500, are the order of
an 8B model in vLLM on one H100). The work that arrives in each second is the
workload's load that second, in GPU-percent (100 = one GPU's work), times a
scale ``k``: ``k`` copies of the traced service's traffic behind one
Deployment, chosen so that the replayed span's busiest minute needs
``--trace-peak-replicas`` replicas at 70 GPU-% each (or set by
``--trace-scale``). kube-sim's engine model then turns that load into
requests of 2 s on one of a GPU's 16 slots (0.125 GPU-s each; the code trace's
mean request costs 0.18 GPU-s at the defaults), which queue when the ready
pods' slots are full.
"""

from __future__ import annotations

import csv
import math
import re
import statistics
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from gpuscale_kubesim.cluster import load as loadmod

DEFAULT_PREFILL_TOKENS_PER_GPU_S = 12_000.0
DEFAULT_DECODE_TOKENS_PER_GPU_S = 2_500.0
BIN_S = 1.0  # the load's resolution: arrivals are summed per second
COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# The longest trace read, a bin a second in memory: a month (the 2024 traces cover a week). A row
# years off is a bad time, and would otherwise ask for a list of billions of bins.
MAX_SPAN_S = 31 * 86_400.0
LEAD_IN_S = 600.0
WINDOW_S = 900.0
VARIABILITY_BIN_S = 10.0  # the spread that picks the most variable window is over 10 s means
PEAK_MINUTE_S = 60.0


@dataclass(frozen=True, slots=True)
class TokenCost:
    """What one GPU does in a second: the stated tokens-to-GPU mapping."""

    prefill_tokens_per_gpu_s: float = DEFAULT_PREFILL_TOKENS_PER_GPU_S
    decode_tokens_per_gpu_s: float = DEFAULT_DECODE_TOKENS_PER_GPU_S

    def gpu_s(self, input_tokens: int, output_tokens: int) -> float:
        return input_tokens / self.prefill_tokens_per_gpu_s + output_tokens / self.decode_tokens_per_gpu_s


@dataclass(frozen=True, slots=True)
class TraceBins:
    """A trace as the work that arrives in each ``bin_s`` from its first request: what the
    replay needs, read in one pass, so a week of requests costs its bins, not its rows."""

    loads: list[float]  # GPU-percent of work arriving in each bin, unscaled
    counts: list[int]  # requests arriving in each bin
    skipped: int  # rows that were no request (a bad time or token count)
    bin_s: float = BIN_S


def seconds(text: str) -> float:
    """A row's arrival: an ISO 8601 time as the Azure traces write it (2023's seven
    fractional digits, 2024's ``+00:00`` offset, a whole second without a fraction; a time
    without an offset is taken as UTC), or a number of seconds."""
    text = text.strip()
    try:
        return float(text)
    except ValueError:
        at = datetime.fromisoformat(text)
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def _count(text: str) -> int:
    """A token count: a whole number, written as one or as a float ("12.0", as dataframes export)."""
    value = float(text)
    if not value.is_integer() or value < 0:  # NaN and inf are not integers either
        raise ValueError(f"not a token count: {text!r}")
    return int(value)


def _rows(path: Path) -> Iterator[tuple[float, int, int] | None]:
    """(arrival, input tokens, output tokens) per row; None for a row that is no request."""
    with path.open(newline="", encoding="utf-8-sig") as f:  # a BOM, as spreadsheets write, is no column name
        reader = csv.reader(f)
        header = [name.strip() for name in next(reader, [])]
        missing = [name for name in COLUMNS if name not in header]
        if missing:
            raise ValueError(f"{path}: needs the columns {list(COLUMNS)}, has {header}")
        at, given, made = (header.index(name) for name in COLUMNS)
        for row in reader:
            try:
                yield seconds(row[at]), _count(row[given]), _count(row[made])
            except (ValueError, IndexError, OverflowError):
                yield None


def read_bins(path: Path, cost: TokenCost, bin_s: float = BIN_S) -> TraceBins:
    """The trace's work per ``bin_s`` from its first request (rows in any order)."""
    origin: float | None = None
    while True:  # a second pass only where a row came before the first one
        loads: list[float] = []
        counts: list[int] = []
        skipped, earliest = 0, math.inf
        for row in _rows(path):
            if row is None or not math.isfinite(row[0]):
                skipped += 1
                continue
            t, given, made = row
            origin = t if origin is None else origin
            earliest = min(earliest, t)
            if t < origin:
                continue
            if t - origin > MAX_SPAN_S:
                raise ValueError(
                    f"{path}: a request {t - origin:.0f} s after the first: more than the "
                    f"{MAX_SPAN_S / 86_400:.0f} days a trace may span (a bad time?)"
                )
            i = int((t - origin) // bin_s)
            if i >= len(loads):
                grow = i + 1 - len(loads)
                loads.extend([0.0] * grow)
                counts.extend([0] * grow)
            loads[i] += 100.0 * cost.gpu_s(given, made) / bin_s
            counts[i] += 1
        if origin is None:
            raise ValueError(
                f"{path}: no requests ({skipped} rows that are none: a time or a token count unread)"
            )
        if earliest >= origin:
            return TraceBins(loads, counts, skipped, bin_s)
        origin = earliest


def _means(values: list[float], per: int) -> list[float]:
    return [statistics.fmean(values[i : i + per]) for i in range(0, len(values) - per + 1, per)]


def most_variable_start_s(
    loads: list[float], bin_s: float = BIN_S, window_s: float = WINDOW_S, lead_in_s: float = LEAD_IN_S
) -> float:
    """The start of the ``window_s`` (on a whole minute, at least ``lead_in_s`` in)
    whose 10 s mean demand has the largest standard deviation: the stretch that
    asks most of a scaler."""
    coarse = _means(loads, round(VARIABILITY_BIN_S / bin_s))
    per_window = round(window_s / VARIABILITY_BIN_S)
    best, best_spread = lead_in_s, -1.0
    start = lead_in_s
    while (first := round(start / VARIABILITY_BIN_S)) + per_window <= len(coarse):
        spread = statistics.pstdev(coarse[first : first + per_window])
        if spread > best_spread:
            best, best_spread = start, spread
        start += 60.0
    if best_spread < 0:
        raise ValueError(
            f"the trace is shorter than a {lead_in_s:.0f} s lead-in and a {window_s:.0f} s window"
        )
    return best


def peak_minute(loads: list[float], bin_s: float = BIN_S) -> float:
    """The highest 60 s mean of the demand (GPU-percent)."""
    per = max(1, round(PEAK_MINUTE_S / bin_s))
    if len(loads) < per:
        return max(loads, default=0.0)
    total = sum(loads[:per])
    best = total
    for i in range(per, len(loads)):
        total += loads[i] - loads[i - per]
        best = max(best, total)
    return best / per


@dataclass(frozen=True)
class TraceProfile(loadmod.Profile):
    """A replayed span of a trace as a load profile: the bins' loads, looked up by index."""

    loads: tuple[float, ...] = ()
    bin_s: float = BIN_S
    lead_in_s: float = 0.0  # replayed before the measured stretch
    scale: float = 1.0
    source: dict[str, object] = field(default_factory=dict, compare=False)

    def at(self, t: float) -> float:
        i = int(max(0.0, t) // self.bin_s)
        return self.loads[i] if i < len(self.loads) else 0.0

    def level_start(self, t: float) -> float | None:
        return None  # the load moves every second: there is no step to place

    @property
    def duration_s(self) -> float:
        return len(self.loads) * self.bin_s

    def opening_level(self) -> float:
        """The mean of the first minute: the base load the pipeline warms up on."""
        head = self.loads[: max(1, round(PEAK_MINUTE_S / self.bin_s))]
        return statistics.fmean(head) if head else 0.0


def trace_profile(
    path: Path,
    cost: TokenCost,
    *,
    whole: bool,
    peak_replicas: float | None,
    scale: float | None,
    per_pod: float,
) -> TraceProfile:
    """The span to replay: the whole trace, or its most variable 15 minutes with
    the 10 minutes before them as a lead-in; scaled by ``scale``, or so that the
    span's busiest minute needs ``peak_replicas`` at ``per_pod`` GPU-percent."""
    trace = read_bins(path, cost)
    loads, bin_s = trace.loads, trace.bin_s
    if whole:
        first, lead_in, span = 0, 0.0, loads
    else:
        start = most_variable_start_s(loads, bin_s)
        first = round((start - LEAD_IN_S) / bin_s)
        span = loads[first : first + round((LEAD_IN_S + WINDOW_S) / bin_s)]
        lead_in = LEAD_IN_S
    if scale is None:
        peak = peak_minute(span, bin_s)
        scale = 1.0 if peak <= 0 or peak_replicas is None else peak_replicas * per_pod / peak
    if not math.isfinite(scale) or scale <= 0:
        raise ValueError(f"the trace's scale must be a positive number, not {scale}")
    scaled = tuple(v * scale for v in span)
    replayed = sum(trace.counts[first : first + len(span)])
    source = {
        "file": path.name,
        "requests_in_trace": sum(trace.counts),
        "requests_replayed": replayed,
        "rows_skipped": trace.skipped,
        "replayed_from_s": first * bin_s,
        "lead_in_s": lead_in,
        "measured_s": len(span) * bin_s - lead_in,
        "prefill_tokens_per_gpu_s": cost.prefill_tokens_per_gpu_s,
        "decode_tokens_per_gpu_s": cost.decode_tokens_per_gpu_s,
        "scale": round(scale, 4),
        "mean_gpu_s_per_request": round(sum(span) * bin_s / 100.0 / replayed, 4) if replayed else 0.0,
        "mean_load_measured": round(statistics.fmean(scaled[round(lead_in / bin_s) :]), 2),
        "peak_minute_load": round(peak_minute(list(scaled), bin_s), 2),
    }
    # a workload name: a lowercase RFC 1123 label, short enough for the pods' names
    stem = re.sub(r"[^a-z0-9]+", "-", path.stem.lower()).strip("-")[:30].strip("-") or "trace"
    name = f"{stem}-{'whole' if whole else 'variable15'}"
    return TraceProfile(name, loads=scaled, lead_in_s=lead_in, scale=scale, source=source, bin_s=bin_s)
