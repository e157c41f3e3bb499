"""The engine table: which families of an inference engine's metrics page are read, and as which signal. Pure.

Counts are summed over an engine's series, KV-cache usage averaged (each engine has its own pool)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final, Literal

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
    # Requests that left without being served (failed, or gave up): they count as departures
    # (what arrived and left), not as what the pod serves. All of the family, or samples with a label.
    served: bool = True
    unserved_label: tuple[str, str] | None = None

    @property
    def sample(self) -> str:
        """The samples summed, as the parser names them."""
        return self.family + ("_total" if self.kind == "counter" else "_count")


FINISHED: Final = (
    # Every finished_reason (stop, length, abort); an abort (a client that gave up) was not served.
    FinishedCounter("vllm", "vllm:request_success", unserved_label=("finished_reason", "abort")),
    FinishedCounter("sglang", "sglang:e2e_request_latency_seconds", kind="histogram"),
    FinishedCounter("tgi", "tgi_request_success"),
    FinishedCounter("tgi", "tgi_request_failure", served=False),
    FinishedCounter("triton", "nv_inference_request_success"),
    FinishedCounter("triton", "nv_inference_request_failure", served=False),
)
# Without a TYPE line the parser names the family after its samples as written
# (``vllm:request_success_total``, TGI's bare ``tgi_request_success``).
FINISHED_BY_FAMILY: Final[Mapping[str, FinishedCounter]] = {
    name: spec for spec in FINISHED for name in (spec.family, spec.sample)
}
