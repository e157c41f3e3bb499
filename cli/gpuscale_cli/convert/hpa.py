"""A HorizontalPodAutoscaler (autoscaling/v2, v2beta2, v2beta1; v1 has only CPU) as a GPUScaler. Pure."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .conversion import (
    HPA_FIELDS,
    Conversion,
    Metrics,
    finish,
    read_behavior,
    source_metric,
    target_ref,
    unknown_fields,
)
from .readers import as_int, as_map, flow, parse_quantity, source_of

# --- HorizontalPodAutoscaler -----------------------------------------------------------------------


def _hpa_metric(i: int, raw: Any, version: str, conv: Conversion, metrics: Metrics) -> None:
    origin = f"spec.metrics[{i}]"
    m = as_map(raw)
    mtype = m.get("type")
    if mtype in ("Resource", "ContainerResource"):
        body = as_map(m.get("resource") or m.get("containerResource"))
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
    body = as_map(m.get("pods" if mtype == "Pods" else "external"))
    kind: Any
    if version == "autoscaling/v2beta1":
        name = body.get("metricName")
        selector = body.get("selector") if mtype == "Pods" else body.get("metricSelector")
        if mtype == "Pods" or body.get("targetAverageValue") is not None:
            kind, raw_target = "AverageValue", body.get("targetAverageValue")
        else:
            kind, raw_target = "Value", body.get("targetValue")
    else:
        metric_id = as_map(body.get("metric"))
        name, selector = metric_id.get("name"), metric_id.get("selector")
        target = as_map(body.get("target"))
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
    source_metric(name, value, origin, conv, metrics, how=how)


def convert_hpa(obj: Mapping[str, Any]) -> Conversion:
    conv = Conversion(source_of(obj))
    version = str(obj.get("apiVersion"))
    spec = as_map(obj.get("spec"))
    if not spec:
        conv.error = "spec is missing"
        return conv
    ref = target_ref(spec.get("scaleTargetRef"), conv, keda=False)
    min_replicas = as_int(spec.get("minReplicas", 1))
    if min_replicas is None or min_replicas < 1:
        conv.unmapped.append(
            f"minReplicas {spec.get('minReplicas')!r} -> 1: a GPUScaler keeps at least one replica "
            "(no scale to zero)"
        )
        min_replicas = 1
    max_replicas = as_int(spec.get("maxReplicas"))
    if max_replicas is None or max_replicas < 1:
        conv.error = conv.error or f"maxReplicas {spec.get('maxReplicas')!r} is not a whole number >= 1"
    metrics = Metrics()
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
        behavior = read_behavior(spec.get("behavior"), "spec.behavior", conv)
        if behavior:
            extra["behavior"] = behavior
    unknown_fields(spec, HPA_FIELDS, "an HPA", conv)
    finish(conv, obj, ref, min_replicas, max_replicas, metrics, extra, "maxReplicas")
    return conv
