"""Workload resolution against kube-sim through kubernetes-asyncio (a real API server
for the client: list + watch of this node's pods, ReplicaSet owner reads)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest
from structlog.testing import capture_logs

from gpuscale.wire import WorkloadRef
from gpuscale_collector.kube_pods import NodePods

from ..k8s_objects import gpu_workload
from ..waiting import eventually

pytestmark = pytest.mark.integration

NODE = "gpu-node-1"


def template(app: str, node: str = NODE) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "nodeName": node,
            "containers": [
                {"name": "server", "image": "example/model:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ],
        },
    }


def deployment(name: str, replicas: int = 1) -> dict[str, Any]:
    return gpu_workload(name, replicas, node=NODE)


def statefulset(name: str) -> dict[str, Any]:
    return gpu_workload(name, kind="StatefulSet", node=NODE)


def bare_pod(name: str, node: str = NODE) -> dict[str, Any]:
    t = template(name, node)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", **t["metadata"]},
        "spec": t["spec"],
    }


@contextlib.asynccontextmanager
async def watching(kube_sim: Any, node: str = NODE) -> AsyncIterator[NodePods]:
    pods = NodePods(node, kube_sim.kubeconfig_path)
    stop = asyncio.Event()
    task = asyncio.create_task(pods.run(stop))
    try:
        await asyncio.wait_for(pods.synced.wait(), 10)
        yield pods
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        await pods.close()


def workloads_by_prefix(pods: NodePods) -> dict[str, WorkloadRef]:
    return {name.split("-")[0]: ref for (_ns, name), ref in pods.workloads.items()}


async def test_deployment_statefulset_and_bare_pod(kube_sim: Any, kit: Any) -> None:
    async with watching(kube_sim) as pods:
        # Created after the first list: these arrive through the watch.
        await kube_sim.create(deployment("bert"))
        await kube_sim.create(statefulset("db"))
        await kube_sim.create(bare_pod("solo"))
        await kube_sim.create(bare_pod("elsewhere", node="gpu-node-2"))
        await kit.wait_for(lambda: len(pods.workloads) >= 3, what="three workloads resolved")
        found = workloads_by_prefix(pods)
        assert found["bert"] == WorkloadRef("Deployment", "bert")
        assert found["db"] == WorkloadRef("StatefulSet", "db")
        assert found["solo"] == WorkloadRef("Pod", "solo")
        assert "elsewhere" not in found  # another node's pod is not watched
        assert all(p.uid for p in pods.pods_by_uid.values())
        # Readiness follows the pod's Ready condition (kube-sim: after the start-up delay).
        await kit.wait_for(
            lambda: all(p.ready for p in pods.pods_by_uid.values()), what="pods ready through the watch"
        )


async def test_pods_listed_at_start_and_deletions_followed(kube_sim: Any, kit: Any) -> None:
    await kube_sim.create(deployment("llm"))
    await kit.wait_for(
        lambda: any(p["spec"].get("nodeName") == NODE for p in kube_sim.pods()), what="pod scheduled"
    )
    async with watching(kube_sim) as pods:
        assert workloads_by_prefix(pods)["llm"] == WorkloadRef("Deployment", "llm")
        await kube_sim.create(bare_pod("tmp"))
        await kit.wait_for(lambda: "tmp" in workloads_by_prefix(pods), what="tmp pod seen")
        kube_sim.store.delete(kube_sim.resource("v1", "Pod"), "default", "tmp")
        await kit.wait_for(lambda: "tmp" not in workloads_by_prefix(pods), what="tmp pod gone")


async def test_sim_collector_reads_owners_from_kube_sim(kube_sim: Any, kit: Any) -> None:
    await kube_sim.create(deployment("bert", replicas=2))
    settings = kit.settings(
        node_name=NODE, sim_source="kube-sim", kubeconfig=kube_sim.kubeconfig_path, interval_s="0.1"
    )

    def bert_gpus(collector: Any) -> list[Any]:
        batch = collector.last_batch
        return [g for g in (batch.gpus if batch else ()) if any(o.workload.name == "bert" for o in g.owners)]

    async with kit.running(settings) as rc:
        await kit.wait_for(lambda: len(bert_gpus(rc.collector)) == 2, what="both bert pods in a batch")
        batch = rc.collector.last_batch
    assert len(batch.gpus) == 8
    owner = bert_gpus(rc.collector)[0].owners[0]
    assert owner.workload == WorkloadRef("Deployment", "bert")
    assert owner.namespace == "default"
    assert owner.container == "server"
    assert owner.pod.startswith("bert-")


async def test_pod_watch_survives_api_errors_and_gone(kube_sim: Any, kit: Any) -> None:
    await kube_sim.create(bare_pod("early"))
    # The first list answers 410 Gone, the next 503: the watcher relists, backs off, recovers.
    gone = kube_sim.faults.add("GET", r"^/api/v1/pods$", status=410, count=1)
    unavailable = kube_sim.faults.add("GET", r"^/api/v1/pods$", status=503, count=1)
    async with watching(kube_sim) as pods:
        assert (gone.hits, unavailable.hits) == (1, 1)
        assert workloads_by_prefix(pods)["early"] == WorkloadRef("Pod", "early")
        await kube_sim.create(bare_pod("later"))
        await kit.wait_for(lambda: "later" in workloads_by_prefix(pods), what="watch after recovery")


async def test_a_stop_ends_the_pod_watch_quietly(kube_sim: Any, kit: Any) -> None:
    """Stopping cancels the watch's pending read; the stream may only be closed once that
    read has ended. Closed at once, it raised "aclose(): asynchronous generator is already
    running", logged as pod_watch_failed on every collector shutdown (each demo and
    benchmark run showed one per node) and left the response to the garbage collector."""
    await kube_sim.create(deployment("bert"))
    with capture_logs() as logs:
        async with watching(kube_sim):
            await eventually(lambda: kube_sim.store.watchers, what="the pod watch is open")
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []


async def test_a_pod_event_larger_than_one_read_keeps_the_watch(kube_sim: Any, kit: Any) -> None:
    """A pod's annotations may hold 256 KiB; its watch event then arrives in several reads. The
    first read without a newline raised TypeError (max() of one int): the watch broke, was logged
    and every pod relisted, on each change of that pod. Now read on as any event."""
    fat = bare_pod("fat")
    fat["metadata"]["annotations"] = {"team-b.example/notes": "x" * 200_000}
    with capture_logs() as logs:
        async with watching(kube_sim) as pods:
            await kube_sim.create(fat)
            await kube_sim.create(bare_pod("later"))
            await kit.wait_for(
                lambda: {"fat", "later"} <= set(workloads_by_prefix(pods)), what="both pods seen"
            )
    assert [e for e in logs if e["event"] == "watch_failed"] == []
    assert [e["event"] for e in logs].count("listed") == 1
