"""One reconcile step for one GPUScaler: values in, values out.

Purely computational: no clock (``now`` is a parameter), no I/O. The shell
reads (the scale subresource, the pods behind its selector, the latest
metrics, the stored state), calls :func:`reconcile`, and writes what the
:class:`Step` says: a decision to publish, a status to write, the next state
to keep. HPA's ``reconcileAutoscaler`` in ``horizontal.go`` is the model, in
the same order: read the scale, seed the first recommendation, the
zero/max/min pre-checks, the metrics (``computeReplicasForMetrics``), then
``normalizeDesiredReplicasWithBehaviors``.

What gpuscale adds, each said in the reason when it applies: ``paused``, a
``fallback`` count when metrics stop, per-direction ``cooldownSeconds``, a
decision waiting for the actuator, and another controller on the target.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Final

from gpuscale.clocks import due
from gpuscale.policy import GPUScaler, GPUScalerSpec, Mode
from gpuscale.wire import UNSET, Action, WorkloadMetrics
from gpuscale_decider.core.behavior import Direction, clamp_rate_and_bounds, cooldown, normalize
from gpuscale_decider.core.conditions import (
    NOT_LIMITED,
    READY,
    Condition,
    Conditions,
    Reason,
    able,
    active,
    limited,
)
from gpuscale_decider.core.events import EventSpec, condition_events
from gpuscale_decider.core.replicas import (
    MetricProposal,
    PodView,
    Tolerances,
    fmt_ago,
    fmt_seconds,
    metric_proposal,
    replicas_text,
)
from gpuscale_decider.core.saturation import (
    QUEUES,
    Remembered,
    Signals,
    adjust,
    queue_capacity,
)
from gpuscale_decider.core.state import (
    Capacity,
    Pending,
    ScalerState,
    TimedValue,
    clock_bounded,
    record_scale,
)
from gpuscale_decider.core.status import blocked_status, evaluation_status, status_differs

# Decision ids are derived, not drawn: the same workload, counts and instant
# give the same id, so JetStream's de-duplication folds a repeat into one.
_DECISION_IDS: Final = uuid.UUID("6f1c1a52-8f0e-4a53-9d55-1c6b1c0de1a5")
# Actions that mean the change was made, and those that mean it could not be.
_APPLIED_OUTCOMES: Final = frozenset({"applied", "conflict_retried"})
_FAILED_OUTCOMES: Final = frozenset({"failed", "refused"})
# After a failed decision, the next waits 5 s, doubling per failure up to 5 min,
# so a target the actuator cannot scale (RBAC, a webhook) is not hammered.
_RETRY_FIRST_S: Final = 5.0
_RETRY_MAX_S: Final = 300.0
# A pod's sample tells the second before it and reaches the decider with the
# aggregator's next publish: load moved by a scale-down shows this much after it.
_SAMPLE_LAG_S: Final = 2.0


# --- inputs ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """What the shell read of the scale target."""

    replicas: int | None = None  # the scale subresource's spec.replicas; None: not read
    selector: str = ""  # its status.selector
    error: str = ""  # why it could not be read
    conflict: str | None = None  # another controller that scales it ("HorizontalPodAutoscaler ns/x")


@dataclass(frozen=True, slots=True)
class Observation:
    """The newest metrics message for the workload, as the step needs it.

    ``received_at`` is on the decider's own clock: freshness is judged on one
    clock, never by comparing with the sender's ``ts`` (``sent_at``)."""

    received_at: float
    sent_at: float
    window_s: float
    values: Mapping[str, Mapping[str, float]]  # metric -> fresh pod -> value
    averages: Mapping[str, float]  # the aggregator's averages over fresh pods
    pods_fresh: int
    pods_stale: int
    # Seconds the averages cover when shorter than the window: a pod joined the
    # workload then, and the aggregator dropped what was measured before.
    span_s: float | None = None
    # metric -> fresh pod -> mean over the last recent_s, where the aggregator sent them.
    recent: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    recent_s: float | None = None


