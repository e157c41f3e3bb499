"""A conversion's result and the pieces HPA and KEDA sources share: the target, the behavior, the metric, the GPUScaler. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuscale_kedascaler.core.query import (
    QueryError,
    ValueKind,
    parse_external_metric_name,
)

from . import signals
from .readers import as_int, as_map, clean, flow, fmt, identity, parse_quantity

GPUSCALER_API_VERSION: Final = "gpuscale.io/v1alpha1"
CONVERTED_FROM: Final = "gpuscale.io/converted-from"
TARGET_KINDS: Final = ("Deployment", "StatefulSet")
HPA_VERSIONS: Final = ("autoscaling/v2", "autoscaling/v2beta2", "autoscaling/v2beta1", "autoscaling/v1")
KEDA_API_PREFIX: Final = "keda.sh/"
# KEDA's defaults (keda.sh/v1alpha1 ScaledObject).
KEDA_MIN_REPLICAS: Final = 0
KEDA_MAX_REPLICAS: Final = 100
KEDA_POLLING_INTERVAL_S: Final = 30
KEDA_PAUSED: Final = "autoscaling.keda.sh/paused"
KEDA_PAUSED_REPLICAS: Final = "autoscaling.keda.sh/paused-replicas"
KEDA_PAUSED_SCALE_IN: Final = "autoscaling.keda.sh/paused-scale-in"
KEDA_PAUSED_SCALE_OUT: Final = "autoscaling.keda.sh/paused-scale-out"
# The bounds the GPUScaler CRD and the decider's parser enforce (HPA's own).
MAX_STABILIZATION_S: Final = 3600
MAX_PERIOD_S: Final = 1800
PROMETHEUS_CONNECTION_KEYS: Final = frozenset(
    {
        "serverAddress",
        "metricName",
        "namespace",
        "customHeaders",
        "ignoreNullValues",
        "unsafeSsl",
        "cortexOrgID",
        "authModes",
        "queryParameters",
        "timeout",
    }
)


@dataclass
class Conversion:
    source: str  # "HorizontalPodAutoscaler default/gpu-hpa (autoscaling/v2)"
    gpuscaler: dict[str, Any] | None = None
    mapped: list[str] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)
    error: str | None = None
    autoscaler: bool = True  # False: a document that is neither an HPA nor a ScaledObject

    @property
    def converted(self) -> bool:
        return self.gpuscaler is not None


@dataclass
class Metrics:
    """gpuscale metric -> target, keeping the lowest when several sources name one
    (HPA scales to the largest recommendation, which the lowest target gives)."""

    targets: dict[str, float] = field(default_factory=dict)

    def add(self, metric: str, target: float, origin: str, conv: Conversion) -> None:
        previous = self.targets.get(metric)
        if previous is None:
            self.targets[metric] = target
            return
        kept = min(previous, target)
        self.targets[metric] = kept
        conv.unmapped.append(
            f"{origin}: {metric} is already a metric here (target {fmt(previous)}); "
            f"kept the lower target {fmt(kept)}, which scales to the larger count as HPA would"
        )

    def as_list(self) -> list[dict[str, Any]]:
        return [{"name": m, "target": clean(t)} for m, t in self.targets.items()]


# --- shared pieces --------------------------------------------------------------------------------


def target_ref(raw: Any, conv: Conversion, *, keda: bool) -> dict[str, str] | None:
    ref = as_map(raw)
    name = ref.get("name")
    if not isinstance(name, str) or not name:
        conv.error = "scaleTargetRef.name is missing"
        return None
    kind = ref.get("kind") or ("Deployment" if keda else None)
    if kind not in TARGET_KINDS:
        conv.error = (
            f"scaleTargetRef.kind {kind!r}: a GPUScaler scales a {' or '.join(TARGET_KINDS)} "
            "(through its scale subresource)"
        )
        return None
    api_version = ref.get("apiVersion") or "apps/v1"
    if api_version != "apps/v1":
        conv.mapped.append(
            f"scaleTargetRef.apiVersion {api_version!r} -> apps/v1 (the only API group of a {kind} today)"
        )
    if keda and ref.get("envSourceContainerName"):
        conv.mapped.append("scaleTargetRef.envSourceContainerName: not needed (gpuscale reads no env vars)")
    return {"apiVersion": "apps/v1", "kind": str(kind), "name": name}


def _rules(raw: Any, where: str, conv: Conversion) -> dict[str, Any] | None:
    """One direction of HPA behavior (HPAScalingRules), checked against the GPUScaler's bounds."""
    rules = as_map(raw)
    if not rules:
        if raw is not None:
            conv.unmapped.append(f"{where}: not a map, left out (HPA's defaults apply)")
        return None
    out: dict[str, Any] = {}
    window = rules.get("stabilizationWindowSeconds")
    if window is not None:
        w = as_int(window)
        if w is None or not 0 <= w <= MAX_STABILIZATION_S:
            conv.unmapped.append(
                f"{where}.stabilizationWindowSeconds {window!r}: must be 0..{MAX_STABILIZATION_S}, left out"
            )
        else:
            out["stabilizationWindowSeconds"] = w
    select = rules.get("selectPolicy")
    if select is not None:
        if select in ("Max", "Min", "Disabled"):
            out["selectPolicy"] = select
        else:
            conv.unmapped.append(f"{where}.selectPolicy {select!r}: must be Max, Min or Disabled, left out")
    tolerance = rules.get("tolerance")
    if tolerance is not None:
        try:
            t = parse_quantity(tolerance)
            if t < 0:
                raise ValueError("negative")
            out["tolerance"] = clean(t)
        except ValueError:
            conv.unmapped.append(f"{where}.tolerance {tolerance!r}: not a quantity >= 0, left out")
    policies = rules.get("policies")
    if policies is not None:
        kept: list[dict[str, Any]] = []
        for i, p in enumerate(policies if isinstance(policies, list) else []):
            pm = as_map(p)
            ptype, value, period = pm.get("type"), as_int(pm.get("value")), as_int(pm.get("periodSeconds"))
            if (
                ptype in ("Pods", "Percent")
                and value is not None
                and value >= 1
                and period is not None
                and 1 <= period <= MAX_PERIOD_S
            ):
                kept.append({"type": ptype, "value": value, "periodSeconds": period})
            else:
                conv.unmapped.append(f"{where}.policies[{i}] {flow(pm)}: not a valid rate policy, left out")
        if kept:
            out["policies"] = kept
        elif not isinstance(policies, list) or policies:
            conv.unmapped.append(f"{where}.policies: none usable, HPA's default policies apply")
    for key in rules:
        if key not in ("stabilizationWindowSeconds", "selectPolicy", "tolerance", "policies"):
            conv.unmapped.append(f"{where}.{key}: not an HPA scaling rule, left out")
    return out


