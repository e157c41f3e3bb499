"""Each sender's clock, seen from the receiver's: one clock per judge. Pure.

A sender's offset is the median of ``arrival - ts``, so a skewed clock is placed where its
samples belong and a lone late or forged message moves nothing."""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from typing import Final

HISTORY: Final = 15  # messages per sender in the median
STEP_CONFIRMATIONS: Final = 3  # off-cadence messages that agree before a step is believed
MAX_SENDERS: Final = 20_000  # bounded: a flood of sender names cannot grow memory


@dataclass(frozen=True, slots=True)
class Placement:
    at: float  # when the message's content happened, on the receiver's clock
    delay_s: float  # how much later than its sender's usual it arrived (negative: earlier)


def _median(values: deque[float]) -> float:
    # statistics.median, without its generality: this runs once per message.
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class _Sender:
    __slots__ = ("arrived", "delay", "history", "offset", "suspects")

    def __init__(self, first: float, arrival: float) -> None:
        self.history: deque[float] = deque([first], maxlen=HISTORY)
        self.offset = first
        self.delay = 0.0  # the last message's (first sight: on time)
        self.arrived = arrival
        self.suspects: list[float] = []

    def rebase(self, observed: list[float]) -> None:
        self.history = deque(observed, maxlen=HISTORY)
        self.offset = _median(self.history)
        self.suspects = []


class SenderClocks:
    """The offset of every sender that has spoken recently. ``step_s``: how far
    from its offset a message must arrive to be more than jitter."""

    def __init__(self, step_s: float = 2.0, max_senders: int = MAX_SENDERS) -> None:
        self.step_s = step_s
        self.max_senders = max_senders
        self._senders: dict[Hashable, _Sender] = {}

    def place(
        self, sender: Hashable, ts: float, arrival: float, interval_s: float | None = None
    ) -> Placement:
        """:meth:`at`, with how late the message arrived."""
        at = self.at(sender, ts, arrival, interval_s)
        s = self._senders[sender]
        return Placement(at, s.delay)

    def at(self, sender: Hashable, ts: float, arrival: float, interval_s: float | None = None) -> float:
        """Where a message sent at ``ts`` (sender's clock) and received at
        ``arrival`` belongs on the receiver's clock. ``interval_s``: how often the
        sender speaks, when it has a cadence (a collector's sample interval)."""
        observed = arrival - ts
        s = self._senders.get(sender)
        if s is None:
            if len(self._senders) >= self.max_senders:
                self._senders.pop(next(iter(self._senders)))
            # First sight: nothing to compare with, so it arrived on time.
            self._senders[sender] = _Sender(observed, arrival)
            return arrival
        gap = arrival - s.arrived
        s.arrived = arrival
        delay = observed - s.offset
        if abs(delay) <= self.step_s:
            if s.suspects:
                s.suspects = []
            s.history.append(observed)
            s.offset = _median(s.history)
        else:
            # Off by more than jitter: only a clock that moved repeats, so believe
            # it when the next message on cadence (or a few off it) agrees.
            on_cadence = interval_s is not None and 0.5 * interval_s <= gap <= 1.5 * interval_s
            s.suspects = (
                [*s.suspects[-(STEP_CONFIRMATIONS - 1) :], observed]
                if s.suspects or on_cadence
                else [observed]
            )
            needed = 2 if on_cadence else STEP_CONFIRMATIONS
            recent = s.suspects[-needed:]
            tolerance = min(self.step_s, 0.5 * interval_s) if interval_s else self.step_s
            if len(recent) == needed and max(recent) - min(recent) <= tolerance:
                s.rebase(recent)
                delay = observed - s.offset
        s.delay = delay
        return min(arrival, ts + s.offset)

    def offset(self, sender: Hashable) -> float | None:
        s = self._senders.get(sender)
        return None if s is None else s.offset

    def forget(self, sender: Hashable) -> None:
        self._senders.pop(sender, None)

    def __iter__(self) -> Iterator[tuple[Hashable, float]]:
        return ((k, s.offset) for k, s in self._senders.items())

    def __len__(self) -> int:
        return len(self._senders)


def due(last: float, now: float, every_s: float) -> bool:
    """``every_s`` has passed since ``last`` on a wall clock, or the clock was set back
    past ``last`` (the time since is unknown): waiting the skew out would stall a
    repeat, a refresh or a cache's expiry for as long as the step."""
    elapsed = now - last
    return elapsed >= every_s or elapsed < 0.0
