"""The demo's record of a run and its summary. Purely computational.

Times are seconds since the demo started (``t``); the observer converts
wall-clock timestamps before they get here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

APPLIED = ("applied", "conflict_retried")


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    t: float
    load: float | None
    replicas: int | None
    desired: int | None
    gpu_util_avg: float | None


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    t: float
    ts: float
    from_replicas: int
    to_replicas: int
    reason: str
    id: str

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "t": self.t,
            "from": self.from_replicas,
            "to": self.to_replicas,
            "reason": self.reason,
            "id": self.id,
        }


@dataclass(frozen=True, slots=True)
class ActionRecord:
    t: float
    ts: float
    decision_id: str
    outcome: str
    replicas_before: int | None
    replicas_after: int | None
    error: str | None


@dataclass(frozen=True, slots=True)
class Limits:
    min_replicas: int
    max_replicas: int
    scale_up_cooldown_s: float = 0.0
    scale_down_cooldown_s: float = 0.0


@dataclass
class RunRecord:
    profile: str
    limits: Limits
    timeline: list[TimelinePoint] = field(default_factory=list)
    decisions: list[DecisionRecord] = field(default_factory=list)
    actions: list[ActionRecord] = field(default_factory=list)


def first_load_step(timeline: list[TimelinePoint], min_rise: float = 5.0) -> float | None:
    """When the load first rose above where it started (by more than noise)."""
    start = next((p.load for p in timeline if p.load is not None), None)
    if start is None:
        return None
    for point in timeline:
        if point.load is not None and point.load > start + min_rise:
            return point.t
    return None


def first_scale_up(actions: list[ActionRecord], after_t: float = 0.0) -> float | None:
    for a in actions:
        if (
            a.outcome in APPLIED
            and a.t >= after_t
            and a.replicas_before is not None
            and a.replicas_after is not None
            and a.replicas_after > a.replicas_before
        ):
            return a.t
    return None


def reaction_s(record: RunRecord) -> float | None:
    """First load step -> first scale-up PATCH."""
    step = first_load_step(record.timeline)
    if step is None:
        return None
    up = first_scale_up(record.actions, step)
    return None if up is None else round(up - step, 3)


def violations(record: RunRecord) -> list[str]:
    """Replica counts outside [min, max], and changes inside a cooldown."""
    found: list[str] = []
    lim = record.limits
    for p in record.timeline:
        if (
            p.replicas is not None
            and p.replicas > 0
            and not lim.min_replicas <= p.replicas <= lim.max_replicas
        ):
            found.append(
                f"t={p.t:.0f}s: {p.replicas} replicas outside [{lim.min_replicas}, {lim.max_replicas}]"
            )
    for d in record.decisions:
        if not lim.min_replicas <= d.to_replicas <= lim.max_replicas:
            found.append(
                f"t={d.t:.0f}s: decision {d.id} to {d.to_replicas} outside [{lim.min_replicas}, {lim.max_replicas}]"
            )
    last_change: dict[str, float] = {}
    for a in record.actions:
        if a.outcome not in APPLIED or a.replicas_before is None or a.replicas_after is None:
            continue
        if a.replicas_after == a.replicas_before:
            continue
        direction = "up" if a.replicas_after > a.replicas_before else "down"
        cooldown = lim.scale_up_cooldown_s if direction == "up" else lim.scale_down_cooldown_s
        previous = last_change.get(direction)
        if previous is not None and cooldown > 0 and a.t - previous < cooldown:
            found.append(
                f"t={a.t:.0f}s: scale-{direction} {a.t - previous:.1f}s after the last one, inside its {cooldown:.0f}s cooldown"
            )
        last_change[direction] = a.t
    return found


def summary(record: RunRecord, duration_s: float) -> dict[str, Any]:
    """The --report document."""
    return {
        "profile": record.profile,
        "duration_s": round(duration_s, 3),
        "reaction_s": reaction_s(record),
        "limits": asdict(record.limits),
        "timeline": [
            {
                "t": p.t,
                "load": p.load,
                "replicas": p.replicas,
                "desired": p.desired,
                "gpu_util_avg": p.gpu_util_avg,
            }
            for p in record.timeline
        ],
        "decisions": [d.to_json() for d in record.decisions],
        "actions": [asdict(a) for a in record.actions],
        "violations": violations(record),
    }
