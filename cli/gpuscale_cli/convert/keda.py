"""A KEDA ScaledObject (``prometheus`` and ``external``/``external-push`` triggers) as a GPUScaler. Pure."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpuscale_kedascaler.core.query import (
    QueryError,
    parse_scaler_metadata,
)

from . import signals
from .conversion import (
    KEDA_MAX_REPLICAS,
    KEDA_MIN_REPLICAS,
    KEDA_PAUSED,
    KEDA_PAUSED_REPLICAS,
    KEDA_PAUSED_SCALE_IN,
    KEDA_PAUSED_SCALE_OUT,
    KEDA_POLLING_INTERVAL_S,
    PROMETHEUS_CONNECTION_KEYS,
    SCALED_OBJECT_FIELDS,
    Conversion,
    Metrics,
    finish,
    read_behavior,
    target_ref,
    unknown_fields,
)
from .readers import as_int, as_map, fmt, identity, parse_quantity, source_of

# --- KEDA ScaledObject ---------------------------------------------------------------------------------


@dataclass
class _KedaContext:
    target_name: str
    namespace: str | None
    windows: list[float] = field(default_factory=list)


def _prometheus_trigger(
    origin: str, trigger: Mapping[str, Any], ctx: _KedaContext, conv: Conversion, metrics: Metrics
) -> None:
    meta = as_map(trigger.get("metadata"))
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
        conv.unmapped.append(f"{origin}: threshold {fmt(threshold)} is not above 0; not carried over")
        return
    unit = "" if signal.per_unit == 1 else f" (the query's unit × {fmt(1 / signal.per_unit)})"
    conv.mapped.append(
        f"{origin}: query {query.strip()!r} threshold {fmt(threshold)} -> {signal.metric} target "
        f"{fmt(target)}{unit}"
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
                f"with {fmt(threshold)}; the GPUScaler holds each pod's average at {fmt(target)} "
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
                f": on this % metric it could never ask for more than ceil(100/{fmt(target)}) = {cap} replicas"
                if cap is not None
                else ""
            )
            conv.unmapped.append(
                f"{origin}: behaviour change: with KEDA's metricType AverageValue (its default) HPA "
                f"computed ceil(query / {fmt(threshold)}), ignoring the current replicas{cap_note}. "
                f"The GPUScaler computes ceil(replicas × average / {fmt(target)}) as HPA does for "
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
    origin: str, trigger: Mapping[str, Any], ctx: _KedaContext, conv: Conversion, metrics: Metrics
) -> None:
    meta = {str(k): str(v) for k, v in as_map(trigger.get("metadata")).items()}
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
        f"{origin}: gpuscale keda-scaler {query.query.metric} target {fmt(query.target)} -> "
        f"{query.query.metric} target {fmt(query.target)}"
    )
    if query.activation_target:
        conv.unmapped.append(
            f"{origin}: activationTarget {fmt(query.activation_target)}: only decides scaling from "
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
    conv = Conversion(source_of(obj))
    spec = as_map(obj.get("spec"))
    if not spec:
        conv.error = "spec is missing"
        return conv
    name, namespace = identity(obj)
    ref = target_ref(spec.get("scaleTargetRef"), conv, keda=True)
    ctx = _KedaContext(ref["name"] if ref else name, namespace)

    raw_min = spec.get("minReplicaCount")
    min_replicas = as_int(raw_min) if raw_min is not None else KEDA_MIN_REPLICAS
    if min_replicas is None or min_replicas < 1:
        default = " (KEDA's default)" if raw_min is None else ""
        conv.unmapped.append(
            f"minReplicaCount {KEDA_MIN_REPLICAS if raw_min is None else raw_min!r}{default} -> 1: KEDA "
            "scaled this target to zero when idle; a GPUScaler keeps at least one replica. Keep the "
            "ScaledObject with gpuscale's KEDA scaler (gpuscale keda-scaler) if scale to zero matters"
        )
        min_replicas = 1
    raw_max = spec.get("maxReplicaCount")
    max_replicas = as_int(raw_max) if raw_max is not None else KEDA_MAX_REPLICAS
    if raw_max is None:
        conv.mapped.append(f"maxReplicaCount not set -> maxReplicas {KEDA_MAX_REPLICAS} (KEDA's default)")
    if max_replicas is None or max_replicas < 1:
        conv.error = conv.error or f"maxReplicaCount {raw_max!r} is not a whole number >= 1"
    polling = as_int(spec.get("pollingInterval", KEDA_POLLING_INTERVAL_S))
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

    metrics = Metrics()
    triggers = spec.get("triggers")
    if not isinstance(triggers, list) or not triggers:
        conv.unmapped.append("spec.triggers is empty")
    for i, raw in enumerate(triggers if isinstance(triggers, list) else []):
        trigger = as_map(raw)
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
        extra["window"] = f"{fmt(window)}s"
        conv.mapped.append(f"the query's range [{fmt(window)}s] -> spec.window: {fmt(window)}s")
        if len(set(ctx.windows)) > 1:
            conv.unmapped.append(
                f"the triggers average over different ranges ({', '.join(fmt(w) + 's' for w in ctx.windows)}); "
                "a GPUScaler has one window: the longest was kept"
            )
    advanced = as_map(spec.get("advanced"))
    hpa_config = as_map(advanced.get("horizontalPodAutoscalerConfig"))
    if hpa_config.get("behavior") is not None:
        behavior = read_behavior(
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
    fallback = as_map(spec.get("fallback"))
    if fallback:
        failures = as_int(fallback.get("failureThreshold"))
        replicas = as_int(fallback.get("replicas"))
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
    _paused(as_map(as_map(obj.get("metadata")).get("annotations")), conv, extra)
    unknown_fields(spec, SCALED_OBJECT_FIELDS, "a ScaledObject", conv)
    if "fallback" in extra and extra["fallback"]["replicas"] < min_replicas:
        conv.mapped.append(
            f"fallback.replicas {extra['fallback']['replicas']} is below minReplicas {min_replicas}: "
            "the decider clamps it to minReplicas"
        )
    finish(conv, obj, ref, min_replicas, max_replicas, metrics, extra, "maxReplicaCount")
    return conv
