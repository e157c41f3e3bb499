"""The GPUScaler policy model: HPA's defaults, and every invalid field named."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscale.policy import (
    DEFAULT_SCALE_DOWN,
    DEFAULT_SCALE_UP,
    PolicyError,
    RatePolicy,
    parse_gpuscaler,
)


def obj(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bert"},
        "maxReplicas": 10,
        "metrics": [{"name": "gpu_util", "target": 70}],
    }
    body.update(spec)
    return {
        "apiVersion": "gpuscale.io/v1alpha1",
        "kind": "GPUScaler",
        "metadata": {"name": "bert", "namespace": "ml", "generation": 3},
        "spec": body,
    }


def test_defaults_are_hpas() -> None:
    scaler = parse_gpuscaler(obj())
    s = scaler.spec
    assert (scaler.namespace, scaler.name, scaler.generation) == ("ml", "bert", 3)
    assert s.min_replicas == 1
    assert s.tolerance == 0.1
    assert s.window_s == 30.0
    assert s.scale_up == DEFAULT_SCALE_UP
    assert s.scale_down == DEFAULT_SCALE_DOWN
    assert s.scale_up.policies == (RatePolicy("Percent", 100, 15), RatePolicy("Pods", 4, 15))
    assert s.scale_down.stabilization_window_seconds == 300
    assert s.fallback is None
    assert not s.paused
    assert s.scale_target_ref.reference() == "Deployment/bert"


def test_design_example_parses() -> None:
    s = parse_gpuscaler(
        obj(
            minReplicas=1,
            metrics=[{"name": "gpu_util", "target": 70}, {"name": "gpu_mem_used_ratio", "target": 80}],
            window="30s",
            tolerance=0.1,
            behavior={
                "scaleUp": {"stabilizationWindowSeconds": 0, "cooldownSeconds": 0, "selectPolicy": "Max"},
                "scaleDown": {"stabilizationWindowSeconds": 300, "cooldownSeconds": 60, "tolerance": 0.05},
            },
            fallback={"afterSeconds": 120, "replicas": 2},
        )
    ).spec
    assert [m.name for m in s.metrics] == ["gpu_util", "gpu_mem_used_ratio"]
    assert s.scale_down.cooldown_seconds == 60
    assert s.scale_down_tolerance == 0.05
    assert s.scale_up_tolerance == 0.1
    assert s.fallback is not None
    assert s.fallback.replicas == 2


def test_partial_behavior_keeps_the_other_defaults() -> None:
    s = parse_gpuscaler(obj(behavior={"scaleDown": {"cooldownSeconds": 30}})).spec
    assert s.scale_down.stabilization_window_seconds == 300
    assert s.scale_down.policies == DEFAULT_SCALE_DOWN.policies
    assert s.scale_up == DEFAULT_SCALE_UP


@pytest.mark.parametrize(
    ("name", "spec", "field"),
    [
        ("max below min", {"minReplicas": 5, "maxReplicas": 2}, "spec.maxReplicas"),
        ("unknown metric", {"metrics": [{"name": "gpu_fun", "target": 70}]}, "spec.metrics[0].name"),
        ("zero target", {"metrics": [{"name": "gpu_util", "target": 0}]}, "spec.metrics[0].target"),
        ("negative target", {"metrics": [{"name": "gpu_util", "target": -3}]}, "spec.metrics[0].target"),
        (
            "negative window",
            {"behavior": {"scaleDown": {"stabilizationWindowSeconds": -1}}},
            "spec.behavior.scaleDown.stabilizationWindowSeconds",
        ),
        (
            "unknown policy type",
            {"behavior": {"scaleUp": {"policies": [{"type": "Nodes", "value": 1, "periodSeconds": 15}]}}},
            "spec.behavior.scaleUp.policies[0].type",
        ),
        (
            "bad select",
            {"behavior": {"scaleUp": {"selectPolicy": "Most"}}},
            "spec.behavior.scaleUp.selectPolicy",
        ),
        ("bad averaging window", {"window": "soon"}, "spec.window"),
        ("negative tolerance", {"tolerance": -0.1}, "spec.tolerance"),
        (
            "negative direction tolerance",
            {"behavior": {"scaleUp": {"tolerance": -1}}},
            "spec.behavior.scaleUp.tolerance",
        ),
        ("unknown notReadyPods", {"notReadyPods": "Ignored"}, "spec.notReadyPods"),
        ("missing max", {"maxReplicas": None}, "spec.maxReplicas"),
        ("missing target ref", {"scaleTargetRef": None}, "spec.scaleTargetRef"),
        ("empty metrics", {"metrics": []}, "spec.metrics"),
        ("fallback above max", {"fallback": {"afterSeconds": 10, "replicas": 50}}, "spec.fallback.replicas"),
        (
            "negative cooldown",
            {"behavior": {"scaleUp": {"cooldownSeconds": -5}}},
            "spec.behavior.scaleUp.cooldownSeconds",
        ),
        ("paused not a bool", {"paused": "yes"}, "spec.paused"),
    ],
)
def test_invalid_field_is_named(name: str, spec: dict[str, Any], field: str) -> None:
    with pytest.raises(PolicyError) as info:
        parse_gpuscaler(obj(**spec))
    assert field in info.value.fields, (name, info.value.problems)
    assert field in str(info.value)


@pytest.mark.parametrize("tolerance", [0, 1.5, 2.0, "10"])
def test_any_tolerance_at_or_above_zero_is_accepted_as_kubernetes_does(tolerance: Any) -> None:
    # Kubernetes' own HPA tests use tolerances of 2.0 and "10" (KEP-4951).
    s = parse_gpuscaler(obj(tolerance=tolerance, behavior={"scaleUp": {"tolerance": tolerance}})).spec
    assert s.tolerance == float(tolerance)
    assert s.scale_up_tolerance == float(tolerance)


def test_not_ready_pods_defaults_to_missing_and_can_count() -> None:
    assert parse_gpuscaler(obj()).spec.not_ready_pods.value == "Missing"
    assert parse_gpuscaler(obj(notReadyPods="Counted")).spec.not_ready_pods.value == "Counted"


def test_all_errors_at_once() -> None:
    with pytest.raises(PolicyError) as info:
        parse_gpuscaler(
            obj(
                minReplicas=5,
                maxReplicas=2,
                metrics=[{"name": "nope", "target": -1}],
                behavior={"scaleUp": {"policies": [{"type": "X", "value": 0, "periodSeconds": 0}]}},
            )
        )
    assert set(info.value.fields) >= {
        "spec.maxReplicas",
        "spec.metrics[0].name",
        "spec.metrics[0].target",
        "spec.behavior.scaleUp.policies[0].type",
        "spec.behavior.scaleUp.policies[0].value",
        "spec.behavior.scaleUp.policies[0].periodSeconds",
    }


@pytest.mark.parametrize(
    "garbage", [None, 42, "text", [], {"spec": "x"}, {"metadata": {"name": 3}, "spec": {}}]
)
def test_garbage_is_rejected_not_crashed(garbage: Any) -> None:
    with pytest.raises(PolicyError):
        parse_gpuscaler(garbage)
