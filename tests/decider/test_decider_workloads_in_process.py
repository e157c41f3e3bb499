"""The Decider's shell without servers: our own adapters stand in for NATS
and Kubernetes (a list publisher, a dict scale source, static pods, a list
status sink)."""

from __future__ import annotations

from typing import Any

from gpuscale import codec, subjects
from gpuscale.kube import NotFound, ScaleState, ScaleTargetRef
from gpuscale.metrics import ServiceMetrics
from gpuscale.policy import GPUScaler, parse_gpuscaler
from gpuscale.policyfile import parse_documents
from gpuscale.wire import Action, Decision, MetricValues, PodMetrics, WorkloadMetrics
from gpuscale_decider.core.reconcile import Config
from gpuscale_decider.decider import Decider
from gpuscale_decider.sources import MemoryStateStore, StaticPods, StaticScaleSource

NOW = 1_800_000_000.0
KEY = subjects.WorkloadKey("default", "Deployment", "bert")


class ListStatus:
    def __init__(self) -> None:
        self.writes: list[tuple[str, str, dict[str, Any]]] = []

    def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self.writes.append((namespace, name, status))

    def last(self, name: str) -> dict[str, Any]:
        return [s for _, n, s in self.writes if n == name][-1]


class MissingTarget(StaticScaleSource):
    async def read(self, ref: ScaleTargetRef, now: float) -> ScaleState:
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
    scales: StaticScaleSource | None = None,
) -> tuple[Decider, list[Decision], ListStatus, dict[str, float]]:
    published: list[Decision] = []
    clock = {"now": NOW}

    async def publish(d: Decision) -> None:
        published.append(d)

    status = ListStatus()
    scales = scales or StaticScaleSource(default=2)
    decider = Decider(
        ServiceMetrics("test-decider"),
        scales,
        StaticPods(scales),
        MemoryStateStore(),
        publish,
        status=status,
        clock=lambda: clock["now"],
        config=Config(convergence_grace_s=30.0),
    )
    return decider, published, status, clock


async def test_one_desired_count_written_while_the_scale_lags_and_the_next_from_the_scale() -> None:
    scales = StaticScaleSource(default=2)
    decider, published, _, clock = make(scales)
    decider.registry.set_policies([policy()], [])
    await decider.handle_metrics(*message(83.0, 2))
    await decider.idle()
    assert [(d.from_replicas, d.to_replicas) for d in published] == [(2, 3)]
    for _ in range(5):  # /scale still shows 2: 3 stays desired, nothing is written again
        clock["now"] += 2
        await decider.handle_metrics(*message(83.0, 2, clock["now"]))
        await decider.idle()
    clock["now"] = NOW + 31  # past the grace, /scale still at 2: 3 is still what the load wants
    await decider.handle_metrics(*message(83.0, 2, clock["now"]))
    await decider.idle()
    assert len(published) == 1
    scales.set(decider.workloads[KEY].ref, 3)  # the actuator got there
    clock["now"] += 2
    await decider.handle_metrics(*message(95.0, 3, clock["now"]))
    await decider.idle()
    assert [(d.from_replicas, d.to_replicas) for d in published] == [(2, 3), (3, 5)]


