"""HPA and KEDA ScaledObject objects in, GPUScaler objects and explanations out.

Pure: maps in (as YAML parsed them), :class:`Conversion` values out. Each
conversion says what was carried over and how (``mapped``) and what was not
(``unmapped``: the caller prints those as YAML comments AND on stderr, so
nothing is dropped silently). A source that cannot become a GPUScaler at all
(no GPU metric, a target kind gpuscale cannot scale) has ``error`` set.

Readers: autoscaling/v2, v2beta2 and v2beta1 HorizontalPodAutoscalers
(autoscaling/v1 has only CPU), keda.sh/v1alpha1 ScaledObjects with
``prometheus`` triggers (queries recognised by :mod:`.signals`) and
``external``/``external-push`` triggers aimed at ``gpuscale keda-scaler``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gpuscale_kedascaler.core.query import (
    QueryError,
    ValueKind,
    parse_external_metric_name,
    parse_scaler_metadata,
)

from . import signals

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
class _Metrics:
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
            f"{origin}: {metric} is already a metric here (target {_fmt(previous)}); "
            f"kept the lower target {_fmt(kept)}, which scales to the larger count as HPA would"
        )

    def as_list(self) -> list[dict[str, Any]]:
        return [{"name": m, "target": _clean(t)} for m, t in self.targets.items()]


# --- small readers ------------------------------------------------------------------------------------

_QUANTITY = re.compile(
    r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$"
)
_SUFFIX: Final = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
    "Ki": 2.0**10,
    "Mi": 2.0**20,
    "Gi": 2.0**30,
    "Ti": 2.0**40,
    "Pi": 2.0**50,
    "Ei": 2.0**60,
}


_PLAIN = re.compile(r"[A-Za-z0-9_./-]+")


def flow(value: Any) -> str:
    """A value as the user wrote it in YAML (flow style), never a Python repr in a note."""
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{flow(k)}: {flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(flow(v) for v in value) + "]"
    if isinstance(value, str):
        return value if _PLAIN.fullmatch(value) else '"' + value.replace('"', '\\"') + '"'
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity (``20``, ``"500m"``, ``"2Gi"``, ``1e3``) as a float, or ValueError."""
    if isinstance(value, bool):
        raise ValueError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        number = float(value)
    else:
        m = _QUANTITY.match(str(value).strip())
        if m is None:
            raise ValueError(f"{value!r} is not a quantity")
        number = float(m.group(1))
        try:
            if m.group(2):
                number *= 10.0 ** int(m.group(2)[1:])
            elif m.group(3):
                number *= _SUFFIX[m.group(3)]
        except OverflowError:
            raise ValueError(f"{value!r} is not finite") from None
    if not math.isfinite(number):
        raise ValueError(f"{value!r} is not finite")
    return number


def _fmt(value: float) -> str:
    return f"{value:g}"


def _clean(value: float) -> int | float:
    """Whole numbers as ints (``target: 70``, not ``70.0`` or ``70.00000000000001`` from 0.7 / 0.01);
    others with the float noise of unit conversions rounded away (12 significant digits)."""
    whole = round(value)
    if abs(value - whole) <= 1e-9 * max(1.0, abs(value)):
        return int(whole)
    return float(f"{value:.12g}")


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return None


def _identity(obj: Mapping[str, Any]) -> tuple[str, str | None]:
    meta = _map(obj.get("metadata"))
    name = meta.get("name")
    ns = meta.get("namespace")
    return (
        name if isinstance(name, str) and name else "<unnamed>",
        ns if isinstance(ns, str) and ns else None,
    )


def _source(obj: Mapping[str, Any]) -> str:
    name, ns = _identity(obj)
    where = f"{ns}/{name}" if ns else name
    return f"{obj.get('kind')} {where} ({obj.get('apiVersion')})"


# --- shared pieces --------------------------------------------------------------------------------


