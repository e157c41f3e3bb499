"""The GPUScaler policy (docs/ARCHITECTURE.md#algorithm) as a typed, validated model: the
contract between a user and gpuscale, read by the decider (to decide) and
the actuator (to refuse what the policy does not allow).

:func:`parse_gpuscaler` takes the object as a plain map (from the API server
or a YAML file) and returns a :class:`GPUScaler`, or raises
:class:`PolicyError` listing every problem at once, each naming its field
(``spec.maxReplicas``, ``spec.behavior.scaleUp.policies[1].type``). Defaults
are HPA's (autoscaling/v2 ``HPAScalingRules`` defaults).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from typing import Any, Final, TypeVar

from gpuscale.timefmt import DURATION_EXAMPLES, parse_duration
from gpuscale.wire import DEFAULT_API_VERSION, MAX_REQUESTED_WINDOW_S, METRIC_NAMES, ScaleTargetRef

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
# Metrics that cannot read above their ceiling (%): where every pod is pinned there,
# the ratio understates demand (docs/ARCHITECTURE.md#algorithm). Memory is left out: a full framebuffer
# is an allocation (vLLM reserves 90 % at start), not load.
CEILINGS: Final = {"gpu_util": 100.0, "sm_active": 100.0, "sm_util": 100.0, "kv_cache_usage": 100.0}
# Pinned: at or above this share of the ceiling.
PINNED_SHARE: Final = 0.95


class NotReadyPods(StrEnum):
    """How a pod whose Ready condition is not True counts (``spec.notReadyPods``).

    HPA counts such a pod's value for a ``Pods`` metric (it applies readiness
    to CPU only). A GPU pod loading its model reports 0 % while it is not
    Ready, so gpuscale counts it as *missing* by default: at the target on the
    way down, as 0 on the way up (HPA's missing-pod rule)."""

    MISSING = "Missing"
    COUNTED = "Counted"


class Mode(StrEnum):
    """``spec.mode``. Active: gpuscale scales the target. Shadow: gpuscale
    evaluates the policy even while another controller owns the target and
    publishes what it would do (``gpuscale.v1.advice.…``), never a decision,
    so a team can compare before it switches."""

    ACTIVE = "Active"
    SHADOW = "Shadow"


E = TypeVar("E", bound=StrEnum)


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

    def target_of(self, metric: str) -> float | None:
        for m in self.metrics:
            if m.name == metric:
                return m.target
        return None


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


# --- parsing ---------------------------------------------------------------------


def _shown(value: Any) -> str:
    """A bad value as the problem quotes it: never longer than a line (it goes to a status)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit number"  # repr() of a huge int is itself refused
    text = (
        repr(value) if isinstance(value, str | bool | int | float) or value is None else type(value).__name__
    )
    return text if len(text) <= 40 else f"{text[:37]}..."


class _Collector:
    """Collects every problem so the user sees them all at once."""

    def __init__(self) -> None:
        self.problems: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.problems.append((path, message))

    def map(self, value: Any, path: str, *, required: bool = False) -> Mapping[str, Any] | None:
        if value is None:
            if required:
                self.add(path, "is required")
            return None
        if not isinstance(value, Mapping):
            self.add(path, f"must be a map, got {type(value).__name__}")
            return None
        return value

    def integer(
        self,
        m: Mapping[str, Any],
        key: str,
        path: str,
        default: int | None,
        *,
        lo: int | None = None,
        hi: int | None = None,
    ) -> int | None:
        value = m.get(key)
        where = f"{path}.{key}"
        if value is None:
            if default is None:
                self.add(where, "is required")
            return default
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(where, f"must be a whole number, got {_shown(value)}")
            return default
        if lo is not None and value < lo:
            self.add(where, f"must be >= {lo}, got {_shown(value)}")
            return default
        if hi is not None and value > hi:
            self.add(where, f"must be <= {hi}, got {_shown(value)}")
            return default
        return value

    def number(
        self,
        m: Mapping[str, Any],
        key: str,
        path: str,
        default: float | None,
        *,
        positive: bool = False,
        lo: float | None = None,
        hi: float | None = None,
    ) -> float | None:
        value = m.get(key)
        where = f"{path}.{key}"
        if value is None:
            if default is None:
                self.add(where, "is required")
            return default
        if isinstance(value, bool) or not isinstance(value, int | float):
            try:
                value = float(value) if isinstance(value, str) else None
            except ValueError:
                value = None
            if value is None:
                self.add(where, f"must be a number, got {_shown(m.get(key))}")
                return default
        try:
            f = float(value)
        except OverflowError:  # a whole number past float's range
            f = math.inf
        if not math.isfinite(f):
            self.add(where, f"must be finite, got {_shown(value)}")
            return default
        if positive and f <= 0:
            self.add(where, f"must be greater than 0, got {_shown(value)}")
            return default
        if lo is not None and f < lo:
            self.add(where, f"must be >= {lo:g}, got {_shown(value)}")
            return default
        if hi is not None and f > hi:
            self.add(where, f"must be <= {hi:g}, got {_shown(value)}")
            return default
        return f

    def duration(
        self, m: Mapping[str, Any], key: str, path: str, default: float, *, lo: float, hi: float
    ) -> float:
        value = m.get(key)
        where = f"{path}.{key}"
        if value is None:
            return default
        if isinstance(value, bool):
            self.add(where, f"must be a duration such as 30s, got {_shown(value)}")
            return default
        if isinstance(value, int | float):
            seconds = float(value) if not isinstance(value, int) or value.bit_length() <= 64 else math.inf
        elif isinstance(value, str) and len(value) > MAX_WINDOW_TEXT:
            self.add(where, f"must be at most {MAX_WINDOW_TEXT} characters, got {len(value)}")
            return default
        else:
            try:
                seconds = parse_duration(str(value))
            except ValueError:
                self.add(where, f"must be a duration such as {DURATION_EXAMPLES}, got {_shown(value)}")
                return default
        if seconds <= 0:
            self.add(where, f"must be greater than 0, got {_shown(value)}")
            return default
        if not lo <= seconds <= hi:  # inf and NaN too
            self.add(where, f"must be from {lo:g} s to {hi:g} s, got {_shown(value)}")
            return default
        return seconds

    def choice(self, m: Mapping[str, Any], key: str, path: str, default: E) -> E:
        """One value of ``default``'s enum, by its value."""
        raw = m.get(key, default.value)
        try:
            return type(default)(raw)
        except ValueError:
            choices = ", ".join(v.value for v in type(default))
            self.add(f"{path}.{key}", f"must be one of {choices}, got {_shown(raw)}")
            return default

    def string(
        self,
        m: Mapping[str, Any],
        key: str,
        path: str,
        default: str | None = None,
        *,
        max_length: int = MAX_NAME_LENGTH,
    ) -> str:
        value = m.get(key)
        where = f"{path}.{key}"
        if value is None:
            if default is None:
                self.add(where, "is required")
                return ""
            return default
        if not isinstance(value, str) or not value:
            self.add(where, f"must be a non-empty string, got {_shown(value)}")
            return default or ""
        if len(value) > max_length:
            self.add(where, f"must be at most {max_length} characters, got {len(value)}")
            return default or ""
        return value

    def items(self, m: Mapping[str, Any], key: str, path: str, *, max_items: int) -> list[Any] | None:
        """A list of at most ``max_items`` (None: left out, or not a list, reported)."""
        value = m.get(key)
        if value is None:
            return None
        if not isinstance(value, list):
            self.add(f"{path}.{key}", "must be a list")
            return None
        if len(value) > max_items:
            self.add(f"{path}.{key}", f"must hold at most {max_items} items, got {len(value)}")
            return None
        return value


def _rules(c: _Collector, raw: Any, path: str, default: ScalingRules) -> ScalingRules:
    m = c.map(raw, path)
    if m is None:
        return default
    window = c.integer(
        m,
        "stabilizationWindowSeconds",
        path,
        default.stabilization_window_seconds,
        lo=0,
        hi=MAX_STABILIZATION_WINDOW_S,
    )
    cooldown = c.integer(m, "cooldownSeconds", path, 0, lo=0, hi=MAX_COOLDOWN_S)
    select = m.get("selectPolicy", default.select_policy)
    if select not in SELECT_POLICIES:
        c.add(f"{path}.selectPolicy", f"must be one of {', '.join(SELECT_POLICIES)}, got {_shown(select)}")
        select = default.select_policy
    tolerance: float | None = None
    if m.get("tolerance") is not None:
        tolerance = c.number(m, "tolerance", path, None)
        if tolerance is not None and tolerance < 0:
            c.add(f"{path}.tolerance", f"must be >= 0, got {tolerance}")
            tolerance = None
    policies = default.policies
    raw_policies = c.items(m, "policies", path, max_items=MAX_RATE_POLICIES)
    if raw_policies is not None:
        if not raw_policies:
            c.add(f"{path}.policies", "must hold at least one policy (or be left out for the defaults)")
        else:
            parsed: list[RatePolicy] = []
            for i, rp in enumerate(raw_policies):
                ppath = f"{path}.policies[{i}]"
                pm = c.map(rp, ppath, required=True)
                if pm is None:
                    continue
                ptype = pm.get("type")
                if ptype not in POLICY_TYPES:
                    c.add(f"{ppath}.type", f"must be one of {', '.join(POLICY_TYPES)}, got {_shown(ptype)}")
                value = c.integer(pm, "value", ppath, None, lo=1, hi=MAX_POLICY_VALUE)
                period = c.integer(pm, "periodSeconds", ppath, None, lo=1, hi=MAX_PERIOD_S)
                if ptype in POLICY_TYPES and value is not None and period is not None:
                    parsed.append(RatePolicy(str(ptype), value, period))
            policies = tuple(parsed)
    return ScalingRules(
        stabilization_window_seconds=default.stabilization_window_seconds if window is None else window,
        policies=policies,
        select_policy=str(select),
        cooldown_seconds=cooldown or 0,
        tolerance=tolerance,
    )


def parse_gpuscaler(obj: Any) -> GPUScaler:
    """A GPUScaler from its map form, or PolicyError naming every bad field."""
    c = _Collector()
    root = c.map(obj, "object", required=True) or {}
    meta = c.map(root.get("metadata"), "metadata", required=True) or {}
    name = c.string(meta, "name", "metadata")
    namespace = c.string(meta, "namespace", "metadata", default="default")
    generation_raw = meta.get("generation", 0)
    generation = generation_raw if isinstance(generation_raw, int) else 0
    uid_raw = meta.get("uid", "")
    uid = uid_raw if isinstance(uid_raw, str) else ""
    kind = root.get("kind", KIND)
    if kind != KIND:
        c.add("kind", f"must be {KIND}, got {_shown(kind)}")
    spec = c.map(root.get("spec"), "spec", required=True) or {}

    ref_map = c.map(spec.get("scaleTargetRef"), "spec.scaleTargetRef", required=True) or {}
    ref = ScaleTargetRef(
        api_version=c.string(ref_map, "apiVersion", "spec.scaleTargetRef", default=DEFAULT_API_VERSION),
        kind=c.string(ref_map, "kind", "spec.scaleTargetRef"),
        name=c.string(ref_map, "name", "spec.scaleTargetRef"),
    )
    min_replicas = c.integer(spec, "minReplicas", "spec", 1, lo=1, hi=MAX_REPLICAS)
    max_replicas = c.integer(spec, "maxReplicas", "spec", None, lo=1, hi=MAX_REPLICAS)
    if min_replicas is not None and max_replicas is not None and max_replicas < min_replicas:
        c.add("spec.maxReplicas", f"must be >= spec.minReplicas ({min_replicas}), got {max_replicas}")

    metrics: list[MetricTarget] = []
    raw_metrics = spec.get("metrics")
    if not isinstance(raw_metrics, list) or not raw_metrics:
        c.add("spec.metrics", "must be a non-empty list of {name, target}")
    elif len(raw_metrics) > MAX_METRICS:
        c.add("spec.metrics", f"must hold at most {MAX_METRICS} items, got {len(raw_metrics)}")
    else:
        seen: set[str] = set()
        for i, rm in enumerate(raw_metrics):
            mpath = f"spec.metrics[{i}]"
            mm = c.map(rm, mpath, required=True)
            if mm is None:
                continue
            mname = mm.get("name")
            if mname not in METRIC_NAMES:
                c.add(f"{mpath}.name", f"must be one of {', '.join(METRIC_NAMES)}, got {_shown(mname)}")
            elif mname in seen:
                c.add(f"{mpath}.name", f"{mname} is listed twice")
            target = c.number(mm, "target", mpath, None, positive=True, lo=MIN_TARGET, hi=MAX_TARGET)
            if isinstance(mname, str) and mname in METRIC_NAMES and mname not in seen and target is not None:
                metrics.append(MetricTarget(mname, target))
            if isinstance(mname, str):
                seen.add(mname)

    window_s = c.duration(spec, "window", "spec", DEFAULT_WINDOW_S, lo=MIN_WINDOW_S, hi=MAX_WINDOW_S)
    tolerance = c.number(spec, "tolerance", "spec", DEFAULT_TOLERANCE)
    # As Kubernetes: any tolerance >= 0 (its own tests use 2.0); above 1 a
    # scale-down can never leave the band, which is the user's choice to make.
    if tolerance is not None and tolerance < 0:
        c.add("spec.tolerance", f"must be >= 0, got {tolerance}")
    behavior = c.map(spec.get("behavior"), "spec.behavior") or {}
    scale_up = _rules(c, behavior.get("scaleUp"), "spec.behavior.scaleUp", DEFAULT_SCALE_UP)
    scale_down = _rules(c, behavior.get("scaleDown"), "spec.behavior.scaleDown", DEFAULT_SCALE_DOWN)

    fallback: Fallback | None = None
    fb = c.map(spec.get("fallback"), "spec.fallback")
    if fb is not None:
        after = c.integer(fb, "afterSeconds", "spec.fallback", None, lo=1, hi=MAX_FALLBACK_AFTER_S)
        replicas = c.integer(fb, "replicas", "spec.fallback", None, lo=0, hi=MAX_REPLICAS)
        if replicas is not None and max_replicas is not None and replicas > max_replicas:
            c.add("spec.fallback.replicas", f"must be <= spec.maxReplicas ({max_replicas}), got {replicas}")
        if after is not None and replicas is not None:
            fallback = Fallback(float(after), replicas)
    paused = spec.get("paused", False)
    if not isinstance(paused, bool):
        c.add("spec.paused", f"must be true or false, got {_shown(paused)}")
        paused = False
    not_ready = c.choice(spec, "notReadyPods", "spec", NotReadyPods.MISSING)
    mode = c.choice(spec, "mode", "spec", Mode.ACTIVE)

    if c.problems or min_replicas is None or max_replicas is None or tolerance is None:
        raise PolicyError(c.problems or [("spec", "is incomplete")])
    return GPUScaler(
        namespace=namespace,
        name=name,
        generation=generation,
        uid=uid,
        spec=GPUScalerSpec(
            scale_target_ref=ref,
            min_replicas=min_replicas,
            max_replicas=max_replicas,
            metrics=tuple(metrics),
            window_s=window_s,
            tolerance=tolerance,
            scale_up=scale_up,
            scale_down=scale_down,
            fallback=fallback,
            paused=paused,
            not_ready_pods=not_ready,
            mode=mode,
        ),
    )


def object_identity(obj: Any) -> tuple[str, str]:
    """(namespace, name) of a possibly invalid object, for reporting it."""
    meta = obj.get("metadata") if isinstance(obj, Mapping) else None
    if not isinstance(meta, Mapping):
        return ("default", "<unnamed>")
    ns = meta.get("namespace")
    name = meta.get("name")
    return (
        ns if isinstance(ns, str) and ns else "default",
        name if isinstance(name, str) and name else "<unnamed>",
    )
