"""From a recommendation to the replicas wanted now: stabilization, rate
policies, bounds, and gpuscale's cooldown.

Purely computational. A port of ``normalizeDesiredReplicasWithBehaviors`` in
Kubernetes' ``pkg/controller/podautoscaler/horizontal.go``
(``stabilizeRecommendationWithBehaviors``,
``convertDesiredReplicasWithBehaviorRate``,
``calculateScaleUpLimitWithScalingRules``,
``calculateScaleDownLimitWithBehaviors``), one direction at a time: the two
mirrored halves of HPA's code are one function here, given a
:class:`Direction`. Every clamp returns HPA's reason. ``now`` and the history
are parameters; nothing here reads a clock.
"""

from __future__ import annotations

import math
from enum import Enum

import msgspec

from gpuscale.policy import GPUScalerSpec, RatePolicy, ScalingRules
from gpuscale_decider.core.conditions import (
    NOT_LIMITED,
    READY,
    Condition,
    Reason,
    able,
    limited,
)
from gpuscale_decider.core.replicas import count_pods
from gpuscale_decider.core.state import ScalerState, TimedValue


class Direction(Enum):
    UP = 1
    DOWN = -1

    @staticmethod
    def of(current: int, desired: int) -> Direction | None:
        if desired > current:
            return Direction.UP
        if desired < current:
            return Direction.DOWN
        return None

    @property
    def word(self) -> str:
        return "scale-up" if self is Direction.UP else "scale-down"


def rules_for(spec: GPUScalerSpec, direction: Direction) -> ScalingRules:
    return spec.scale_up if direction is Direction.UP else spec.scale_down


def _change_in_period(period_s: int, events: tuple[TimedValue, ...], now: float) -> int:
    """``getReplicasChangePerPeriod``: events strictly after the cutoff."""
    cutoff = now - period_s
    return sum(e.value for e in events if e.ts > cutoff)


def _proposal(start: int, policy: RatePolicy, direction: Direction) -> int:
    if policy.type == "Pods":
        return start + direction.value * policy.value
    if direction is Direction.UP:
        # rounded up, or a small target could never grow
        return math.ceil(start * (1 + policy.value / 100))
    return int(start * (1 - policy.value / 100))  # Go's int32(): towards zero


def rate_limit(
    current: int, rules: ScalingRules, state: ScalerState, now: float, direction: Direction
) -> tuple[int, str]:
    """The farthest count the rate policies allow now in ``direction``, and
    which policy said so. ``selectPolicy: Max`` takes the largest change (the
    highest count up, the lowest down); ``Min`` the smallest."""
    if rules.select_policy == "Disabled" or not rules.policies:
        return current, ""
    largest_change = rules.select_policy == "Max"
    pick = max if (direction is Direction.UP) == largest_change else min
    best: int | None = None
    best_text = ""
    for policy in rules.policies:
        added = _change_in_period(policy.period_seconds, state.scale_up_events, now)
        removed = _change_in_period(policy.period_seconds, state.scale_down_events, now)
        proposed = _proposal(current - added + removed, policy, direction)
        if best is None or pick(best, proposed) != best:
            best = proposed
            best_text = (
                f"{count_pods(policy.value)} per {policy.period_seconds} s"
                if policy.type == "Pods"
                else f"{policy.value}% per {policy.period_seconds} s"
            )
    return (current, "") if best is None else (best, best_text)


def stabilize(
    spec: GPUScalerSpec, current: int, desired: int, state: ScalerState, now: float
) -> tuple[int, tuple[TimedValue, ...]]:
    """``stabilizeRecommendationWithBehaviors``: the lowest recommendation of
    the scale-up window and the highest of the scale-down window bound the
    count. Returns it and the history to keep, with ``desired`` recorded.

    HPA overwrites one entry older than both windows; here such entries are
    dropped, and so is any entry that can never again be a window's min or
    max (equal to the new one, or out of the scale-up window and not above
    the new one), which changes no future result and keeps the state small.
    """
    up_cutoff = now - spec.scale_up.stabilization_window_seconds
    down_cutoff = now - spec.scale_down.stabilization_window_seconds
    up_rec = desired
    down_rec = desired
    kept: list[TimedValue] = []
    for rec in state.recommendations:
        in_up = rec.ts > up_cutoff
        in_down = rec.ts > down_cutoff
        if in_up and rec.value < up_rec:
            up_rec = rec.value
        if in_down and rec.value > down_rec:
            down_rec = rec.value
        if (in_up or in_down) and rec.value != desired and (in_up or rec.value > desired):
            kept.append(rec)
    stabilized = min(max(current, up_rec), down_rec)
    kept.append(TimedValue(now, desired))
    return stabilized, tuple(kept)


