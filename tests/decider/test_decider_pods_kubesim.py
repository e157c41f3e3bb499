"""The decider reads the target's pods as HPA's pod lister does, against
kube-sim (which schedules pods on simulated GPU nodes) and a real nats-server.

Scenarios from the HPA behaviour the decider must match: a cluster out of
GPUs leaves replicas Pending, and HPA leaves Pending pods out of a
scale-down ("scale down: exclude unscheduled pods"); an idle workload goes
to minReplicas (TooFewReplicas)."""

from __future__ import annotations

import asyncio
import random
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.kube.config import new_api_client
from gpuscale.natsio import NATS
from gpuscale_decider.pods import PodCache, PodIndex, pod_of
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload
from ..waiting import eventually
from .decider_harness import (
    gpuscaler,
    metrics_message,
    publish_metrics,
    running_decider,
    running_pods,
    settings_for,
    watch_decisions,
    write_policies,
)

pytestmark = pytest.mark.integration


def phases(sim: KubeSim, app: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in sim.pods("default", f"app={app}"):
        if not p["metadata"].get("deletionTimestamp"):
            out.setdefault(p["status"]["phase"], []).append(p["metadata"]["name"])
    return out


async def test_pending_pods_on_a_cluster_out_of_gpus_do_not_freeze_a_scale_down(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    # 2 nodes x 8 GPUs and pods of 8 GPUs each: 2 run, 3 stay Pending (Unschedulable).
    await kube_sim.create(gpu_workload("llm", 5, gpus=8))
    running = await eventually(
        lambda: (
            (p := phases(kube_sim, "llm"))
            and len(p.get("Running", [])) == 2
            and len(p.get("Pending", [])) == 3
            and p
        ),
        what="2 Running and 3 Pending pods",
    )

    # The decider reads the scheduler's verdict: those 3 are not starting (they lend no headroom).
    def unschedulable() -> list[bool]:
        views = [parsed[2].view for p in kube_sim.pods("default", "app=llm") if (parsed := pod_of(p))]
        return sorted(v.unschedulable for v in views if not v.deleting)

    await eventually(lambda: unschedulable() == [False, False, True, True, True], what="3 Unschedulable")
    policies = write_policies(
        tmp_path / "policies.yaml",
        gpuscaler("llm", "llm", metrics=[{"name": "gpu_util", "target": 50}]),
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    async with running_decider(settings), watch_decisions(nats_client) as watch:
        # The running pods at 10 % of a 50 % target: HPA leaves the Pending ones
        # out and goes to ceil(2 x 0.2) = 1.
        await publish_metrics(nats_client, metrics_message("llm", 10.0, 2, pods=sorted(running["Running"])))
        decision = await watch.next(1)
    assert (decision.from_replicas, decision.to_replicas) == (5, 1)
    assert "3 pods Pending left out" in decision.reason
    assert decision.inputs["pods_pending"] == 3


async def test_an_idle_workload_goes_to_min_replicas(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(gpu_workload("bert", 3))
    pods = await running_pods(kube_sim, "bert", 3)
    policies = write_policies(
        tmp_path / "policies.yaml",
        gpuscaler("bert", "bert", min_replicas=2, metrics=[{"name": "gpu_util", "target": 90}]),
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    async with running_decider(settings), watch_decisions(nats_client) as watch:
        await publish_metrics(nats_client, metrics_message("bert", 0.0, 3, pods=pods))
        decision = await watch.next(1)
    assert (decision.from_replicas, decision.to_replicas) == (3, 2)
    assert "raised to minReplicas 2" in decision.reason
    assert decision.inputs["conditions"]["ScalingLimited"] == "TooFewReplicas"


def pod(
    name: str, labels: dict[str, str], phase: str = "Running", ready: bool = True, **meta: Any
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ml", "labels": labels, **meta},
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_pod_index_answers_selectors_as_the_api_server_would() -> None:
    index = PodIndex()
    for obj in (
        pod("bert-a", {"app": "bert", "tier": "gpu"}),
        pod("bert-b", {"app": "bert", "tier": "cpu"}, phase="Pending", ready=False),
        pod("bert-c", {"app": "bert"}, deletionTimestamp="2026-11-23T10:00:00Z"),
        pod("llama-a", {"app": "llama", "tier": "gpu"}),
    ):
        found = pod_of(obj)
        assert found is not None
        index.put(*found)

    def names(selector: str) -> list[str]:
        views = index.select("ml", selector)
        assert views is not None
        return [v.name for v in views]

    assert names("app=bert") == ["bert-a", "bert-b", "bert-c"]
    assert names("app=bert,tier=gpu") == ["bert-a"]
    assert names("app in (bert, llama),tier!=cpu") == ["bert-a", "bert-c", "llama-a"]
    assert names("tier") == ["bert-a", "bert-b", "llama-a"]
    assert names("!tier") == ["bert-c"]
    assert index.select("other", "app=bert") == ()
    assert index.select("ml", "app in (bert") is None  # unparsable: no answer rather than a wrong one
    views = {v.name: v for v in index.select("ml", "app=bert") or ()}
    assert (views["bert-b"].phase, views["bert-b"].ready) == ("Pending", False)
    assert views["bert-c"].deleting
    # A label change moves the pod between selectors; a delete forgets it.
    relabelled = pod_of(pod("bert-a", {"app": "bert", "tier": "cpu"}))
    assert relabelled is not None
    index.put(*relabelled)
    assert names("app=bert,tier=gpu") == []
    # A pod that becomes ready, its labels unchanged, is read so at the next selection.
    started = pod_of(pod("bert-b", {"app": "bert", "tier": "cpu"}))
    assert started is not None
    index.put(*started)
    views = {v.name: v for v in index.select("ml", "app=bert") or ()}
    assert (views["bert-b"].phase, views["bert-b"].ready) == ("Running", True)
    index.put("ml", "bert-b", None)
    assert names("app=bert") == ["bert-a", "bert-c"]


def test_kept_selections_always_answer_as_a_fresh_index_would() -> None:
    """Selections are kept between pod changes (a workload is evaluated every second,
    its pods change rarely). Random changes (labels moved, pods readied, deleted, the
    last pod carrying a label gone and the label back) against a fresh index's answer
    to every selector after each change: a kept answer is never out of date."""
    rng = random.Random(14)
    selectors = (
        "app=bert",
        "app=bert,tier=gpu",
        "app in (bert, llama)",
        "app in (bert, llama),tier!=cpu",
        "tier=gpu,app notin (llama)",
        "tier",
        "!tier",
        "app=gone",
    )
    kept = PodIndex()
    live: dict[str, dict[str, Any]] = {}
    for _ in range(3000):
        name = f"pod-{rng.randrange(12)}"
        if name in live and rng.random() < 0.2:
            del live[name]
            kept.put("ml", name, None)
        else:
            labels = {"app": rng.choice(("bert", "llama", "gone"))}
            if rng.random() < 0.7:
                labels["tier"] = rng.choice(("gpu", "cpu"))
            obj = pod(name, labels, phase=rng.choice(("Running", "Pending")), ready=rng.random() < 0.5)
            live[name] = obj
            found = pod_of(obj)
            assert found is not None
            kept.put(*found)
        fresh = PodIndex()
        for obj in live.values():
            found = pod_of(obj)
            assert found is not None
            fresh.put(*found)
        for selector in rng.sample(selectors, 3):
            assert kept.select("ml", selector) == fresh.select("ml", selector), selector


async def test_one_teams_fat_pods_are_not_kept_whole_after_the_list(kube_sim: KubeSim) -> None:
    # One team's 30 pods with 200 KiB annotations: the decider keeps labels and state, not
    # the listed objects (the reflector held its whole list through every watch, 6 MiB here).
    for ns in ("greedy", "other"):
        await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for i in range(30):
        meta = {
            "name": f"fat{i}",
            "namespace": "greedy",
            "labels": {"app": "g"},
            "annotations": {"n": "x" * 200 * 1024},
        }
        await kube_sim.create(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": meta,
                "spec": {"containers": [{"name": "c", "image": "i"}]},
            }
        )
    small = {"name": "small", "namespace": "other", "labels": {"app": "o"}}
    await kube_sim.create(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": small,
            "spec": {"containers": [{"name": "c", "image": "i"}]},
        }
    )
    api = await new_api_client(kube_sim.kubeconfig_path)
    cache, stop = PodCache(api), asyncio.Event()
    tracemalloc.start(40)
    try:
        task = asyncio.create_task(cache.run(stop))
        await asyncio.wait_for(cache.synced.wait(), 30)
        await asyncio.sleep(0.2)  # the watch has started: what the list left is all that is kept
        parsed = tracemalloc.take_snapshot().filter_traces(
            [tracemalloc.Filter(True, "*json/decoder.py", all_frames=True)]
        )
    finally:
        tracemalloc.stop()
        stop.set()
        await task
        await api.close()
    assert sum(s.size for s in parsed.statistics("filename")) < 2**20
    assert [p.name for p in cache.select("other", "app=o") or ()] == ["small"]
    assert len(cache.select("greedy", "app=g") or ()) == 30


async def test_a_pod_held_by_a_scheduling_gate_is_read_as_not_starting(kube_sim: KubeSim) -> None:
    gated = gpu_workload("queued", 2)
    gated["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/quota"}]
    await kube_sim.create(gated)

    def views() -> list[tuple[str, bool]]:
        parsed = [pod_of(p) for p in kube_sim.pods("default", "app=queued")]
        return [(x[2].view.phase, x[2].view.unschedulable) for x in parsed if x is not None]

    await eventually(lambda: views() == [("Pending", True)] * 2, what="2 gated pods read as not starting")


@pytest.mark.parametrize(
    ("conditions", "unschedulable"),
    [
        ([{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}], True),
        ([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}], True),
        ([{"type": "PodScheduled", "status": "False", "reason": "Other"}], False),
        ([{"type": "PodScheduled", "status": "False", "reason": ["Unschedulable"]}], False),
        ([{"type": "PodScheduled", "status": "False", "reason": {"a": 1}}], False),
        ([{"type": "PodScheduled", "status": "True"}], False),
        ("Unschedulable", False),  # not a list: read as no conditions
        (7, False),
        ([None, "x", {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}], True),
    ],
)
def test_a_pending_pod_is_unschedulable_only_on_the_scheduler_s_own_no_node_or_gate(
    conditions: Any, unschedulable: bool
) -> None:
    obj = pod("bert-a", {"app": "bert"}, phase="Pending", ready=False)
    obj["status"]["conditions"] = conditions
    parsed = pod_of(obj)
    assert parsed is not None
    assert (parsed[2].view.unschedulable, parsed[2].view.ready) == (unschedulable, False)
