"""The GPUScaler policy's bounds and quantities: every number a tenant writes is held to
what the algorithm needs (the CRD holds the same: tests/deploy/test_deploy_gpuscaler_doc.py),
and targets are milli-units rounded up, as Kubernetes' quantities."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest

from gpuscale.policy import (
    MAX_REPLICAS,
    MAX_TARGET,
    PolicyError,
    milli_value,
    parse_gpuscaler,
)


def obj(**spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "scaleTargetRef": {"kind": "Deployment", "name": "bert"},
        "maxReplicas": 10,
        "metrics": [{"name": "gpu_util", "target": 70}],
    }
    body.update(spec)
    return {"kind": "GPUScaler", "metadata": {"name": "bert", "namespace": "ml"}, "spec": body}


def problems(**spec: Any) -> dict[str, str]:
    with pytest.raises(PolicyError) as info:
        parse_gpuscaler(obj(**spec))
    return dict(info.value.problems)


def target(value: Any) -> list[dict[str, Any]]:
    return [{"name": "gpu_util", "target": value}]


# --- quantities ----------------------------------------------------------------------


def test_a_target_of_5e_10_rounds_up_to_one_milli_unit_not_zero() -> None:
    assert milli_value(5e-10) == 1


@pytest.mark.parametrize(
    ("written", "milli"),
    [
        ("0", 0),
        ("0.001", 1),
        ("0.0015", 2),  # 1500u: MilliValue() is 2
        ("0.07", 70),  # 70.00000000000001 in binary: noise, not a fraction anyone wrote
        ("0.1", 100),
        ("0.29", 290),
        ("2.675", 2675),
        ("83.5", 83500),
        ("70", 70000),
        ("1.0001", 1001),
        ("123456789.0001", 123456789001),  # past float's whole milli-units: rounded as a decimal
    ],
)
def test_milli_values_round_up_as_kubernetes_quantities_do(written: str, milli: int) -> None:
    assert milli_value(float(written)) == milli == math.ceil(Decimal(written) * 1000)


def test_values_past_any_metric_are_held_at_the_largest_target() -> None:
    cap = milli_value(MAX_TARGET)
    assert cap == 10**18
    assert [milli_value(v) for v in (1e300, math.inf, math.nan)] == [cap, cap, cap]


# --- bounds, each named ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "spec", "field"),
    [
        ("target below a milli-unit", {"metrics": target(5e-10)}, "spec.metrics[0].target"),
        ("target just below a milli-unit", {"metrics": target(0.0009)}, "spec.metrics[0].target"),
        ("target past 1e15", {"metrics": target(2e15)}, "spec.metrics[0].target"),
        ("maxReplicas past int32", {"maxReplicas": MAX_REPLICAS + 1}, "spec.maxReplicas"),
        ("minReplicas past int32", {"minReplicas": MAX_REPLICAS + 1}, "spec.minReplicas"),
        ("window below a millisecond", {"window": "0.0009s"}, "spec.window"),
        ("window past a day", {"window": "25h"}, "spec.window"),
        ("window past a day in seconds", {"window": 86401}, "spec.window"),
        ("window text past 32 characters", {"window": "0" * 31 + "30s"}, "spec.window"),
        (
            "cooldown past an hour",
            {"behavior": {"scaleDown": {"cooldownSeconds": 3601}}},
            "spec.behavior.scaleDown.cooldownSeconds",
        ),
        (
            "rate value past int32",
            {
                "behavior": {
                    "scaleUp": {"policies": [{"type": "Percent", "value": 2**31, "periodSeconds": 15}]}
                }
            },
            "spec.behavior.scaleUp.policies[0].value",
        ),
        (
            "seventeen rate policies",
            {"behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}] * 17}}},
            "spec.behavior.scaleUp.policies",
        ),
        ("seventeen metrics", {"metrics": target(70) * 17}, "spec.metrics"),
        (
            "fallback after a fraction",
            {"fallback": {"afterSeconds": 0.5, "replicas": 1}},
            "spec.fallback.afterSeconds",
        ),
        (
            "fallback after a day",
            {"fallback": {"afterSeconds": 86401, "replicas": 1}},
            "spec.fallback.afterSeconds",
        ),
        (
            "target name past 253",
            {"scaleTargetRef": {"kind": "Deployment", "name": "b" * 254}},
            "spec.scaleTargetRef.name",
        ),
    ],
)
def test_a_value_past_its_bound_is_refused_with_its_field(
    name: str, spec: dict[str, Any], field: str
) -> None:
    assert field in problems(**spec), name


@pytest.mark.parametrize(
    "spec",
    [
        {"metrics": target(0.001)},
        {"metrics": target(MAX_TARGET)},
        {"minReplicas": MAX_REPLICAS, "maxReplicas": MAX_REPLICAS},
        {"window": "1ms"},
        {"window": "24h"},
        {"window": 86400},
        {"behavior": {"scaleUp": {"cooldownSeconds": 3600}}},
        {"fallback": {"afterSeconds": 86400, "replicas": 10}},
        {"scaleTargetRef": {"kind": "Deployment", "name": "b" * 253}},
    ],
    ids=lambda spec: str(spec)[:60],
)
def test_a_value_at_its_bound_is_taken(spec: dict[str, Any]) -> None:
    parse_gpuscaler(obj(**spec))


def test_every_bound_broken_is_reported_at_once() -> None:
    found = problems(
        maxReplicas=MAX_REPLICAS + 1,
        metrics=target(5e-10),
        window="25h",
        behavior={"scaleDown": {"cooldownSeconds": 3601}},
        fallback={"afterSeconds": 86401, "replicas": 1},
    )
    assert set(found) == {
        "spec.maxReplicas",
        "spec.metrics[0].target",
        "spec.window",
        "spec.behavior.scaleDown.cooldownSeconds",
        "spec.fallback.afterSeconds",
    }


@pytest.mark.parametrize(
    "spec",
    [
        {"maxReplicas": 10**5000},  # repr() of it is itself refused by Python
        {"tolerance": 10**400},  # past float's range
        {"window": 10**400},
        {"metrics": target("9" * 5000)},
        {"mode": "x" * 100_000},
        {"scaleTargetRef": {"kind": "Deployment", "name": "b" * 100_000}},
    ],
    ids=["huge-int", "int-past-float", "window-past-float", "long-number-text", "long-enum", "long-name"],
)
def test_monstrous_values_are_refused_in_a_line_never_raised(spec: dict[str, Any]) -> None:
    found = problems(**spec)
    assert all(len(message) < 200 for message in found.values()), found