def observation_of(message: WorkloadMetrics, received_at: float) -> Observation:
    """The fresh pods' values by metric. A producer that marks each pod
    ``fresh`` is followed; for one that does not, the ``pods_fresh`` most
    recently seen pods are the fresh ones (the aggregator calls a pod stale
    when its newest sample is too old, so freshness follows ``last_seen``)."""
    pods = message.pods
    fresh = (
        pods
        if message.pods_fresh >= len(pods)  # the usual case: every pod listed is fresh
        else sorted(pods, key=lambda p: p.last_seen, reverse=True)[: message.pods_fresh]
    )
    values: dict[str, dict[str, float]] = {}
    recent: dict[str, dict[str, float]] = {}
    for pod in fresh:
        for metric, value in pod.values.items():
            values.setdefault(metric, {})[pod.pod] = value
        if pod.recent is not UNSET:
            for metric, value in pod.recent.items():
                recent.setdefault(metric, {})[pod.pod] = value
    return Observation(
        received_at,
        message.ts,
        message.window_s,
        values,
        message.averages.to_dict(),
        message.pods_fresh,
        message.pods_stale,
        _span(message),
        recent,
        None if message.recent_s is UNSET else message.recent_s,
    )


def _scale_down_held(
    spec: GPUScalerSpec, state: ScalerState, observation: Observation, now: float
) -> tuple[Condition, str] | None:
    """Why the means are no evidence for a scale-down yet, or None. Applied to the
    decision after stabilization, like a cooldown, so the recommendations kept for
    the stabilization window stay HPA's: held ones kept there would hold a
    scale-down a whole window (300 s) after the hold ended.

    **No scale-down on the first seconds after capacity arrives.** While the
    averages cover less than the window because a pod became ready (``span_s``),
    they start with the new pods taking their first requests: read as load per pod
    they ask to undo the step just taken. HPA leaves a new pod's metric out until a
    whole window was measured after it became ready (cpuInitializationPeriod).

    **A scale-down is judged on what came after the last one.** For a few seconds
    after pods leave, the means a decision rests on (the recent ones where sent,
    else the window's) still hold seconds when those pods shared the load: per pod
    they read low, and a second scale-down on them takes away what the first left.
    It waits until they were measured after the last one took effect; a sample
    tells the second before it and reaches the aggregator's next publish
    (_SAMPLE_LAG_S). The user's ``cooldownSeconds``, while it holds, says so itself."""
    if observation.span_s is not None:
        return able(
            True,
            Reason.SCALE_DOWN_STABILIZED,
            "the averages start when a pod became ready: no scale-down until they span the window",
        ), (
            f"a pod became ready {fmt_ago(observation.span_s)} (or the window was made longer): its "
            "first seconds, while requests build up on it, are no evidence for a scale-down until the "
            "averages span the window"
        )
    last = state.last_scale_down  # never after now: clock_bounded
    if last is None or now - last < spec.scale_down.cooldown_seconds:
        return None
    recent_s = observation.recent_s
    measured_for = observation.window_s if recent_s is None else recent_s + _SAMPLE_LAG_S
    after = observation.received_at - last
    if after >= measured_for:
        return None
    means = "window" if recent_s is None else f"last {recent_s:g} s"
    return able(
        False,
        Reason.BACKOFF_DOWNSCALE,
        "the metrics still hold seconds measured before the previous scale-down",
    ), (
        f"replicas went down {fmt_ago(max(0.0, after))}: the means of the {means} still hold seconds "
        "when more pods shared the load, no evidence for a further scale-down"
    )


def _span(message: WorkloadMetrics) -> float | None:
    """Seconds the averages cover when ``since`` says they are shorter than the
    window. A ``since`` at or before the window's start says nothing (the
    contract sends it only after it), so it holds no scale-down back; one after
    ``ts`` is read as no span at all."""
    if message.since is UNSET or message.ts - message.since >= message.window_s:
        return None
    return max(0.0, message.ts - message.since)


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


# --- outputs -----------------------------------------------------------------------


class Note(StrEnum):
    """Facts the shell logs."""

    DECISION_APPLIED = "decision_applied"
    TARGET_CHANGED_ELSEWHERE = "target_changed_elsewhere"
    DECISION_NOT_APPLIED_IN_TIME = "decision_not_applied_in_time"


@dataclass(frozen=True, slots=True)
class Evaluation:
    current: int
    desired: int
    conditions: Conditions
    proposals: tuple[MetricProposal, ...] = ()
    steps: tuple[str | MetricProposal, ...] = ()
    recommendation: int | None = None  # from the metrics, before stabilization
    stabilized: int | None = None  # after stabilization, before rate limits
    fresh: bool = False
    fallback: bool = False
    limits: tuple[str, ...] = ()
    usage: Mapping[str, float] | None = None  # per metric, over the pods that counted

    @property
    def change(self) -> bool:
        return self.desired != self.current

    @property
    def reason(self) -> str:
        """The reason sentence with the numbers, built when read."""
        return "; ".join(str(step) for step in self.steps)


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


