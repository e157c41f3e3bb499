"""The Decider's bookkeeping without servers: our own adapters stand in for
NATS and Kubernetes (a list publisher, a dict replica source, a list status sink)."""

from __future__ import annotations

from typing import Any

from gpuscale import codec, subjects
from gpuscale.kube import NotFound, ScaleTargetRef
from gpuscale.metrics import ServiceMetrics
from gpuscale.wire import Decision, MetricValues, PodMetrics, WorkloadMetrics
from gpuscale_decider.core.policy import GPUScaler, parse_gpuscaler
from gpuscale_decider.decider import Decider
from gpuscale_decider.policies import parse_documents
from gpuscale_decider.sources import MemoryStateStore, StaticReplicaSource

NOW = 1_800_000_000.0
KEY = subjects.WorkloadKey("default", "Deployment", "bert")


class ListStatus:
    def __init__(self) -> None:
        self.writes: list[tuple[str, str, dict[str, Any]]] = []

    def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.writes.append((namespace, name, status))

    def last(self, name: str) -> dict[str, Any]:
        return [s for _, n, s in self.writes if n == name][-1]


class MissingTarget(StaticReplicaSource):
    async def replicas(self, ref: ScaleTargetRef, now: float) -> int:
        raise NotFound(404, f"deployments.apps {ref.name!r} not found")


def policy(name: str = "bert", target: str = "bert", **spec: Any) -> GPUScaler:
    body: dict[str, Any] = {
        "scaleTargetRef": {"kind": "Deployment", "name": target},
        "maxReplicas": 10,
        "metrics": [{"name": "gpu_util", "target": 70}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
    }
    body.update(spec)
    return parse_gpuscaler({"metadata": {"name": name, "namespace": "default"}, "spec": body})


def message(util: float, fresh: int, ts: float = NOW) -> tuple[str, bytes]:
    m = WorkloadMetrics(
        "default",
        "Deployment",
        "bert",
        ts,
        30.0,
        tuple(PodMetrics(f"bert-{i}", MetricValues(gpu_util=util), ts) for i in range(fresh)),
        MetricValues(gpu_util=util),
        fresh,
        0,
    )
    return subjects.metrics(KEY), codec.encode(m)


def make(
    replicas: StaticReplicaSource | None = None,
) -> tuple[Decider, list[Decision], ListStatus, dict[str, float]]:
    published: list[Decision] = []
    clock = {"now": NOW}

    async def publish(d: Decision) -> None:
        published.append(d)

    status = ListStatus()
    decider = Decider(
        ServiceMetrics("test-decider"),
        replicas or StaticReplicaSource(default=2),
        MemoryStateStore(),
        publish,
        status=status,
        clock=lambda: clock["now"],
        actuation_timeout_s=30.0,
    )
    return decider, published, status, clock


async def test_one_decision_then_quiet_until_the_target_moves_or_the_timeout() -> None:
    source = StaticReplicaSource(default=2)
    decider, published, _, clock = make(source)
    decider.set_policies([policy()], [])
    await decider.handle_metrics(*message(83.0, 2))
    await decider.idle()
    assert [(d.from_replicas, d.to_replicas) for d in published] == [(2, 3)]
    for _ in range(5):
        clock["now"] += 2
        await decider.handle_metrics(*message(83.0, 2, clock["now"]))
        await decider.idle()
    assert len(published) == 1  # the actuator is working on it
    clock["now"] = NOW + 31  # nothing happened within the actuation timeout: decide afresh
    await decider.handle_metrics(*message(83.0, 2, clock["now"]))
    await decider.idle()
    assert len(published) == 2


async def test_a_second_gpuscaler_on_the_same_target_is_told_why_not() -> None:
    decider, published, status, _ = make()
    decider.set_policies([policy("bert"), policy("bert-copy", "bert")], [])
    able = {c["type"]: c for c in status.last("bert-copy")["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "ConflictingController")
    assert "GPUScaler default/bert already scales Deployment/bert" in able["message"]
    await decider.handle_metrics(*message(83.0, 2))
    await decider.idle()
    assert len(published) == 1
    # The owner goes away: the second takes over.
    decider.remove_policy("default", "bert")
    assert decider.workloads[KEY].scaler.name == "bert-copy"


async def test_conflicting_hpa_blocks_decisions_and_is_reported() -> None:
    decider, published, status, _ = make()
    decider.set_policies([policy()], [])
    decider.set_conflicts({KEY: "HorizontalPodAutoscaler default/bert"})
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    assert published == []
    able = {c["type"]: c for c in status.last("bert")["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "ConflictingController")
    decider.set_conflicts({})
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    assert len(published) == 1


async def test_missing_target_is_a_condition_not_a_crash() -> None:
    decider, published, status, _ = make(MissingTarget())
    decider.set_policies([policy()], [])
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    assert published == []
    able = {c["type"]: c for c in status.last("bert")["conditions"]}["AbleToScale"]
    assert (able["reason"], able["message"]) == ("FailedGetScale", "the target does not exist")


async def test_policy_edits_apply_and_deletes_forget() -> None:
    decider, published, _, _ = make()
    decider.set_policies([policy(maxReplicas=10)], [])
    decider.upsert_policy(policy(maxReplicas=2, minReplicas=2))
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    assert published == []  # already at the new max
    valid, invalid = parse_documents([{"metadata": {"name": "bert"}, "spec": {"maxReplicas": 0}}])
    decider.set_policies(valid, invalid)
    assert KEY not in decider.workloads
    assert "default/bert" in dict(decider.policy_error_summary())
    decider.set_policies([], [])
    assert decider.policy_error_summary() == []


async def test_metrics_for_unknown_workloads_are_counted_not_rejected() -> None:
    decider, published, _, _ = make()
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    value = decider.metrics.registry.get_sample_value("gpuscale_decider_metrics_without_policy_total")
    assert value == 1
    assert published == []


def test_state_keys_are_valid_kv_keys_and_distinct() -> None:
    import re

    from gpuscale_decider.sources import state_key

    keys = {
        state_key(subjects.WorkloadKey("ml", "Deployment", name))
        for name in ("bert.v2", "bert-v2", "bert~2Ev2", "bert_v2")
    }
    assert len(keys) == 4
    assert all(re.fullmatch(r"[-/_=.a-zA-Z0-9]+", k) for k in keys)
