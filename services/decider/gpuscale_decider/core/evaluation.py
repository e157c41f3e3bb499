"""The evaluation: HPA's order over the observation, the holds, the fallback, shadow mode.

``reconcileAutoscaler`` in ``horizontal.go`` is the model, in the same order: the
zero/max/min pre-checks, the metrics (``computeReplicasForMetrics``), then
``normalizeDesiredReplicasWithBehaviors``; what gpuscale adds says so in the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any

import msgspec

from gpuscale.policy import GPUScalerSpec
from gpuscale_decider.core.behavior import clamp_rate_and_bounds, cooldown, normalize
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
from gpuscale_decider.core.demand import QUEUES, ServiceRate, demand, service_rate
from gpuscale_decider.core.observation import Observation, Target, same_window
from gpuscale_decider.core.replicas import (
    MetricProposal,
    Phase,
    PodView,
    Tolerances,
    fmt_seconds,
    metric_proposal,
    replicas_text,
)
from gpuscale_decider.core.state import Capacity, ScalerState


class Evaluation(msgspec.Struct, frozen=True):
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


def evaluate(
    spec: GPUScalerSpec,
    current: int,
    target: Target,
    pods: Sequence[PodView] | None,
    observation: Observation | None,
    state: ScalerState,
    now: float,
    max_metrics_age_s: float | None,
) -> tuple[Evaluation, ScalerState]:
    """The replicas wanted now and why, with the state the stabilization and the
    fallback remember."""
    stale_why = _fresh(spec, observation, now, max_metrics_age_s)
    proposals: tuple[MetricProposal, ...] = ()
    measured: Capacity | None = None  # a service rate measured now, to remember
    if not stale_why and observation is not None and pods is not None and target.selector:
        proposals, measured = _proposals(spec, current, pods, observation, state, now)
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
        ), _kept(state, measured)
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
        ), _kept(state, measured)
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
        ), _kept(state, measured)

    why_not = stale_why or _metrics_error(target, pods, proposals)
    if why_not:
        return _blind(spec, current, why_not, proposals, state, now), _kept(state, measured)
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
        ), _kept(state, measured, last_fresh_metrics=now)

    normalized = normalize(spec, current, recommendation, state, now)
    desired, able_to_scale, steps = normalized.desired, normalized.able_to_scale, normalized.steps
    state = _kept(state, measured, last_fresh_metrics=now, recommendations=normalized.recommendations)
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


def _fresh(
    spec: GPUScalerSpec, observation: Observation | None, now: float, max_metrics_age_s: float | None
) -> str:
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
    if max_metrics_age_s is not None and age > max_metrics_age_s:
        return (
            f"latest metrics arrived {age:.0f} s ago, longer than --max-metrics-age {max_metrics_age_s:g} s"
        )
    return ""


def averages_notes(observation: Observation, spec: GPUScalerSpec) -> tuple[str, ...]:
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


def not_applied(evaluation: Evaluation, failure: str) -> Evaluation:
    """The actuator reported it could not apply the desired count: said on the status; the
    count stays desired and the actuator tries again on its next resync."""
    return msgspec.structs.replace(
        evaluation,
        steps=(*evaluation.steps, f"the actuator could not apply it ({failure}): it tries again"),
        conditions=msgspec.structs.replace(
            evaluation.conditions,
            able_to_scale=able(False, Reason.FAILED_RESCALE, f"the actuator could not apply: {failure}"),
        ),
    )


def shadowed(evaluation: Evaluation, owner: str | None) -> Evaluation:
    """``spec.mode: Shadow``: the evaluation stands, another controller (if
    any) owns the target, and gpuscale says what it would do."""
    who = f"{owner} owns the target" if owner is not None else "no controller is named"
    if evaluation.change:
        verdict = f"shadow mode: would scale {evaluation.current} → {evaluation.desired}; {who}"
    else:
        verdict = f"shadow mode: would keep {evaluation.current}; {who}"
    return msgspec.structs.replace(
        evaluation,
        steps=(*evaluation.steps, verdict),
        conditions=msgspec.structs.replace(
            evaluation.conditions,
            able_to_scale=able(
                False, Reason.SHADOW_MODE, f"spec.mode is Shadow: gpuscale advises and changes nothing; {who}"
            ),
        ),
    )


def _conditions(
    able_to_scale: Condition, scaling_active: Condition, scaling_limited: Condition
) -> Conditions:
    return Conditions(able_to_scale, scaling_active, scaling_limited)


def _proposals(
    spec: GPUScalerSpec,
    current: int,
    pods: Sequence[PodView],
    observation: Observation,
    state: ScalerState,
    now: float,
) -> tuple[tuple[MetricProposal, ...], Capacity | None]:
    """HPA's calculation of each metric, once, on its demand estimates (:mod:`.demand`),
    and the service rate measured now (None: none was)."""
    tolerances = Tolerances(down=spec.scale_down_tolerance, up=spec.scale_up_tolerance)
    rate: ServiceRate | None = None
    measured: Capacity | None = None
    for m in spec.metrics:
        if m.name in QUEUES:  # a queue's estimate divides by μ: measured, remembered or bounded
            kept = state.queue_capacity
            rate = service_rate(observation, None if kept is None else kept.per_pod)
            if rate is not None and rate.measured:
                measured = Capacity(now, rate.per_pod)
            break
    proposals = []
    # Pods asked for and starting; one the scheduler has no node for is not starting.
    starting = sum(1 for p in pods if p.phase == Phase.PENDING and not (p.deleting or p.unschedulable))
    for m in spec.metrics:
        d = demand(m.name, m.target, observation, rate, starting)
        estimated = d if d.estimated else None
        proposals.append(
            metric_proposal(
                m.name, m.target, d.values, pods, current, tolerances, spec.not_ready_pods, estimated
            )
        )
    return tuple(proposals), measured


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
    return _calculated_from(", ".join(p.name for p in valid))


@lru_cache(maxsize=1024)
def _calculated_from(names: str) -> Condition:
    return active(True, Reason.VALID_METRIC_FOUND, f"the replica count is calculated from {names}")


def _blind(
    spec: GPUScalerSpec,
    current: int,
    why: str,
    proposals: tuple[MetricProposal, ...],
    state: ScalerState,
    now: float,
) -> Evaluation:
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
        )
    if fb.replicas <= current:
        text = f"{why} for {blind_for:.0f} s: fallback {fb.replicas} is not above {current}, keep {current}"
        conditions = _conditions(READY, scaling_active, NOT_LIMITED)
        return Evaluation(current, current, conditions, proposals, (text,), fallback=True)
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
    )


def _kept(state: ScalerState, measured: Capacity | None, **changes: Any) -> ScalerState:
    """``state`` with ``changes`` and the service rate measured now: one copy at most."""
    if measured is not None:
        changes["queue_capacity"] = measured
    return replace(state, **changes) if changes else state
