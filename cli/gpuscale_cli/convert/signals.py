"""Which gpuscale metric a DCGM/Prometheus query or an adapter metric name measures. Pure.

``per_unit``: how many of the source's units make one of gpuscale's (a target is ``t / per_unit``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final

from . import promql


@dataclass(frozen=True, slots=True)
class Source:
    """A source metric name and what it is in gpuscale's terms."""

    metric: str  # the gpuscale metric
    per_unit: float  # source units per gpuscale unit
    unit: str  # the source's unit, for the notes


# dcgm-exporter's names, Alibaba Cloud's per-process DCGM fields and the older
# gpu-prometheus-exporter's (as prometheus-adapter rules rename them).
KNOWN: Final[dict[str, Source]] = {
    "DCGM_FI_DEV_GPU_UTIL": Source("gpu_util", 1.0, "%"),
    "DCGM_FI_PROF_SM_ACTIVE": Source("sm_active", 0.01, "ratio 0..1"),
    "DCGM_CUSTOM_PROCESS_SM_UTIL": Source("sm_util", 1.0, "%"),
    "DCGM_FI_DEV_FB_USED": Source("gpu_mem_used_mib", 1.0, "MiB"),
    "DCGM_CUSTOM_PROCESS_MEM_USED": Source("gpu_mem_used_mib", 1.0, "MiB"),
    "DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO": Source("gpu_mem_used_ratio", 1.0, "%"),
    "DCGM_FI_DEV_POWER_USAGE": Source("power_w", 1.0, "W"),
    "nvidia_gpu_duty_cycle": Source("gpu_util", 1.0, "%"),
    "duty_cycle_current": Source("gpu_util", 1.0, "%"),
    "duty_cycle_over_time": Source("gpu_util", 1.0, "%"),
    "nvidia_gpu_memory_used_bytes": Source("gpu_mem_used_mib", 1024.0 * 1024.0, "bytes"),
    "memory_used_bytes_current": Source("gpu_mem_used_mib", 1024.0 * 1024.0, "bytes"),
    "memory_used_bytes_over_time": Source("gpu_mem_used_mib", 1024.0 * 1024.0, "bytes"),
    "nvidia_gpu_power_usage_milliwatts": Source("power_w", 1000.0, "mW"),
    "power_usage_milliwatts_current": Source("power_w", 1000.0, "mW"),
    "power_usage_milliwatts_over_time": Source("power_w", 1000.0, "mW"),
}

# Names users scale on that have no gpuscale equivalent, each with the reason.
UNMAPPABLE: Final[dict[str, str]] = {
    "DCGM_FI_DEV_FB_FREE": "free framebuffer falls as load rises; scale on gpu_mem_used_ratio or gpu_mem_used_mib instead",
    "DCGM_FI_DEV_FB_TOTAL": "the framebuffer size is not a load signal",
    "DCGM_FI_DEV_GPU_TEMP": "temperature is not a load signal; gpuscale does not scale on it",
    "nvidia_gpu_temperature_celsius": "temperature is not a load signal; gpuscale does not scale on it",
    "temperature_celsius_current": "temperature is not a load signal; gpuscale does not scale on it",
    "temperature_celsius_over_time": "temperature is not a load signal; gpuscale does not scale on it",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "memory-bandwidth utilization is not a GPUScaler metric; gpu_util or sm_active measure load",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": "graphics-engine activity is not a GPUScaler metric; sm_active (Hopper and newer) or gpu_util are the nearest",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "tensor-pipe activity is not a GPUScaler metric; sm_active is the nearest",
    "DCGM_FI_PROF_DRAM_ACTIVE": "DRAM activity is not a GPUScaler metric",
}

# Labels that name the pod a GPU series belongs to: dcgm-exporter's own, the
# pre-2.x name, and what Prometheus renames them to without honorLabels.
POD_LABELS: Final = ("pod", "pod_name", "exported_pod")
NAMESPACE_LABELS: Final = ("namespace", "namespace_name", "exported_namespace")
_OVER_TIME: Final = frozenset(
    {"avg_over_time", "max_over_time", "min_over_time", "last_over_time", "quantile_over_time"}
)
_ROUNDING: Final = frozenset({"ceil", "floor", "round"})


def lookup(name: str) -> Source | None:
    return KNOWN.get(name)


def why_unmappable(name: str) -> str:
    reason = UNMAPPABLE.get(name)
    if reason is not None:
        return reason
    if name.upper().startswith("DCGM_"):
        return "this DCGM field has no GPUScaler equivalent"
    return "not a GPU metric gpuscale knows (its metrics: DCGM GPU/SM utilization, framebuffer use, power)"


@dataclass
class QuerySignal:
    """What a recognised query measures, and how it was aggregated."""

    metric: str
    per_unit: float  # query units per gpuscale unit (after * 100 and the like)
    aggregations: list[str] = field(default_factory=list)  # outermost first
    window_s: float | None = None  # from avg_over_time(...[d])
    notes: list[str] = field(default_factory=list)  # what is approximated
    pod_matchers: list[promql.Matcher] = field(default_factory=list)
    namespace_matchers: list[promql.Matcher] = field(default_factory=list)
    grouped_by: tuple[str, ...] | None = None


class Unrecognised(ValueError):
    """The query measures nothing gpuscale knows how to measure."""


