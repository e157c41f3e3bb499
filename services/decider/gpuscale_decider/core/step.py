"""What one reconcile step hands back and remembers, and the desired count it writes.

The decider writes each workload's desired count as state; the actuator converges
``/scale`` to it (docs/ARCHITECTURE.md#fault-model). Nothing waits on the actuator:
until ``/scale`` shows a count just written, the step counts from it, as HPA counts
from the ``spec.replicas`` it wrote."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any, Final

import msgspec

from gpuscale.policy import GPUScaler, GPUScalerSpec
from gpuscale.wire import Action
from gpuscale_decider.core.behavior import Direction
from gpuscale_decider.core.evaluation import Evaluation
from gpuscale_decider.core.events import EventSpec
from gpuscale_decider.core.observation import Observation
from gpuscale_decider.core.state import Desired, ScalerState

# Decision ids are derived, not drawn: the same workload, counts and instant give the same
# id, so the record of a change and the actuator's report on it name each other.
_DECISION_IDS: Final = uuid.UUID("6f1c1a52-8f0e-4a53-9d55-1c6b1c0de1a5")
# Actions that mean the change was made, and those that mean it could not be.
_APPLIED_OUTCOMES: Final = frozenset({"applied", "conflict_retried"})
_FAILED_OUTCOMES: Final = frozenset({"failed", "refused"})
# The newest recommendations a decision or advice carries (the state keeps the window's, up to
# ~3,600): each goes to a stream every team shares, up to once a second per workload in Shadow.
CARRIED_RECOMMENDATIONS: Final = 32


@dataclass(frozen=True, slots=True)
class Written:
    """The status last handed to the writer: written again only when it changes."""

    status: Mapping[str, Any] | None = None
    signature: tuple[Any, ...] | None = None
    at: float = 0.0


class Memory(msgspec.Struct, frozen=True):
    """Everything the step remembers between calls for one GPUScaler."""

    state: ScalerState = msgspec.field(default_factory=ScalerState)  # kept in the KV bucket
    written: Written = msgspec.field(default_factory=Written)  # this process only


class Config(msgspec.Struct, frozen=True):
    """The decider's own settings the step needs."""

    convergence_grace_s: float = 30.0  # /scale not showing a written count after this: /scale is the truth
    status_refresh_s: float = 15.0  # metric values alone move the status this often (HPA's sync period)
    max_metrics_age_s: float | None = None  # never act on metrics older than this (default: the window)


class Note(StrEnum):
    """Facts the shell logs."""

    DESIRED_REACHED = "desired_reached"
    TARGET_CHANGED_ELSEWHERE = "target_changed_elsewhere"
    DESIRED_NOT_REACHED_IN_TIME = "desired_not_reached_in_time"


class PlannedDecision(msgspec.Struct, frozen=True):
    id: str
    from_replicas: int
    to_replicas: int
    reason: str
    inputs: dict[str, Any]


class Step(msgspec.Struct, frozen=True):
    memory: Memory
    evaluation: Evaluation | None = None
    decision: PlannedDecision | None = None
    status: dict[str, Any] | None = None
    notes: tuple[tuple[Note, Desired], ...] = ()
    advice: PlannedDecision | None = None  # spec.mode Shadow: what gpuscale would decide
    # Events on the GPUScaler for the conditions that changed with this status
    # (the decision's own Event is recorded once it is published).
    events: tuple[EventSpec, ...] = ()


def action_seen(state: ScalerState, action: Action) -> ScalerState:
    """The actuator's report on the desired count: kept for the status only (``FailedRescale``);
    the next evaluation reads the outcome from ``/scale``."""
    desired = state.desired
    if desired is None or action.decision_id != desired.decision_id:
        return state
    if action.outcome in _APPLIED_OUTCOMES:
        return replace(state, last_failure="")
    if action.outcome in _FAILED_OUTCOMES:
        return replace(state, last_failure=(action.error or action.outcome)[:300])
    return state


def write_failed(state: ScalerState, decision_id: str) -> ScalerState:
    """The desired count never reached the bucket: write it again at the next evaluation."""
    if state.desired is not None and state.desired.decision_id == decision_id:
        return replace(state, desired=None)
    return state


def longest_period(spec: GPUScalerSpec) -> int:
    periods = [p.period_seconds for p in (*spec.scale_up.policies, *spec.scale_down.policies)]
    return max(periods, default=0)


def base_count(
    state: ScalerState, current: int, now: float, config: Config
) -> tuple[ScalerState, int, tuple[tuple[Note, Desired], ...]]:
    """The count this step starts from: the one just written while ``/scale`` still shows
    the count it was written at (the actuator is on its way), else ``/scale``'s."""
    desired = state.desired
    if desired is None or desired.settled:
        return state, current, ()
    if current == desired.to_replicas:
        return (
            replace(state, desired=msgspec.structs.replace(desired, settled=True)),
            current,
            ((Note.DESIRED_REACHED, desired),),
        )
    if current == desired.from_replicas and now - desired.written_at < config.convergence_grace_s:
        return state, desired.to_replicas, ()
    note = (
        Note.TARGET_CHANGED_ELSEWHERE
        if current != desired.from_replicas
        else Note.DESIRED_NOT_REACHED_IN_TIME
    )
    return replace(state, desired=msgspec.structs.replace(desired, settled=True)), current, ((note, desired),)


def plan(
    scaler: GPUScaler, evaluation: Evaluation, observation: Observation | None, state: ScalerState, now: float
) -> PlannedDecision:
    spec = scaler.spec
    ref = spec.scale_target_ref
    key = f"{scaler.namespace}/{ref.kind}/{ref.name}/{evaluation.current}/{evaluation.desired}/{now!r}"
    groups = next((p.groups for p in evaluation.proposals if p.groups is not None), None)
    inputs: dict[str, Any] = {
        "gpuscaler": scaler.key,
        "gpuscaler_generation": scaler.generation,
        "averages": dict(evaluation.usage or {}),
        # What each average is (window mean, recent mean, estimated demand): a screen names it so.
        "averages_basis": {
            p.name: p.basis.value
            for p in evaluation.proposals
            if p.replicas is not None and p.usage is not None
        },
        "aggregator_averages": dict(observation.averages) if observation is not None else {},
        "metrics_ts": observation.sent_at if observation is not None else None,
        "window_s": observation.window_s if observation is not None else None,
        "span_s": observation.span_s if observation is not None else None,
        "targets": {m.name: m.target for m in spec.metrics},
        "pods_fresh": observation.pods_fresh if observation is not None else 0,
        "pods_stale": observation.pods_stale if observation is not None else 0,
        "pods_ready": groups.ready if groups is not None else 0,
        "pods_missing": groups.missing if groups is not None else 0,
        "pods_pending": groups.unready if groups is not None else 0,
        "pods_ignored": groups.ignored if groups is not None else 0,
        "proposals": {p.name: p.replicas for p in evaluation.proposals},
        "recommendation": evaluation.recommendation,
        "stabilized": evaluation.stabilized,
        "recommendations": [[r.ts, r.value] for r in state.recommendations[-CARRIED_RECOMMENDATIONS:]],
        "recommendations_kept": len(state.recommendations),
        "fallback": evaluation.fallback,
        "conditions": {c.type.value: c.reason.value for c in evaluation.conditions},
    }
    direction = Direction.of(evaluation.current, evaluation.desired)
    return PlannedDecision(
        str(uuid.uuid5(_DECISION_IDS, key)),
        evaluation.current,
        evaluation.desired,
        evaluation.reason if direction is not None else "",
        inputs,
    )
