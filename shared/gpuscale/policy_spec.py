"""The GPUScaler policy's typed model (docs/ARCHITECTURE.md#algorithm): its API names, bounds, defaults and spec types.

:mod:`gpuscale.policy` parses an object into these. Purely computational: no I/O, no clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Final

from gpuscale.wire import MAX_REQUESTED_WINDOW_S, ScaleTargetRef

API_GROUP: Final = "gpuscale.io"
API_VERSION: Final = "v1alpha1"
KIND: Final = "GPUScaler"
PLURAL: Final = "gpuscalers"

POLICY_TYPES: Final = ("Pods", "Percent")
SELECT_POLICIES: Final = ("Max", "Min", "Disabled")
# HPA's own bounds (k8s.io/kubernetes/pkg/apis/autoscaling/validation).
MAX_STABILIZATION_WINDOW_S: Final = 3600
MAX_PERIOD_S: Final = 1800
# The same bounds in deploy/cluster/crd-gpuscaler.yaml (tests/deploy/test_deploy_gpuscaler_doc.py
# keeps them in step). Replica counts and rate values are int32 in the scale subresource and HPA.
MAX_REPLICAS: Final = 2**31 - 1
MAX_POLICY_VALUE: Final = 2**31 - 1
MAX_RATE_POLICIES: Final = 16  # per direction: each evaluation walks them all
MAX_METRICS: Final = 16
MAX_COOLDOWN_S: Final = MAX_STABILIZATION_WINDOW_S
MAX_FALLBACK_AFTER_S: Final = 86_400
# Targets are computed on in milli-units, as HPA's quantities (MilliValue): below one
# milli-unit nothing is left to divide by; up to 1e15 the milli-value stays well inside int64.
MIN_TARGET: Final = 0.001
MAX_TARGET: Final = 1e15
# The window is told to the aggregators in a WindowRequest, whose contract holds these.
MIN_WINDOW_S: Final = 0.001
MAX_WINDOW_S: Final = MAX_REQUESTED_WINDOW_S
MAX_WINDOW_TEXT: Final = 32
MAX_NAME_LENGTH: Final = 253  # a Kubernetes object name (DNS subdomain), an apiVersion
DEFAULT_TOLERANCE: Final = 0.1
DEFAULT_WINDOW_S: Final = 30.0


class NotReadyPods(StrEnum):
    """How a pod whose Ready condition is not True counts (``spec.notReadyPods``).

    A GPU pod loading its model reports 0 %, so by default it counts as missing (HPA's rule)."""

    MISSING = "Missing"
    COUNTED = "Counted"


class Mode(StrEnum):
    """``spec.mode``. Active: gpuscale scales the target. Shadow: gpuscale
    evaluates the policy even while another controller owns the target and
    publishes what it would do (``gpuscale.v1.advice.…``), never a decision,
    so a team can compare before it switches."""

    ACTIVE = "Active"
    SHADOW = "Shadow"


class PolicyError(ValueError):
    """An invalid GPUScaler. ``problems`` holds (field path, message) pairs."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        super().__init__(self.summary())

    def summary(self) -> str:
        return "; ".join(f"{path}: {msg}" for path, msg in self.problems)

    @property
    def fields(self) -> list[str]:
        return [path for path, _ in self.problems]


@dataclass(frozen=True, slots=True)
class MetricTarget:
    name: str
    target: float  # average per pod, in the metric's unit


@dataclass(frozen=True, slots=True)
class RatePolicy:
    type: str  # Pods | Percent
    value: int
    period_seconds: int


@dataclass(frozen=True, slots=True)
class ScalingRules:
    """One direction's behaviour (HPAScalingRules plus cooldown and tolerance)."""

    stabilization_window_seconds: int
    policies: tuple[RatePolicy, ...]
    select_policy: str  # Max | Min | Disabled
    cooldown_seconds: int = 0
    tolerance: float | None = None  # None: the top-level tolerance


@dataclass(frozen=True, slots=True)
class Fallback:
    after_seconds: float
    replicas: int


@dataclass(frozen=True, slots=True)
class GPUScalerSpec:
    scale_target_ref: ScaleTargetRef
    min_replicas: int
    max_replicas: int
    metrics: tuple[MetricTarget, ...]
    window_s: float
    tolerance: float
    scale_up: ScalingRules
    scale_down: ScalingRules
    fallback: Fallback | None = None
    paused: bool = False
    not_ready_pods: NotReadyPods = NotReadyPods.MISSING
    mode: Mode = Mode.ACTIVE

    @property
    def scale_up_tolerance(self) -> float:
        return self.tolerance if self.scale_up.tolerance is None else self.scale_up.tolerance

    @property
    def scale_down_tolerance(self) -> float:
        return self.tolerance if self.scale_down.tolerance is None else self.scale_down.tolerance


@dataclass(frozen=True, slots=True)
class GPUScaler:
    namespace: str
    name: str
    spec: GPUScalerSpec
    generation: int = 0
    uid: str = ""  # the object's metadata.uid: its Events name it

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


# HPA's defaults (autoscaling/v2 GenerateHPAScaleUpRules / ...ScaleDownRules).
DEFAULT_SCALE_UP: Final = ScalingRules(
    stabilization_window_seconds=0,
    policies=(RatePolicy("Percent", 100, 15), RatePolicy("Pods", 4, 15)),
    select_policy="Max",
)
DEFAULT_SCALE_DOWN: Final = ScalingRules(
    stabilization_window_seconds=300,
    policies=(RatePolicy("Percent", 100, 15),),
    select_policy="Max",
)


# Below this a product's few ulps of noise are far less than a milli-unit; above, Decimal.
_EXACT_FLOAT: Final = float(2**48)


def milli_value(value: float) -> int:
    """``value`` in milli-units rounded up, as Kubernetes' ``Quantity.MilliValue()``
    (5e-10 is 1m, never 0); at most :data:`MAX_TARGET`'s. A product within a few ulps
    above a whole number is that number: binary noise (0.07 x 1000 = 70.00000000000001)
    is no fraction anyone wrote."""
    if not value < MAX_TARGET:  # NaN too: the contract bounds some values only by "finite"
        value = MAX_TARGET
    elif value < -MAX_TARGET:
        value = -MAX_TARGET
    scaled = value * 1000.0
    if not -_EXACT_FLOAT < scaled < _EXACT_FLOAT:
        return math.ceil(Decimal(repr(value)) * 1000)
    whole = math.ceil(scaled)
    if whole == scaled or scaled - (whole - 1) > 4.0 * math.ulp(scaled):
        return whole
    return whole - 1