def read_behavior(raw: Any, where: str, conv: Conversion) -> dict[str, Any]:
    behavior = as_map(raw)
    out: dict[str, Any] = {}
    for direction in ("scaleUp", "scaleDown"):
        if direction in behavior:
            rules = _rules(behavior[direction], f"{where}.{direction}", conv)
            if rules:
                out[direction] = rules
    for key in behavior:
        if key not in ("scaleUp", "scaleDown"):
            conv.unmapped.append(f"{where}.{key}: not part of HPA behavior, left out")
    if out:
        conv.mapped.append(f"{where} -> spec.behavior (same fields, same meaning)")
    return out


def _gpuscaler(
    obj: Mapping[str, Any],
    ref: dict[str, str],
    min_replicas: int,
    max_replicas: int,
    metrics: Metrics,
    extra: dict[str, Any],
) -> dict[str, Any]:
    name, namespace = identity(obj)
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["annotations"] = {CONVERTED_FROM: f"{obj.get('kind')}/{name}"}
    spec: dict[str, Any] = {
        "scaleTargetRef": ref,
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "metrics": metrics.as_list(),
    }
    spec.update(extra)
    return {"apiVersion": GPUSCALER_API_VERSION, "kind": "GPUScaler", "metadata": meta, "spec": spec}


def source_metric(
    name: str, target: float, origin: str, conv: Conversion, metrics: Metrics, *, how: str
) -> None:
    """An adapter or DCGM metric name and its per-pod target, into the metrics."""
    try:
        metric, value = parse_external_metric_name(name)
    except QueryError:
        pass
    else:  # gpuscale's own external metric (gpuscale keda-scaler's external metrics API)
        conv.mapped.append(f"{origin}: {name} {how} {fmt(target)} -> {metric} target {fmt(target)}")
        if (value is ValueKind.TOTAL) != (how == "average value"):
            conv.unmapped.append(
                f"{origin}: {name} pairs with a target of type "
                f"{'AverageValue' if value is ValueKind.TOTAL else 'Value'}; with the other type HPA "
                "did not hold the per-pod average at the target"
            )
        metrics.add(metric, target, origin, conv)
        return
    source = signals.lookup(name)
    if source is None:
        conv.unmapped.append(f"{origin}: {name}: {signals.why_unmappable(name)}; not carried over")
        return
    converted = target / source.per_unit
    unit_note = "" if source.per_unit == 1 else f" (from {source.unit})"
    conv.mapped.append(
        f"{origin}: {name} {how} {fmt(target)} -> {source.metric} target {fmt(converted)}{unit_note}"
    )
    if name.endswith("_over_time"):
        conv.unmapped.append(
            f"{origin}: {name} was averaged over the adapter rule's own window (3m in the usual "
            "rule); the GPUScaler averages over spec.window (30s by default): set it to match if "
            "you relied on that smoothing"
        )
    if converted <= 0:
        conv.unmapped.append(f"{origin}: target {fmt(target)} is not above 0; not carried over")
        return
    metrics.add(source.metric, converted, origin, conv)


HPA_FIELDS: Final = frozenset(
    {"scaleTargetRef", "minReplicas", "maxReplicas", "metrics", "behavior", "targetCPUUtilizationPercentage"}
)
SCALED_OBJECT_FIELDS: Final = frozenset(
    {
        "scaleTargetRef",
        "minReplicaCount",
        "maxReplicaCount",
        "pollingInterval",
        "cooldownPeriod",
        "initialCooldownPeriod",
        "idleReplicaCount",
        "triggers",
        "advanced",
        "fallback",
    }
)


def unknown_fields(spec: Mapping[str, Any], known: frozenset[str], what: str, conv: Conversion) -> None:
    for key in spec:
        if key not in known:
            conv.unmapped.append(f"spec.{key}: not {what} field gpuscale knows; not carried over")


def finish(
    conv: Conversion,
    obj: Mapping[str, Any],
    ref: dict[str, str] | None,
    min_replicas: int,
    max_replicas: int | None,
    metrics: Metrics,
    extra: dict[str, Any],
    max_field: str,
) -> None:
    """The GPUScaler, when nothing stands in the way."""
    if not metrics.targets and conv.error is None:
        conv.error = "no GPU metric to scale on (see the notes)"
    if conv.error is not None or ref is None or max_replicas is None:
        return
    if max_replicas < min_replicas:
        conv.error = f"{max_field} {max_replicas} is below the minimum of {min_replicas}"
        return
    conv.mapped.insert(
        0, f"scaleTargetRef {ref['kind']}/{ref['name']}, replicas {min_replicas}..{max_replicas}"
    )
    conv.gpuscaler = _gpuscaler(obj, ref, min_replicas, max_replicas, metrics, extra)