# --- the step ----------------------------------------------------------------------


def reconcile(
    memory: Memory,
    scaler: GPUScaler,
    target: Target,
    pods: Sequence[PodView] | None,
    observation: Observation | None,
    now: float,
    config: Config = Config(),
) -> Step:
    spec = scaler.spec
    previous = memory.written.status
    if target.replicas is None:
        return _with_status(
            Step(memory),
            ("FailedGetScale", target.error, scaler.generation),
            lambda: blocked_status(
                spec,
                scaler.generation,
                Reason.FAILED_GET_SCALE,
                target.error or "the target's scale subresource could not be read",
                None,
                None,
                previous,
                now,
            ),
            now,
            config,
        )

    current = target.replicas
    state = clock_bounded(memory.state, now, _RETRY_MAX_S)
    state, notes = _settle_pending(state, current, now, config, longest_period(spec))
    state = _seen(state, current, now)
    evaluation, state = _evaluate(spec, current, target, pods, observation, state, now, config)
    if observation is not None and evaluation.fresh and observation.span_s is not None:
        evaluation = replace(evaluation, steps=(*evaluation.steps, *_averages_notes(observation, spec)))

    shadow = spec.mode is Mode.SHADOW
    advice: PlannedDecision | None = None
    if shadow:
        evaluation, advice, state = _shadow(scaler, evaluation, observation, state, target.conflict, now)
    elif target.conflict is not None:
        conflict = target.conflict
        usage = evaluation.usage if evaluation.fresh else None
        return _with_status(
            Step(Memory(state, memory.written), evaluation, None, None, notes),
            ("ConflictingController", conflict, current, evaluation.fresh, scaler.generation),
            lambda: blocked_status(
                spec,
                scaler.generation,
                Reason.CONFLICTING_CONTROLLER,
                f"{conflict} already scales {spec.scale_target_ref.reference()}: gpuscale does not act on it",
                current,
                usage,
                previous,
                now,
            ),
            now,
            config,
        )

    decision: PlannedDecision | None = None
    if not shadow and evaluation.change:
        if state.pending is not None:
            evaluation = _waiting(evaluation, state.pending)
        elif state.retry_at is not None and now < state.retry_at:
            evaluation = _backing_off(evaluation, state, now)
        else:
            decision = _plan(scaler, evaluation, observation, state, now)
            state = replace(
                state, pending=Pending(decision.id, decision.from_replicas, decision.to_replicas, now)
            )
    last_scale_time = state.last_scale_time
    final = evaluation
    signature = (
        final.current,
        final.desired,
        tuple((c.type, c.status, c.reason) for c in final.conditions),
        final.fresh,
        final.fallback,
        last_scale_time,
        scaler.generation,
    )
    return _with_status(
        Step(Memory(state, memory.written), final, decision, None, notes, advice),
        signature,
        lambda: evaluation_status(spec, scaler.generation, final, last_scale_time, previous, now),
        now,
        config,
    )


def _averages_notes(observation: Observation, spec: GPUScalerSpec) -> tuple[str, ...]:
    """What the reason must say of the averages it rests on when they cover less
    than the policy's window."""
    if observation.span_s is None:
        return ()
    if observation.span_s < 1.0:  # told as soon as every pod was measured after the change
        return (
            "averages of what was measured since a pod became ready, less than a second ago, only "
            "(what was measured before is no evidence of the per-pod load after it)",
        )
    return (
        f"averages of the last {fmt_seconds(observation.span_s)} s of the "
        f"{spec.window_s:g} s window only: a pod became ready then (what was measured before is no "
        "evidence of the per-pod load after it), or the window was just made longer",
    )


def same_window(observed_s: float, wanted_s: float) -> bool:
    """The metrics were averaged over the policy's window (to a millisecond's rounding)."""
    return abs(observed_s - wanted_s) <= 1e-3 * max(1.0, wanted_s)


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
        wait = min(_RETRY_MAX_S, _RETRY_FIRST_S * 2 ** min(failures - 1, 16))
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


# --- the parts -----------------------------------------------------------------------


def _seen(state: ScalerState, current: int, now: float) -> ScalerState:
    """``recordInitialRecommendation``: a workload seen for the first time
    starts its history with the current count, so neither window acts on a
    single first recommendation."""
    if state.first_seen is not None:
        return state
    recs = state.recommendations or (TimedValue(now, current),)
    return replace(state, first_seen=now, recommendations=recs)


