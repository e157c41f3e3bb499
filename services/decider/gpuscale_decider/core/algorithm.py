"""HPA's scaling algorithm as a pure function, plus cooldown, fallback and reasons.

Modelled on Kubernetes' ``pkg/controller/podautoscaler``:
``replica_calculator.go`` (per-metric ratio, tolerance, missing pods) and
``horizontal.go`` (``normalizeDesiredReplicasWithBehaviors``,
``stabilizeRecommendationWithBehaviors``,
``convertDesiredReplicasWithBehaviorRate``,
``calculateScaleUpLimitWithScalingRules``,
``calculateScaleDownLimitWithBehaviors``). Where HPA keeps the
recommendation and scale-event history in controller memory, here it is a
value (:class:`ScalerState`) passed in and returned, so the shell can store
it (JetStream KV) and a restart forgets nothing. ``now`` is a parameter.

What HPA lacks and this adds: per-direction ``cooldownSeconds``, ``paused``,
a ``fallback`` count when metrics stop, and a reason sentence with the
numbers for every result.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from gpuscale_decider.core.policy import GPUScalerSpec, RatePolicy, ScalingRules

ABLE_TO_SCALE: Final = "AbleToScale"
SCALING_ACTIVE: Final = "ScalingActive"
SCALING_LIMITED: Final = "ScalingLimited"


@dataclass(frozen=True, slots=True)
class Observation:
    """One metrics message for the workload, as the algorithm needs it."""

    ts: float  # when the aggregator computed the averages
    averages: Mapping[str, float]  # metric -> mean over fresh pods
    pods_fresh: int


@dataclass(frozen=True, slots=True)
class TimedValue:
    ts: float
    value: int


@dataclass(frozen=True, slots=True)
class ScalerState:
    """What HPA keeps in memory per autoscaler; here a value the shell stores."""

    recommendations: tuple[TimedValue, ...] = ()
    scale_up_events: tuple[TimedValue, ...] = ()  # value: replicas added
    scale_down_events: tuple[TimedValue, ...] = ()  # value: replicas removed
    last_scale_up: float | None = None
    last_scale_down: float | None = None
    last_fresh_metrics: float | None = None
    first_seen: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "recommendations": [[r.ts, r.value] for r in self.recommendations],
            "scale_up_events": [[e.ts, e.value] for e in self.scale_up_events],
            "scale_down_events": [[e.ts, e.value] for e in self.scale_down_events],
            "last_scale_up": self.last_scale_up,
            "last_scale_down": self.last_scale_down,
            "last_fresh_metrics": self.last_fresh_metrics,
            "first_seen": self.first_seen,
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
            return tuple(out)

        def opt_ts(key: str) -> float | None:
            v = m.get(key)
            return float(v) if isinstance(v, int | float) and math.isfinite(v) else None

        return cls(
            recommendations=timed("recommendations"),
            scale_up_events=timed("scale_up_events"),
            scale_down_events=timed("scale_down_events"),
            last_scale_up=opt_ts("last_scale_up"),
            last_scale_down=opt_ts("last_scale_down"),
            last_fresh_metrics=opt_ts("last_fresh_metrics"),
            first_seen=opt_ts("first_seen"),
        )


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class MetricProposal:
    """One metric's recommendation; :attr:`explanation` says why in words.

    The sentence is built only when read (status, decision), not on every
    evaluation: most evaluations change nothing and are never shown.
    """

    name: str
    target: float
    average: float | None
    ratio: float | None
    pods_fresh: int
    pods_missing: int
    replicas: int | None  # None: no valid value for this metric
    current: int = 0
    outcome: str = (
        "none"  # none | within | ceil | missing_within | missing_reverse | missing_wrong_way | missing_ceil
    )
    new_ratio: float | None = None  # with the missing pods counted

    @property
    def explanation(self) -> str:
        if self.average is None or self.ratio is None:
            return f"{self.name}: no fresh value (target {fmt_target(self.target)})"
        ratio = self.ratio
        relation = "over" if ratio > 1.0 else "under" if ratio < 1.0 else "at"
        head = (
            f"{self.name} {fmt_value(self.average)} {relation} target {fmt_target(self.target)} "
            f"(ratio {fmt_ratio(ratio)}) on {self.pods_fresh} of {_pods(max(self.current, self.pods_fresh))}"
        )
        if self.outcome == "within":
            return f"{head}: within tolerance, keep {self.current}"
        if self.outcome == "ceil":
            return f"{head}: ceil({self.pods_fresh} × {fmt_ratio(ratio)}) = {self.replicas}"
        new_ratio = self.new_ratio if self.new_ratio is not None else ratio
        counted_as = "at target" if ratio < 1.0 else "as 0"
        head = f"{head}; counting {_pods(self.pods_missing)} without samples {counted_as}: ratio {fmt_ratio(new_ratio)}"
        total = self.pods_fresh + self.pods_missing
        if self.outcome == "missing_within":
            return f"{head}, within tolerance: keep {self.current}"
        if self.outcome == "missing_reverse":
            return f"{head}, which reverses the direction: keep {self.current}"
        if self.outcome == "missing_wrong_way":
            wrong = math.ceil(new_ratio * total)
            return f"{head}: ceil({total} × {fmt_ratio(new_ratio)}) = {wrong} goes the wrong way: keep {self.current}"
        return f"{head}: ceil({total} × {fmt_ratio(new_ratio)}) = {self.replicas}"

    def __str__(self) -> str:
        return self.explanation


@dataclass(frozen=True, slots=True)
class Evaluation:
    current_replicas: int
    desired_replicas: int
    reason_steps: tuple[str | MetricProposal, ...]
    conditions: tuple[Condition, Condition, Condition]
    metrics: tuple[MetricProposal, ...] = ()
    recommendation: int | None = None  # from the metrics, before stabilization
    stabilized: int | None = None  # after stabilization, before rate limits
    fresh: bool = False
    fallback: bool = False
    limits: tuple[str, ...] = field(default=())

    @property
    def change(self) -> bool:
        return self.desired_replicas != self.current_replicas

    @property
    def reason(self) -> str:
        """The reason sentence with the numbers, built when read."""
        return "; ".join(str(step) for step in self.reason_steps)

    def condition(self, type_: str) -> Condition:
        for c in self.conditions:
            if c.type == type_:
                return c
        raise KeyError(type_)


# --- numbers as people read them -------------------------------------------------


def fmt_value(v: float) -> str:
    return f"{v:.1f}"


def fmt_target(v: float) -> str:
    return f"{v:g}"


def fmt_ratio(v: float) -> str:
    return f"{v:.2f}"


def _pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def _replicas(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"


# --- replica_calculator.go --------------------------------------------------------


def _within(ratio: float, up_tolerance: float, down_tolerance: float) -> bool:
    # KEP-4951 configurable tolerance: [1 - down, 1 + up] is "close enough".
    return (1.0 - down_tolerance) <= ratio <= (1.0 + up_tolerance)


def metric_proposal(
    name: str,
    target: float,
    average: float | None,
    pods_fresh: int,
    current: int,
    up_tolerance: float,
    down_tolerance: float,
) -> MetricProposal:
    """``calcPlainMetricReplicas`` for one metric averaged over the fresh pods.

    Missing pods (replicas of the scale subresource without a fresh sample)
    count 0 on the way up and exactly the target on the way down; if that
    reverses the direction or lands within the tolerance, keep ``current``.
    """
    if average is None or pods_fresh <= 0:
        return MetricProposal(name, target, None, None, pods_fresh, 0, None, current)
    ratio = average / target
    missing = current - pods_fresh
    if missing <= 0:
        if (1.0 - down_tolerance) <= ratio <= (1.0 + up_tolerance):
            return MetricProposal(name, target, average, ratio, pods_fresh, 0, current, current, "within")
        replicas = math.ceil(ratio * pods_fresh)
        return MetricProposal(name, target, average, ratio, pods_fresh, 0, replicas, current, "ceil")

    total = pods_fresh + missing
    if ratio < 1.0:
        new_ratio = (average * pods_fresh + target * missing) / (target * total)
    else:
        new_ratio = (average * pods_fresh) / (target * total)

    def keep(outcome: str) -> MetricProposal:
        return MetricProposal(
            name, target, average, ratio, pods_fresh, missing, current, current, outcome, new_ratio
        )

    if _within(new_ratio, up_tolerance, down_tolerance):
        return keep("missing_within")
    if (ratio > 1.0 and new_ratio < 1.0) or (ratio < 1.0 and new_ratio > 1.0):
        return keep("missing_reverse")
    replicas = math.ceil(new_ratio * total)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return keep("missing_wrong_way")
    return MetricProposal(
        name, target, average, ratio, pods_fresh, missing, replicas, current, "missing_ceil", new_ratio
    )


# --- horizontal.go -------------------------------------------------------------


def _change_in_period(period_s: int, events: tuple[TimedValue, ...], now: float) -> int:
    cutoff = now - period_s
    return sum(e.value for e in events if e.ts > cutoff)


def _period_start(current: int, policy: RatePolicy, state: ScalerState, now: float) -> int:
    added = _change_in_period(policy.period_seconds, state.scale_up_events, now)
    removed = _change_in_period(policy.period_seconds, state.scale_down_events, now)
    return current - added + removed


def scale_up_limit(current: int, rules: ScalingRules, state: ScalerState, now: float) -> tuple[int, str]:
    """``calculateScaleUpLimitWithScalingRules``: the most replicas allowed now."""
    if rules.select_policy == "Disabled":
        return current, ""
    pick = min if rules.select_policy == "Min" else max
    best: int | None = None
    best_text = ""
    for policy in rules.policies:
        start = _period_start(current, policy, state, now)
        if policy.type == "Pods":
            proposed = start + policy.value
            text = f"{_pods(policy.value)} per {policy.period_seconds} s"
        else:
            # rounded up, or a small target could never grow
            proposed = math.ceil(start * (1 + policy.value / 100))
            text = f"{policy.value}% per {policy.period_seconds} s"
        if best is None or pick(best, proposed) != best:
            best, best_text = proposed, text
    if best is None:
        return current, "no scale-up policy"
    return best, best_text


def scale_down_limit(current: int, rules: ScalingRules, state: ScalerState, now: float) -> tuple[int, str]:
    """``calculateScaleDownLimitWithBehaviors``: the fewest replicas allowed now."""
    if rules.select_policy == "Disabled":
        return current, ""
    # for scaling down, the smallest change (Min) is the highest count
    pick = max if rules.select_policy == "Min" else min
    best: int | None = None
    best_text = ""
    for policy in rules.policies:
        start = _period_start(current, policy, state, now)
        if policy.type == "Pods":
            proposed = start - policy.value
            text = f"{_pods(policy.value)} per {policy.period_seconds} s"
        else:
            proposed = int(start * (1 - policy.value / 100))
            text = f"{policy.value}% per {policy.period_seconds} s"
        if best is None or pick(best, proposed) != best:
            best, best_text = proposed, text
    if best is None:
        return current, "no scale-down policy"
    return best, best_text


def _stabilize(
    spec: GPUScalerSpec, current: int, desired: int, state: ScalerState, now: float
) -> tuple[int, tuple[TimedValue, ...]]:
    """``stabilizeRecommendationWithBehaviors``: scale-up takes the lowest
    recommendation of its window, scale-down the highest of its window.

    Returns the stabilized count and the history to keep, with ``desired``
    recorded. The history is kept small without changing any future result:
    an older entry equal to the new one, or one out of the scale-up window and
    not above the new one, can never again be a window's min or max.
    """
    up_cutoff = now - spec.scale_up.stabilization_window_seconds
    down_cutoff = now - spec.scale_down.stabilization_window_seconds
    up_rec = desired
    down_rec = desired
    kept: list[TimedValue] = []
    for rec in state.recommendations:
        ts = rec.ts
        value = rec.value
        in_up = ts > up_cutoff
        in_down = ts > down_cutoff
        if in_up and value < up_rec:
            up_rec = value
        if in_down and value > down_rec:
            down_rec = value
        if (in_up or in_down) and value != desired and (in_up or value > desired):
            kept.append(rec)
    stabilized = min(max(current, up_rec), down_rec)
    kept.append(TimedValue(now, desired))
    return stabilized, tuple(kept)


def _with(
    state: ScalerState,
    *,
    recommendations: tuple[TimedValue, ...] | None = None,
    last_fresh_metrics: float | None = None,
) -> ScalerState:
    # dataclasses.replace is slow on the hot path; this is the same thing.
    return ScalerState(
        state.recommendations if recommendations is None else recommendations,
        state.scale_up_events,
        state.scale_down_events,
        state.last_scale_up,
        state.last_scale_down,
        state.last_fresh_metrics if last_fresh_metrics is None else last_fresh_metrics,
        state.first_seen,
    )


def _with_first_seen(spec: GPUScalerSpec, current: int, state: ScalerState, now: float) -> ScalerState:
    if state.first_seen is not None:
        return state
    # maybeInitScaleDownStabilizationWindow: a controller that just started
    # has seen no history, so it must not scale down before a window passes.
    recs = state.recommendations
    if not recs and spec.scale_down.stabilization_window_seconds > 0 and current > 0:
        recs = (TimedValue(now, current),)
    return replace(state, first_seen=now, recommendations=recs)


def _conditions(
    able: tuple[bool, str, str], active: tuple[bool, str, str], limited: tuple[bool, str, str]
) -> tuple[Condition, Condition, Condition]:
    return (
        Condition(ABLE_TO_SCALE, *able),
        Condition(SCALING_ACTIVE, *active),
        Condition(SCALING_LIMITED, *limited),
    )


_READY = (True, "ReadyForNewScale", "recommended size matches current size")
_NOT_LIMITED = (False, "DesiredWithinRange", "the desired count is within the acceptable range")


def _apply_rate_cooldown_clamp(
    spec: GPUScalerSpec, current: int, desired: int, state: ScalerState, now: float
) -> tuple[int, list[str], tuple[bool, str, str], tuple[bool, str, str] | None]:
    """``convertDesiredReplicasWithBehaviorRate`` then cooldown. Returns the
    count, the reason phrases, the ScalingLimited condition and, when a
    cooldown held the change, the AbleToScale condition saying so."""
    steps: list[str] = []
    limited = _NOT_LIMITED
    if desired > current:
        limit, how = scale_up_limit(current, spec.scale_up, state, now)
        limit = max(limit, current)
        if spec.max_replicas > limit:
            allowed, why = limit, "ScaleUpLimit"
            message = "the desired replica count is increasing faster than the maximum scale rate"
            phrase = f"scale-up limited to {how}: {limit}" if how else f"scale-up disabled: keep {limit}"
        else:
            allowed, why = spec.max_replicas, "TooManyReplicas"
            message = "the desired replica count is more than the maximum replica count"
            phrase = f"capped at maxReplicas {spec.max_replicas}"
        if desired > allowed:
            desired = allowed
            limited = (True, why, message)
            steps.append(phrase)
    elif desired < current:
        limit, how = scale_down_limit(current, spec.scale_down, state, now)
        limit = min(limit, current)
        if spec.min_replicas < limit:
            allowed, why = limit, "ScaleDownLimit"
            message = "the desired replica count is decreasing faster than the maximum scale rate"
            phrase = f"scale-down limited to {how}: {limit}" if how else f"scale-down disabled: keep {limit}"
        else:
            allowed, why = spec.min_replicas, "TooFewReplicas"
            message = "the desired replica count is less than the minimum replica count"
            phrase = f"raised to minReplicas {spec.min_replicas}"
        if desired < allowed:
            desired = allowed
            limited = (True, why, message)
            steps.append(phrase)

    held: tuple[bool, str, str] | None = None
    if desired > current and state.last_scale_up is not None:
        since = now - state.last_scale_up
        if since < spec.scale_up.cooldown_seconds:
            steps.append(
                f"scale-up cooling down ({since:.0f} s since the last, cooldownSeconds "
                f"{spec.scale_up.cooldown_seconds}): keep {current}"
            )
            held = (False, "BackoffUpscale", "the time since the previous scale-up is within its cooldown")
            desired = current
    elif desired < current and state.last_scale_down is not None:
        since = now - state.last_scale_down
        if since < spec.scale_down.cooldown_seconds:
            steps.append(
                f"scale-down cooling down ({since:.0f} s since the last, cooldownSeconds "
                f"{spec.scale_down.cooldown_seconds}): keep {current}"
            )
            held = (
                False,
                "BackoffDownscale",
                "the time since the previous scale-down is within its cooldown",
            )
            desired = current
    return desired, steps, limited, held


def evaluate(
    spec: GPUScalerSpec,
    current: int,
    observation: Observation | None,
    state: ScalerState,
    now: float,
) -> tuple[Evaluation, ScalerState]:
    """One evaluation: the replicas wanted now, why, and the state to store.

    ``observation`` is the latest metrics for the workload (None: none yet).
    Metrics older than ``spec.window_s`` are never acted on.
    """
    state = _with_first_seen(spec, current, state, now)
    fresh = (
        observation is not None
        and observation.pods_fresh > 0
        and now - observation.ts <= spec.window_s
        and any(m.name in observation.averages for m in spec.metrics)
    )
    proposals: tuple[MetricProposal, ...] = ()
    if fresh and observation is not None:
        state = _with(state, last_fresh_metrics=max(observation.ts, state.last_fresh_metrics or 0.0))
        up_tol, down_tol = spec.scale_up_tolerance, spec.scale_down_tolerance
        proposals = tuple(
            metric_proposal(
                m.name,
                m.target,
                observation.averages.get(m.name),
                observation.pods_fresh,
                current,
                up_tol,
                down_tol,
            )
            for m in spec.metrics
        )

    def result(
        desired: int,
        reason: str | tuple[str | MetricProposal, ...],
        conditions: tuple[Condition, Condition, Condition],
        **extra: Any,
    ) -> tuple[Evaluation, ScalerState]:
        steps = (reason,) if isinstance(reason, str) else reason
        return Evaluation(current, desired, steps, conditions, proposals, fresh=fresh, **extra), state

    # horizontal.go reconcileAutoscaler: these come before any metric maths.
    if current == 0:
        return result(
            0,
            "the target has 0 replicas: autoscaling is off until it is scaled up by hand",
            _conditions(
                _READY,
                (
                    False,
                    "ScalingDisabled",
                    "scaling is disabled since the replica count of the target is zero",
                ),
                _NOT_LIMITED,
            ),
        )
    if spec.paused:
        wanted = [p.explanation for p in proposals if p.replicas is not None]
        return result(
            current,
            "; ".join([f"paused: keep {current}", *wanted[:1]]),
            _conditions(
                _READY, (False, "ScalingDisabled", "spec.paused is true: nothing is changed"), _NOT_LIMITED
            ),
        )
    if current > spec.max_replicas:
        return result(
            spec.max_replicas,
            f"{_replicas(current)} above maxReplicas {spec.max_replicas}: {spec.max_replicas}",
            _conditions(
                _READY,
                _active(fresh, proposals),
                (True, "TooManyReplicas", "the current replica count is more than the maximum replica count"),
            ),
        )
    if current < spec.min_replicas:
        return result(
            spec.min_replicas,
            f"{_replicas(current)} below minReplicas {spec.min_replicas}: {spec.min_replicas}",
            _conditions(
                _READY,
                _active(fresh, proposals),
                (True, "TooFewReplicas", "the current replica count is less than the minimum replica count"),
            ),
        )

    if not fresh:
        return _blind(spec, current, observation, state, now, proposals)

    valid = [p for p in proposals if p.replicas is not None]
    if not valid:  # unreachable while `fresh` holds; kept so a gap cannot crash
        return _blind(spec, current, observation, state, now, proposals)
    best = max(valid, key=lambda p: p.replicas or 0)
    recommendation = best.replicas or current
    steps: list[str | MetricProposal] = [best]
    if len(valid) < len(proposals) and recommendation < current:
        # HPA: with some metrics unreadable, never scale down on the others.
        missing_names = ", ".join(p.name for p in proposals if p.replicas is None)
        steps.append(f"no value for {missing_names}, so no scale-down: keep {current}")
        recommendation = current

    stabilized, history = _stabilize(spec, current, recommendation, state, now)
    state = _with(state, recommendations=history)
    if stabilized != recommendation:
        if recommendation >= current:
            able = (
                True,
                "ScaleUpStabilized",
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
            window = spec.scale_up.stabilization_window_seconds
            steps.append(f"lowest recommendation of the last {window} s: {stabilized}")
        else:
            able = (
                True,
                "ScaleDownStabilized",
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
            window = spec.scale_down.stabilization_window_seconds
            steps.append(f"held by the {window} s scale-down stabilization window at {stabilized}")
    else:
        able = _READY

    desired, more, limited, held = _apply_rate_cooldown_clamp(spec, current, stabilized, state, now)
    steps.extend(more)
    if held is not None:
        able = held
    active = _active(True, proposals)
    return result(
        desired,
        tuple(steps),
        _conditions(able, active, limited),
        recommendation=recommendation,
        stabilized=stabilized,
        limits=tuple(more),
    )


def _active(fresh: bool, proposals: tuple[MetricProposal, ...]) -> tuple[bool, str, str]:
    if not fresh:
        return (False, "FailedGetGPUMetrics", "no fresh GPU metrics for the target's pods")
    names = ", ".join(p.name for p in proposals if p.replicas is not None)
    return (True, "ValidMetricFound", f"the replica count is calculated from {names}")


def _blind(
    spec: GPUScalerSpec,
    current: int,
    observation: Observation | None,
    state: ScalerState,
    now: float,
    proposals: tuple[MetricProposal, ...],
) -> tuple[Evaluation, ScalerState]:
    """No fresh metrics: never scale down; after ``fallback.afterSeconds``
    raise the count to the fallback replicas (a floor, through the rate limits)."""
    if observation is None:
        why = "no metrics received"
    elif observation.pods_fresh <= 0:
        why = "no pod has fresh samples"
    elif now - observation.ts > spec.window_s:
        why = (
            f"latest metrics are {now - observation.ts:.0f} s old, older than the {spec.window_s:g} s window"
        )
    else:
        why = "no value for any of the policy's metrics"
    active = (False, "FailedGetGPUMetrics", f"no fresh GPU metrics: {why}")
    since_ref = state.last_fresh_metrics if state.last_fresh_metrics is not None else state.first_seen
    blind_for = now - (since_ref if since_ref is not None else now)
    fb = spec.fallback
    if fb is None or blind_for < fb.after_seconds:
        reason = f"{why}: keep {current}"
        if fb is not None:
            reason += (
                f" (fallback to {fb.replicas} after {fb.after_seconds:g} s, blind for {blind_for:.0f} s)"
            )
        evaluation = Evaluation(
            current, current, (reason,), _conditions(_READY, active, _NOT_LIMITED), proposals
        )
        return evaluation, state
    if fb.replicas <= current:
        reason = f"{why} for {blind_for:.0f} s: fallback {fb.replicas} is not above {current}, keep {current}"
        evaluation = Evaluation(
            current, current, (reason,), _conditions(_READY, active, _NOT_LIMITED), proposals, fallback=True
        )
        return evaluation, state
    wanted = min(fb.replicas, spec.max_replicas)
    desired, steps, limited, held = _apply_rate_cooldown_clamp(spec, current, wanted, state, now)
    able = held if held is not None else _READY
    evaluation = Evaluation(
        current,
        desired,
        (f"{why} for {blind_for:.0f} s: fallback to {fb.replicas}", *steps),
        _conditions(able, active, limited),
        proposals,
        recommendation=wanted,
        stabilized=wanted,
        fallback=True,
        limits=tuple(steps),
    )
    return evaluation, state


def record_scale(
    state: ScalerState, from_replicas: int, to_replicas: int, now: float, longest_period_s: int
) -> ScalerState:
    """``storeScaleEvent``: remember a change the decider asked for, for the
    rate policies (events within the longest period) and the cooldowns."""
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


def longest_period(spec: GPUScalerSpec) -> int:
    periods = [p.period_seconds for p in (*spec.scale_up.policies, *spec.scale_down.policies)]
    return max(periods, default=0)


def seed_last_scale(state: ScalerState, last_scale_time: float | None) -> ScalerState:
    """After a restart without stored state, the GPUScaler status's
    lastScaleTime still keeps the cooldowns (both directions: which one it
    was is not recorded there)."""
    if last_scale_time is None or state.last_scale_up is not None or state.last_scale_down is not None:
        return state
    return replace(state, last_scale_up=last_scale_time, last_scale_down=last_scale_time)
