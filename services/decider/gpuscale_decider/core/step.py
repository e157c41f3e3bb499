"""What one reconcile step hands back and remembers, and the actuator's side of a decision:
a decision waits for its action (or for ``/scale`` to show it, or a timeout) before the next."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from gpuscale.policy import GPUScaler, GPUScalerSpec
from gpuscale.wire import Action
from gpuscale_decider.core.behavior import Direction
from gpuscale_decider.core.evaluation import Evaluation
from gpuscale_decider.core.events import EventSpec
from gpuscale_decider.core.observation import Observation
from gpuscale_decider.core.state import Pending, ScalerState, record_scale

# Decision ids are derived, not drawn: the same workload, counts and instant
# give the same id, so JetStream's de-duplication folds a repeat into one.
_DECISION_IDS: Final = uuid.UUID("6f1c1a52-8f0e-4a53-9d55-1c6b1c0de1a5")
# Actions that mean the change was made, and those that mean it could not be.
_APPLIED_OUTCOMES: Final = frozenset({"applied", "conflict_retried"})
_FAILED_OUTCOMES: Final = frozenset({"failed", "refused"})
# After a failed decision, the next waits 5 s, doubling per failure up to 5 min,
# so a target the actuator cannot scale (RBAC, a webhook) is not hammered.
_RETRY_FIRST_S: Final = 5.0
RETRY_MAX_S: Final = 300.0


@dataclass(frozen=True, slots=True)
class Written:
    """The status last handed to the writer: written again only when it changes."""

    status: Mapping[str, Any] | None = None
    signature: tuple[Any, ...] | None = None
    at: float = 0.0


@dataclass(frozen=True, slots=True)
class Memory:
    """Everything the step remembers between calls for one GPUScaler."""

    state: ScalerState = field(default_factory=ScalerState)  # kept in the KV bucket
    written: Written = field(default_factory=Written)  # this process only


@dataclass(frozen=True, slots=True)
class Config:
    """The decider's own settings the step needs."""

    actuation_timeout_s: float = 30.0
    status_refresh_s: float = 15.0  # metric values alone move the status this often (HPA's sync period)
    max_metrics_age_s: float | None = None  # never act on metrics older than this (default: the window)


class Note(StrEnum):
    """Facts the shell logs."""

    DECISION_APPLIED = "decision_applied"
    TARGET_CHANGED_ELSEWHERE = "target_changed_elsewhere"
    DECISION_NOT_APPLIED_IN_TIME = "decision_not_applied_in_time"


@dataclass(frozen=True, slots=True)
class PlannedDecision:
    id: str
    from_replicas: int
    to_replicas: int
    reason: str
    inputs: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Step:
    memory: Memory
    evaluation: Evaluation | None = None
    decision: PlannedDecision | None = None
    status: dict[str, Any] | None = None
    notes: tuple[tuple[Note, Pending], ...] = ()
    advice: PlannedDecision | None = None  # spec.mode Shadow: what gpuscale would decide
    # Events on the GPUScaler for the conditions that changed with this status
    # (the decision's own Event is recorded once it is published).
    events: tuple[EventSpec, ...] = ()


def action_seen(state: ScalerState, action: Action, now: float, longest_period_s: int) -> ScalerState:
    """The actuator reported on a decision. Only a change that was made counts
    for the rate policies and cooldowns (HPA stores a scale event after its
    update succeeded); any final outcome ends the wait."""
    pending = state.pending
    if pending is None or action.decision_id != pending.decision_id:
        return state
    state = replace(state, pending=None)
    if action.outcome in _APPLIED_OUTCOMES:
        before = pending.from_replicas if action.replicas_before is None else action.replicas_before
        after = pending.to_replicas if action.replicas_after is None else action.replicas_after
        state = replace(state, failures=0, retry_at=None, last_failure="")
        state = record_scale(state, before, after, now, longest_period_s)
    elif action.outcome in _FAILED_OUTCOMES:
        failures = state.failures + 1
        wait = min(RETRY_MAX_S, _RETRY_FIRST_S * 2 ** min(failures - 1, 16))
        why = (action.error or action.outcome)[:300]
        state = replace(state, failures=failures, retry_at=now + wait, last_failure=why)
    return state


def publish_failed(state: ScalerState, decision_id: str) -> ScalerState:
    """The decision never left: decide afresh at the next message."""
    if state.pending is not None and state.pending.decision_id == decision_id:
        return replace(state, pending=None)
    return state


def longest_period(spec: GPUScalerSpec) -> int:
    periods = [p.period_seconds for p in (*spec.scale_up.policies, *spec.scale_down.policies)]
    return max(periods, default=0)


def settle_pending(
    state: ScalerState, current: int, now: float, config: Config, longest_period_s: int
) -> tuple[ScalerState, tuple[tuple[Note, Pending], ...]]:
    """A decision still waiting for its action report: the scale subresource
    may already show the outcome (the report can be lost: it is core NATS)."""
    pending = state.pending
    if pending is None:
        return state, ()
    if current == pending.to_replicas:
        state = record_scale(
            replace(state, pending=None), pending.from_replicas, current, now, longest_period_s
        )
        return state, ((Note.DECISION_APPLIED, pending),)
    if current != pending.from_replicas:
        return replace(state, pending=None), ((Note.TARGET_CHANGED_ELSEWHERE, pending),)
    if now - pending.published_at >= config.actuation_timeout_s:
        return replace(state, pending=None), ((Note.DECISION_NOT_APPLIED_IN_TIME, pending),)
    return state, ()


def plan(
    scaler: GPUScaler, evaluation: Evaluation, observation: Observation | None, state: ScalerState, now: float
) -> PlannedDecision:
    spec = scaler.spec
    ref = spec.scale_target_ref
    key = f"{scaler.namespace}/{ref.kind}/{ref.name}/{evaluation.current}/{evaluation.desired}/{now!r}"
    groups = next((p.groups for p in evaluation.proposals if p.groups is not None), None)
    inputs: dict[str, Any] = {
        "gpuscaler": scaler.key,
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
        "recommendations": [[r.ts, r.value] for r in state.recommendations],
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
