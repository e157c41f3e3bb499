"""The demo's record of a run and its summary. Pure: ``t`` is seconds since the demo started."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

APPLIED = ("applied", "conflict_retried")
# What one replica should carry, in GPU-percent of load: the replicas a load
# needs are ceil(load / this) (the demo's GPUScalers aim at 70 % per pod).
NEEDED_PER_POD = 70.0
# A scale-up beyond the most the load needed in this many seconds before it is overshoot.
OVERSHOOT_LOOKBACK_S = 60.0


@dataclass(frozen=True, slots=True)
class TimelinePoint:
    t: float
    load: float | None
    replicas: int | None
    desired: int | None
    gpu_util_avg: float | None
    metric_avg: float | None = None  # the GPUScaler's (first) metric, when not gpu_util
    requests_waiting_avg: float | None = None  # the engine's queue per pod, when it has one
    # The GPUScaler's (first) metric over the last seconds only (what a pinned or
    # rising load is judged on), when the aggregator sends it.
    recent_avg: float | None = None


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    t: float
    ts: float
    from_replicas: int
    to_replicas: int
    reason: str
    id: str
    # The value the decision rested on for the GPUScaler's (first) metric, and what it
    # is ("window mean", "estimated demand", "estimated demand and window means").
    value: float | None = None
    basis: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "t": self.t,
            "from": self.from_replicas,
            "to": self.to_replicas,
            "reason": self.reason,
            "id": self.id,
            "value": self.value,
            "basis": self.basis or None,
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
    # (t, load) where a load level began, as the cluster says (exact; the timeline's
    # polls see it up to a period later). Empty where the load moves continuously.
    load_changes: list[tuple[float, float]] = field(default_factory=list)


def exact_points(record: RunRecord) -> list[tuple[float, float, int]]:
    """``(t, load, requested replicas)`` in time order: the timeline's polls, plus a
    point at each load level's start and at each applied PATCH, each carrying the
    other value forward. Measured on polls alone, a time to adequate is off by up to
    a poll period at either end."""
    events: list[tuple[float, int, float | None, int | None]] = [
        (p.t, 0, p.load, p.replicas) for p in record.timeline if p.load is not None and p.replicas
    ]
    if not events:
        return []
    events += [(t, 1, load, None) for t, load in record.load_changes]
    events += [
        (a.t, 1, None, a.replicas_after)
        for a in record.actions
        if a.outcome in APPLIED and a.replicas_after is not None and a.replicas_after > 0
    ]
    events.sort(key=lambda e: (e[0], e[1]))  # at one time, the exact event after the poll
    points: list[tuple[float, float, int]] = []
    load: float | None = None
    replicas: int | None = None
    for t, _, new_load, new_replicas in events:
        load = new_load if new_load is not None else load
        replicas = new_replicas if new_replicas is not None else replicas
        if load is not None and replicas is not None:
            points.append((t, load, replicas))
    return points


def first_rise(loads: Sequence[tuple[float, float]], min_rise: float = 5.0) -> float | None:
    """The first ``t`` whose load is above the first one by more than ``min_rise``."""
    if not loads:
        return None
    start = loads[0][1]
    return next((t for t, load in loads if load > start + min_rise), None)


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
    step = first_rise([(t, load) for t, load, _ in exact_points(record)])
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


# --- what users pay for: capacity against need ---------------------------------------


def needed_replicas(
    load: float, per_pod: float, min_replicas: int = 1, max_replicas: int | None = None
) -> int:
    """The replicas a load needs at ``per_pod`` GPU-percent each, within the limits."""
    want = max(min_replicas, math.ceil(load / per_pod - 1e-9))
    return want if max_replicas is None else min(max_replicas, want)


@dataclass(frozen=True, slots=True)
class Provisioning:
    """Requested replicas against the replicas the load needed, over a run (docs/DEMO.md)."""

    time_to_adequate_s: float | None
    episodes: tuple[tuple[float, float], ...]
    underprovisioned_gpu_s: float
    overprovisioned_gpu_s: float
    scale_events: int
    max_overshoot_replicas: int
    oscillations: int

    def to_json(self) -> dict[str, Any]:
        return {
            "time_to_adequate_s": self.time_to_adequate_s,
            "adequacy_episodes": [{"t": t, "seconds": d} for t, d in self.episodes],
            "underprovisioned_gpu_s": self.underprovisioned_gpu_s,
            "overprovisioned_gpu_s": self.overprovisioned_gpu_s,
            "scale_events": self.scale_events,
            "max_overshoot_replicas": self.max_overshoot_replicas,
            "oscillations": self.oscillations,
        }


def provisioning(
    points: Sequence[tuple[float, float, int]],
    per_pod: float = NEEDED_PER_POD,
    gpus_per_pod: int = 1,
    min_replicas: int = 1,
    max_replicas: int | None = None,
) -> Provisioning:
    """From ``(t, load, requested replicas)`` points in time order."""
    under = over = 0.0
    episodes: list[tuple[float, float]] = []
    short_since: float | None = None
    changes = oscillations = overshoot = 0
    last_change: tuple[int, int] | None = None  # (direction, need at that change)
    history: list[tuple[float, int]] = []  # (t, needed) within the lookback
    previous: int | None = None
    for i, (t, load, requested) in enumerate(points):
        need = needed_replicas(load, per_pod, min_replicas, max_replicas)
        history.append((t, need))
        while history and history[0][0] < t - OVERSHOOT_LOOKBACK_S:
            history.pop(0)
        if i + 1 < len(points):
            dt = points[i + 1][0] - t
            under += max(0, need - requested) * gpus_per_pod * dt
            over += max(0, requested - need) * gpus_per_pod * dt
        if requested < need and short_since is None:
            short_since = t
        elif requested >= need and short_since is not None:
            episodes.append((short_since, t - short_since))
            short_since = None
        if previous is not None and requested != previous:
            changes += 1
            direction = 1 if requested > previous else -1
            if direction > 0:
                overshoot = max(overshoot, requested - max(n for _, n in history))
            if last_change is not None and direction != last_change[0]:
                moved = need - last_change[1]
                if moved * direction <= 0:
                    oscillations += 1
            last_change = (direction, need)
        previous = requested
    if short_since is not None and points:
        episodes.append((short_since, points[-1][0] - short_since))
    return Provisioning(
        time_to_adequate_s=round(max(d for _, d in episodes), 3) if episodes else None,
        episodes=tuple((round(t, 3), round(d, 3)) for t, d in episodes),
        underprovisioned_gpu_s=round(under, 1),
        overprovisioned_gpu_s=round(over, 1),
        scale_events=changes,
        max_overshoot_replicas=max(0, overshoot),
        oscillations=oscillations,
    )


def record_provisioning(record: RunRecord, per_pod: float = NEEDED_PER_POD) -> Provisioning:
    """:func:`provisioning` over a demo run's :func:`exact_points`."""
    return provisioning(
        exact_points(record),
        per_pod,
        min_replicas=record.limits.min_replicas,
        max_replicas=record.limits.max_replicas,
    )


