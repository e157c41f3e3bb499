"""Wall-clock seconds that never step, for state that lives in one process.

A wall clock stepped back would leave old buckets in the window's future; state shared with
other processes needs the real wall clock."""

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