def recognise_query(query: str) -> QuerySignal:
    """The gpuscale metric behind a Prometheus query, or Unrecognised with the reason."""
    try:
        tree = promql.parse(query)
    except promql.PromQLError as e:
        raise Unrecognised(f"the query is outside the PromQL gpuscale reads ({e})") from None
    signal = _analyse(tree)
    for sel in promql.selectors(tree):
        for m in sel.matchers:
            if m.label in POD_LABELS:
                signal.pod_matchers.append(m)
            elif m.label in NAMESPACE_LABELS:
                signal.namespace_matchers.append(m)
    return signal


def _strip(node: promql.Node, signal: QuerySignal | None = None) -> tuple[promql.Node, list[str]]:
    """Aggregations and rounding around a node, removed (for the memory ratio's operands)."""
    seen: list[str] = []
    while True:
        if isinstance(node, promql.Aggregation) and node.param is None:
            seen.append(node.op)
            node = node.expr
        elif isinstance(node, promql.Call) and node.func in _ROUNDING and len(node.args) == 1:
            node = node.args[0]
        else:
            return node, seen


def _metric_of(node: promql.Node) -> str | None:
    node, _ = _strip(node)
    if isinstance(node, promql.Call) and node.func in _OVER_TIME and node.args:
        inner = node.args[-1]
        if isinstance(inner, promql.RangeSelector):
            return inner.selector.metric
    if isinstance(node, promql.Selector):
        return node.metric
    return None


def _memory_ratio(node: promql.Binary) -> bool:
    """``FB_USED / (FB_USED + FB_FREE)`` or ``FB_USED / FB_TOTAL``, aggregations anywhere."""
    if node.op != "/" or _metric_of(node.lhs) != "DCGM_FI_DEV_FB_USED":
        return False
    rhs, _ = _strip(node.rhs)
    if isinstance(rhs, promql.Binary) and rhs.op == "+":
        parts = {_metric_of(rhs.lhs), _metric_of(rhs.rhs)}
        return parts == {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}
    return _metric_of(rhs) == "DCGM_FI_DEV_FB_TOTAL"


def _analyse(node: promql.Node) -> QuerySignal:
    if isinstance(node, promql.Number):
        raise Unrecognised("the query is a constant")
    if isinstance(node, promql.RangeSelector):
        raise Unrecognised("a range vector is not a value to scale on")
    if isinstance(node, promql.Selector):
        source = lookup(node.metric)
        if source is None:
            raise Unrecognised(f"{node.metric or 'a nameless selector'}: {why_unmappable(node.metric)}")
        return QuerySignal(source.metric, source.per_unit)
    if isinstance(node, promql.Aggregation):
        if node.param is not None or node.op in ("count", "group", "stddev", "stdvar"):
            raise Unrecognised(f"{node.op}(...) does not measure load per pod")
        signal = _analyse(node.expr)
        signal.aggregations.insert(0, node.op)
        if node.grouping is not None and signal.grouped_by is None:
            signal.grouped_by = node.grouping
            if not node.without and node.grouping:
                signal.notes.append(
                    f"{node.op} by ({', '.join(node.grouping)}) gives one value per group; "
                    "gpuscale computes one value for the whole workload"
                )
        return signal
    if isinstance(node, promql.Call):
        if node.func in _ROUNDING and len(node.args) == 1:
            signal = _analyse(node.args[0])
            signal.notes.append(f"{node.func}() rounding is dropped: gpuscale compares the exact average")
            return signal
        if node.func in _OVER_TIME and node.args and isinstance(node.args[-1], promql.RangeSelector):
            signal = _analyse(node.args[-1].selector)
            signal.window_s = node.args[-1].seconds
            if node.func != "avg_over_time":
                signal.notes.append(
                    f"{node.func} is approximated by the average over the window (gpuscale averages)"
                )
            return signal
        raise Unrecognised(f"{node.func}() is not understood")
    # Binary
    if _memory_ratio(node):
        signal = QuerySignal("gpu_mem_used_ratio", 0.01)  # a 0..1 fraction
        _, lhs_aggs = _strip(node.lhs)
        signal.aggregations.extend(lhs_aggs)
        return signal
    if node.op in ("*", "/"):
        number, other = (node.rhs, node.lhs) if isinstance(node.rhs, promql.Number) else (node.lhs, node.rhs)
        if isinstance(number, promql.Number) and not isinstance(other, promql.Number):
            if number.value == 0:
                raise Unrecognised("the query multiplies or divides by 0")
            if node.op == "/" and number is node.lhs:
                raise Unrecognised("a number divided by a metric is not understood")
            signal = _analyse(other)
            signal.per_unit *= number.value if node.op == "*" else 1.0 / number.value
            return signal
    raise Unrecognised(f"the {node.op!r} expression does not match a known GPU metric shape")


_REGEX_SUFFIXES: Final = (".*", ".+", "-.*", "-.+", "-[a-z0-9]+-[a-z0-9]+", "-[a-z0-9]+-[a-z0-9]{5}")


def pod_regex_target(matcher: promql.Matcher) -> str | None:
    """The workload name a ``pod=~"name-.*"`` matcher stands for, or None."""
    if matcher.op == "=~":
        for suffix in _REGEX_SUFFIXES:
            if matcher.value.endswith(suffix):
                stem = matcher.value[: -len(suffix)].rstrip("-")
                if stem and re.fullmatch(r"[a-z0-9]([-a-z0-9.]*[a-z0-9])?", stem):
                    return stem
    return None
