"""kube-sim plays the cluster: replicas become pods on GPU nodes, load follows ready pods."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import pytest

from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload
from ..waiting import eventually

pytestmark = pytest.mark.integration

NS = "default"


def deployment(name: str, replicas: int = 1, gpus: int | None = 1) -> dict[str, Any]:
    return gpu_workload(name, replicas, namespace=NS, gpus=gpus, image="triton")


def alive(sim: KubeSim, app: str) -> list[dict[str, Any]]:
    return [p for p in sim.pods(NS, f"app={app}") if not p["metadata"].get("deletionTimestamp")]


def is_ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


async def scale(sim: KubeSim, name: str, replicas: int) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.patch(
            f"{sim.url}/apis/apps/v1/namespaces/{NS}/deployments/{name}/scale",
            json={"spec": {"replicas": replicas}},
            headers={"Content-Type": "application/merge-patch+json"},
        ) as response,
    ):
        assert response.status == 200, await response.text()


async def test_scale_up_gives_pending_pods_then_ready_ones_spread_on_gpu_nodes() -> None:
    # A start-up delay long enough to see the new pods still loading on a busy machine.
    async with KubeSim(
        port=0, scenario="empty", nodes=3, startup_delay_s=1.5, termination_delay_s=0.1
    ) as sim:
        await sim.create(deployment("bert"))
        await eventually(
            lambda: len(alive(sim, "bert")) == 1 and all(is_ready(p) for p in alive(sim, "bert"))
        )
        await scale(sim, "bert", 3)
        pods = await eventually(lambda: (ps := alive(sim, "bert")) and len(ps) == 3 and ps)
        starting = [p for p in pods if not is_ready(p)]
        assert len(starting) == 2, "the new pods load their model first"
        assert all(p["status"]["phase"] == "Pending" for p in starting)
        await eventually(
            lambda: all(is_ready(p) for p in alive(sim, "bert")) and len(alive(sim, "bert")) == 3
        )
        pods = alive(sim, "bert")
        assert all(p["status"]["phase"] == "Running" for p in pods)
        assert {p["spec"]["nodeName"] for p in pods} == {"gpu-node-1", "gpu-node-2", "gpu-node-3"}
        rs_name = pods[0]["metadata"]["ownerReferences"][0]["name"]
        assert all(p["metadata"]["name"].startswith(f"{rs_name}-") for p in pods)
        assert len(pods[0]["metadata"]["name"]) == len(rs_name) + 6  # <deploy>-<hash>-<5 chars>
        rs = sim.get("apps/v1", "ReplicaSet", rs_name)
        assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"

        status = await eventually(
            lambda: (s := sim.get("apps/v1", "Deployment", "bert")["status"]).get("readyReplicas") == 3 and s
        )
        assert status["replicas"] == status["availableReplicas"] == status["updatedReplicas"] == 3


async def test_scale_down_removes_the_newest_pods_after_the_termination_delay(kube_sim: KubeSim) -> None:
    await kube_sim.create(deployment("bert", replicas=2))
    await eventually(
        lambda: len(alive(kube_sim, "bert")) == 2 and all(is_ready(p) for p in alive(kube_sim, "bert"))
    )
    await scale(kube_sim, "bert", 3)
    await eventually(
        lambda: len(alive(kube_sim, "bert")) == 3 and all(is_ready(p) for p in alive(kube_sim, "bert"))
    )
    newest = max(alive(kube_sim, "bert"), key=lambda p: int(p["metadata"]["resourceVersion"]))
    oldest_names = {p["metadata"]["name"] for p in alive(kube_sim, "bert")} - {newest["metadata"]["name"]}
    await scale(kube_sim, "bert", 2)
    await eventually(lambda: {p["metadata"]["name"] for p in alive(kube_sim, "bert")} == oldest_names)
    await eventually(lambda: len(kube_sim.pods(NS, "app=bert")) == 2)  # terminated pods are gone for good
    await eventually(lambda: kube_sim.get("apps/v1", "Deployment", "bert")["status"].get("replicas") == 2)


async def test_pods_without_free_gpus_stay_pending_unschedulable() -> None:
    async with KubeSim(port=0, scenario="empty", nodes=1, gpus_per_node=4, startup_delay_s=0.1) as sim:
        await sim.create(deployment("big", replicas=3, gpus=2))
        await eventually(lambda: sum(1 for p in alive(sim, "big") if is_ready(p)) == 2)
        stuck = await eventually(lambda: [p for p in alive(sim, "big") if not p["spec"].get("nodeName")])
        condition = stuck[0]["status"]["conditions"][0]
        assert (condition["type"], condition["status"], condition["reason"]) == (
            "PodScheduled",
            "False",
            "Unschedulable",
        )
        assert "Insufficient nvidia.com/gpu" in condition["message"]


async def test_statefulset_pods_are_ordinal() -> None:
    async with KubeSim(port=0, scenario="empty", startup_delay_s=0.1, termination_delay_s=0.1) as sim:
        sts = deployment("llm", replicas=3)
        sts["kind"] = "StatefulSet"
        await sim.create(sts)
        await eventually(
            lambda: sorted(p["metadata"]["name"] for p in alive(sim, "llm")) == ["llm-0", "llm-1", "llm-2"]
        )
        sts_obj = sim.get("apps/v1", "StatefulSet", "llm")
        sim.store.patch_scale(
            sim.resource("apps/v1", "StatefulSet"),
            NS,
            "llm",
            {"spec": {"replicas": 1}},
            "application/merge-patch+json",
        )
        await eventually(lambda: [p["metadata"]["name"] for p in sim.pods(NS, "app=llm")] == ["llm-0"])
        assert sts_obj["spec"]["replicas"] == 3


async def test_load_is_split_among_ready_pods_in_the_gpu_endpoint() -> None:
    async with KubeSim(port=0, scenario="empty", nodes=2, startup_delay_s=1.0, seed=7) as sim:
        await sim.create(deployment("bert", replicas=2))
        sim.set_load(NS, "bert", 120)
        await eventually(
            lambda: len(alive(sim, "bert")) == 2 and all(is_ready(p) for p in alive(sim, "bert"))
        )
        async with aiohttp.ClientSession() as http:
            readings = []
            for node in ("gpu-node-1", "gpu-node-2"):
                async with http.get(f"{sim.url}/sim/v1/nodes/{node}/gpus") as response:
                    assert response.status == 200
                    body = await response.json()
                assert body["node"] == node
                assert len(body["gpus"]) == 8
                readings += [g for g in body["gpus"] if g["owners"]]
            assert len(readings) == 2
            for gpu in readings:
                assert gpu["util"] == pytest.approx(
                    60, abs=10
                )  # 120 GPU-percent over 2 ready pods, with noise
                assert gpu["owners"][0]["workload"] == {"kind": "Deployment", "name": "bert"}
                assert gpu["uuid"].startswith("GPU-")
                assert gpu["fb_used_mib"] + gpu["fb_free_mib"] == pytest.approx(81559, abs=1)

            # A third pod still loading takes no load; the ready two keep carrying it.
            await scale(sim, "bert", 3)
            await eventually(lambda: len(alive(sim, "bert")) == 3)
            loading = next(p for p in alive(sim, "bert") if not is_ready(p))
            async with http.get(f"{sim.url}/sim/v1/nodes/{loading['spec']['nodeName']}/gpus") as response:
                gpus = (await response.json())["gpus"]
            mine = next(
                g for g in gpus if g["owners"] and g["owners"][0]["pod"] == loading["metadata"]["name"]
            )
            assert mine["util"] == 0
            assert mine["owners"][0]["ready"] is False  # counted as missing downstream
            assert mine["fb_used_mib"] < 0.6 * 81559

            async with http.get(f"{sim.url}/sim/v1/nodes/no-such-node/gpus") as response:
                assert response.status == 404
                assert (await response.json())["reason"] == "NotFound"

            before = time.time()
            async with http.put(
                f"{sim.url}/sim/v1/workloads/{NS}/bert/load", json={"profile": "constant:30"}
            ) as r:
                assert r.status == 200
            after = time.time()
            async with http.get(f"{sim.url}/sim/v1/workloads") as response:
                workloads = (await response.json())["workloads"]
            assert workloads == [
                {
                    "namespace": NS,
                    "kind": "Deployment",
                    "name": "bert",
                    "load": 30.0,
                    "load_since": workloads[0]["load_since"],
                    "replicas": 3,
                    "current_replicas": workloads[0]["current_replicas"],
                    "ready_replicas": workloads[0]["ready_replicas"],
                }
            ]
            assert before - 0.01 <= workloads[0]["load_since"] <= after + 0.01  # the profile began then

            # A step placed at its own time, however late the reader polls after it.
            before = time.time()
            async with http.put(
                f"{sim.url}/sim/v1/workloads/{NS}/bert/load",
                json={"profile": [{"t": 0, "load": 30}, {"t": 0.3, "load": 90}]},
            ) as r:
                assert r.status == 200
            after = time.time()

            async def stepped() -> dict[str, Any]:
                async with http.get(f"{sim.url}/sim/v1/workloads") as response:
                    (bert,) = (await response.json())["workloads"]
                assert bert["load"] == 90.0
                return dict(bert)

            bert = await eventually(stepped)
            assert before + 0.3 - 0.01 <= bert["load_since"] <= after + 0.3 + 0.01
            async with http.put(f"{sim.url}/sim/v1/workloads/{NS}/bert/load", json={"profile": "ramp"}) as r:
                assert r.status == 200
            async with http.get(f"{sim.url}/sim/v1/workloads") as response:
                assert (await response.json())["workloads"][0]["load_since"] is None  # it moves continuously
            async with http.put(f"{sim.url}/sim/v1/workloads/{NS}/bert/load", json={"profile": "bogus"}) as r:
                assert r.status == 400


async def test_fault_endpoint_for_out_of_process_use(kube_sim: KubeSim) -> None:
    await kube_sim.create(deployment("bert"))
    url = f"{kube_sim.url}/apis/apps/v1/namespaces/{NS}/deployments/bert/scale"
    async with aiohttp.ClientSession() as http:
        async with http.post(
            f"{kube_sim.url}/sim/v1/faults",
            json={"method": "GET", "path_regex": "/scale$", "status": 503, "count": 2},
        ) as r:
            assert r.status == 201
        for _ in range(2):
            async with http.get(url) as r:
                assert r.status == 503
        async with http.get(url) as r:
            assert r.status == 200
        async with http.post(
            f"{kube_sim.url}/sim/v1/faults", json={"path_regex": "/scale$", "delay_s": 0.3}
        ) as r:
            assert r.status == 201
        started = asyncio.get_running_loop().time()
        async with http.get(url) as r:
            assert r.status == 200
        assert asyncio.get_running_loop().time() - started >= 0.3
        async with http.post(f"{kube_sim.url}/sim/v1/faults", json={"path_regex": "(", "status": 500}) as r:
            assert r.status == 400


async def test_deleting_a_deployment_collects_its_replicasets_and_pods(kube_sim: KubeSim) -> None:
    await kube_sim.create(deployment("bert", replicas=2))
    await eventually(lambda: len(alive(kube_sim, "bert")) == 2)
    url = f"{kube_sim.url}/apis/apps/v1/namespaces/{NS}/deployments/bert"
    async with aiohttp.ClientSession() as http, http.delete(url) as r:
        assert r.status == 200
        assert (await r.json())["status"] == "Success"
    assert kube_sim.list_objects("apps/v1", "ReplicaSet", NS) == []
    await eventually(lambda: kube_sim.pods(NS) == [])


async def test_demo_scenario_has_the_workload_its_scaler_and_the_step_profile() -> None:
    async with KubeSim(port=0, scenario="demo", startup_delay_s=0.1) as sim:
        assert [n["metadata"]["name"] for n in sim.list_objects("v1", "Node")] == [
            f"gpu-node-{i}" for i in range(1, 5)
        ]
        scaler = sim.get("gpuscale.io/v1alpha1", "GPUScaler", "bert-intent-detection")
        assert scaler["spec"]["metrics"] == [{"name": "gpu_util", "target": 70}]
        assert sim.get("apps/v1", "Deployment", "bert-intent-detection")["spec"]["replicas"] == 1
        assert sim.load_of(NS, "bert-intent-detection") == 30.0  # the step profile's quiet start


SCENARIO_YAML = """\
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.io}
spec:
  group: example.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties: {size: {type: integer}}
      additionalPrinterColumns:
        - {name: Size, type: integer, jsonPath: .spec.size}
