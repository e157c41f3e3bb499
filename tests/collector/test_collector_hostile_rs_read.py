"""One tenant's pod whose ReplicaSet cannot be read must not stop the node's pod view.

A pod's controller ownerReference is checked by the API server only for being
non-empty: a team may name a "ReplicaSet" whose read the API server refuses with
something other than 404 (a name longer than the server reads in a request line:
kube-sim's aiohttp answers 400 past 8 KiB, Kubernetes' Go server 431 past 1 MiB).
The collector read it inside the list's handler and raised: every relist of the
node failed at that pod, so no pod of any team on the node was seen again (new
pods, their IPs for engine scrapes, their workloads)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from gpuscale.wire import WorkloadRef
from gpuscale_collector.kube_pods import NodePods

from ..k8s_objects import gpu_workload

pytestmark = pytest.mark.integration

NODE = "gpu-node-1"


def hostile_pod(owner_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "evil",
            "namespace": "default",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": owner_name,
                    "uid": "0c7c6c2e-0000-4000-8000-000000000001",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": NODE,
            "containers": [
                {"name": "server", "image": "example/model:1", "resources": {"limits": {"nvidia.com/gpu": 1}}}
            ],
        },
    }


async def test_a_replicaset_the_api_will_not_read_stops_no_other_pod(kube_sim: Any, kit: Any) -> None:
    await kube_sim.create(hostile_pod("\u00e9" * 2000))  # 12,000 characters once quoted
    await kube_sim.create(gpu_workload("victim", 1, kind="StatefulSet", node=NODE))
    pods = NodePods(NODE, kube_sim.kubeconfig_path)
    stop = asyncio.Event()
    task = asyncio.create_task(pods.run(stop))
    try:
        await kit.wait_for(
            lambda: any(ref == WorkloadRef("StatefulSet", "victim") for ref in pods.workloads.values()),
            10,
            "the other team's pod resolved",
        )
    finally:
        stop.set()
        await asyncio.wait_for(task, 5)
        await pods.close()
