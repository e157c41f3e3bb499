"""How `gpuscale convert` carries each HPA and ScaledObject field over, or says why not.

Field meanings are HPA's (autoscaling/v2 API reference: behavior, Pods and
External metric targets) and KEDA's (ScaledObject spec: minReplicaCount 0
and maxReplicaCount 100 by default, pollingInterval 30 s, fallback after
failureThreshold failed polls, the paused annotations). Every result is
checked against the CRD schema and the decider's parser.
"""

from __future__ import annotations

from typing import Any

import pytest

from gpuscale.policy import parse_gpuscaler
from gpuscale_cli.convert.translate import Conversion, convert_documents, parse_quantity

from ..deploy.deploy_support import gpuscaler_validator


def hpa(metrics: list[dict[str, Any]], version: str = "autoscaling/v2", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": version,
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "bert-hpa", "namespace": "ml"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bert"},
            "minReplicas": 2,
            "maxReplicas": 8,
            "metrics": metrics,
            **spec,
        },
    }


def pods_metric(name: str, average: Any) -> dict[str, Any]:
    return {
        "type": "Pods",
        "pods": {"metric": {"name": name}, "target": {"type": "AverageValue", "averageValue": average}},
    }


def prometheus(query: str, threshold: str = "70", **trigger: Any) -> dict[str, Any]:
    return {
        "type": "prometheus",
        "metadata": {"serverAddress": "http://prom:9090", "query": query, "threshold": threshold},
        **trigger,
    }


GPU_QUERY = 'avg(DCGM_FI_DEV_GPU_UTIL{pod=~"bert-.*"})'


def scaled_object(
    triggers: list[dict[str, Any]], annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "bert-so", "namespace": "ml"}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": meta,
        "spec": {
            "scaleTargetRef": {"name": "bert"},
            "minReplicaCount": 1,
            "maxReplicaCount": 6,
            "triggers": triggers,
            **spec,
        },
    }


def one(doc: dict[str, Any]) -> Conversion:
    (conv,) = convert_documents([doc])
    if conv.gpuscaler is not None:
        errors = [f"{list(e.path)}: {e.message}" for e in gpuscaler_validator().iter_errors(conv.gpuscaler)]
        assert errors == []
        parse_gpuscaler(conv.gpuscaler)
    return conv


def spec_of(conv: Conversion) -> dict[str, Any]:
    assert conv.gpuscaler is not None, conv.error
    spec: dict[str, Any] = conv.gpuscaler["spec"]
    return spec


def said(conv: Conversion, text: str) -> bool:
    return any(text in line for line in conv.unmapped)


# --- HPA ----------------------------------------------------------------------------------------------


def test_hpa_behavior_is_carried_over_field_for_field() -> None:
    behavior = {
        "scaleUp": {
            "stabilizationWindowSeconds": 0,
            "selectPolicy": "Max",
            "policies": [
                {"type": "Pods", "value": 4, "periodSeconds": 60},
                {"type": "Percent", "value": 100, "periodSeconds": 15},
            ],
        },
        "scaleDown": {
            "stabilizationWindowSeconds": 600,
            "policies": [{"type": "Percent", "value": 10, "periodSeconds": 60}],
            "tolerance": "50m",
        },
    }
    conv = one(hpa([pods_metric("DCGM_FI_DEV_GPU_UTIL", 70)], behavior=behavior))
    spec = spec_of(conv)
    assert spec["behavior"]["scaleUp"] == behavior["scaleUp"]
    assert spec["behavior"]["scaleDown"] == {**behavior["scaleDown"], "tolerance": 0.05}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 8)
    assert conv.gpuscaler is not None
    assert conv.gpuscaler["metadata"] == {
        "name": "bert-hpa",
        "namespace": "ml",
        "annotations": {"gpuscale.io/converted-from": "HorizontalPodAutoscaler/bert-hpa"},
    }
    assert conv.unmapped == []


def test_invalid_behavior_values_are_left_out_and_named() -> None:
    behavior = {
        "scaleDown": {
            "stabilizationWindowSeconds": 7200,
            "policies": [{"type": "Pods", "value": 0, "periodSeconds": 60}],
            "selectPolicy": "Sometimes",
        }
    }
    conv = one(hpa([pods_metric("DCGM_FI_DEV_GPU_UTIL", 70)], behavior=behavior))
    assert "behavior" not in spec_of(conv)
    assert said(conv, "stabilizationWindowSeconds 7200: must be 0..3600")
    assert said(conv, "policies[0]")
    assert said(conv, "selectPolicy 'Sometimes'")


