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

Its inputs are in :mod:`.observation`, the evaluation in :mod:`.evaluation`,
what it hands back and remembers (and the actuator's side) in :mod:`.step`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final

from gpuscale.clocks import due
from gpuscale.policy import GPUScaler, Mode
from gpuscale_decider.core.conditions import Reason
from gpuscale_decider.core.evaluation import (
    Evaluation,
    averages_notes,
    backing_off,
    evaluate,
    shadowed,
    waiting,
)
from gpuscale_decider.core.events import condition_events
from gpuscale_decider.core.observation import Observation, Target, observation_of, same_window
from gpuscale_decider.core.replicas import PodView
from gpuscale_decider.core.state import Pending, ScalerState, TimedValue, clock_bounded
from gpuscale_decider.core.status import blocked_status, evaluation_status, status_differs
from gpuscale_decider.core.step import (
    RETRY_MAX_S,
    Config,
    Memory,
    Note,
    PlannedDecision,
    Step,
    Written,
    action_seen,
    longest_period,
    plan,
    publish_failed,
    settle_pending,
)

# The step's inputs, outputs and memory live beside it; callers import them from here.
__all__ = [
    "Config",
    "Evaluation",
    "Memory",
    "Note",
    "Observation",
    "PlannedDecision",
    "Step",
    "Target",
    "Written",
    "action_seen",
    "longest_period",
    "observation_of",
    "publish_failed",
    "reconcile",
    "same_window",
]

_DEFAULTS: Final = Config()


def reconcile(
    memory: Memory,
    scaler: GPUScaler,
    target: Target,
    pods: Sequence[PodView] | None,
    observation: Observation | None,
    now: float,
    config: Config = _DEFAULTS,
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
    state = clock_bounded(memory.state, now, RETRY_MAX_S)
    state, notes = settle_pending(state, current, now, config, longest_period(spec))
    state = _seen(state, current, now)
    evaluation, state = evaluate(
        spec, current, target, pods, observation, state, now, config.max_metrics_age_s
    )
    if observation is not None and evaluation.fresh and observation.span_s is not None:
        evaluation = replace(evaluation, steps=(*evaluation.steps, *averages_notes(observation, spec)))

    shadow = spec.mode is Mode.SHADOW
    advice: PlannedDecision | None = None
    if shadow:
        evaluation = shadowed(evaluation, target.conflict)
        advice, state = _advise(scaler, evaluation, observation, state, now)
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
            evaluation = waiting(evaluation, state.pending)
        elif state.retry_at is not None and now < state.retry_at:
            evaluation = backing_off(evaluation, state, now)
        else:
            decision = plan(scaler, evaluation, observation, state, now)
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


def _advise(
    scaler: GPUScaler,
    evaluation: Evaluation,
    observation: Observation | None,
    state: ScalerState,
    now: float,
) -> tuple[PlannedDecision | None, ScalerState]:
    """Shadow mode's advice: what gpuscale would decide, once for each new (from, to)."""
    # Every new (from, to) is advice, a "keep" (from == to) included: the stream
    # then records both what gpuscale wanted and each live count it saw, so
    # `gpuscale shadow-report` can compare them over the whole trial.
    wanted = (evaluation.current, evaluation.desired)
    if wanted == state.last_advice:
        return None, state
    advice = replace(plan(scaler, evaluation, observation, state, now), reason=evaluation.reason)
    return advice, replace(state, last_advice=wanted)


def _seen(state: ScalerState, current: int, now: float) -> ScalerState:
    """``recordInitialRecommendation``: a workload seen for the first time
    starts its history with the current count, so neither window acts on a
    single first recommendation."""
    if state.first_seen is not None:
        return state
    recs = state.recommendations or (TimedValue(now, current),)
    return replace(state, first_seen=now, recommendations=recs)


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
