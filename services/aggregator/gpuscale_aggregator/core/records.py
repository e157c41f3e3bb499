"""What one bucket of one pod holds, byte by byte: per metric a float32 sum and a byte count.
Totals are doubles, which add and subtract float32 values exactly: they do not drift."""

from __future__ import annotations

import operator
import struct
from typing import Any, Final

from gpuscale.catalog import GPU_METRICS, METRICS, POD_METRICS
from gpuscale.wire import EngineSignals

# The metrics the window computes, in the catalog's order; its hot loops spell out six of them.
WINDOW_METRICS: Final = GPU_METRICS
ENGINE_METRICS: Final = POD_METRICS  # in a ring of their own, for the pods that have them
if len(WINDOW_METRICS) != 6 or [METRICS[m].ceiling for m in WINDOW_METRICS[:4]] != [100.0] * 4:
    raise ImportError(
        f"the window's loops spell out four percentages and two other metrics, not {WINDOW_METRICS}"
    )
N_METRICS: Final = len(WINDOW_METRICS)
MEM_RATIO: Final = 3  # the last per-GPU metric that is a %
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
# Per engine metric, the most it can read (a %), or None.
ENGINE_CEILINGS: Final = tuple(METRICS[m].ceiling for m in ENGINE_METRICS)
if ENGINE_CEILINGS.count(100.0) != 1:
    raise ImportError(f"the window pins one engine percentage at 100, not those of {ENGINE_METRICS}")
KV: Final = ENGINE_CEILINGS.index(100.0)
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
