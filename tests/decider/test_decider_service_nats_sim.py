"""The decider service against a real nats-server and kube-sim."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuscale import codec, natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.kube import new_api_client, request_json
from gpuscale.natsio import NATS, jetstream
from gpuscale.wire import Decision, MetricValues, PodMetrics, WorkloadMetrics
from gpuscale_kubesim import KubeSim

from ..waiting import eventually, holds_for
from .decider_harness import (
    deployment,
    gpuscaler,
    metrics_message,
    publish_metrics,
    running_decider,
    running_pods,
    settings_for,
    store_predating_the_crd_rules,
    watch_decisions,
    write_policies,
)

pytestmark = pytest.mark.integration


async def scale_to(sim: KubeSim, name: str, replicas: int) -> None:
    """Play the actuator: PATCH the scale subresource."""
    api = await new_api_client(Path(sim.kubeconfig_path))
    try:
        await request_json(
            api,
            "PATCH",
            f"/apis/apps/v1/namespaces/default/deployments/{name}/scale",
            {"spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )
    finally:
        await api.close()


async def test_metrics_in_desired_count_out_with_its_record_and_reason(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(deployment("bert", 2))
    policies = write_policies(tmp_path / "policies.yaml", gpuscaler("bert", "bert"))
    settings = settings_for(
        nats_server.url, kube_sim.kubeconfig_path, policies=policies, actuation_timeout=30.0
    )
    headers: list[dict[str, str]] = []

    async def on_raw(msg: Any) -> None:
        headers.append(dict(msg.headers or {}))

    raw_sub = await nats_client.subscribe(subjects.DECISIONS_ALL, cb=on_raw)
    async with running_decider(settings) as running, watch_decisions(nats_client) as watch:
        await publish_metrics(
            nats_client, metrics_message("bert", 83.0, 2, pods=await running_pods(kube_sim, "bert", 2))
        )
        decision = await watch.next(1)
        assert (decision.from_replicas, decision.to_replicas) == (2, 3)
        assert (
            "gpu_util 83.0 over target 70 (ratio 1.19) on 2 of 2 pods: ceil(2 × 1.19) = 3" in decision.reason
        )
        assert decision.inputs["averages"] == {"gpu_util": 83.0}
        assert decision.inputs["targets"] == {"gpu_util": 70}
        assert decision.inputs["pods_fresh"] == 2
        assert decision.inputs["recommendation"] == 3
        await eventually(lambda: headers, what="raw decision")
        assert headers[0].get("Nats-Msg-Id") == decision.id

        # The desired count is state in its bucket, and the record of the change is in its stream.
        async def stored() -> int:
            return (await jetstream(nats_client).stream_info(subjects.DECISIONS_STREAM)).state.messages

        assert await eventually(stored, what="the decision stored in its stream") == 1
        bucket = await jetstream(nats_client).key_value(subjects.DESIRED_BUCKET)
        entry = await bucket.get(subjects.desired_key(subjects.WorkloadKey("default", "Deployment", "bert")))
        assert entry.value is not None
        assert codec.decode(entry.value, Decision, time.time()) == decision

        # /scale still shows 2 (no actuator here): the same load writes nothing again.
        for _ in range(5):
            await publish_metrics(
                nats_client, metrics_message("bert", 83.0, 2, pods=await running_pods(kube_sim, "bert", 2))
            )
        await eventually(lambda: running.metric("gpuscale_messages_in_total", kind="metrics") >= 6)
        # All six messages were handled; a decision would be on its way now. 0.5 s
        # is many times a publish's round trip on loopback.
        await holds_for(lambda: len(watch.decisions) == 1, 0.5, what="one desired count while /scale lags")

        # The actuator applies it; the decider goes on from the new count.
        await scale_to(kube_sim, "bert", 3)
        await publish_metrics(
            nats_client, metrics_message("bert", 100.0, 3, pods=await running_pods(kube_sim, "bert", 3))
        )
        second = await watch.next(2)
        assert (second.from_replicas, second.to_replicas) == (3, 5)
        # Counted once its publish is acknowledged, which may come after the subscriber saw it.
        await eventually(lambda: running.metric("gpuscale_decider_decisions_total", direction="up") == 2)
    await raw_sub.unsubscribe()


async def test_restart_keeps_the_scale_down_stabilization_window(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    """Decider 1 sees the load at target on 4 replicas; after a restart,
    decider 2 holds a scale-down until 300 s after decider 1's history, not
    300 s after its own start: the window survived in the KV bucket."""
    await kube_sim.create(deployment("bert", 4))
    policies = write_policies(tmp_path / "policies.yaml", gpuscaler("bert", "bert", behavior={}))
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies, tick_interval=3600)
    t0 = time.time()
    async with running_decider(settings) as first:
        for _ in range(3):
            await publish_metrics(
                nats_client, metrics_message("bert", 70.0, 4, pods=await running_pods(kube_sim, "bert", 4))
            )
        await eventually(
            lambda: first.metric("gpuscale_decider_evaluations_total") >= 3, what="3 evaluations"
        )
    offset = {"s": t0 + 250.0 - time.time()}
    async with running_decider(settings) as second, watch_decisions(nats_client) as watch:
        second.decider.clock = lambda: time.time() + offset["s"]
        # 250 s later: the load halves, and the window (anchored at t0) holds it.
        await publish_metrics(
            nats_client,
            metrics_message(
                "bert", 35.0, 4, pods=await running_pods(kube_sim, "bert", 4), ts=time.time() + offset["s"]
            ),
        )
        await eventually(lambda: second.metric("gpuscale_decider_evaluations_total") >= 1, what="evaluation")
        evaluation = second.decider.workloads[
            subjects.WorkloadKey("default", "Deployment", "bert")
        ].last_evaluation
        assert evaluation is not None
        assert not evaluation.change
        assert "held by the 300 s scale-down stabilization window at 4" in evaluation.reason
        # 320 s after decider 1's history (70 s after decider 2 started): released.
        # A decider that forgot would start a fresh window and still hold.
        offset["s"] = t0 + 320.0 - time.time()
        await publish_metrics(
            nats_client,
            metrics_message(
                "bert", 35.0, 4, pods=await running_pods(kube_sim, "bert", 4), ts=time.time() + offset["s"]
            ),
        )
        decision = await watch.next(1)
        assert (decision.from_replicas, decision.to_replicas) == (4, 2)


def queue_message(
    name: str, pods: Sequence[str], waiting: float, arriving: float, finished: float, ts: float
) -> WorkloadMetrics:
    """What the aggregator sends for pods with ``waiting`` queued and the engines' flows
    (requests/s per pod), the same over the window and its recent span."""
    values = MetricValues(
        requests_waiting=waiting, request_arrival_rate=arriving, request_completion_rate=finished
    )
    recent = values
    return WorkloadMetrics(
        namespace="default",
        kind="Deployment",
        name=name,
        ts=ts,
        window_s=30.0,
        pods=tuple(PodMetrics(pod, values, ts, recent=recent) for pod in pods),
        averages=values,
        pods_fresh=len(pods),
        pods_stale=0,
        recent_s=3.0,
    )


async def test_a_new_decider_keeps_the_queue_s_capacity_the_last_one_measured(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    """Decider 1 sees 3 pods with a queue finish 6 requests/s each; decider 2, after a restart,
    sees the queue gone with 13 requests/s arriving. HPA's answer on the empty queue is 1; the
    service rate, kept in the KV bucket, keeps the 3 that serve 13/s at 83 % busy (2.6 pods). A decider that forgot would
    cut to 1 and meet the queue again."""
    await kube_sim.create(deployment("llm", 3))
    policies = write_policies(
        tmp_path / "policies.yaml",
        gpuscaler(
            "llm",
            "llm",
            metrics=[{"name": "requests_waiting", "target": 4}],
            behavior={"scaleDown": {"stabilizationWindowSeconds": 0}},
        ),
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies, tick_interval=3600)
    pods = await running_pods(kube_sim, "llm", 3)

    key = subjects.WorkloadKey("default", "Deployment", "llm")

    async def evaluated(
        running: Any, waiting: float, arriving: float, finished: float, saying: str = ""
    ) -> bool:
        """Evaluated once (with ``saying`` in its reason); until then the message goes out
        again (a busy machine may start the decider's pod watch after the first one arrived,
        and an evaluation without the pods measures nothing)."""
        workload = running.decider.workloads.get(key)
        last = None if workload is None else workload.last_evaluation
        if (
            running.metric("gpuscale_decider_evaluations_total") >= 1
            and last is not None
            and saying in last.reason
        ):
            return True
        message = queue_message("llm", pods, waiting, arriving, finished, time.time())
        await publish_metrics(nats_client, message)
        await asyncio.sleep(0.5)
        return False

    async with running_decider(settings) as first:
        # At the target (4 waiting), 5 arrive and 6 finish per pod, about the 83 % a target of 4
        # holds a pod at: no change, the capacity measured.
        await eventually(
            lambda: evaluated(first, 4.0, 5.0, 6.0, "measured on a pod with a queue"), 30, "evaluation"
        )
    async with running_decider(settings) as second, watch_decisions(nats_client) as watch:
        await eventually(lambda: evaluated(second, 0.0, 13.0 / 3, 13.0 / 3), 30, "evaluation")
        evaluation = second.decider.workloads[key].last_evaluation
        assert evaluation is not None
        assert evaluation.desired == 3, evaluation.reason
        assert "a pod serves 6.0/s at its limit, as last measured" in evaluation.reason
        assert not watch.decisions
        # Fewer arrive: down to the 2 that serve them, not HPA's 1.
        await publish_metrics(nats_client, queue_message("llm", pods, 0.0, 7.0 / 3, 7.0 / 3, time.time()))
        decision = await watch.next(1)
        assert (decision.from_replicas, decision.to_replicas) == (3, 2), decision.reason


async def test_malformed_metrics_are_counted_and_never_crash(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(deployment("bert", 1))
    policies = write_policies(
        tmp_path / "policies.yaml", gpuscaler("bert", "bert", metrics=[{"name": "gpu_util", "target": 20}])
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    key = subjects.WorkloadKey("default", "Deployment", "bert")
    good = metrics_message("bert", 23.0, 1, pods=await running_pods(kube_sim, "bert", 1))
    async with running_decider(settings) as running, watch_decisions(nats_client) as watch:
        await nats_client.publish(subjects.metrics(key), b"\xc1 not msgpack")
        await nats_client.publish(subjects.metrics(key), codec.encode_raw({"v": 2, "namespace": "default"}))
        await nats_client.publish(subjects.metrics(key), codec.encode_raw([1, 2, 3]))
        wrong_place = metrics_message("other", 23.0, 1)
        await nats_client.publish(subjects.metrics(key), codec.encode(wrong_place))
        nan = good.to_wire()
        nan["averages"] = {"gpu_util": float("nan")}
        await nats_client.publish(subjects.metrics(key), codec.encode_raw(nan))
        await nats_client.publish("gpuscale.v1.metrics.too.short", codec.encode(good))
        await natsio.flush(nats_client)

        def rejected(reason: str) -> float:
            return running.metric("gpuscale_messages_rejected_total", kind="metrics", reason=reason)

        reasons = (
            "bad_subject",
            "undecodable",
            "wrong_version",
            "not_a_map",
            "subject_mismatch",
            "not_finite",
        )

        def each_counted_once() -> bool:
            counted = {r: rejected(r) for r in reasons}
            assert counted == dict.fromkeys(reasons, 1.0), counted
            return True

        await eventually(each_counted_once, 30, "each rejection counted once")
        # Still alive and deciding: the seeds' example, 1 replica at 23 vs 20 -> 2.
        await publish_metrics(nats_client, good)
        decision = await watch.next(1)
        assert decision.to_replicas == 2
        assert not running.task.done()


async def test_invalid_policies_in_a_file_are_reported_and_the_valid_ones_work(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(deployment("bert", 2))
    bad = gpuscaler("broken", "bert", max_replicas=1, min_replicas=3)
    worse = gpuscaler("worse", "bert", metrics=[{"name": "gpu_fun", "target": 0}])
    policies = write_policies(
        tmp_path / "policies.yaml", bad, "just a string", worse, gpuscaler("bert", "bert")
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    async with running_decider(settings) as running, watch_decisions(nats_client) as watch:
        fields = {name: err.fields for name, err in running.decider.registry.errors()}
        assert "spec.maxReplicas" in fields["default/broken"]
        assert {"spec.metrics[0].name", "spec.metrics[0].target"} <= set(fields["default/worse"])
        assert any("object" in f for f in fields["default/<document 2>"])
        assert running.metric("gpuscale_decider_invalid_policies_total", field="spec.maxReplicas") == 1
        assert running.metric("gpuscale_decider_policies", state="invalid") == 3
        assert running.metric("gpuscale_decider_policies", state="valid") == 1
        await publish_metrics(
            nats_client, metrics_message("bert", 83.0, 2, pods=await running_pods(kube_sim, "bert", 2))
        )
        assert (await watch.next(1)).to_replicas == 3
        assert not running.task.done()


def hpa(name: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
                }
            ],
        },
    }


def conditions_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


async def test_gpuscaler_objects_get_status_invalid_ones_a_condition_and_conflicts_no_decision(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    await kube_sim.create(deployment("bert", 2))
    await kube_sim.create(deployment("llama", 2))
    await kube_sim.create(gpuscaler("bert", "bert"))
    await store_predating_the_crd_rules(
        kube_sim,
        gpuscaler("broken", "bert-two", max_replicas=1, min_replicas=3),
        gpuscaler("broken", "bert-two"),
    )
    await kube_sim.create(hpa("llama-hpa", "llama"))
    await kube_sim.create(gpuscaler("llama", "llama"))
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, leader_election=True)

    def scaler(name: str) -> dict[str, Any]:
        return kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", name)

    async with running_decider(settings) as running, watch_decisions(nats_client) as watch:
        await eventually(lambda: running.decider.is_leader(), what="leadership")
        lease = kube_sim.get("coordination.k8s.io/v1", "Lease", "gpuscale-decider")
        assert lease["spec"]["holderIdentity"] == "decider-test"

        # The invalid object gets a condition naming the field, and is not acted on.
        await eventually(lambda: "AbleToScale" in conditions_of(scaler("broken")), what="invalid status")
        able = conditions_of(scaler("broken"))["AbleToScale"]
        assert (able["status"], able["reason"]) == ("False", "InvalidPolicy")
        assert "spec.maxReplicas" in able["message"]

        await eventually(lambda: running.decider.workloads, what="policies listed")
        await publish_metrics(
            nats_client, metrics_message("bert", 83.0, 2, pods=await running_pods(kube_sim, "bert", 2))
        )
        decision = await watch.next(1)
        assert (decision.name, decision.to_replicas) == ("bert", 3)
        await eventually(
            lambda: (scaler("bert").get("status") or {}).get("targets") == "83/70", what="bert status"
        )
        status = scaler("bert")["status"]
        assert status["reference"] == "Deployment/bert"
        # 3 is desired, and stays desired while /scale (no actuator here) shows 2.
        able = conditions_of({"status": status})["AbleToScale"]  # the same read as status
        assert (status["desiredReplicas"], able["reason"]) == (3, "ReadyForNewScale")
        assert status["currentReplicas"] == 2
        # As HPA's: the time gpuscale set the new count (HPA's is its write of spec.replicas).
        assert status.get("lastScaleTime")
        assert conditions_of(scaler("bert"))["ScalingActive"]["reason"] == "ValidMetricFound"
        await scale_to(kube_sim, "bert", 3)  # the actuator's part
        await publish_metrics(
            nats_client, metrics_message("bert", 70.0, 3, pods=await running_pods(kube_sim, "bert", 3))
        )
        await eventually(
            lambda: (scaler("bert").get("status") or {}).get("currentReplicas") == 3, what="the new count"
        )

        # Another controller on llama: a condition, and no decision.
        await eventually(
            lambda: (
                conditions_of(scaler("llama")).get("AbleToScale", {}).get("reason") == "ConflictingController"
            ),
            what="conflict condition",
        )
        seen = running.metric("gpuscale_messages_in_total", kind="metrics")
        for _ in range(3):
            await publish_metrics(
                nats_client, metrics_message("llama", 95.0, 2, pods=await running_pods(kube_sim, "llama", 2))
            )
        await eventually(lambda: running.metric("gpuscale_messages_in_total", kind="metrics") >= seen + 3)
        # Handled, and a decision would have been published within milliseconds.
        await holds_for(lambda: [d.name for d in watch.decisions] == ["bert"], 1.0, what="no llama decision")
        able = conditions_of(scaler("llama"))["AbleToScale"]
        assert able["status"] == "False"
        assert "HorizontalPodAutoscaler default/llama-hpa" in able["message"]

        # Status is written when it changes, not on every message: five messages alike write
        # nothing alike. llama's own writes are compared, each with the status before it (on a busy
        # machine a status may really change meanwhile: an API read that timed out, and its recovery).
        llama = next(w for w in running.decider.workloads.values() if w.scaler.name == "llama")
        assert llama.memory is not None
        llama_writes: list[dict[str, Any]] = [dict(llama.memory.written.status or {})]
        writer = running.decider.status
        submit = writer.submit

        def recording(namespace: str, name: str, status: dict[str, Any]) -> None:
            if name == "llama":
                llama_writes.append(status)
            submit(namespace, name, status)

        monkeypatch.setattr(writer, "submit", recording)
        seen = running.metric("gpuscale_messages_in_total", kind="metrics")
        for _ in range(5):
            await publish_metrics(
                nats_client, metrics_message("llama", 95.0, 2, pods=await running_pods(kube_sim, "llama", 2))
            )
        await eventually(lambda: running.metric("gpuscale_messages_in_total", kind="metrics") >= seen + 5)
        # Handled, and a write would have been submitted within milliseconds.
        await asyncio.sleep(0.5)
        repeated = [after for before, after in itertools.pairwise(llama_writes) if after == before]
        assert not repeated, f"a status written again unchanged: {repeated}"
        assert len(llama_writes) < 1 + 5, f"a status written on every message: {llama_writes}"

        # Edits and deletes arrive through the watch.
        api = await new_api_client(Path(kube_sim.kubeconfig_path))
        try:
            base = "/apis/gpuscale.io/v1alpha1/namespaces/default/gpuscalers"
            await request_json(
                api,
                "PATCH",
                f"{base}/bert",
                {"spec": {"maxReplicas": 3}},
                content_type="application/merge-patch+json",
            )
            await request_json(api, "DELETE", f"{base}/broken")
        finally:
            await api.close()
        bert = subjects.WorkloadKey("default", "Deployment", "bert")
        await eventually(
            lambda: running.decider.workloads[bert].scaler.spec.max_replicas == 3, what="edit seen"
        )
        await eventually(lambda: not running.decider.registry.invalid, what="delete seen")


async def test_only_the_leader_publishes(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await kube_sim.create(deployment("bert", 2))
    await kube_sim.create(gpuscaler("bert", "bert"))
    one = settings_for(nats_server.url, kube_sim.kubeconfig_path, leader_election=True, identity="decider-a")
    two = settings_for(nats_server.url, kube_sim.kubeconfig_path, leader_election=True, identity="decider-b")
    async with (
        running_decider(one) as a,
        running_decider(two) as b,
        watch_decisions(nats_client) as watch,
    ):
        await eventually(lambda: a.decider.is_leader() or b.decider.is_leader(), what="a leader")
        await eventually(lambda: a.decider.workloads and b.decider.workloads, what="policies listed")
        assert not (a.decider.is_leader() and b.decider.is_leader())
        leader = "decider-a" if a.decider.is_leader() else "decider-b"
        lease = kube_sim.get("coordination.k8s.io/v1", "Lease", "gpuscale-decider")
        assert lease["spec"]["holderIdentity"] == leader
        await publish_metrics(
            nats_client, metrics_message("bert", 83.0, 2, pods=await running_pods(kube_sim, "bert", 2))
        )
        await watch.next(1)
        standby = b if leader == "decider-a" else a
        await eventually(lambda: standby.metric("gpuscale_messages_in_total", kind="metrics") >= 1)
        # Both got the message; the standby would have decided within milliseconds.
        await holds_for(
            lambda: len(watch.decisions) == 1 and standby.metric("gpuscale_decider_evaluations_total") == 0,
            1.0,
            what="only the leader decides",
        )


async def test_survives_a_nats_restart_and_an_api_server_failure(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(deployment("bert", 2))
    policies = write_policies(tmp_path / "policies.yaml", gpuscaler("bert", "bert"))
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    async with running_decider(settings) as running:
        kube_sim.faults.add("GET", r"/deployments/bert/scale$", status=503, count=2)
        await publish_metrics(
            nats_client, metrics_message("bert", 70.0, 2, pods=await running_pods(kube_sim, "bert", 2))
        )
        await eventually(
            lambda: running.metric("gpuscale_decider_scale_read_failures_total", status="503") >= 1,
            what="a failed scale read",
        )
        await asyncio.to_thread(nats_server.restart)
        await eventually(lambda: nats_client.is_connected, timeout_s=15, what="test client reconnected")
        await eventually(
            lambda: running.metric("gpuscale_nats_reconnects_total") >= 1,
            timeout_s=15,
            what="decider reconnected",
        )
        async with watch_decisions(nats_client) as watch:

            async def decided() -> bool:
                # The decider re-subscribes as part of its reconnect: publish until
                # a message lands on the re-established subscription.
                await publish_metrics(
                    nats_client,
                    metrics_message("bert", 83.0, 2, pods=await running_pods(kube_sim, "bert", 2)),
                )
                return bool(watch.decisions)

            await eventually(decided, what="a decision after the restart")
            decision = await watch.next(1)
        assert (decision.from_replicas, decision.to_replicas) == (2, 3)
        assert not running.task.done()


async def test_a_broken_policy_file_keeps_the_policies_loaded_before(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(deployment("bert", 2))
    policies = write_policies(tmp_path / "policies.yaml", gpuscaler("bert", "bert"))
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    async with running_decider(settings) as running, watch_decisions(nats_client) as watch:
        policies.write_text("spec: [unclosed\n")
        await eventually(
            lambda: running.metric("gpuscale_decider_invalid_policies_total", field="file") >= 1,
            what="broken file noticed",
        )
        await publish_metrics(
            nats_client, metrics_message("bert", 83.0, 2, pods=await running_pods(kube_sim, "bert", 2))
        )
        assert (await watch.next(1)).to_replicas == 3
        assert not running.task.done()