class Normalized(msgspec.Struct, frozen=True):
    """What ``normalizeDesiredReplicasWithBehaviors`` decided, and why."""

    desired: int
    stabilized: int
    able_to_scale: Condition
    scaling_limited: Condition
    steps: tuple[str, ...]  # reason phrases, in order
    limits: tuple[str, ...]  # the phrases of the rate/bound clamps only
    recommendations: tuple[TimedValue, ...]


def clamp_rate_and_bounds(
    spec: GPUScalerSpec, current: int, desired: int, state: ScalerState, now: float
) -> tuple[int, Condition, str]:
    """``convertDesiredReplicasWithBehaviorRate``: the count the rate policies
    and ``[minReplicas, maxReplicas]`` allow, the ScalingLimited condition,
    and the phrase for the reason ("" when nothing was clamped)."""
    direction = Direction.of(current, desired)
    if direction is None:
        return desired, NOT_LIMITED, ""
    limit, how = rate_limit(current, rules_for(spec, direction), state, now, direction)
    if direction is Direction.UP:
        limit = max(limit, current)  # no further scale-up until old events age out
        if spec.max_replicas > limit:
            allowed, reason = limit, Reason.SCALE_UP_LIMIT
            message = "the desired replica count is increasing faster than the maximum scale rate"
        else:
            allowed, reason = spec.max_replicas, Reason.TOO_MANY_REPLICAS
            message = "the desired replica count is more than the maximum replica count"
        clamped = desired > allowed
    else:
        limit = min(limit, current)
        if spec.min_replicas < limit:
            allowed, reason = limit, Reason.SCALE_DOWN_LIMIT
            message = "the desired replica count is decreasing faster than the maximum scale rate"
        else:
            allowed, reason = spec.min_replicas, Reason.TOO_FEW_REPLICAS
            message = "the desired replica count is less than the minimum replica count"
        clamped = desired < allowed
    if not clamped:
        return desired, NOT_LIMITED, ""
    if reason in (Reason.SCALE_UP_LIMIT, Reason.SCALE_DOWN_LIMIT):
        phrase = (
            f"{direction.word} limited to {how}: {allowed}"
            if how
            else f"{direction.word} disabled: keep {allowed}"
        )
    elif reason is Reason.TOO_MANY_REPLICAS:
        phrase = f"capped at maxReplicas {spec.max_replicas}"
    else:
        phrase = f"raised to minReplicas {spec.min_replicas}"
    return allowed, limited(True, reason, message), phrase


def cooldown(
    spec: GPUScalerSpec, current: int, desired: int, state: ScalerState, now: float
) -> tuple[int, Condition | None, str]:
    """gpuscale's ``cooldownSeconds``: no change in a direction until that long
    after the last one in the same direction."""
    direction = Direction.of(current, desired)
    if direction is None:
        return desired, None, ""
    last = state.last_scale_up if direction is Direction.UP else state.last_scale_down
    wait = rules_for(spec, direction).cooldown_seconds
    if last is None or now - last >= wait:
        return desired, None, ""
    reason = Reason.BACKOFF_UPSCALE if direction is Direction.UP else Reason.BACKOFF_DOWNSCALE
    condition = able(False, reason, f"the time since the previous {direction.word} is within its cooldown")
    phrase = (
        f"{direction.word} cooling down ({now - last:.0f} s since the last, cooldownSeconds {wait}): "
        f"keep {current}"
    )
    return current, condition, phrase


def normalize(
    spec: GPUScalerSpec, current: int, recommendation: int, state: ScalerState, now: float
) -> Normalized:
    """Stabilize, then rate policies and bounds, then the cooldown."""
    stabilized, history = stabilize(spec, current, recommendation, state, now)
    steps: list[str] = []
    able_to_scale = READY
    if stabilized != recommendation:
        if recommendation >= current:
            able_to_scale = able(
                True,
                Reason.SCALE_UP_STABILIZED,
                "recent recommendations were lower than current one, applying the lowest recent recommendation",
            )
            window = spec.scale_up.stabilization_window_seconds
            steps.append(f"lowest recommendation of the last {window} s: {stabilized}")
        else:
            able_to_scale = able(
                True,
                Reason.SCALE_DOWN_STABILIZED,
                "recent recommendations were higher than current one, applying the highest recent recommendation",
            )
            window = spec.scale_down.stabilization_window_seconds
            steps.append(f"held by the {window} s scale-down stabilization window at {stabilized}")
    desired, scaling_limited, clamp_phrase = clamp_rate_and_bounds(spec, current, stabilized, state, now)
    limits = (clamp_phrase,) if clamp_phrase else ()
    steps.extend(limits)
    desired, held, cool_phrase = cooldown(spec, current, desired, state, now)
    if held is not None:
        able_to_scale = held
        steps.append(cool_phrase)
    return Normalized(desired, stabilized, able_to_scale, scaling_limited, tuple(steps), limits, history)
