"""The keda-scaler's pure core: trigger metadata, freshness, the external metrics API's answers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuscale.subjects import WorkloadKey
from gpuscale.wire import MetricValues
from gpuscale_kedascaler.core import external_api
from gpuscale_kedascaler.core.latest import (
    METRIC_NOT_REPORTED,
    NO_FRESH_PODS,
    NO_METRICS,
    STALE,
    LatestMetrics,
    Unavailable,
)
from gpuscale_kedascaler.core.query import (
    QueryError,
    ScalerQuery,
    ValueKind,
    WorkloadQuery,
    parse_external_metric,
    parse_scaler_metadata,
)

NOW = 1_800_000_000.0
BERT = WorkloadKey("default", "Deployment", "bert")


@dataclass
class Message:
    namespace: str = "default"
    kind: str = "Deployment"
    name: str = "bert"
    ts: float = NOW
    window_s: float = 30.0
    averages: Any = field(default_factory=lambda: {"gpu_util": 80.0})
    pods_fresh: int = 2
    pods_stale: int = 0

    def __post_init__(self) -> None:
        # A metric map on the wire is gpuscale.wire.MetricValues.
        self.averages = MetricValues.of(self.averages)


def query(metric: str = "gpu_util", value: ValueKind = ValueKind.AVERAGE) -> WorkloadQuery:
    return WorkloadQuery(BERT, metric, value)


# --- trigger metadata ------------------------------------------------------------------------------


def test_metadata_with_defaults() -> None:
    q = parse_scaler_metadata(
        {"scalerAddress": "a:1", "workload": "bert", "metric": "gpu_util", "target": "70"}, "ml"
    )
    assert q == ScalerQuery(WorkloadQuery(WorkloadKey("ml", "Deployment", "bert"), "gpu_util"), 70.0, 0.0)
    assert q.metric_name == "gpuscale-gpu_util"


def test_metadata_with_everything() -> None:
    q = parse_scaler_metadata(
        {
            "workload": "StatefulSet/llm",
            "namespace": "serving",
            "metric": "sm_active",
            "target": "0.5e2",
            "activationTarget": "5",
            "value": "total",
        },
        "ml",
    )
    assert q.query == WorkloadQuery(
        WorkloadKey("serving", "StatefulSet", "llm"), "sm_active", ValueKind.TOTAL
    )
    assert (q.target, q.activation_target, q.metric_name) == (50.0, 5.0, "gpuscale-sm_active-total")


def test_every_metadata_problem_at_once() -> None:
    with pytest.raises(QueryError) as info:
        parse_scaler_metadata(
            {
                "workload": "Job/x",
                "metric": "util",
                "target": "nan",
                "activationTarget": "-1",
                "value": "max",
                "query": "q",
            },
            "",
        )
    problems = info.value.problems
    assert len(problems) == 7, problems
    joined = "; ".join(problems)
    for expected in (
        "unknown metadata query",
        "kind must be one of Deployment, StatefulSet, got 'Job'",
        "namespace is required",
        "metric must be one of",
        "target must be greater than 0",
        "activationTarget must be at least 0",
        "value must be average or total",
    ):
        assert expected in joined


def test_missing_metadata_is_named() -> None:
    with pytest.raises(QueryError) as info:
        parse_scaler_metadata({}, "default")
    assert [p.split(" ")[0] for p in info.value.problems] == ["workload", "metric", "target"]


# --- freshness ---------------------------------------------------------------------------------------


def test_a_fresh_reading_and_its_total() -> None:
    store = LatestMetrics(max_age_s=10)
    assert store.observe(Message(averages={"gpu_util": 80.0, "power_w": 300.0}, pods_fresh=3), NOW)
    reading = store.read(query(), NOW + 9.9)
    assert (reading.value, reading.pods_fresh, reading.age_s) == (80.0, 3, pytest.approx(9.9))
    assert store.read(query("power_w", ValueKind.TOTAL), NOW).value == 900.0


@pytest.mark.parametrize(
    ("message", "at", "metric", "reason"),
    [
        (None, NOW, "gpu_util", NO_METRICS),
        (Message(), NOW + 10.5, "gpu_util", STALE),
        (Message(), NOW - 3600, "gpu_util", STALE),  # this clock set back past the arrival: age unknown
        (Message(pods_fresh=0, pods_stale=2, averages={}), NOW, "gpu_util", NO_FRESH_PODS),
        (Message(), NOW, "sm_active", METRIC_NOT_REPORTED),
    ],
)
def test_nothing_stale_is_served(message: Message | None, at: float, metric: str, reason: str) -> None:
    store = LatestMetrics(max_age_s=10)
    if message is not None:
        store.observe(message, NOW)
    with pytest.raises(Unavailable) as info:
        store.read(query(metric), at)
    assert info.value.reason == reason


def test_freshness_is_judged_on_arrival_not_on_the_senders_clock() -> None:
    store = LatestMetrics(max_age_s=10)
    store.observe(Message(ts=NOW - 3600), NOW)  # the sender's clock is an hour behind
    assert store.read(query(), NOW + 5).value == 80.0
    store.observe(Message(ts=NOW + 3600), NOW + 1)  # ...or ahead: still judged on arrival
    with pytest.raises(Unavailable):
        store.read(query(), NOW + 12)


def test_a_reordered_message_does_not_replace_a_newer_one() -> None:
    store = LatestMetrics(max_age_s=10)
    store.observe(Message(ts=NOW, averages={"gpu_util": 80.0}), NOW)
    assert not store.observe(Message(ts=NOW - 2, averages={"gpu_util": 10.0}), NOW + 0.1)
    assert store.read(query(), NOW + 0.2).value == 80.0
    # A sender whose clock jumped back is followed once the kept message is old.
    assert store.observe(Message(ts=NOW - 60, averages={"gpu_util": 20.0}), NOW + 11)
    assert store.read(query(), NOW + 11).value == 20.0


def test_after_both_clocks_are_set_back_the_next_message_is_served() -> None:
    """An NTP step back on a node moves the sender's ``ts`` and this arrival clock together:
    the kept message then arrived "in the future", its age unknown and never served. Read as
    reordered, every message after it was ignored until this clock caught up (an hour here),
    and the workload had no metric for KEDA all that time."""
    store = LatestMetrics(max_age_s=10)
    store.observe(Message(ts=NOW, averages={"gpu_util": 80.0}), NOW)
    back = NOW - 3600
    assert store.observe(Message(ts=back + 2, averages={"gpu_util": 30.0}), back + 2)
    assert store.read(query(), back + 3).value == 30.0


def test_memory_is_bounded() -> None:
    store = LatestMetrics(max_age_s=10, max_workloads=3)
    for i in range(5):
        store.observe(Message(name=f"w{i}"), NOW + i)
    assert len(store) == 3
    assert store.snapshot(WorkloadKey("default", "Deployment", "w0")) is None
    assert store.expire(NOW + 4 + store.forget_after_s + 1) == 3


def test_a_clock_set_back_further_than_the_memory_forgets_what_it_kept() -> None:
    """Its age unknown, a snapshot is never served again (read says stale); kept, a workload
    that stopped publishing would stay until this clock caught up with its arrival."""
    store = LatestMetrics(max_age_s=10)
    store.observe(Message(name="live"), NOW)
    store.observe(Message(name="gone"), NOW)
    assert store.expire(NOW - 5) == 0, "a step back within the memory forgets nothing"
    assert store.expire(NOW - store.forget_after_s - 1) == 2
    store.observe(Message(name="live"), NOW - store.forget_after_s - 1)
    live = WorkloadQuery(WorkloadKey("default", "Deployment", "live"), "gpu_util", ValueKind.AVERAGE)
    assert store.read(live, NOW - store.forget_after_s).value == 80.0
    assert len(store) == 1


def test_activity() -> None:
    store = LatestMetrics(max_age_s=10)
    store.observe(Message(averages={"gpu_util": 5.0}), NOW)
    assert store.is_active(ScalerQuery(query(), 70.0, 4.0), NOW)
    assert not store.is_active(ScalerQuery(query(), 70.0, 5.0), NOW)


# --- the external metrics API ---------------------------------------------------------------------


def test_request_parsing() -> None:
    assert external_api.parse_request("ml", "gpuscale-gpu_util", "workload=bert") == WorkloadQuery(
        WorkloadKey("ml", "Deployment", "bert"), "gpu_util"
    )
    assert external_api.parse_request(
        "ml", "gpuscale-power_w-total", "kind=StatefulSet,workload=llm"
    ) == WorkloadQuery(WorkloadKey("ml", "StatefulSet", "llm"), "power_w", ValueKind.TOTAL)
    with pytest.raises(external_api.ApiError) as info:
        external_api.parse_request("ml", "gpuscale-gpu_util", "workload!=bert")
    assert info.value.code == 400
    with pytest.raises(external_api.ApiError) as info:
        external_api.parse_request("ml", "gpuscale-gpu_util", "workload=bert,workload=other")
    assert "names workload twice" in info.value.body["message"]
    with pytest.raises(external_api.ApiError) as info:
        external_api.parse_request("ml", "gpuscale-temp", "workload=bert")
    assert (info.value.code, info.value.body["reason"]) == (404, "NotFound")


def test_external_metric_names_round_trip() -> None:
    with pytest.raises(QueryError):
        parse_external_metric("ml", "gpuscale-gpu_util-totals", {"workload": "x"})
    q = parse_external_metric("ml", "gpuscale-sm_util-total", {"workload": "StatefulSet/x"})
    assert (q.workload.kind, q.metric_name) == ("StatefulSet", "gpuscale-sm_util-total")


@pytest.mark.parametrize(
    ("value", "text"), [(83.5, "83500m"), (70.0, "70"), (0.0, "0"), (0.0004, "0"), (1234.5678, "1234568m")]
)
def test_quantities(value: float, text: str) -> None:
    assert external_api.quantity(value) == text


def test_unavailable_maps_to_404_or_503() -> None:
    assert external_api.unavailable(Unavailable(NO_METRICS, "x")).code == 404
    assert external_api.unavailable(Unavailable(STALE, "x")).code == 503
    assert external_api.unavailable(Unavailable(NO_FRESH_PODS, "x")).code == 503
