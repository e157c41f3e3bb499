"""Shadow mode's advice against the live controller's changes. Pure.

Each change is matched with when the other curve reached the same count the same way."""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

# How long after a reported change the decider's view may still show the count before.
SEEN_LAG_S = 15.0


@dataclass(frozen=True, slots=True)
class Advice:
    ts: float
    from_replicas: int  # the live count the decider saw
    to_replicas: int  # what gpuscale would have asked for
    reason: str = ""


@dataclass(frozen=True, slots=True)
class LiveChange:
    ts: float
    replicas: int
    source: str  # "HorizontalPodAutoscaler ns/name", "seen by the decider", "scale subresource"


@dataclass(frozen=True, slots=True)
class Matched:
    ts: float
    from_replicas: int
    to_replicas: int
    source: str
    reached_at: float | None  # when the other curve reached to_replicas (None: never while this held)
    lead_s: float | None  # > 0: gpuscale got there first; None: never reached, or a return to agreement


@dataclass(frozen=True, slots=True)
class Report:
    start: float
    end: float
    advised: tuple[Matched, ...]  # gpuscale's changes, each with when the live count followed
    live: tuple[Matched, ...]  # the live controller's changes, each with when gpuscale had advised it
    extra_gpu_s: float  # where gpuscale would have run more GPUs than the live controller did
    saved_gpu_s: float  # where it would have run fewer
    gpus_per_replica: float

    @property
    def net_gpu_s(self) -> float:
        return self.extra_gpu_s - self.saved_gpu_s


class Curve:
    """A count that holds from each point until the next."""

    def __init__(self, points: Iterable[tuple[float, int, str]]) -> None:
        kept: list[tuple[float, int, str]] = []
        for ts, value, source in sorted(points, key=lambda p: p[0]):
            if kept and kept[-1][1] == value:
                continue  # the same count again: not a change
            kept.append((ts, value, source))
        self.points = kept
        self.times = [p[0] for p in kept]

    def at(self, t: float) -> int | None:
        i = bisect.bisect_right(self.times, t) - 1
        return self.points[i][1] if i >= 0 else None

    def changes(self) -> list[tuple[float, int, int, str]]:
        return [(b[0], a[1], b[1], b[2]) for a, b in zip(self.points, self.points[1:], strict=False)]

    def first_time(self, holds: Callable[[int], bool], start: float, end: float) -> float | None:
        """The first moment in [start, end) at which ``holds(count)``."""
        value = self.at(start)
        if value is not None and holds(value):
            return start
        i = bisect.bisect_right(self.times, start)
        while i < len(self.points) and self.points[i][0] < end:
            if holds(self.points[i][1]):
                return self.points[i][0]
            i += 1
        return None

    def held_since(self, holds: Callable[[int], bool], t: float) -> float | None:
        """When the run of ``holds`` that includes ``t`` began (None: it does not hold at ``t``)."""
        i = bisect.bisect_right(self.times, t) - 1
        if i < 0 or not holds(self.points[i][1]):
            return None
        while i > 0 and holds(self.points[i - 1][1]):
            i -= 1
        return self.points[i][0]

    def pieces(self, start: float, end: float) -> list[tuple[float, float, int]]:
        """(from, to, count) pieces covering [start, end] where the count is known."""
        pieces: list[tuple[float, float, int]] = []
        first = max(0, bisect.bisect_right(self.times, start) - 1)  # the point that holds at start
        for i in range(first, len(self.points)):
            ts, value, _ = self.points[i]
            if ts >= end:
                break
            nxt = self.points[i + 1][0] if i + 1 < len(self.points) else end
            lo, hi = max(ts, start), min(nxt, end)
            if hi > lo:
                pieces.append((lo, hi, value))
        return pieces


def _reaches(frm: int, to: int) -> Callable[[int], bool]:
    return (lambda n: n >= to) if to > frm else (lambda n: n <= to)