async def test_a_second_gpuscaler_on_the_same_target_is_told_why_not() -> None:
    decider, published, status, _ = make()
    decider.registry.set_policies([policy("bert"), policy("bert-copy", "bert")], [])
    able = {c["type"]: c for c in status.last("bert-copy")["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "ConflictingController")
    assert "GPUScaler default/bert already scales Deployment/bert" in able["message"]
    await decider.handle_metrics(*message(83.0, 2))
    await decider.idle()
    assert len(published) == 1
    # The owner goes away: the second takes over.
    decider.registry.remove_policy("default", "bert")
    assert decider.workloads[KEY].scaler.name == "bert-copy"


async def test_conflicting_hpa_blocks_decisions_and_is_reported() -> None:
    decider, published, status, _ = make()
    decider.registry.set_policies([policy()], [])
    decider.registry.set_conflicts({KEY: "HorizontalPodAutoscaler default/bert"})
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    assert published == []
    able = {c["type"]: c for c in status.last("bert")["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "ConflictingController")
    decider.registry.set_conflicts({})
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    assert len(published) == 1


async def test_missing_target_is_a_condition_not_a_crash() -> None:
    decider, published, status, _ = make(MissingTarget())
    decider.registry.set_policies([policy()], [])
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    assert published == []
    able = {c["type"]: c for c in status.last("bert")["conditions"]}["AbleToScale"]
    assert (able["reason"], able["message"]) == ("FailedGetScale", "the target does not exist")


async def test_policy_edits_apply_and_deletes_forget() -> None:
    decider, published, _, _ = make()
    decider.registry.set_policies([policy(maxReplicas=10)], [])
    decider.registry.upsert_policy(policy(maxReplicas=2, minReplicas=2))
    await decider.handle_metrics(*message(95.0, 2))
    await decider.idle()
    assert published == []  # already at the new max
    valid, invalid = parse_documents([{"metadata": {"name": "bert"}, "spec": {"maxReplicas": 0}}])
    decider.registry.set_policies(valid, invalid)
    assert KEY not in decider.workloads
    assert "default/bert" in dict(decider.registry.errors())
    decider.registry.set_policies([], [])
    assert decider.registry.errors() == []


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


async def test_the_actuator_s_failure_is_said_on_the_status_and_holds_no_decision() -> None:
    """The action report only names, on the status, why the desired count is not reached;
    the decider never waits for it, and reads the outcome from /scale."""
    decider, published, status, clock = make(StaticScaleSource(default=2))
    decider.registry.set_policies([policy()], [])
    await decider.handle_metrics(*message(83.0, 2))
    await decider.idle()
    first = published[0]
    failed = Action(
        first.id, clock["now"], "failed", 2, 2, "the API server said no", "default", "Deployment", "bert"
    )
    await decider.handle_action(subjects.actions(KEY), codec.encode(failed))
    clock["now"] += 2
    await decider.handle_metrics(*message(83.0, 2, clock["now"]))
    await decider.idle()
    assert len(published) == 1  # 3 is still desired: the actuator tries again at its resync
    able = {c["type"]: c for c in status.last("bert")["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "FailedRescale")
    assert "the API server said no" in able["message"]
    other = Action("someone-else", clock["now"], "applied", 2, 3)
    await decider.handle_action(subjects.actions(KEY), codec.encode(other))
    state = decider.workloads[KEY].memory
    assert state is not None
    assert state.state.last_failure == "the API server said no"  # not ours: ignored
    await decider.handle_action(subjects.actions(KEY), b"\xc1 not msgpack")
    assert (
        decider.metrics.registry.get_sample_value(
            "gpuscale_messages_rejected_total", {"kind": "actions", "reason": "undecodable"}
        )
        == 1
    )


async def test_a_clock_set_back_an_hour_still_re_evaluates_at_the_next_tick() -> None:
    """Waiting the skew out, the periodic evaluation (staleness, fallback, timeouts) stalled
    for the hour: metrics that arrived "after now" must be judged, and said, at once."""
    decider, _, status, clock = make()
    decider.registry.set_policies([policy()], [])
    await decider.handle_metrics(*message(70.0, 2))
    await decider.idle()
    clock["now"] = NOW - 3600.0
    await decider.tick(5.0)
    await decider.idle()
    active = {c["type"]: c for c in status.last("bert")["conditions"]}["ScalingActive"]
    assert active["status"] == "False"
    assert "clock was set back 3600 s" in active["message"]


async def test_a_cached_scale_is_read_again_after_a_clock_set_back() -> None:
    """Waiting the skew out, the replica count read before the step was used for the hour."""
    from gpuscale_decider.sources import KubeScaleSource

    reads: list[int] = []

    class Client:
        async def get(self, ref: ScaleTargetRef) -> ScaleState:
            reads.append(len(reads) + 2)
            return ScaleState(reads[-1], str(len(reads)), "app=bert", reads[-1])

    source = KubeScaleSource(None, ttl_s=1.0)  # type: ignore[arg-type]  # the client is replaced
    source.client = Client()  # type: ignore[assignment]
    ref = ScaleTargetRef("apps/v1", "Deployment", "bert", "default")
    assert (await source.read(ref, NOW)).replicas == 2
    assert (await source.read(ref, NOW + 0.5)).replicas == 2  # cached
    assert (await source.read(ref, NOW - 3600.0)).replicas == 3
