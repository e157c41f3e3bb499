"""The GPUScaler's conditions: HPA's three types, with typed reasons.

Purely computational. The reasons are HPA's where HPA has one
(``ScaleUpLimit``, ``TooFewReplicas``, ``ScaleDownStabilized``...), and
gpuscale's own where it adds a rule (cooldown, conflicts, invalid policies).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum


class ConditionType(StrEnum):
    ABLE_TO_SCALE = "AbleToScale"
    SCALING_ACTIVE = "ScalingActive"
    SCALING_LIMITED = "ScalingLimited"


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
    WAITING_FOR_ACTUATOR = "WaitingForActuator"
    FAILED_RESCALE = "FailedRescale"
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


@dataclass(frozen=True, slots=True)
class Condition:
    type: ConditionType
    status: bool
    reason: Reason
    message: str


@dataclass(frozen=True, slots=True)
class Conditions:
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


READY = able(True, Reason.READY_FOR_NEW_SCALE, "recommended size matches current size")
NOT_LIMITED = limited(False, Reason.DESIRED_WITHIN_RANGE, "the desired count is within the acceptable range")
