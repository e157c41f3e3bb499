"""The metrics gpuscale scales on: one entry each, and everything else derives from it.

The wire's metric maps (:class:`gpuscale.wire.MetricValues` and the per-pod
:class:`gpuscale.wire.EngineSignals`), the aggregator's window layout, the
decider's demand table, the policy's and the KEDA scaler's accepted names, the
CRD's enum and docs/GPUSCALER.md's table are made from (or checked against)
:data:`CATALOG`. Adding a metric is one entry here; the collector must then read
it (its NVML backend or its engine table), and a per-GPU metric needs the
aggregator's unrolled window loops to grow (its import check says so).

Purely declarative: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Scope(StrEnum):
    GPU = "gpu"  # read per GPU (or per owner of a shared GPU), averaged per pod over its GPUs
    POD = "pod"  # the pod's inference engine says it once per pod


class DemandKind(StrEnum):
    """How the decider estimates a pod's demand in this metric (docs/ARCHITECTURE.md#algorithm)."""

    SERVED = "served"  # grows with the requests served: the utilization law (Little's law for a count)
    QUEUE = "queue"  # a queue, held at its target while the pod serves at its rate
    LEVEL = "level"  # no model: the reading, as HPA uses it


class Unit(StrEnum):
    PERCENT = "%"
    MIB = "MiB"
    WATTS = "W"
    REQUESTS = "requests"
    REQUESTS_PER_S = "requests/s"


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    unit: Unit
    scope: Scope
    demand: DemandKind
    what: str  # for users: what it measures (docs/GPUSCALER.md's table)
    source: str  # for users: where it is read
    estimate_unit: str = ""  # how an estimate of demand is told, where it is not a reading (GPU-%)

    @property
    def ceiling(self) -> float | None:
        """The most it can read (a percentage), or None."""
        return 100.0 if self.unit is Unit.PERCENT else None

    @property
    def per_pod_unit(self) -> str:
        """The unit a target is written in, as users read it."""
        return f"{self.unit} per pod" if self.unit in (Unit.REQUESTS, Unit.REQUESTS_PER_S) else str(self.unit)


_ENGINE_PAGE = (
    "the engine's /metrics (the pod annotation of [the vLLM example](#example-vllm-scaled-on-its-queue))"
)

# Per-GPU metrics first, percentages first among them: the aggregator's packed records rely on the order.
CATALOG: Final[tuple[Metric, ...]] = (
    Metric(
        "gpu_util",
        Unit.PERCENT,
        Scope.GPU,
        DemandKind.SERVED,
        "fraction of time the GPU was busy (a kernel running), not how much of it",
        "NVML utilization, dcgm-exporter's `DCGM_FI_DEV_GPU_UTIL`",
        estimate_unit="GPU-%",
    ),
    Metric(
        "sm_active",
        Unit.PERCENT,
        Scope.GPU,
        DemandKind.SERVED,
        "fraction of time the SMs had work: the load signal NVIDIA recommends",
        "NVML GPM (Hopper and newer). dcgm-exporter's `DCGM_FI_PROF_SM_ACTIVE` is the same figure as a "
        "**ratio** 0–1: its 0.7 is `70` here",
    ),
    Metric(
        "sm_util",
        Unit.PERCENT,
        Scope.GPU,
        DemandKind.SERVED,
        "SM utilization of the pod's own processes",
        "NVML per-process utilization: the signal when several pods share a GPU",
    ),
    Metric(
        "gpu_mem_used_ratio",
        Unit.PERCENT,
        Scope.GPU,
        DemandKind.LEVEL,
        "framebuffer used, in % of the GPU's total (a percentage despite the name)",
        "NVML memory info, `DCGM_FI_DEV_FB_USED / (FB_USED + FB_FREE)`",
    ),
    Metric(
        "gpu_mem_used_mib", Unit.MIB, Scope.GPU, DemandKind.LEVEL, "framebuffer used", "`DCGM_FI_DEV_FB_USED`"
    ),
    Metric("power_w", Unit.WATTS, Scope.GPU, DemandKind.LEVEL, "power draw", "`DCGM_FI_DEV_POWER_USAGE`"),
    Metric(
        "requests_waiting",
        Unit.REQUESTS,
        Scope.POD,
        DemandKind.QUEUE,
        "requests queued in the inference server, not yet running: demand not being served",
        f"{_ENGINE_PAGE}: vLLM `vllm:num_requests_waiting`, SGLang `sglang:num_queue_reqs`, "
        "TGI `tgi_queue_size`, Triton `nv_inference_pending_request_count`",
    ),
    Metric(
        "requests_running",
        Unit.REQUESTS,
        Scope.POD,
        DemandKind.SERVED,
        "requests in flight (the running batch)",
        "vLLM `vllm:num_requests_running`, SGLang `sglang:num_running_reqs`, TGI `tgi_batch_current_size`",
    ),
    Metric(
        "kv_cache_usage",
        Unit.PERCENT,
        Scope.POD,
        DemandKind.SERVED,
        "KV cache in use: near 100 % the engine queues or preempts",
        "vLLM `vllm:kv_cache_usage_perc` (a ratio 0–1 there, × 100 here), SGLang `sglang:token_usage`",
    ),
    Metric(
        "request_arrival_rate",
        Unit.REQUESTS_PER_S,
        Scope.POD,
        DemandKind.LEVEL,
        "requests arriving: every request that left (served, gave up or failed) plus the growth of "
        "waiting + running, over the collector's last two scrapes (Knative's requests-per-second target)",
        "the engine's finished-request counters, failures and aborts included, and its gauges (below)",
    ),
    Metric(
        "request_completion_rate",
        Unit.REQUESTS_PER_S,
        Scope.POD,
        DemandKind.LEVEL,
        "requests served: what the pod finishes (at saturation, its capacity); not those that gave up or failed",
        'vLLM `vllm:request_success_total` but `finished_reason="abort"`, SGLang '
        "`sglang:e2e_request_latency_seconds_count`, TGI `tgi_request_success`, Triton "
        "`nv_inference_request_success`",
    ),
)

METRICS: Final[Mapping[str, Metric]] = {m.name: m for m in CATALOG}
METRIC_NAMES: Final[tuple[str, ...]] = tuple(METRICS)
GPU_METRICS: Final[tuple[str, ...]] = tuple(m.name for m in CATALOG if m.scope is Scope.GPU)
POD_METRICS: Final[tuple[str, ...]] = tuple(m.name for m in CATALOG if m.scope is Scope.POD)
# The engine's rates, which the demand model reads beside any metric.
ARRIVAL: Final = "request_arrival_rate"
COMPLETION: Final = "request_completion_rate"


def docs_table() -> str:
    """docs/GPUSCALER.md's table of metrics (a test keeps the document equal to it)."""
    rows = ["| name | unit | what | source |", "|---|---|---|---|"]
    rows += [
        f"| `{m.name}` | {m.per_pod_unit}{' (0–100)' if m.ceiling else ''} | {m.what} | {m.source} |"
        for m in CATALOG
    ]
    return "\n".join(rows)


def _check_order() -> None:
    if CATALOG[: len(GPU_METRICS)] != tuple(METRICS[n] for n in GPU_METRICS):
        raise ImportError("gpuscale.catalog: per-GPU metrics come first")


_check_order()
