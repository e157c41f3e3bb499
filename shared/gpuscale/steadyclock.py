"""Wall-clock seconds that never step, for state that lives in one process.

An aggregator's window is placed and expired on its own clock. Should the
host's wall clock step back (chrony's ``makestep``, a VM resumed, an operator's
``date -s``), buckets from before the step would sit in the window's future: an
hour's step kept the old load in every average, its pods fresh, for the hour
(tests/aggregator/test_aggregator_steady_clock.py). A :class:`SteadyClock` is the
wall clock at start plus the monotonic time since: it reads like ``time.time()``
(other processes compare it with theirs, within their skew allowances) but only
ever moves forward at the rate of seconds. NTP's slewing moves both clocks
alike; a step shows as :meth:`SteadyClock.step_s`, to log. State shared with
other processes (the decider's, in a KV bucket) needs the real wall clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class SteadyClock:
    def __init__(
        self, wall: Callable[[], float] = time.time, monotonic: Callable[[], float] = time.monotonic
    ) -> None:
        self._wall, self._monotonic = wall, monotonic
        self._anchor = wall() - monotonic()

    def __call__(self) -> float:
        return self._anchor + self._monotonic()

    def step_s(self) -> float:
        """How far the wall clock has stepped from this one since start (negative: back)."""
        return self._wall() - self()