@pytest.mark.parametrize(
    ("metric", "expected"),
    [
        (pods_metric("DCGM_FI_DEV_FB_USED", "20k"), {"name": "gpu_mem_used_mib", "target": 20000}),
        (pods_metric("memory_used_bytes_current", "8Gi"), {"name": "gpu_mem_used_mib", "target": 8192}),
        (pods_metric("power_usage_milliwatts_current", "250k"), {"name": "power_w", "target": 250}),
        (
            pods_metric("DCGM_CUSTOM_PROCESS_GPU_MEM_USED_RATIO", "800m"),
            {"name": "gpu_mem_used_ratio", "target": 0.8},
        ),
        (pods_metric("DCGM_FI_PROF_SM_ACTIVE", "700m"), {"name": "sm_active", "target": 70}),
        (pods_metric("gpuscale-sm_util-total", 30), {"name": "sm_util", "target": 30}),
    ],
)
def test_adapter_metric_names_and_units(metric: dict[str, Any], expected: dict[str, Any]) -> None:
    assert spec_of(one(hpa([metric])))["metrics"] == [expected]


def test_v2beta1_pods_and_external_metrics() -> None:
    metrics = [
        {"type": "Pods", "pods": {"metricName": "duty_cycle_current", "targetAverageValue": 40}},
        {
            "type": "External",
            "external": {
                "metricName": "DCGM_FI_DEV_FB_USED",
                "metricSelector": {"matchLabels": {"app": "bert"}},
                "targetValue": "10k",
            },
        },
    ]
    conv = one(hpa(metrics, version="autoscaling/v2beta1"))
    assert spec_of(conv)["metrics"] == [
        {"name": "gpu_util", "target": 40},
        {"name": "gpu_mem_used_mib", "target": 10000},
    ]
    assert said(conv, "selector {matchLabels: {app: bert}} left out")


def test_cpu_and_memory_metrics_are_named_and_the_gpu_ones_kept() -> None:
    metrics = [
        {
            "type": "Resource",
            "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
        },
        pods_metric("DCGM_FI_DEV_GPU_UTIL", 60),
        pods_metric("DCGM_FI_DEV_GPU_TEMP", 80),
    ]
    conv = one(hpa(metrics))
    assert spec_of(conv)["metrics"] == [{"name": "gpu_util", "target": 60}]
    assert said(conv, "Resource cpu: gpuscale scales on GPU metrics only")
    assert said(conv, "DCGM_FI_DEV_GPU_TEMP: temperature is not a load signal")


def test_an_hpa_without_gpu_metrics_is_not_converted() -> None:
    conv = one(
        hpa(
            [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}},
                }
            ]
        )
    )
    assert conv.gpuscaler is None
    assert conv.error == "no GPU metric to scale on (see the notes)"
    v1 = {
        "apiVersion": "autoscaling/v1",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "old"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": "x"},
            "maxReplicas": 3,
            "targetCPUUtilizationPercentage": 50,
        },
    }
    conv = one(v1)
    assert conv.gpuscaler is None
    assert said(conv, "autoscaling/v1 scales on CPU only")


def test_two_sources_of_one_metric_keep_the_lower_target() -> None:
    conv = one(hpa([pods_metric("DCGM_FI_DEV_GPU_UTIL", 70), pods_metric("duty_cycle_current", 60)]))
    assert spec_of(conv)["metrics"] == [{"name": "gpu_util", "target": 60}]
    assert said(conv, "kept the lower target 60")


def test_min_replicas_zero_and_targets_other_than_deployments() -> None:
    conv = one(hpa([pods_metric("DCGM_FI_DEV_GPU_UTIL", 70)], minReplicas=0))
    assert spec_of(conv)["minReplicas"] == 1
    assert said(conv, "minReplicas 0 -> 1")
    rollout = hpa([pods_metric("DCGM_FI_DEV_GPU_UTIL", 70)])
    rollout["spec"]["scaleTargetRef"] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Rollout",
        "name": "bert",
    }
    conv = one(rollout)
    assert conv.gpuscaler is None
    assert "scaleTargetRef.kind 'Rollout'" in (conv.error or "")


# --- KEDA ---------------------------------------------------------------------------------------------


def test_keda_behavior_fallback_and_window() -> None:
    behavior = {
        "scaleDown": {
            "stabilizationWindowSeconds": 120,
            "policies": [{"type": "Pods", "value": 1, "periodSeconds": 30}],
        }
    }
    doc = scaled_object(
        [prometheus('avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod=~"bert-.*"}[1m]))', metricType="Value")],
        pollingInterval=15,
        fallback={"failureThreshold": 3, "replicas": 4},
        advanced={"horizontalPodAutoscalerConfig": {"name": "keda-hpa-bert", "behavior": behavior}},
    )
    conv = one(doc)
    spec = spec_of(conv)
    assert spec["behavior"] == behavior
    assert spec["fallback"] == {"afterSeconds": 45, "replicas": 4}
    assert spec["window"] == "60s"
    assert spec["metrics"] == [{"name": "gpu_util", "target": 70}]
    # metricType Value with a per-pod average is exactly HPA's ratio: nothing to warn about.
    assert conv.unmapped == []
    assert any("pollingInterval 15: not needed" in m for m in conv.mapped)


