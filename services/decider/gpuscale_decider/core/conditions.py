"""The GPUScaler's conditions: HPA's three types and KEDA's summary ones, with typed reasons.

Purely computational. The reasons are HPA's where HPA has one
(``ScaleUpLimit``, ``TooFewReplicas``, ``ScaleDownStabilized``...), and
gpuscale's own where it adds a rule (cooldown, conflicts, invalid policies).
``Ready``, ``Paused`` and ``Fallback`` are KEDA's (a ScaledObject's READY,
PAUSED and FALLBACK columns); ``ScalingActive`` is the ACTIVE column.
docs/GPUSCALER.md says what to do about each reason (a test keeps it complete).
"""

from __future__ import annotations

from collections.abc import Iterator
from enum import StrEnum

import msgspec


class ConditionType(StrEnum):
    READY = "Ready"
    ABLE_TO_SCALE = "AbleToScale"
    SCALING_ACTIVE = "ScalingActive"
    SCALING_LIMITED = "ScalingLimited"
    PAUSED = "Paused"
    FALLBACK = "Fallback"


class Reason(StrEnum):
    # AbleToScale
    READY_FOR_NEW_SCALE = "ReadyForNewScale"
    SCALE_UP_STABILIZED = "ScaleUpStabilized"
    SCALE_DOWN_STABILIZED = "ScaleDownStabilized"
    BACKOFF_UPSCALE = "BackoffUpscale"
    BACKOFF_DOWNSCALE = "BackoffDownscale"
    FAILED_GET_SCALE = "FailedGetScale"
    CONFLICTING_CONTROLLER = "ConflictingController"
    INVALID_POLICY = "InvalidPolicy"
    WAITING_FOR_ACTUATOR = "WaitingForActuator"  # no longer set; kept to read statuses older deciders wrote
    FAILED_RESCALE = "FailedRescale"
    FAILED_EVALUATION = "FailedEvaluation"  # the decider failed on this GPUScaler (a bug or a fault)
    SHADOW_MODE = "ShadowMode"
    # ScalingActive
    VALID_METRIC_FOUND = "ValidMetricFound"
    FAILED_GET_GPU_METRICS = "FailedGetGPUMetrics"
    INVALID_SELECTOR = "InvalidSelector"
    SCALING_DISABLED = "ScalingDisabled"
    # ScalingLimited
    DESIRED_WITHIN_RANGE = "DesiredWithinRange"
    SCALE_UP_LIMIT = "ScaleUpLimit"
    SCALE_DOWN_LIMIT = "ScaleDownLimit"
    TOO_MANY_REPLICAS = "TooManyReplicas"
    TOO_FEW_REPLICAS = "TooFewReplicas"
    # Ready (False: AbleToScale's reason)
    GPUSCALER_READY = "GPUScalerReady"
    # Paused
    PAUSED_BY_SPEC = "PausedBySpec"
    NOT_PAUSED = "NotPaused"
    # Fallback
    FALLBACK_ACTIVE = "FallbackActive"
    FALLBACK_INACTIVE = "FallbackInactive"


class Condition(msgspec.Struct, frozen=True):
    type: ConditionType
    status: bool
    reason: Reason
    message: str


class Conditions(msgspec.Struct, frozen=True):
    """One of each type, in the order ``kubectl describe`` lists HPA's."""

    able_to_scale: Condition
    scaling_active: Condition
    scaling_limited: Condition

    def __iter__(self) -> Iterator[Condition]:
        return iter((self.able_to_scale, self.scaling_active, self.scaling_limited))

    def of(self, type_: ConditionType) -> Condition:
        for c in self:
            if c.type is type_:
                return c
        raise KeyError(type_)


def able(status: bool, reason: Reason, message: str) -> Condition:
    return Condition(ConditionType.ABLE_TO_SCALE, status, reason, message)


def active(status: bool, reason: Reason, message: str) -> Condition:
    return Condition(ConditionType.SCALING_ACTIVE, status, reason, message)


def limited(status: bool, reason: Reason, message: str) -> Condition:
    return Condition(ConditionType.SCALING_LIMITED, status, reason, message)


def summary(able_to_scale: Condition, paused: bool, fallback: bool) -> tuple[Condition, Condition, Condition]:
    """KEDA's summary conditions: ``Ready`` follows ``AbleToScale`` (False with
    its reason when gpuscale cannot scale the target), ``Paused`` follows
    ``spec.paused``, ``Fallback`` says the fallback rule is in force."""
    ready = (
        Condition(ConditionType.READY, False, able_to_scale.reason, able_to_scale.message)
        if able_to_scale.reason in NOT_READY
        else Condition(ConditionType.READY, True, Reason.GPUSCALER_READY, "gpuscale can scale the target")
    )
    pause = (
        Condition(
            ConditionType.PAUSED,
            True,
            Reason.PAUSED_BY_SPEC,
            "spec.paused is true: the replica count is held",
        )
        if paused
        else Condition(ConditionType.PAUSED, False, Reason.NOT_PAUSED, "spec.paused is false")
    )
    fall = (
        Condition(
            ConditionType.FALLBACK,
            True,
            Reason.FALLBACK_ACTIVE,
            "no fresh metrics for longer than fallback.afterSeconds: at least fallback.replicas are kept",
        )
        if fallback
        else Condition(
            ConditionType.FALLBACK, False, Reason.FALLBACK_INACTIVE, "the fallback is not in force"
        )
    )
    return ready, pause, fall


# AbleToScale False for these means gpuscale cannot act (Ready False); a cooldown
# (Backoff*) is a rule the user set, not a fault.
NOT_READY = frozenset(
    {
        Reason.CONFLICTING_CONTROLLER,
        Reason.FAILED_GET_SCALE,
        Reason.INVALID_POLICY,
        Reason.FAILED_RESCALE,
        Reason.FAILED_EVALUATION,
    }
)
# Deliberate states: ScalingActive False while paused or at 0 replicas, AbleToScale
# False during a cooldown or in shadow mode.
_DELIBERATE = frozenset(
    {
        Reason.SCALING_DISABLED.value,
        Reason.BACKOFF_UPSCALE.value,
        Reason.BACKOFF_DOWNSCALE.value,
        Reason.SHADOW_MODE.value,
    }
)


def is_trouble(type_: str, status: str, reason: str) -> bool:
    """Whether a condition in this state asks for attention (a Warning event)."""
    return (type_, status) in _TROUBLE and reason not in _DELIBERATE


_TROUBLE = frozenset(
    {
        (ConditionType.READY.value, "False"),
        (ConditionType.ABLE_TO_SCALE.value, "False"),
        (ConditionType.SCALING_ACTIVE.value, "False"),
        (ConditionType.FALLBACK.value, "True"),
    }
)


READY = able(True, Reason.READY_FOR_NEW_SCALE, "recommended size matches current size")
NOT_LIMITED = limited(False, Reason.DESIRED_WITHIN_RANGE, "the desired count is within the acceptable range")
