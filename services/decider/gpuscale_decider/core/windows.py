"""What a GPUScaler needs of the aggregator: its averaging window, and each
pod's means over a short recent span (a queue, a stock, is read at its latest
level: :mod:`.demand`). Purely computational.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpuscale.policy import GPUScalerSpec

# A tenth of the window, as Knative's panic window; shorter than three 1 s samples would flicker.
RECENT_FRACTION: Final = 0.1
RECENT_MIN_S: Final = 3.0


@dataclass(frozen=True, slots=True)
class WindowNeed:
    window_s: float
    recent_s: float


def window_need(spec: GPUScalerSpec) -> WindowNeed:
    window = spec.window_s
    return WindowNeed(window, min(window, max(RECENT_MIN_S, RECENT_FRACTION * window)))
