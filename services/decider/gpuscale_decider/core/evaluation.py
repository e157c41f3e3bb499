"""The evaluation: HPA's order over the observation, the holds, the fallback, shadow mode.

``reconcileAutoscaler`` in ``horizontal.go`` is the model, in the same order: the
zero/max/min pre-checks, the metrics (``computeReplicasForMetrics``), then
``normalizeDesiredReplicasWithBehaviors``; what gpuscale adds says so in the reason.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

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
from gpuscale_decider.core.observation import Observation, Target, same_window
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
from gpuscale_decider.core.state import Capacity, ScalerState

# A pod's sample tells the second before it and reaches the decider with the
# aggregator's next publish: load moved by a scale-down shows this much after it.
_SAMPLE_LAG_S: Final = 2.0


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
    return replace(
        evaluation,
        steps=(*evaluation.steps, f"the actuator could not apply it ({failure}): it tries again"),
        conditions=replace(
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
    return replace(
        evaluation,
        steps=(*evaluation.steps, verdict),
        conditions=replace(
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