def _target_ref(raw: Any, conv: Conversion, *, keda: bool) -> dict[str, str] | None:
    ref = _map(raw)
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
    rules = _map(raw)
    if not rules:
        if raw is not None:
            conv.unmapped.append(f"{where}: not a map, left out (HPA's defaults apply)")
        return None
    out: dict[str, Any] = {}
    window = rules.get("stabilizationWindowSeconds")
    if window is not None:
        w = _int(window)
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
            out["tolerance"] = _clean(t)
        except ValueError:
            conv.unmapped.append(f"{where}.tolerance {tolerance!r}: not a quantity >= 0, left out")
    policies = rules.get("policies")
    if policies is not None:
        kept: list[dict[str, Any]] = []
        for i, p in enumerate(policies if isinstance(policies, list) else []):
            pm = _map(p)
            ptype, value, period = pm.get("type"), _int(pm.get("value")), _int(pm.get("periodSeconds"))
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


def _behavior(raw: Any, where: str, conv: Conversion) -> dict[str, Any]:
    behavior = _map(raw)
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
    metrics: _Metrics,
    extra: dict[str, Any],
) -> dict[str, Any]:
    name, namespace = _identity(obj)
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


def _source_metric(
    name: str, target: float, origin: str, conv: Conversion, metrics: _Metrics, *, how: str
) -> None:
    """An adapter or DCGM metric name and its per-pod target, into the metrics."""
    try:
        metric, value = parse_external_metric_name(name)
    except QueryError:
        pass
    else:  # gpuscale's own external metric (gpuscale keda-scaler's external metrics API)
        conv.mapped.append(f"{origin}: {name} {how} {_fmt(target)} -> {metric} target {_fmt(target)}")
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
        f"{origin}: {name} {how} {_fmt(target)} -> {source.metric} target {_fmt(converted)}{unit_note}"
    )
    if name.endswith("_over_time"):
        conv.unmapped.append(
            f"{origin}: {name} was averaged over the adapter rule's own window (3m in the usual "
            "rule); the GPUScaler averages over spec.window (30s by default): set it to match if "
            "you relied on that smoothing"
        )
    if converted <= 0:
        conv.unmapped.append(f"{origin}: target {_fmt(target)} is not above 0; not carried over")
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


def _unknown_fields(spec: Mapping[str, Any], known: frozenset[str], what: str, conv: Conversion) -> None:
    for key in spec:
        if key not in known:
            conv.unmapped.append(f"spec.{key}: not {what} field gpuscale knows; not carried over")


