"""The GPUScaler policy (docs/ARCHITECTURE.md#algorithm) as a typed, validated model.

:func:`parse_gpuscaler` reports every problem at once, each naming its field; defaults are HPA's."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import StrEnum
from typing import Any, TypeVar

from gpuscale.catalog import METRIC_NAMES

# The model lives in policy_spec; callers import it, with its parser, from here.
from gpuscale.policy_spec import API_GROUP as API_GROUP
from gpuscale.policy_spec import API_VERSION as API_VERSION
from gpuscale.policy_spec import DEFAULT_SCALE_DOWN as DEFAULT_SCALE_DOWN
from gpuscale.policy_spec import DEFAULT_SCALE_UP as DEFAULT_SCALE_UP
from gpuscale.policy_spec import DEFAULT_TOLERANCE as DEFAULT_TOLERANCE
from gpuscale.policy_spec import DEFAULT_WINDOW_S as DEFAULT_WINDOW_S
from gpuscale.policy_spec import KIND as KIND
from gpuscale.policy_spec import MAX_COOLDOWN_S as MAX_COOLDOWN_S
from gpuscale.policy_spec import MAX_FALLBACK_AFTER_S as MAX_FALLBACK_AFTER_S
from gpuscale.policy_spec import MAX_METRICS as MAX_METRICS
from gpuscale.policy_spec import MAX_NAME_LENGTH as MAX_NAME_LENGTH
from gpuscale.policy_spec import MAX_PERIOD_S as MAX_PERIOD_S
from gpuscale.policy_spec import MAX_POLICY_VALUE as MAX_POLICY_VALUE
from gpuscale.policy_spec import MAX_RATE_POLICIES as MAX_RATE_POLICIES
from gpuscale.policy_spec import MAX_REPLICAS as MAX_REPLICAS
from gpuscale.policy_spec import MAX_STABILIZATION_WINDOW_S as MAX_STABILIZATION_WINDOW_S
from gpuscale.policy_spec import MAX_TARGET as MAX_TARGET
from gpuscale.policy_spec import MAX_WINDOW_S as MAX_WINDOW_S
from gpuscale.policy_spec import MAX_WINDOW_TEXT as MAX_WINDOW_TEXT
from gpuscale.policy_spec import MIN_TARGET as MIN_TARGET
from gpuscale.policy_spec import MIN_WINDOW_S as MIN_WINDOW_S
from gpuscale.policy_spec import PLURAL as PLURAL
from gpuscale.policy_spec import POLICY_TYPES as POLICY_TYPES
from gpuscale.policy_spec import SELECT_POLICIES as SELECT_POLICIES
from gpuscale.policy_spec import Fallback as Fallback
from gpuscale.policy_spec import GPUScaler as GPUScaler
from gpuscale.policy_spec import GPUScalerSpec as GPUScalerSpec
from gpuscale.policy_spec import MetricTarget as MetricTarget
from gpuscale.policy_spec import Mode as Mode
from gpuscale.policy_spec import NotReadyPods as NotReadyPods
from gpuscale.policy_spec import PolicyError as PolicyError
from gpuscale.policy_spec import RatePolicy as RatePolicy
from gpuscale.policy_spec import ScalingRules as ScalingRules
from gpuscale.policy_spec import milli_value as milli_value
from gpuscale.timefmt import DURATION_EXAMPLES, parse_duration
from gpuscale.wire import DEFAULT_API_VERSION, ScaleTargetRef

E = TypeVar("E", bound=StrEnum)


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
