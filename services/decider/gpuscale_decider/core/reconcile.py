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
``fallback`` count when metrics stop, per-direction ``cooldownSeconds``, the
actuator's report that it could not apply the desired count, and another
controller on the target. The step's output is the workload's desired count
(a decision when it changes), which the actuator converges ``/scale`` to.

Its inputs are in :mod:`.observation`, the evaluation in :mod:`.evaluation`,
what it hands back and remembers (and the actuator's side) in :mod:`.step`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final

import msgspec

from gpuscale.clocks import due
from gpuscale.policy import GPUScaler, Mode
from gpuscale_decider.core.conditions import Reason
from gpuscale_decider.core.evaluation import (
    Evaluation,
    averages_notes,
    evaluate,
    not_applied,
    shadowed,
)
from gpuscale_decider.core.events import condition_events
from gpuscale_decider.core.observation import Observation, Target, observation_of, same_window
from gpuscale_decider.core.replicas import PodView
from gpuscale_decider.core.state import Desired, ScalerState, TimedValue, clock_bounded, record_scale
from gpuscale_decider.core.status import blocked_status, evaluation_status, status_differs
from gpuscale_decider.core.step import (
    Config,
    Memory,
    Note,
    PlannedDecision,
    Step,
    Written,
    action_seen,
    base_count,
    longest_period,
    plan,
    write_failed,
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
    "observation_of",
    "reconcile",
    "same_window",
    "write_failed",
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

    state = clock_bounded(memory.state, now)
    state, current, notes = base_count(state, target.replicas, now, config)
    state = _seen(state, current, now)
    evaluation, state = evaluate(
        spec, current, target, pods, observation, state, now, config.max_metrics_age_s
    )
    if observation is not None and evaluation.fresh and observation.span_s is not None:
        evaluation = msgspec.structs.replace(
            evaluation, steps=(*evaluation.steps, *averages_notes(observation, spec))
        )

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
    written = state.desired
    changed = evaluation.change if written is None else evaluation.desired != written.to_replicas
    if not shadow and changed:
        # A new desired count (or /scale went elsewhere and the written one is no longer wanted).
        decision = plan(scaler, evaluation, observation, state, now)
        if evaluation.change:  # HPA records a scale event once its write succeeded: here, the desired count
            state = record_scale(state, evaluation.current, evaluation.desired, now, longest_period(spec))
        state = replace(
            state,
            desired=Desired(
                decision.id,
                target.replicas,
                decision.to_replicas,
                now,
                settled=target.replicas == decision.to_replicas,
            ),
            last_failure="",
        )
    elif not shadow and written is not None and written.to_replicas != target.replicas and state.last_failure:
        evaluation = not_applied(evaluation, state.last_failure)
    last_scale_time = state.last_scale_time
    final = (  # the status shows /scale's count, as HPA's
        evaluation
        if evaluation.current == target.replicas
        else msgspec.structs.replace(evaluation, current=target.replicas)
    )
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
    advice = msgspec.structs.replace(
        plan(scaler, evaluation, observation, state, now), reason=evaluation.reason
    )
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
        return msgspec.structs.replace(
            step, memory=Memory(step.memory.state, Written(written.status, signature, now))
        )
    return msgspec.structs.replace(
        step,
        memory=Memory(step.memory.state, Written(status, signature, now)),
        status=status,
        events=condition_events(written.status, status),
    )
