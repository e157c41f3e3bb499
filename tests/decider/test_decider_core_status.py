"""The GPUScaler status the decider writes, built as a value."""

from __future__ import annotations

from typing import Any

from gpuscale.policy import PolicyError, parse_gpuscaler
from gpuscale_decider.core.reconcile import Evaluation, Memory, Target, reconcile
from gpuscale_decider.core.state import ScalerState
from gpuscale_decider.core.status import (
    evaluation_status,
    invalid_status,
    parse_rfc3339,
    rfc3339,
    status_differs,
    targets_column,
)
from gpuscale_kubesim.apiserver.patch import merge_patch

from .scenario import SELECTOR, running, world

NOW = 1_800_000_000.0


def evaluate(
    scaler: Any,
    current: int,
    util: float | None,
    state: ScalerState,
    now: float,
    received_at: float | None = None,
) -> tuple[Evaluation, ScalerState]:
    views, observation = world(
        running(current, util), received_at=now if received_at is None else received_at
    )
    metrics = observation if util is not None else None
    s = reconcile(Memory(state), scaler, Target(current, SELECTOR), views, metrics, now)
    assert s.evaluation is not None
    return s.evaluation, s.memory.state


def scaler(**spec: Any) -> Any:
    body: dict[str, Any] = {
        "scaleTargetRef": {"kind": "Deployment", "name": "bert"},
        "maxReplicas": 10,
        "metrics": [{"name": "gpu_util", "target": 70}],
    }
    body.update(spec)
    return parse_gpuscaler({"metadata": {"name": "bert", "namespace": "ml", "generation": 4}, "spec": body})


def test_targets_column_reads_like_kubectl_get_hpa() -> None:
    s = scaler(metrics=[{"name": "gpu_util", "target": 70}, {"name": "gpu_mem_used_ratio", "target": 80.5}])
    assert targets_column(s.spec, {"gpu_util": 83.4}) == "83/70, <unknown>/80.5"
    assert targets_column(s.spec, None) == "<unknown>/70, <unknown>/80.5"


def test_evaluation_status_has_the_printer_column_fields_and_conditions() -> None:
    s = scaler()
    result, _ = evaluate(s, 2, 83.0, ScalerState(first_seen=NOW - 100), NOW)
    status = evaluation_status(s.spec, s.generation, result, NOW - 60, None, NOW)
    assert status["reference"] == "Deployment/bert"
    assert status["targets"] == "83/70"
    assert status["observedGeneration"] == 4
    assert (status["currentReplicas"], status["desiredReplicas"]) == (2, 3)
    assert status["lastScaleTime"] == rfc3339(NOW - 60)
    assert status["currentMetrics"] == [{"name": "gpu_util", "target": 70.0, "current": 83.0}]
    types = [(c["type"], c["status"], c["reason"]) for c in status["conditions"]]
    assert types == [
        ("Ready", "True", "GPUScalerReady"),
        ("AbleToScale", "True", "ReadyForNewScale"),
        ("ScalingActive", "True", "ValidMetricFound"),
        ("ScalingLimited", "False", "DesiredWithinRange"),
        ("Paused", "False", "NotPaused"),
        ("Fallback", "False", "FallbackInactive"),
    ]


def test_stale_metrics_show_unknown_targets() -> None:
    s = scaler()
    result, _ = evaluate(s, 2, 83.0, ScalerState(), NOW, received_at=NOW - 100)
    status = evaluation_status(s.spec, 1, result, None, None, NOW)
    assert status["targets"] == "<unknown>/70"
    assert "lastScaleTime" not in status
    # No null: the API server's merge patch drops one inside a list, and what a new leader reads
    # back would then differ from what it builds, and be written again.
    assert status["currentMetrics"] == [{"name": "gpu_util", "target": 70.0}]
    assert not status_differs(merge_patch({}, status), status)


def test_transition_time_kept_while_the_condition_holds() -> None:
    s = scaler()
    first, state = evaluate(s, 4, 70.0, ScalerState(), NOW)
    before = evaluation_status(s.spec, 1, first, None, None, NOW)
    again, _ = evaluate(s, 4, 70.0, state, NOW + 30)
    after = evaluation_status(s.spec, 1, again, None, before, NOW + 30)
    assert [c["lastTransitionTime"] for c in after["conditions"]] == [
        c["lastTransitionTime"] for c in before["conditions"]
    ]
    assert not status_differs(before, after)  # the same numbers at a later time: no write


def test_a_changed_condition_is_a_change() -> None:
    s = scaler()
    ok, state = evaluate(s, 4, 70.0, ScalerState(), NOW)
    blind, _ = evaluate(s, 4, None, state, NOW + 100)
    before = evaluation_status(s.spec, 1, ok, None, None, NOW)
    after = evaluation_status(s.spec, 1, blind, None, before, NOW + 100)
    assert status_differs(before, after)
    active = next(c for c in after["conditions"] if c["type"] == "ScalingActive")
    assert (active["status"], active["reason"]) == ("False", "FailedGetGPUMetrics")
    assert active["lastTransitionTime"] == rfc3339(NOW + 100)


def test_invalid_status_names_the_fields() -> None:
    status = invalid_status(7, PolicyError([("spec.maxReplicas", "must be >= 3")]), None, NOW)
    able = next(c for c in status["conditions"] if c["type"] == "AbleToScale")
    assert (able["status"], able["reason"]) == ("False", "InvalidPolicy")
    assert "spec.maxReplicas: must be >= 3" in able["message"]
    assert status["observedGeneration"] == 7


def test_rfc3339_round_trip() -> None:
    assert parse_rfc3339(rfc3339(NOW)) == NOW
    assert parse_rfc3339("yesterday") is None
    assert parse_rfc3339(None) is None