def timeline_json(record: RunRecord) -> list[dict[str, Any]]:
    return [
        {
            "t": p.t,
            "load": p.load,
            "replicas": p.replicas,
            "desired": p.desired,
            "gpu_util_avg": p.gpu_util_avg,
            "metric_avg": p.metric_avg,
            "requests_waiting_avg": p.requests_waiting_avg,
            "recent_avg": p.recent_avg,
        }
        for p in record.timeline
    ]


@dataclass(frozen=True, slots=True)
class Followed:
    """One GPUScaler's workload as the report names it."""

    workload: str  # "namespace/name" of the scale target
    metric: str
    target: float | None
    record: RunRecord


def workload_summary(followed: Followed, per_pod: float = NEEDED_PER_POD) -> dict[str, Any]:
    """One entry of the report's ``workloads`` (docs/DEMO.md defines each field)."""
    record = followed.record
    return {
        "workload": followed.workload or None,
        "metric": followed.metric,
        "target": followed.target,
        "limits": asdict(record.limits),
        "reaction_s": reaction_s(record),
        **record_provisioning(record, per_pod).to_json(),
        "violations": violations(record),
        "timeline": timeline_json(record),
        "decisions": [d.to_json() for d in record.decisions],
        "actions": [asdict(a) for a in record.actions],
    }


def summary(
    profile: str, duration_s: float, workloads: Sequence[Followed], per_pod: float = NEEDED_PER_POD
) -> dict[str, Any]:
    """The --report document: the run, then a list of its workloads, each in one shape."""
    return {
        "profile": profile,
        "duration_s": round(duration_s, 3),
        "needed_per_pod": per_pod,
        "workloads": [workload_summary(w, per_pod) for w in workloads],
    }


def summary_lines(doc: dict[str, Any], log_dir: str) -> list[str]:
    """What the demo prints when it ends: the report's figures, each named as docs/DEMO.md does."""
    lines = [
        "",
        f"gpuscale demo finished after {doc['duration_s']} s (profile {doc['profile']})",
        f"  (needed replicas: load ÷ {doc['needed_per_pod']:g} GPU-% per pod; the terms: docs/DEMO.md)",
    ]
    for w in doc["workloads"]:
        decisions = w["decisions"]
        lines += [
            f"  {w['workload'] or '(no GPUScaler)'} scaled on {w['metric']} (target {w['target']}):",
            f"    reaction (first load step -> first scale-up applied): {_seconds(w['reaction_s'])}",
            f"    time to adequate (longest stretch with fewer replicas than needed): {_seconds(w['time_to_adequate_s'])}",
            f"    under-provisioned {w['underprovisioned_gpu_s']} GPU-s · over-provisioned {w['overprovisioned_gpu_s']} GPU-s"
            f" · scale events {w['scale_events']} · overshoot {w['max_overshoot_replicas']} replicas"
            f" · oscillations {w['oscillations']}",
            f"    decisions: {len(decisions)}",
        ]
        for d in decisions[-10:]:
            used = (
                f" [{d['basis']} {d['value']:.1f}]" if d.get("basis") and d.get("value") is not None else ""
            )
            lines.append(f"      t={d['t']:6.1f}s  {d['from']} -> {d['to']}{used}: {d['reason']}")
        found = w["violations"]
        lines.append(f"    violations (limits or cooldowns broken): {'; '.join(found) if found else 'none'}")
    lines.append(f"  logs: {log_dir}")
    return lines


def _seconds(value: float | None) -> str:
    return "—" if value is None else f"{value:g} s"
