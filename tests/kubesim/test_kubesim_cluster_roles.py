"""The cluster's roles run on the clock reading they are given: a reconcile pass reads no
clock of its own, so time in the simulation is whatever the caller says."""

from __future__ import annotations

import random
from typing import Any

from gpuscale_kubesim.apiserver.resources import format_time
from gpuscale_kubesim.apiserver.store import Store
from gpuscale_kubesim.cluster import ClusterPlayer, Now, scenarios
from gpuscale_kubesim.cluster import load as loadmod

from ..k8s_objects import gpu_workload

API_SERVER_TIME = 1_800_000_000.0


def no_clock() -> float:
    raise AssertionError("a role read the clock instead of the Now it was given")


def cluster(startup_delay_s: float = 10.0) -> tuple[Store, ClusterPlayer]:
    store = Store(clock=lambda: API_SERVER_TIME, rng=random.Random(1))
    for obj in scenarios.base_objects(nodes=2, gpus_per_node=8):
        rd = store.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rd is not None
        store.create(rd, (obj.get("metadata") or {}).get("namespace"), obj)
    player = ClusterPlayer(
        store,
        startup_delay_s=startup_delay_s,
        termination_delay_s=2.0,
        rng=random.Random(2),
        monotonic=no_clock,
        wall=no_clock,
    )
    return store, player


def pods(store: Store) -> list[dict[str, Any]]:
    rd = store.registry.get("", "v1", "pods")
    assert rd is not None
    return store.list(rd, "default")[0]


def test_pods_start_when_the_given_time_says_so() -> None:
    store, player = cluster(startup_delay_s=10.0)
    rd_deploy = store.registry.get("apps", "v1", "deployments")
    assert rd_deploy is not None
    store.create(rd_deploy, "default", gpu_workload("bert", 2))

    due = player.reconcile(Now(mono=100.0, wall=API_SERVER_TIME + 5))
    assert due == 110.0, "the next change is the pods' start-up"
    assert [p["status"]["phase"] for p in pods(store)] == ["Pending", "Pending"]
    assert all(p["status"]["startTime"] == format_time(API_SERVER_TIME + 5) for p in pods(store))

    player.reconcile(Now(mono=109.9, wall=API_SERVER_TIME + 15))
    assert all(p["status"]["phase"] == "Pending" for p in pods(store))

    assert player.reconcile(Now(mono=110.0, wall=API_SERVER_TIME + 15)) is None
    assert [p["status"]["phase"] for p in pods(store)] == ["Running", "Running"]
    ready = [c for p in pods(store) for c in p["status"]["conditions"] if c["type"] == "Ready"]
    assert {c["lastTransitionTime"] for c in ready} == {format_time(API_SERVER_TIME + 15)}
    deployment = store.get(rd_deploy, "default", "bert")
    assert deployment["status"]["readyReplicas"] == 2
    rd_event = store.registry.get("", "v1", "events")
    assert rd_event is not None
    scaled = [e for e in store.list(rd_event, "default")[0] if e["reason"] == "ScalingReplicaSet"]
    assert scaled[0]["firstTimestamp"] == format_time(API_SERVER_TIME + 5)


def test_the_gpu_feed_follows_the_given_time() -> None:
    store, player = cluster(startup_delay_s=0.0)
    rd_deploy = store.registry.get("apps", "v1", "deployments")
    assert rd_deploy is not None
    store.create(rd_deploy, "default", gpu_workload("bert", 1, node="gpu-node-1"))
    player.reconcile(Now(mono=0.0, wall=API_SERVER_TIME))
    player.load_model.set_load("default", "bert", loadmod.STEP, Now(mono=0.0, wall=API_SERVER_TIME))

    quiet = player.load_model.node_gpus("gpu-node-1", 8, Now(mono=5.0, wall=API_SERVER_TIME + 5))
    busy = player.load_model.node_gpus("gpu-node-1", 8, Now(mono=20.0, wall=API_SERVER_TIME + 20))
    assert quiet.ts == API_SERVER_TIME + 5
    (held_quiet,) = [g for g in quiet.gpus if g.owners]
    (held_busy,) = [g for g in busy.gpus if g.owners]
    # The step profile: 30 until 15 s, then 200 (one GPU caps at 100 %), noise sd 2.
    assert 20 < held_quiet.util < 40
    assert held_busy.util > 90
    assert held_busy.owners[0].ready is True


def test_a_pod_pinned_to_a_node_that_does_not_exist_does_not_stop_the_cluster() -> None:
    store, player = cluster(startup_delay_s=0.0)
    rd_deploy = store.registry.get("apps", "v1", "deployments")
    assert rd_deploy is not None
    store.create(rd_deploy, "default", gpu_workload("ghost", 1, node="no-such-node"))
    store.create(rd_deploy, "default", gpu_workload("bert", 1))
    player.reconcile(Now(mono=100.0, wall=API_SERVER_TIME))  # raised KeyError before
    assert {p["metadata"]["labels"]["app"] for p in pods(store)} == {"ghost", "bert"}
