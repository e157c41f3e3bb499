"""The decider's per-workload series, as the dashboards and alerting rules in
deploy/ read them: the replica counts and metric values of each workload
(``gpuscale_workload_*``), and one GPUScaler condition series at 1 per
condition, for its current status and reason
(``gpuscale_gpuscaler_status_condition``). Both are reported on every
evaluation and written only when they change."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry

from gpuscale.metrics import ServiceMetrics
from gpuscale.subjects import WorkloadKey
from gpuscale_decider.metrics import DeciderMetrics

NAME = "gpuscale_gpuscaler_status_condition"


def status(able_reason: str) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": "AbleToScale", "status": "True", "reason": able_reason},
            {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"},
        ]
    }


def series(registry: CollectorRegistry) -> set[tuple[str, str, str]]:
    return {
        (s.labels["condition"], s.labels["status"], s.labels["reason"])
        for family in registry.collect()
        if family.name == NAME
        for s in family.samples
        if s.value == 1.0
    }


def test_a_changed_reason_replaces_its_series_and_the_same_status_again_changes_nothing() -> None:
    base = ServiceMetrics("decider")
    m = DeciderMetrics(base)
    first = status("ReadyForNewScale")
    m.conditions("ml", "llama", first)
    assert series(base.registry) == {
        ("AbleToScale", "true", "ReadyForNewScale"),
        ("ScalingActive", "true", "ValidMetricFound"),
    }
    m.conditions("ml", "llama", first)
    m.conditions("ml", "llama", status("ScaleDownStabilized"))
    assert series(base.registry) == {
        ("AbleToScale", "true", "ScaleDownStabilized"),
        ("ScalingActive", "true", "ValidMetricFound"),
    }


def test_a_new_leader_reports_the_status_it_finds_even_the_same_object_as_before() -> None:
    """Leadership lost forgets every series; leadership won again reports what the
    object says, which may be the very status object last reported."""
    base = ServiceMetrics("decider")
    m = DeciderMetrics(base)
    seen = status("ReadyForNewScale")
    m.conditions("ml", "llama", seen)
    m.forget_conditions()
    assert series(base.registry) == set()
    m.conditions("ml", "llama", seen)
    assert ("AbleToScale", "true", "ReadyForNewScale") in series(base.registry)
    m.forget_conditions("ml", "llama")  # the GPUScaler deleted, then created again with it
    m.conditions("ml", "llama", seen)
    assert ("AbleToScale", "true", "ReadyForNewScale") in series(base.registry)


def test_the_replica_counts_follow_every_evaluation_and_come_back_after_a_forget() -> None:
    base = ServiceMetrics("decider")
    m = DeciderMetrics(base)
    key = WorkloadKey("ml", "Deployment", "llama")
    labels = {"namespace": "ml", "kind": "Deployment", "name": "llama"}
    targets = {"gpu_util": 70.0}

    def value(series: str, **more: str) -> float:
        return base.registry.get_sample_value(series, {**labels, **more}) or 0.0

    def counts() -> tuple[float, float, float]:
        return (
            value("gpuscale_workload_replicas_current"),
            value("gpuscale_workload_replicas_desired"),
            value("gpuscale_workload_metric_value", metric="gpu_util"),
        )

    m.observe(key, targets, {"gpu_util": 90.0}, 2, 3, (1, 8))
    m.observe(key, targets, {"gpu_util": 91.0}, 2, 3, (1, 8))
    assert counts() == (2.0, 3.0, 91.0)
    m.observe(key, targets, {"gpu_util": 60.0}, 3, 3, (1, 8))
    assert counts() == (3.0, 3.0, 60.0)
    m.forget(key, targets)  # the GPUScaler deleted: its series go
    assert counts() == (0.0, 0.0, 0.0)
    m.observe(key, targets, {"gpu_util": 60.0}, 3, 3, (1, 8))  # created again, the same values
    assert counts() == (3.0, 3.0, 60.0)