def test_keda_defaults_scale_to_zero_and_cooldown_are_explained() -> None:
    doc = scaled_object([prometheus(GPU_QUERY)], cooldownPeriod=300, idleReplicaCount=0)
    del doc["spec"]["minReplicaCount"], doc["spec"]["maxReplicaCount"]
    conv = one(doc)
    spec = spec_of(conv)
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 100)
    assert said(conv, "minReplicaCount 0 (KEDA's default) -> 1")
    assert said(conv, "cooldownPeriod 300: only delays KEDA's scale to zero")
    assert said(conv, "idleReplicaCount 0: no idle state")
    assert said(conv, "ceil(100/70) = 2 replicas")


def test_keda_sum_query_with_average_value_is_a_per_pod_target() -> None:
    conv = one(scaled_object([prometheus('sum(DCGM_FI_DEV_GPU_UTIL{pod=~"bert-.*"})', "60")]))
    assert spec_of(conv)["metrics"] == [{"name": "gpu_util", "target": 60}]
    assert not said(conv, "behaviour change")


def test_keda_paused_annotations() -> None:
    conv = one(
        scaled_object(
            [prometheus(GPU_QUERY, metricType="Value")],
            annotations={
                "autoscaling.keda.sh/paused-replicas": "3",
                "autoscaling.keda.sh/paused-scale-in": "true",
            },
        )
    )
    spec = spec_of(conv)
    assert spec["paused"] is True
    assert spec["behavior"] == {"scaleDown": {"selectPolicy": "Disabled"}}
    assert said(conv, "scale to that count yourself")
    conv = one(
        scaled_object(
            [prometheus(GPU_QUERY, metricType="Value")], annotations={"autoscaling.keda.sh/paused": "true"}
        )
    )
    assert spec_of(conv)["paused"] is True
    assert conv.unmapped == []


def test_keda_trigger_kinds() -> None:
    triggers = [
        prometheus('avg(DCGM_FI_PROF_SM_ACTIVE{pod=~"other-.*"})', "0.6", metricType="Value"),
        {"type": "cpu", "metricType": "Utilization", "metadata": {"value": "60"}},
        {
            "type": "external",
            "metadata": {
                "scalerAddress": "gpuscale-keda-scaler.gpuscale:9500",
                "workload": "bert",
                "metric": "gpu_mem_used_ratio",
                "target": "85",
            },
        },
        {"type": "external", "metadata": {"scalerAddress": "someone-else:6000", "queue": "jobs"}},
    ]
    conv = one(scaled_object(triggers))
    assert spec_of(conv)["metrics"] == [
        {"name": "sm_active", "target": 60},
        {"name": "gpu_mem_used_ratio", "target": 85},
    ]
    assert said(
        conv, 'pod=~"other-.*" selected pods by name; the GPUScaler measures the pods of bert instead'
    )
    assert said(conv, "triggers[1]: cpu trigger")
    assert said(conv, "triggers[3]: external trigger is not gpuscale's keda-scaler or is invalid")


def test_a_scaled_object_with_no_usable_trigger_is_not_converted() -> None:
    conv = one(scaled_object([prometheus("avg(DCGM_FI_DEV_GPU_TEMP)")]))
    assert conv.gpuscaler is None
    assert said(conv, "temperature is not a load signal")


def test_fallback_above_max_is_lowered() -> None:
    conv = one(
        scaled_object(
            [prometheus(GPU_QUERY, metricType="Value")], fallback={"failureThreshold": 2, "replicas": 50}
        )
    )
    assert spec_of(conv)["fallback"] == {"afterSeconds": 60, "replicas": 6}
    assert said(conv, "fallback.replicas 50 is above maxReplicas 6")


def test_lists_and_stray_documents() -> None:
    listed = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [hpa([pods_metric("DCGM_FI_DEV_GPU_UTIL", 70)]), scaled_object([prometheus(GPU_QUERY)])],
    }
    convs = convert_documents(
        [
            listed,
            "just a string",
            {"apiVersion": "keda.sh/v1alpha1", "kind": "ScaledJob", "metadata": {"name": "j"}},
        ]
    )
    assert [c.converted for c in convs] == [True, True, False, False]
    assert convs[2].unmapped == ["not a Kubernetes object; skipped"]
    assert "ScaledJob" in convs[3].unmapped[0]
    assert not convs[3].autoscaler


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("20", 20.0),
        (20, 20.0),
        ("500m", 0.5),
        ("2Gi", 2.0 * 1024**3),
        ("1e3", 1000.0),
        ("1.5k", 1500.0),
        (0.25, 0.25),
    ],
)
def test_quantities(text: Any, value: float) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "twenty", "1x", None, True, "1e400"])
def test_bad_quantities(text: Any) -> None:
    with pytest.raises(ValueError, match=r"quantity|finite"):
        parse_quantity(text)