---
apiVersion: example.io/v1
kind: Widget
metadata: {name: w1, namespace: default}
spec: {size: 3}
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: llm
  namespace: default
  annotations: {sim.gpuscale.io/load: "constant:150"}
spec:
  replicas: 2
  selector: {matchLabels: {app: llm}}
  template:
    metadata: {labels: {app: llm}}
    spec:
      containers: [{name: vllm, image: vllm}]
"""


async def test_scenario_file_with_a_crd_its_objects_and_an_annotated_load(tmp_path: Any) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO_YAML)
    async with KubeSim(port=0, scenario=str(path), startup_delay_s=0.1) as sim:
        assert sim.get("example.io/v1", "Widget", "w1")["spec"]["size"] == 3
        await eventually(lambda: sum(1 for p in alive(sim, "llm") if is_ready(p)) == 2)
        assert sim.load_of(NS, "llm") == 150
        async with aiohttp.ClientSession() as http:
            accept = {"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"}
            async with http.get(f"{sim.url}/apis/example.io/v1/namespaces/{NS}/widgets", headers=accept) as r:
                table = await r.json()
            assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Size", "Age"]
            assert table["rows"][0]["cells"][:2] == ["w1", 3]
            async with http.delete(
                f"{sim.url}/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.io"
            ) as r:
                assert r.status == 200
            async with http.get(f"{sim.url}/apis/example.io/v1/namespaces/{NS}/widgets") as r:
                assert r.status == 404, "deleting the CRD stops serving its kind"