def _finish(
    conv: Conversion,
    obj: Mapping[str, Any],
    ref: dict[str, str] | None,
    min_replicas: int,
    max_replicas: int | None,
    metrics: _Metrics,
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


# --- HorizontalPodAutoscaler -----------------------------------------------------------------------


def _hpa_metric(i: int, raw: Any, version: str, conv: Conversion, metrics: _Metrics) -> None:
    origin = f"spec.metrics[{i}]"
    m = _map(raw)
    mtype = m.get("type")
    if mtype in ("Resource", "ContainerResource"):
        body = _map(m.get("resource") or m.get("containerResource"))
        conv.unmapped.append(
            f"{origin}: {mtype} {body.get('name', '?')}: gpuscale scales on GPU metrics only; "
            "not carried over"
        )
        return
    if mtype == "Object":
        conv.unmapped.append(f"{origin}: Object metrics describe another object; not carried over")
        return
    if mtype not in ("Pods", "External"):
        conv.unmapped.append(f"{origin}: metric type {mtype!r} is not understood; not carried over")
        return
    body = _map(m.get("pods" if mtype == "Pods" else "external"))
    kind: Any
    if version == "autoscaling/v2beta1":
        name = body.get("metricName")
        selector = body.get("selector") if mtype == "Pods" else body.get("metricSelector")
        if mtype == "Pods" or body.get("targetAverageValue") is not None:
            kind, raw_target = "AverageValue", body.get("targetAverageValue")
        else:
            kind, raw_target = "Value", body.get("targetValue")
    else:
        metric_id = _map(body.get("metric"))
        name, selector = metric_id.get("name"), metric_id.get("selector")
        target = _map(body.get("target"))
        kind = target.get("type")
        raw_target = target.get("averageValue") if kind == "AverageValue" else target.get("value")
        if kind == "Utilization":
            raw_target = target.get("averageValue", target.get("averageUtilization"))
            conv.unmapped.append(
                f"{origin}: target type Utilization is only valid for Resource metrics (the API server "
                f"rejects it for {mtype} metrics); its number was read as a per-pod average value"
            )
            kind = "AverageValue"
    if not isinstance(name, str) or not name:
        conv.unmapped.append(f"{origin}: the metric has no name; not carried over")
        return
    try:
        value = parse_quantity(raw_target)
    except ValueError:
        conv.unmapped.append(f"{origin}: {name}: target {raw_target!r} is not a quantity; not carried over")
        return
    if selector:
        conv.unmapped.append(
            f"{origin}: {name}: selector {flow(selector)} left out: the GPUScaler measures the pods of its "
            "scaleTargetRef (the Deployment's own selector)"
        )
    how = "average value" if kind == "AverageValue" else "value"
    if mtype == "External":
        if kind == "Value":
            conv.mapped.append(
                f"{origin}: External {name} of type Value: HPA scaled by replicas × value / target; "
                "carried over as a per-pod average (right when the adapter averages over the pods)"
            )
        else:
            conv.mapped.append(
                f"{origin}: External {name} of type AverageValue: HPA divided the value by the "
                "replicas; carried over as a per-pod average (right when the adapter sums over the pods)"
            )
    _source_metric(name, value, origin, conv, metrics, how=how)


def convert_hpa(obj: Mapping[str, Any]) -> Conversion:
    conv = Conversion(_source(obj))
    version = str(obj.get("apiVersion"))
    spec = _map(obj.get("spec"))
    if not spec:
        conv.error = "spec is missing"
        return conv
    ref = _target_ref(spec.get("scaleTargetRef"), conv, keda=False)
    min_replicas = _int(spec.get("minReplicas", 1))
    if min_replicas is None or min_replicas < 1:
        conv.unmapped.append(
            f"minReplicas {spec.get('minReplicas')!r} -> 1: a GPUScaler keeps at least one replica "
            "(no scale to zero)"
        )
        min_replicas = 1
    max_replicas = _int(spec.get("maxReplicas"))
    if max_replicas is None or max_replicas < 1:
        conv.error = conv.error or f"maxReplicas {spec.get('maxReplicas')!r} is not a whole number >= 1"
    metrics = _Metrics()
    if version == "autoscaling/v1":
        cpu = spec.get("targetCPUUtilizationPercentage")
        conv.unmapped.append(
            f"targetCPUUtilizationPercentage {cpu!r}: autoscaling/v1 scales on CPU only, "
            "gpuscale on GPU metrics; not carried over"
        )
    else:
        raw_metrics = spec.get("metrics")
        if not isinstance(raw_metrics, list) or not raw_metrics:
            conv.unmapped.append(
                "spec.metrics is empty: HPA's default is 80 % CPU, which gpuscale does not scale on"
            )
        for i, raw in enumerate(raw_metrics if isinstance(raw_metrics, list) else []):
            _hpa_metric(i, raw, version, conv, metrics)
    extra: dict[str, Any] = {}
    if spec.get("behavior") is not None:
        behavior = _behavior(spec.get("behavior"), "spec.behavior", conv)
        if behavior:
            extra["behavior"] = behavior
    _unknown_fields(spec, HPA_FIELDS, "an HPA", conv)
    _finish(conv, obj, ref, min_replicas, max_replicas, metrics, extra, "maxReplicas")
    return conv


# --- KEDA ScaledObject ---------------------------------------------------------------------------------


@dataclass
class _KedaContext:
    target_name: str
    namespace: str | None
    windows: list[float] = field(default_factory=list)


def _prometheus_trigger(
    origin: str, trigger: Mapping[str, Any], ctx: _KedaContext, conv: Conversion, metrics: _Metrics
) -> None:
    meta = _map(trigger.get("metadata"))
    query = meta.get("query")
    if not isinstance(query, str) or not query.strip():
        conv.unmapped.append(f"{origin}: prometheus trigger without a query; not carried over")
        return
    try:
        threshold = parse_quantity(meta.get("threshold"))
    except ValueError:
        conv.unmapped.append(
            f"{origin}: threshold {meta.get('threshold')!r} is not a number; not carried over"
        )
        return
    try:
        signal = signals.recognise_query(query)
    except signals.Unrecognised as e:
        conv.unmapped.append(f"{origin}: query {query.strip()!r}: {e}; not carried over")
        return
    target = threshold / signal.per_unit
    if target <= 0:
        conv.unmapped.append(f"{origin}: threshold {_fmt(threshold)} is not above 0; not carried over")
        return
    unit = "" if signal.per_unit == 1 else f" (the query's unit × {_fmt(1 / signal.per_unit)})"
    conv.mapped.append(
        f"{origin}: query {query.strip()!r} threshold {_fmt(threshold)} -> {signal.metric} target "
        f"{_fmt(target)}{unit}"
    )
    metric_type = trigger.get("metricType") or "AverageValue"
    outer = signal.aggregations[0] if signal.aggregations else None
    if outer == "sum":
        if metric_type == "AverageValue":
            conv.mapped.append(
                f"{origin}: sum(...) with metricType AverageValue: HPA divided the sum by the replicas, "
                "which is a per-pod average target as in a GPUScaler"
            )
        else:
            conv.unmapped.append(
                f"{origin}: sum(...) with metricType {metric_type}: HPA compared the workload's total "
                f"with {_fmt(threshold)}; the GPUScaler holds each pod's average at {_fmt(target)} "
                "(divide by your usual replica count if you meant a total)"
            )
    else:
        if outer in ("max", "min"):
            conv.unmapped.append(
                f"{origin}: {outer}(...) is approximated by the average over the pods (gpuscale averages)"
            )
        elif outer is None:
            conv.unmapped.append(
                f"{origin}: the query has no aggregation (KEDA fails on more than one series); "
                "read as the average over the pods"
            )
        if metric_type == "AverageValue":
            cap = math.ceil(100.0 / target) if signal.metric in ("gpu_util", "sm_active", "sm_util") else None
            cap_note = (
                f": on this % metric it could never ask for more than ceil(100/{_fmt(target)}) = {cap} replicas"
                if cap is not None
                else ""
            )
            conv.unmapped.append(
                f"{origin}: behaviour change: with KEDA's metricType AverageValue (its default) HPA "
                f"computed ceil(query / {_fmt(threshold)}), ignoring the current replicas{cap_note}. "
                f"The GPUScaler computes ceil(replicas × average / {_fmt(target)}) as HPA does for "
                "per-pod metrics, so expect more replicas under load"
            )
    metrics.add(signal.metric, target, origin, conv)
    conv.unmapped.extend(f"{origin}: {n}" for n in signal.notes)
    if signal.window_s is not None:
        ctx.windows.append(signal.window_s)
    for matcher in signal.pod_matchers:
        stem = signals.pod_regex_target(matcher)
        label_note = (
            " (exported_pod is what Prometheus renames dcgm-exporter's pod label to without honorLabels)"
            if matcher.label == "exported_pod"
            else ""
        )
        if stem == ctx.target_name:
            conv.mapped.append(
                f'{origin}: {matcher.label}{matcher.op}"{matcher.value}" -> the pods of the '
                f"scaleTargetRef (gpuscale knows each pod's workload; no name pattern needed){label_note}"
            )
        else:
            conv.unmapped.append(
                f'{origin}: {matcher.label}{matcher.op}"{matcher.value}" selected pods by name; the '
                f"GPUScaler measures the pods of {ctx.target_name} instead{label_note}"
            )
    for matcher in signal.namespace_matchers:
        if not (matcher.op == "=" and (ctx.namespace is None or matcher.value == ctx.namespace)):
            conv.unmapped.append(
                f'{origin}: {matcher.label}{matcher.op}"{matcher.value}": the GPUScaler measures pods in '
                "its own namespace only"
            )
    if meta.get("activationThreshold") is not None:
        conv.unmapped.append(
            f"{origin}: activationThreshold {meta.get('activationThreshold')!r}: only decides scaling "
            "from and to zero, which a GPUScaler does not do; not carried over"
        )
    connection = sorted(k for k in meta if k in PROMETHEUS_CONNECTION_KEYS)
    if connection:
        conv.mapped.append(
            f"{origin}: {', '.join(connection)}: not needed (gpuscale reads the GPUs itself, no Prometheus)"
        )
    for key in sorted(meta):
        if key not in PROMETHEUS_CONNECTION_KEYS and key not in ("query", "threshold", "activationThreshold"):
            conv.unmapped.append(f"{origin}: metadata.{key}: not understood; not carried over")


def _external_trigger(
    origin: str, trigger: Mapping[str, Any], ctx: _KedaContext, conv: Conversion, metrics: _Metrics
) -> None:
    meta = {str(k): str(v) for k, v in _map(trigger.get("metadata")).items()}
    try:
        query = parse_scaler_metadata(meta, ctx.namespace or "default")
    except QueryError as e:
        conv.unmapped.append(
            f"{origin}: {trigger.get('type')} trigger is not gpuscale's keda-scaler or is invalid "
            f"({e}); not carried over"
        )
        return
    workload = query.query.workload
    if workload.name != ctx.target_name:
        conv.unmapped.append(
            f"{origin}: the trigger reads {workload.kind}/{workload.name}, the ScaledObject scales "
            f"{ctx.target_name}; the GPUScaler measures its own target"
        )
    conv.mapped.append(
        f"{origin}: gpuscale keda-scaler {query.query.metric} target {_fmt(query.target)} -> "
        f"{query.query.metric} target {_fmt(query.target)}"
    )
    if query.activation_target:
        conv.unmapped.append(
            f"{origin}: activationTarget {_fmt(query.activation_target)}: only decides scaling from "
            "and to zero, which a GPUScaler does not do; not carried over"
        )
    metrics.add(query.query.metric, query.target, origin, conv)


def _paused(annotations: Mapping[str, Any], conv: Conversion, extra: dict[str, Any]) -> None:
    def truthy(key: str) -> bool:
        return str(annotations.get(key, "")).strip().lower() == "true"

    if truthy(KEDA_PAUSED):
        extra["paused"] = True
        conv.mapped.append(f"annotation {KEDA_PAUSED}: true -> spec.paused: true")
    if annotations.get(KEDA_PAUSED_REPLICAS) is not None:
        extra["paused"] = True
        conv.unmapped.append(
            f"annotation {KEDA_PAUSED_REPLICAS}: {annotations[KEDA_PAUSED_REPLICAS]!r} -> spec.paused: "
            "true, but a paused GPUScaler leaves the replicas as they are: scale to that count yourself"
        )
    behavior = extra.setdefault("behavior", {})
    for key, direction in ((KEDA_PAUSED_SCALE_IN, "scaleDown"), (KEDA_PAUSED_SCALE_OUT, "scaleUp")):
        if truthy(key):
            behavior.setdefault(direction, {})["selectPolicy"] = "Disabled"
            conv.mapped.append(f"annotation {key}: true -> spec.behavior.{direction}.selectPolicy: Disabled")
    if not behavior:
        del extra["behavior"]
    for key in annotations:
        if str(key).startswith("autoscaling.keda.sh/") and key not in (
            KEDA_PAUSED,
            KEDA_PAUSED_REPLICAS,
            KEDA_PAUSED_SCALE_IN,
            KEDA_PAUSED_SCALE_OUT,
        ):
            conv.unmapped.append(f"annotation {key}: not understood; not carried over")


def convert_scaled_object(obj: Mapping[str, Any]) -> Conversion:
    conv = Conversion(_source(obj))
    spec = _map(obj.get("spec"))
    if not spec:
        conv.error = "spec is missing"
        return conv
    name, namespace = _identity(obj)
    ref = _target_ref(spec.get("scaleTargetRef"), conv, keda=True)
    ctx = _KedaContext(ref["name"] if ref else name, namespace)

    raw_min = spec.get("minReplicaCount")
    min_replicas = _int(raw_min) if raw_min is not None else KEDA_MIN_REPLICAS
    if min_replicas is None or min_replicas < 1:
        default = " (KEDA's default)" if raw_min is None else ""
        conv.unmapped.append(
            f"minReplicaCount {KEDA_MIN_REPLICAS if raw_min is None else raw_min!r}{default} -> 1: KEDA "
            "scaled this target to zero when idle; a GPUScaler keeps at least one replica. Keep the "
            "ScaledObject with gpuscale's KEDA scaler (gpuscale keda-scaler) if scale to zero matters"
        )
        min_replicas = 1
    raw_max = spec.get("maxReplicaCount")
    max_replicas = _int(raw_max) if raw_max is not None else KEDA_MAX_REPLICAS
    if raw_max is None:
        conv.mapped.append(f"maxReplicaCount not set -> maxReplicas {KEDA_MAX_REPLICAS} (KEDA's default)")
    if max_replicas is None or max_replicas < 1:
        conv.error = conv.error or f"maxReplicaCount {raw_max!r} is not a whole number >= 1"
    polling = _int(spec.get("pollingInterval", KEDA_POLLING_INTERVAL_S))
    if spec.get("pollingInterval") is not None:
        conv.mapped.append(
            f"pollingInterval {spec.get('pollingInterval')!r}: not needed, gpuscale acts on metrics as "
            "they arrive (every publish interval, 2 s by default)"
        )
    if spec.get("cooldownPeriod") is not None:
        conv.unmapped.append(
            f"cooldownPeriod {spec.get('cooldownPeriod')!r}: only delays KEDA's scale to zero, which a "
            "GPUScaler does not do; scale-down pacing is spec.behavior.scaleDown; not carried over"
        )
    if spec.get("initialCooldownPeriod") is not None:
        conv.unmapped.append(
            f"initialCooldownPeriod {spec.get('initialCooldownPeriod')!r}: no equivalent; not carried over"
        )
    if spec.get("idleReplicaCount") is not None:
        conv.unmapped.append(
            f"idleReplicaCount {spec.get('idleReplicaCount')!r}: no idle state in a GPUScaler; not carried over"
        )

    metrics = _Metrics()
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        conv.unmapped.append("spec.triggers is empty")
    for i, raw in enumerate(triggers if isinstance(triggers, list) else []):
        trigger = _map(raw)
        origin = f"triggers[{i}]"
        ttype = trigger.get("type")
        if ttype == "prometheus":
            _prometheus_trigger(origin, trigger, ctx, conv, metrics)
        elif ttype in ("external", "external-push"):
            _external_trigger(origin, trigger, ctx, conv, metrics)
        else:
            conv.unmapped.append(
                f"{origin}: {ttype} trigger: gpuscale scales on GPU metrics only; not carried over"
            )
        if trigger.get("authenticationRef") is not None:
            conv.mapped.append(f"{origin}: authenticationRef: not needed")
        if trigger.get("useCachedMetrics") is not None:
            conv.mapped.append(f"{origin}: useCachedMetrics: not needed (metrics are pushed, not polled)")

    extra: dict[str, Any] = {}
    if ctx.windows:
        window = max(ctx.windows)
        extra["window"] = f"{_fmt(window)}s"
        conv.mapped.append(f"the query's range [{_fmt(window)}s] -> spec.window: {_fmt(window)}s")
        if len(set(ctx.windows)) > 1:
            conv.unmapped.append(
                f"the triggers average over different ranges ({', '.join(_fmt(w) + 's' for w in ctx.windows)}); "
                "a GPUScaler has one window: the longest was kept"
            )
    advanced = _map(spec.get("advanced"))
    hpa_config = _map(advanced.get("horizontalPodAutoscalerConfig"))
    if hpa_config.get("behavior") is not None:
        behavior = _behavior(
            hpa_config.get("behavior"), "advanced.horizontalPodAutoscalerConfig.behavior", conv
        )
        if behavior:
            extra["behavior"] = behavior
    if hpa_config.get("name") is not None:
        conv.mapped.append("advanced.horizontalPodAutoscalerConfig.name: not needed (no HPA is created)")
    if advanced.get("restoreToOriginalReplicaCount") is not None:
        conv.unmapped.append(
            "advanced.restoreToOriginalReplicaCount: deleting a GPUScaler leaves the replicas as they "
            "are; not carried over"
        )
    if advanced.get("scalingModifiers") is not None:
        conv.unmapped.append(
            "advanced.scalingModifiers: a GPUScaler takes the largest count over its metrics (no "
            "formula); not carried over"
        )
    fallback = _map(spec.get("fallback"))
    if fallback:
        failures = _int(fallback.get("failureThreshold"))
        replicas = _int(fallback.get("replicas"))
        if (
            failures is None
            or failures < 1
            or replicas is None
            or replicas < 0
            or polling is None
            or polling < 1
        ):
            conv.unmapped.append(f"fallback {dict(fallback)!r}: incomplete or invalid; not carried over")
        else:
            if max_replicas is not None and replicas > max_replicas:
                conv.unmapped.append(
                    f"fallback.replicas {replicas} is above maxReplicas {max_replicas}: lowered to {max_replicas}"
                )
                replicas = max_replicas
            extra["fallback"] = {"afterSeconds": failures * polling, "replicas": replicas}
            conv.mapped.append(
                f"fallback after {failures} failed polls of {polling} s -> spec.fallback: "
                f"{replicas} replicas after {failures * polling} s without fresh metrics"
            )
            if fallback.get("behavior") not in (None, "static"):
                conv.unmapped.append(
                    f"fallback.behavior {fallback.get('behavior')!r}: a GPUScaler's fallback sets the "
                    "count as given (KEDA's static)"
                )
    _paused(_map(_map(obj.get("metadata")).get("annotations")), conv, extra)
    _unknown_fields(spec, SCALED_OBJECT_FIELDS, "a ScaledObject", conv)
    if "fallback" in extra and extra["fallback"]["replicas"] < min_replicas:
        conv.mapped.append(
            f"fallback.replicas {extra['fallback']['replicas']} is below minReplicas {min_replicas}: "
            "the decider clamps it to minReplicas"
        )
    _finish(conv, obj, ref, min_replicas, max_replicas, metrics, extra, "maxReplicaCount")
    return conv


# --- documents -----------------------------------------------------------------------------------


def convert_document(doc: Any) -> list[Conversion]:
    """One YAML document: an HPA, a ScaledObject, a List of them, or something to skip (said so)."""
    if doc is None:
        return []
    if not isinstance(doc, Mapping):
        return [
            Conversion(
                f"a {type(doc).__name__} document",
                unmapped=["not a Kubernetes object; skipped"],
                autoscaler=False,
            )
        ]
    kind = doc.get("kind")
    api_version = str(doc.get("apiVersion", ""))
    if isinstance(kind, str) and kind.endswith("List") and isinstance(doc.get("items"), list):
        return [c for item in doc["items"] for c in convert_document(item)]
    if kind == "HorizontalPodAutoscaler" and api_version in HPA_VERSIONS:
        return [convert_hpa(doc)]
    if kind == "ScaledObject" and api_version.startswith(KEDA_API_PREFIX):
        return [convert_scaled_object(doc)]
    if kind in ("HorizontalPodAutoscaler", "ScaledObject"):
        return [Conversion(_source(doc), error=f"apiVersion {api_version!r} is not one gpuscale reads")]
    what = (
        "ScaledJob: KEDA's jobs are not a scalable workload"
        if kind == "ScaledJob"
        else "not an HPA or ScaledObject"
    )
    return [Conversion(_source(doc), unmapped=[f"{what}; skipped"], autoscaler=False)]


def convert_documents(docs: list[Any]) -> list[Conversion]:
    """Every document's conversions, with clashes between the results said."""
    conversions = [c for doc in docs for c in convert_document(doc)]
    names: dict[tuple[str, str], str] = {}
    targets: dict[tuple[str, str, str], str] = {}
    for conv in conversions:
        if conv.gpuscaler is None:
            continue
        meta, spec = conv.gpuscaler["metadata"], conv.gpuscaler["spec"]
        ns = meta.get("namespace", "")
        ref = spec["scaleTargetRef"]
        name_key = (ns, meta["name"])
        target_key = (ns, ref["kind"], ref["name"])
        if name_key in names:
            conv.unmapped.append(
                f"GPUScaler {meta['name']} is also the name converted from {names[name_key]}: applying "
                "both keeps only the last; rename one"
            )
        if target_key in targets:
            conv.unmapped.append(
                f"{ref['kind']}/{ref['name']} is also scaled by the GPUScaler from {targets[target_key]}: "
                "two GPUScalers on one target are reported as a conflict; merge their metrics"
            )
        names.setdefault(name_key, conv.source)
        targets.setdefault(target_key, conv.source)
    return conversions
