"""What the decider remembers per workload, as a value.

Purely computational. HPA keeps its recommendation history and scale events
in controller memory and forgets them on restart; here they are a value
(:class:`ScalerState`) that the pure step takes and returns, and that the
shell stores in a JetStream KV bucket, so a restart forgets nothing. The
desired count it last wrote is part of it: a new leader knows it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import msgspec


class TimedValue(msgspec.Struct, frozen=True):
    ts: float
    value: int


class Desired(msgspec.Struct, frozen=True):
    """The desired count this decider last wrote for the workload (the decision that set it)."""

    decision_id: str
    from_replicas: int
    to_replicas: int
    written_at: float
    settled: bool = False  # /scale showed it, or showed it would not: counted from /scale since


class Capacity(msgspec.Struct, frozen=True):
    """What a pod of the workload finished a second while it had a queue (so all it
    could), and when that was measured: a queue reads 0 whenever capacity suffices."""

    ts: float
    per_pod: float  # requests/s


@dataclass(frozen=True, slots=True)
class ScalerState:
    recommendations: tuple[TimedValue, ...] = ()
    scale_up_events: tuple[TimedValue, ...] = ()  # value: replicas added
    scale_down_events: tuple[TimedValue, ...] = ()  # value: replicas removed
    last_scale_up: float | None = None
    last_scale_down: float | None = None
    last_fresh_metrics: float | None = None
    first_seen: float | None = None
    desired: Desired | None = None
    # Why the actuator could not apply the desired count, as it last reported ("": it could).
    last_failure: str = ""
    # Shadow mode: the (from, to) last advised, so advice goes out once per change.
    last_advice: tuple[int, int] | None = None
    # The service rate a pod last showed while it had a queue (core.demand.service_rate).
    queue_capacity: Capacity | None = None

    @property
    def last_scale_time(self) -> float | None:
        times = [t for t in (self.last_scale_up, self.last_scale_down) if t is not None]
        return max(times) if times else None

    def to_dict(self) -> dict[str, Any]:
        p = self.desired
        return {
            "recommendations": [[r.ts, r.value] for r in self.recommendations],
            "scale_up_events": [[e.ts, e.value] for e in self.scale_up_events],
            "scale_down_events": [[e.ts, e.value] for e in self.scale_down_events],
            "last_scale_up": self.last_scale_up,
            "last_scale_down": self.last_scale_down,
            "last_fresh_metrics": self.last_fresh_metrics,
            "first_seen": self.first_seen,
            "desired": None
            if p is None
            else [p.decision_id, p.from_replicas, p.to_replicas, p.written_at, p.settled],
            "last_failure": self.last_failure,
            "last_advice": list(self.last_advice) if self.last_advice is not None else None,
            "queue_capacity": None if (c := self.queue_capacity) is None else [c.ts, c.per_pod],
        }

    @classmethod
    def from_dict(cls, m: Any) -> ScalerState:
        """Lenient: a damaged record yields what can be read, never an error."""
        if not isinstance(m, Mapping):
            return cls()

        def timed(key: str) -> tuple[TimedValue, ...]:
            out: list[TimedValue] = []
            raw = m.get(key)
            for item in raw if isinstance(raw, list) else ():
                if (
                    isinstance(item, list | tuple)
                    and len(item) == 2
                    and isinstance(item[0], int | float)
                    and isinstance(item[1], int)
                    and math.isfinite(item[0])
                ):
                    out.append(TimedValue(float(item[0]), int(item[1])))
            return tuple(sorted(out, key=lambda v: v.ts))  # in time order, as the step keeps them

        def opt_ts(key: str) -> float | None:
            v = m.get(key)
            return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

        desired: Desired | None = None
        raw_p = m.get("desired")
        if (
            isinstance(raw_p, list)
            and len(raw_p) == 5
            and isinstance(raw_p[0], str)
            and all(isinstance(v, int) and not isinstance(v, bool) for v in raw_p[1:3])
            and isinstance(raw_p[3], int | float)
            and math.isfinite(raw_p[3])
        ):
            desired = Desired(raw_p[0], raw_p[1], raw_p[2], float(raw_p[3]), raw_p[4] is True)
        return cls(
            recommendations=timed("recommendations"),
            scale_up_events=timed("scale_up_events"),
            scale_down_events=timed("scale_down_events"),
            last_scale_up=opt_ts("last_scale_up"),
            last_scale_down=opt_ts("last_scale_down"),
            last_fresh_metrics=opt_ts("last_fresh_metrics"),
            first_seen=opt_ts("first_seen"),
            desired=desired,
            last_failure=str(m.get("last_failure") or "")[:500],
            last_advice=_pair(m.get("last_advice")),
            queue_capacity=_capacity(m.get("queue_capacity")),
        )


def clock_bounded(state: ScalerState, now: float) -> ScalerState:
    """The state with no time after ``now``.

    The state outlives the clock that wrote it (another decider replica's, in the
    KV bucket; this one's before it was set back). A time in this clock's future
    would keep its stabilization window, rate period, cooldown or wait for as long
    as the clocks differ, an hour's skew an hour with no scale-down. Read as now,
    each lasts its own length once."""
    desired, never = state.desired, -math.inf
    # The histories are in time order (appended at now; from_dict sorts): their last is their newest.
    newest = max(
        never if state.last_scale_up is None else state.last_scale_up,
        never if state.last_scale_down is None else state.last_scale_down,
        never if state.last_fresh_metrics is None else state.last_fresh_metrics,
        never if state.first_seen is None else state.first_seen,
        state.recommendations[-1].ts if state.recommendations else never,
        state.scale_up_events[-1].ts if state.scale_up_events else never,
        state.scale_down_events[-1].ts if state.scale_down_events else never,
        never if desired is None else desired.written_at,
        never if state.queue_capacity is None else state.queue_capacity.ts,
    )
    if newest <= now:
        return state  # the common case: nothing to bound (evaluated per message: kept cheap)

    def bounded(t: float | None) -> float | None:
        return None if t is None else min(t, now)

    def timed(values: tuple[TimedValue, ...]) -> tuple[TimedValue, ...]:
        return tuple(TimedValue(min(v.ts, now), v.value) for v in values)

    return replace(
        state,
        recommendations=timed(state.recommendations),
        scale_up_events=timed(state.scale_up_events),
        scale_down_events=timed(state.scale_down_events),
        last_scale_up=bounded(state.last_scale_up),
        last_scale_down=bounded(state.last_scale_down),
        last_fresh_metrics=bounded(state.last_fresh_metrics),
        first_seen=bounded(state.first_seen),
        desired=None
        if desired is None
        else msgspec.structs.replace(desired, written_at=min(desired.written_at, now)),
        queue_capacity=None
        if state.queue_capacity is None
        else msgspec.structs.replace(state.queue_capacity, ts=min(state.queue_capacity.ts, now)),
    )


def _pair(raw: Any) -> tuple[int, int] | None:
    if isinstance(raw, list) and len(raw) == 2 and all(type(v) is int for v in raw):
        return (raw[0], raw[1])
    return None


def _capacity(raw: Any) -> Capacity | None:
    if (
        isinstance(raw, list)
        and len(raw) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in raw)
        and raw[1] > 0
    ):
        return Capacity(float(raw[0]), float(raw[1]))
    return None


def record_scale(
    state: ScalerState, from_replicas: int, to_replicas: int, now: float, longest_period_s: int
) -> ScalerState:
    """``storeScaleEvent``: remember a change that was made, for the rate
    policies (events within the longest period) and the cooldowns."""
    cutoff = now - longest_period_s
    ups = tuple(e for e in state.scale_up_events if e.ts > cutoff)
    downs = tuple(e for e in state.scale_down_events if e.ts > cutoff)
    if to_replicas > from_replicas:
        return replace(
            state,
            scale_up_events=(*ups, TimedValue(now, to_replicas - from_replicas)),
            scale_down_events=downs,
            last_scale_up=now,
        )
    if to_replicas < from_replicas:
        return replace(
            state,
            scale_up_events=ups,
            scale_down_events=(*downs, TimedValue(now, from_replicas - to_replicas)),
            last_scale_down=now,
        )
    return state


def seed_last_scale(state: ScalerState, last_scale_time: float | None) -> ScalerState:
    """After a restart without stored state, the GPUScaler status's
    lastScaleTime still keeps the cooldowns (both directions: which one it
    was is not recorded there)."""
    if last_scale_time is None or state.last_scale_up is not None or state.last_scale_down is not None:
        return state
    return replace(state, last_scale_up=last_scale_time, last_scale_down=last_scale_time)
