"""What one bucket of one pod holds, byte by byte: the layout the rings share.

A GPU record is six float32 sums and six byte counts, one per metric of
:data:`WINDOW_METRICS` (30 bytes); an engine record the same for the five
engine gauges (25 bytes). float32 keeps a sample's 7 significant digits, and
a double adds and subtracts such values exactly, so totals built from records
do not drift.
"""

from __future__ import annotations

import operator
import struct
from typing import Any, Final

from gpuscale.wire import METRIC_NAMES, EngineSignals

# The metrics the window computes, in the order its hot loops spell them out,
# percentages first. gpuscale.wire may know more (a metric another component
# produces): the window leaves those absent until it is taught them.
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
# Index of each metric in the sums/counts of a bucket and in a pod's totals.
GPU_UTIL, SM_ACTIVE, SM_UTIL, MEM_RATIO, MEM_MIB, POWER_W = range(N_METRICS)
# One bucket of one pod: six float32 sums, six uint8 counts.
RECORD: Final = struct.Struct(f"<{N_METRICS}f{N_METRICS}B")
EMPTY_RECORD: Final = (0.0,) * N_METRICS + (0,) * N_METRICS
COUNT_MAX: Final = 255
# The contract bounds MiB and watts only by "finite"; a float32 sum of 255 values
# must stay finite, so values above this (no GPU has 1e30 MiB or W) are pinned here.
HUGE: Final = 1e30
EMPTY: Final = 0.0  # a bucket's newest sample time when it holds nothing
TOTALS: Final = 2 * N_METRICS  # per pod: sums then counts over the ring
# A pod's totals as one struct (on the doubles of an array): one call folds or evicts a record.
TOTALS_RECORD: Final = struct.Struct(f"={TOTALS}d")
N_ENGINE: Final = len(ENGINE_METRICS)
KV: Final = ENGINE_METRICS.index("kv_cache_usage")  # the one engine metric that is a %
# One bucket of one engine pod: each engine metric's sum (float32), then their counts.
ENGINE_RECORD: Final = struct.Struct(f"<{N_ENGINE}f{N_ENGINE}B")
EMPTY_ENGINE: Final = (0.0,) * N_ENGINE + (0,) * N_ENGINE
ENGINE_TOTALS: Final = 2 * N_ENGINE
ENGINE_TOTALS_RECORD: Final = struct.Struct(f"={ENGINE_TOTALS}d")
NO_ENGINE: Final = -1

NO_ENGINE_VALUES: Final[tuple[float | None, ...]] = (None,) * N_ENGINE
# EngineSignals carries each engine metric under its own name.
_ENGINE_FIELDS: Final = operator.attrgetter(*ENGINE_METRICS)


def engine_values(engine: EngineSignals) -> tuple[float | None, ...]:
    """An owner's engine values in ENGINE_METRICS' order, large counts and rates
    pinned so that a float32 sum of 255 stays finite."""
    return tuple(None if v is None else min(v, HUGE) for v in _ENGINE_FIELDS(engine))


def engine_added(old: tuple[Any, ...], values: tuple[float | None, ...]) -> tuple[float, ...]:
    """An engine record with one owner's values added: sums, then counts."""
    return (
        *(s + (v or 0.0) for s, v in zip(old[:N_ENGINE], values, strict=True)),
        *(c + (v is not None) for c, v in zip(old[N_ENGINE:], values, strict=True)),
    )