def _next_beyond(
    changes: Sequence[tuple[float, int, int, str]], beyond: Callable[[int, int], bool]
) -> list[int | None]:
    """For each change, the index of the first later change whose count is ``beyond`` its count."""
    found: list[int | None] = [None] * len(changes)
    waiting: list[int] = []  # changes not yet passed, their counts ordered so that only the top can be
    for j, (_, _, to, _) in enumerate(changes):
        while waiting and beyond(to, changes[waiting[-1]][2]):
            found[waiting.pop()] = j
        waiting.append(j)
    return found


def _match(own: Curve, other: Curve, end: float, lead_sign: int) -> tuple[Matched, ...]:
    """Each change of ``own`` with when ``other`` reached its count in its direction:
    already there (the run it was in began earlier) or afterwards, before ``own``
    moved away from it again."""
    out: list[Matched] = []
    changes = own.changes()
    # Where ``own`` first moves away from each change's count: the next change to a count
    # below it (after a rise) or above it (after a fall), found for all in one pass each,
    # since the live changes come from Events a team writes as many as it likes.
    below = _next_beyond(changes, lambda later, to: later < to)
    above = _next_beyond(changes, lambda later, to: later > to)
    for i, (ts, frm, to, source) in enumerate(changes):
        reaches = _reaches(frm, to)
        away = below[i] if to > frm else above[i]
        until = end if away is None else changes[away][0]
        reached = other.held_since(reaches, ts)
        if i > 0 and reached is not None and reached <= changes[i - 1][0] and reaches(changes[i - 1][1]):
            # Both were there before this curve last moved away: a return to agreement, no lead.
            out.append(Matched(ts, frm, to, source, reached, None))
            continue
        if reached is None:
            reached = other.first_time(reaches, ts, until)
        lead = None if reached is None else lead_sign * (reached - ts)
        out.append(Matched(ts, frm, to, source, reached, lead))
    return tuple(out)


def compare(
    advice: Sequence[Advice],
    live_changes: Sequence[LiveChange],
    *,
    end: float,
    live_now: int | None,
    gpus_per_replica: float,
) -> Report | None:
    """The report over [first advice, ``end``]; None without advice."""
    if not advice:
        return None
    ordered = sorted(advice, key=lambda a: a.ts)
    start = ordered[0].ts
    # gpuscale's curve starts from the live count it first saw, so a first
    # advice that asks for a change is a change.
    first = (start, ordered[0].from_replicas, "gpuscale")
    advised = Curve([first, *((a.ts, a.to_replicas, "gpuscale") for a in ordered)])
    seen = [(a.ts, a.from_replicas, "seen by the decider") for a in ordered]
    # An Event times a live change exactly; the decider's view of it, seconds later, is dropped.
    reported = [(c.ts, c.replicas, c.source) for c in live_changes if c.ts <= end]
    reported_at = sorted(r[0] for r in reported)

    def just_reported(t: float) -> bool:  # a reported change in (t - SEEN_LAG_S, t]
        i = bisect.bisect_right(reported_at, t) - 1
        return i >= 0 and t - reported_at[i] < SEEN_LAG_S

    seen = [p for p in seen if not just_reported(p[0])]
    tail = [(end, live_now, "scale subresource")] if live_now is not None else []
    live = Curve([*seen, *reported, *tail])

    extra = saved = 0.0
    for lo, hi, wanted in advised.pieces(start, end):
        for a, b, count in live.pieces(lo, hi):
            gap = (wanted - count) * gpus_per_replica * (b - a)
            if gap > 0:
                extra += gap
            else:
                saved -= gap
    return Report(
        start=start,
        end=end,
        # gpuscale's change at t, the live one reaching it at r: gpuscale leads by r - t.
        advised=_match(advised, live, end, +1),
        # the live change at t, gpuscale there since r: gpuscale leads by t - r.
        live=_match(live, advised, end, -1),
        extra_gpu_s=extra,
        saved_gpu_s=saved,
        gpus_per_replica=gpus_per_replica,
    )