def _settle_pending(
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


def _waiting(evaluation: Evaluation, pending: Pending) -> Evaluation:
    return replace(
        evaluation,
        desired=evaluation.current,
        steps=(
            *evaluation.steps,
            f"waiting for the actuator to apply {pending.from_replicas} → {pending.to_replicas}: "
            f"keep {evaluation.current}",
        ),
        conditions=replace(
            evaluation.conditions,
            able_to_scale=able(
                True, Reason.WAITING_FOR_ACTUATOR, "a decision is being applied by the actuator"
            ),
        ),
    )


def _shadow(
    scaler: GPUScaler,
    evaluation: Evaluation,
    observation: Observation | None,
    state: ScalerState,
    owner: str | None,
    now: float,
) -> tuple[Evaluation, PlannedDecision | None, ScalerState]:
    """``spec.mode: Shadow``: the evaluation stands, another controller (if
    any) owns the target, and what gpuscale would decide is advice, published
    once for each new (from, to) rather than on every message."""
    who = f"{owner} owns the target" if owner is not None else "no controller is named"
    if evaluation.change:
        verdict = f"shadow mode: would scale {evaluation.current} → {evaluation.desired}; {who}"
    else:
        verdict = f"shadow mode: would keep {evaluation.current}; {who}"
    shadowed = replace(
        evaluation,
        steps=(*evaluation.steps, verdict),
        conditions=replace(
            evaluation.conditions,
            able_to_scale=able(
                False, Reason.SHADOW_MODE, f"spec.mode is Shadow: gpuscale advises and changes nothing; {who}"
            ),
        ),
    )
    # Every new (from, to) is advice, a "keep" (from == to) included: the stream
    # then records both what gpuscale wanted and each live count it saw, so
    # `gpuscale shadow-report` can compare them over the whole trial.
    wanted = (evaluation.current, evaluation.desired)
    if wanted == state.last_advice:
        return shadowed, None, state
    advice = replace(_plan(scaler, shadowed, observation, state, now), reason=shadowed.reason)
    return shadowed, advice, replace(state, last_advice=wanted)


def _backing_off(evaluation: Evaluation, state: ScalerState, now: float) -> Evaluation:
    wait = (state.retry_at or now) - now
    decisions = "decision" if state.failures == 1 else f"{state.failures} decisions"
    return replace(
        evaluation,
        desired=evaluation.current,
        steps=(
            *evaluation.steps,
            f"the last {decisions} could not be applied ({state.last_failure}): "
            f"next try in {wait:.0f} s, keep {evaluation.current}",
        ),
        conditions=replace(
            evaluation.conditions,
            able_to_scale=able(
                False, Reason.FAILED_RESCALE, f"the actuator could not apply: {state.last_failure}"
            ),
        ),
    )


def _conditions(
    able_to_scale: Condition, scaling_active: Condition, scaling_limited: Condition
) -> Conditions:
    return Conditions(able_to_scale, scaling_active, scaling_limited)


def _fresh(spec: GPUScalerSpec, observation: Observation | None, now: float, config: Config) -> str:
    """Why the observation cannot be used, or "" when it can."""
    if observation is None:
        return "no metrics received"
    if not same_window(observation.window_s, spec.window_s):
        # Never a decision on another window than the policy's: a 30 s mean is no
        # answer to a policy that asked for 10 s (the aggregator applies each
        # GPUScaler's window within seconds, up to its --max-window).
        return (
            f"the aggregator averages this workload over {observation.window_s:g} s, not spec.window "
            f"{spec.window_s:g} s: waiting for it to apply the policy's window (an aggregator applies "
            "windows up to its --max-window: see FailedGetGPUMetrics in docs/GPUSCALER.md)"
        )
    age = now - observation.received_at
    if age < 0.0:
        # Received and judged by this one clock: it was set back since they arrived, and
        # their age is unknown; read as fresh they would be acted on for the skew.
        return f"this clock was set back {-age:.0f} s since the latest metrics arrived: their age is unknown"
    if age > spec.window_s:
        return f"latest metrics arrived {age:.0f} s ago, longer than the {spec.window_s:g} s window"
    if config.max_metrics_age_s is not None and age > config.max_metrics_age_s:
        return f"latest metrics arrived {age:.0f} s ago, longer than --max-metrics-age {config.max_metrics_age_s:g} s"
    return ""


def _evaluate(
    spec: GPUScalerSpec,
    current: int,
    target: Target,
    pods: Sequence[PodView] | None,
    observation: Observation | None,
    state: ScalerState,
    now: float,
    config: Config,
) -> tuple[Evaluation, ScalerState]:
    stale_why = _fresh(spec, observation, now, config)
    proposals: tuple[MetricProposal, ...] = ()
    if not stale_why and observation is not None and pods is not None and target.selector:
        tolerances = Tolerances(down=spec.scale_down_tolerance, up=spec.scale_up_tolerance)
        signals = Signals(observation.recent, observation.recent_s, observation.span_s)
        if any(m.name in QUEUES for m in spec.metrics):
            signals, state = _with_capacity(signals, state, now)
        proposals = tuple(
            adjust(
                metric_proposal(
                    m.name,
                    m.target,
                    observation.values.get(m.name, {}),
                    pods,
                    current,
                    tolerances,
                    spec.not_ready_pods,
                ),
                observation.values.get(m.name, {}),
                signals,
                pods,
                current,
                tolerances,
                spec.not_ready_pods,
            )
            for m in spec.metrics
        )
    valid = [p for p in proposals if p.replicas is not None]
    usage = {p.name: p.usage for p in valid if p.usage is not None} or None

    # horizontal.go reconcileAutoscaler: these come before any metric maths.
    if current == 0:
        return Evaluation(
            0,
            0,
            _conditions(
                READY,
                active(
                    False,
                    Reason.SCALING_DISABLED,
                    "scaling is disabled since the replica count of the target is zero",
                ),
                NOT_LIMITED,
            ),
            proposals,
            ("the target has 0 replicas: autoscaling is off until it is scaled up by hand",),
            usage=usage,
        ), state
    if spec.paused:
        wanted = [p.explanation for p in valid[:1]]
        return Evaluation(
            current,
            current,
            _conditions(
                READY,
                active(False, Reason.SCALING_DISABLED, "spec.paused is true: nothing is changed"),
                NOT_LIMITED,
            ),
            proposals,
            ("; ".join([f"paused: keep {current}", *wanted]),),
            fresh=bool(valid),
            usage=usage,
        ), state
    if current > spec.max_replicas or current < spec.min_replicas:
        above = current > spec.max_replicas
        bound = spec.max_replicas if above else spec.min_replicas
        reason = Reason.TOO_MANY_REPLICAS if above else Reason.TOO_FEW_REPLICAS
        word = "more" if above else "less"
        return Evaluation(
            current,
            bound,
            _conditions(
                READY,
                _active_condition(valid, proposals),
                limited(
                    True,
                    reason,
                    f"the current replica count is {word} than the {'maximum' if above else 'minimum'} replica count",
                ),
            ),
            proposals,
            (
                f"{replicas_text(current)} {'above maxReplicas' if above else 'below minReplicas'} {bound}: {bound}",
            ),
            fresh=bool(valid),
            usage=usage,
        ), state

    why_not = stale_why or _metrics_error(target, pods, proposals)
    if why_not:
        return _blind(spec, current, why_not, proposals, state, now)
    best = max(valid, key=lambda p: p.replicas or 0)
    recommendation = best.replicas if best.replicas is not None else current
    if len(valid) < len(proposals) and recommendation < current:
        # computeReplicasForMetrics: some metrics invalid and the others would
        # scale down: an error, no scaling at all.
        failed = "; ".join(p.explanation for p in proposals if p.replicas is None)
        reason_text = f"{failed}; no scale-down on the other metrics while one has no value: keep {current}"
        return Evaluation(
            current,
            current,
            _conditions(READY, active(False, Reason.FAILED_GET_GPU_METRICS, failed), NOT_LIMITED),
            proposals,
            (reason_text,),
            usage=usage,
        ), replace(state, last_fresh_metrics=now)

    normalized = normalize(spec, current, recommendation, state, now)
    desired, able_to_scale, steps = normalized.desired, normalized.able_to_scale, normalized.steps
    if desired < current and observation is not None:
        held = _scale_down_held(spec, state, observation, now)
        if held is not None:
            desired, able_to_scale, steps = current, held[0], (*steps, f"{held[1]}: keep {current}")
    state = replace(state, last_fresh_metrics=now, recommendations=normalized.recommendations)
    return Evaluation(
        current,
        desired,
        _conditions(able_to_scale, _active_condition(valid, proposals), normalized.scaling_limited),
        proposals,
        (best, *steps),
        recommendation,
        normalized.stabilized,
        fresh=True,
        limits=normalized.limits,
        usage=usage,
    ), state


def _with_capacity(signals: Signals, state: ScalerState, now: float) -> tuple[Signals, ScalerState]:
    """The signals with the queue's capacity as last measured and its age, and the
    state remembering it: a queue measures it only while it has one, and reads 0
    once capacity suffices (:func:`.saturation._kept_serving` judges the age)."""
    measured = queue_capacity(signals)
    if measured is not None:
        state = replace(state, queue_capacity=Capacity(now, measured))
    kept = state.queue_capacity
    if kept is None:
        return signals, state
    return replace(signals, capacity=Remembered(kept.per_pod, now - kept.ts)), state


def _metrics_error(
    target: Target, pods: Sequence[PodView] | None, proposals: Sequence[MetricProposal]
) -> str:
    if not target.selector:
        return "the target's scale subresource has no selector, so its pods cannot be found"
    if pods is None:
        return "the target's pods are not listed yet"
    if not any(p.replicas is not None for p in proposals):
        return "; ".join(p.explanation for p in proposals) or "the policy has no metrics"
    return ""


def _active_condition(valid: Sequence[MetricProposal], proposals: Sequence[MetricProposal]) -> Condition:
    if not valid:
        failed = "; ".join(p.explanation for p in proposals) or "no fresh GPU metrics"
        return active(False, Reason.FAILED_GET_GPU_METRICS, failed)
    names = ", ".join(p.name for p in valid)
    return active(True, Reason.VALID_METRIC_FOUND, f"the replica count is calculated from {names}")


def _blind(
    spec: GPUScalerSpec,
    current: int,
    why: str,
    proposals: tuple[MetricProposal, ...],
    state: ScalerState,
    now: float,
) -> tuple[Evaluation, ScalerState]:
    """No usable metrics: never scale down; after ``fallback.afterSeconds``
    raise the count to the fallback replicas (a floor, through the rate
    limits and the cooldown)."""
    reason = (
        Reason.INVALID_SELECTOR
        if why.startswith("the target's scale subresource has no selector")
        else (Reason.FAILED_GET_GPU_METRICS)
    )
    scaling_active = active(False, reason, f"no fresh GPU metrics: {why}")
    since = state.last_fresh_metrics if state.last_fresh_metrics is not None else state.first_seen
    blind_for = now - (since if since is not None else now)
    fb = spec.fallback
    if fb is None or blind_for < fb.after_seconds:
        text = f"{why}: keep {current}"
        if fb is not None:
            text += f" (fallback to {fb.replicas} after {fb.after_seconds:g} s, blind for {blind_for:.0f} s)"
        return Evaluation(
            current, current, _conditions(READY, scaling_active, NOT_LIMITED), proposals, (text,)
        ), state
    if fb.replicas <= current:
        text = f"{why} for {blind_for:.0f} s: fallback {fb.replicas} is not above {current}, keep {current}"
        conditions = _conditions(READY, scaling_active, NOT_LIMITED)
        return Evaluation(current, current, conditions, proposals, (text,), fallback=True), state
    wanted = min(fb.replicas, spec.max_replicas)
    desired, scaling_limited, phrase = clamp_rate_and_bounds(spec, current, wanted, state, now)
    desired, held, cool_phrase = cooldown(spec, current, desired, state, now)
    steps = [f"{why} for {blind_for:.0f} s: fallback to {fb.replicas}", *filter(None, (phrase, cool_phrase))]
    return Evaluation(
        current,
        desired,
        _conditions(held or READY, scaling_active, scaling_limited),
        proposals,
        tuple(steps),
        recommendation=wanted,
        stabilized=wanted,
        fallback=True,
        limits=(phrase,) if phrase else (),
    ), state


def _plan(
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


def _with_status(
    step: Step, signature: tuple[Any, ...], build: Callable[[], dict[str, Any]], now: float, config: Config
) -> Step:
    """Write when replicas, conditions or the spec changed; when only the
    metric values moved, at most every ``status_refresh_s``. The status is
    built only then: most evaluations write nothing."""
    written = step.memory.written
    if signature == written.signature and not due(written.at, now, config.status_refresh_s):
        return step
    status = build()
    if not status_differs(written.status, status):
        return replace(step, memory=Memory(step.memory.state, Written(written.status, signature, now)))
    return replace(
        step,
        memory=Memory(step.memory.state, Written(status, signature, now)),
        status=status,
        events=condition_events(written.status, status),
    )
