"""What one bucket of one pod holds, byte by byte: per metric a float32 sum and a byte count.
Totals are doubles, which add and subtract float32 values exactly: they do not drift."""

from __future__ import annotations

import operator
import struct
from typing import Any, Final

from gpuscale.wire import METRIC_NAMES, EngineSignals

# The metrics the window computes, percentages first, in the order its hot loops spell them out.
WINDOW_METRICS: Final = (
    "gpu_util",
    "sm_active",
    "sm_util",
    "gpu_mem_used_ratio",
    "gpu_mem_used_mib",
    "power_w",
)
# The inference engine's gauges, in a ring of their own for the pods that have them.
ENGINE_METRICS: Final = (
    "requests_waiting",
    "requests_running",
    "kv_cache_usage",
    "request_arrival_rate",
    "request_completion_rate",
)
if METRIC_NAMES[: len(WINDOW_METRICS) + len(ENGINE_METRICS)] != WINDOW_METRICS + ENGINE_METRICS:
    raise ImportError(
        f"gpuscale.wire's metrics begin {METRIC_NAMES}; the window computes {WINDOW_METRICS + ENGINE_METRICS}"
    )
N_METRICS: Final = len(WINDOW_METRICS)
MEM_RATIO: Final = WINDOW_METRICS.index("gpu_mem_used_ratio")  # the last metric that is a %
RECORD: Final = struct.Struct(f"<{N_METRICS}f{N_METRICS}B")
EMPTY_RECORD: Final = (0.0,) * N_METRICS + (0,) * N_METRICS
COUNT_MAX: Final = 255
# Values are pinned here so that a float32 sum of COUNT_MAX of them stays finite.
HUGE: Final = 1e30
EMPTY: Final = 0.0  # a bucket's newest sample time when it holds nothing
TOTALS: Final = 2 * N_METRICS  # per pod: sums then counts over the ring
# A pod's totals as one struct: one call folds or evicts a record.
TOTALS_RECORD: Final = struct.Struct(f"={TOTALS}d")
N_ENGINE: Final = len(ENGINE_METRICS)
KV: Final = ENGINE_METRICS.index("kv_cache_usage")  # the one engine metric that is a %
ENGINE_RECORD: Final = struct.Struct(f"<{N_ENGINE}f{N_ENGINE}B")
EMPTY_ENGINE: Final = (0.0,) * N_ENGINE + (0,) * N_ENGINE
ENGINE_TOTALS: Final = 2 * N_ENGINE
ENGINE_TOTALS_RECORD: Final = struct.Struct(f"={ENGINE_TOTALS}d")
NO_ENGINE: Final = -1

NO_ENGINE_VALUES: Final[tuple[float | None, ...]] = (None,) * N_ENGINE
_ENGINE_FIELDS: Final = operator.attrgetter(*ENGINE_METRICS)


def engine_values(engine: EngineSignals) -> tuple[float | None, ...]:
    """An owner's engine values in ENGINE_METRICS' order, pinned at HUGE."""
    return tuple(None if v is None else min(v, HUGE) for v in _ENGINE_FIELDS(engine))


def engine_added(old: tuple[Any, ...], values: tuple[float | None, ...]) -> tuple[float, ...]:
    """An engine record with one owner's values added: sums, then counts."""
    return (
        *(s + (v or 0.0) for s, v in zip(old[:N_ENGINE], values, strict=True)),
        *(c + (v is not None) for c, v in zip(old[N_ENGINE:], values, strict=True)),
    )
