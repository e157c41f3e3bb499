"""The built-in clusters (``demo``, ``demo-llm``, ``empty``) and YAML scenario files."""

from __future__ import annotations

import importlib.resources
import uuid
from pathlib import Path
from typing import Any

import yaml

from .load import H100_FB_MIB, H100_MODEL

Obj = dict[str, Any]

DEMO_WORKLOAD = "bert-intent-detection"
DEMO_NAMESPACE = "default"


def gpuscaler_crd() -> Obj:
    """The GPUScaler CRD, the same file as deploy/cluster/crd-gpuscaler.yaml."""
    text = importlib.resources.files("gpuscale_kubesim").joinpath("crds/gpuscaler.yaml").read_text()
    crd: Obj = yaml.safe_load(text)
    return crd


def node(name: str, gpus: int) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.count": str(gpus),
                "nvidia.com/gpu.product": H100_MODEL.replace(" ", "-"),
                "nvidia.com/gpu.memory": str(int(H100_FB_MIB)),
            },
        },
        "spec": {},
        "status": {
            "capacity": {"cpu": "64", "memory": "1056561152Ki", "pods": "110", "nvidia.com/gpu": str(gpus)},
            "allocatable": {
                "cpu": "63",
                "memory": "1046075392Ki",
                "pods": "110",
                "nvidia.com/gpu": str(gpus),
            },
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "bootID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.boot.kube-sim")),
                "containerRuntimeVersion": "containerd://1.7.22",
                "kernelVersion": "6.8.0-45-generic",
                "kubeProxyVersion": "v1.32.0",
                "kubeletVersion": "v1.32.0",
                "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.machine.kube-sim").hex,
                "operatingSystem": "linux",
                "osImage": "Ubuntu 24.04.1 LTS",
                "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_DNS, f"{name}.system.kube-sim")),
            },
            "addresses": [{"type": "Hostname", "address": name}],
        },
    }


def namespace(name: str) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def demo_deployment(name: str = DEMO_WORKLOAD, ns: str = DEMO_NAMESPACE) -> Obj:
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "server",
                            "image": "nvcr.io/nvidia/tritonserver:24.08-py3",
                            "ports": [{"containerPort": 8000, "name": "http"}],
                            "resources": {"limits": {"nvidia.com/gpu": 1}},
                        }
                    ]
                },
            },
        },
    }


def demo_gpuscaler(name: str = DEMO_WORKLOAD, ns: str = DEMO_NAMESPACE, window: str = "30s") -> Obj:
    return {
        "apiVersion": "gpuscale.io/v1alpha1",
        "kind": "GPUScaler",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": 10,
            "metrics": [{"name": "gpu_util", "target": 70}],
            "window": window,
            "tolerance": 0.1,
            # HPA's 300 s scale-down stabilization would keep the demo's story
            # (load falls, replicas follow) past its two minutes.
            "behavior": {"scaleDown": {"stabilizationWindowSeconds": 30}},
        },
    }


# ``demo-llm``: two vLLM-like workloads on the same traffic, one scaled on its
# engine's queue, one on GPU utilization.
LLM_QUEUE_WORKLOAD = "llm-queue"
LLM_UTIL_WORKLOAD = "llm-util"
LLM_WORKLOADS = (LLM_QUEUE_WORKLOAD, LLM_UTIL_WORKLOAD)
# Queued requests per pod the queue-scaled workload aims at (a pod runs 16 at once).
LLM_WAITING_TARGET = 4


def vllm_deployment(name: str, ns: str = DEMO_NAMESPACE) -> Obj:
    """A Deployment whose pods kube-sim plays as vLLM servers, metrics where the collector looks."""
    deploy = demo_deployment(name, ns)
    template = deploy["spec"]["template"]
    template["metadata"]["annotations"] = {
        "sim.gpuscale.io/engine": "vllm",
        "gpuscale.io/metrics-port": "8000",
        "gpuscale.io/metrics-path": "/metrics",
    }
    container = template["spec"]["containers"][0]
    container["image"] = "vllm/vllm-openai:v0.10.1"
    container["args"] = ["--model", "meta-llama/Llama-3.1-8B-Instruct"]
    return deploy


def llm_gpuscaler(name: str, metrics: list[Obj], ns: str = DEMO_NAMESPACE, window: str = "30s") -> Obj:
    scaler = demo_gpuscaler(name, ns, window)
    scaler["spec"]["metrics"] = metrics
    return scaler


def llm_demo_objects(window: str = "30s") -> list[Obj]:
    return [
        vllm_deployment(LLM_QUEUE_WORKLOAD),
        llm_gpuscaler(
            LLM_QUEUE_WORKLOAD, [{"name": "requests_waiting", "target": LLM_WAITING_TARGET}], window=window
        ),
        vllm_deployment(LLM_UTIL_WORKLOAD),
        llm_gpuscaler(LLM_UTIL_WORKLOAD, [{"name": "gpu_util", "target": 70}], window=window),
    ]


def base_objects(nodes: int, gpus_per_node: int) -> list[Obj]:
    objs = [namespace(n) for n in ("default", "kube-system", "gpuscale")]
    objs += [node(f"gpu-node-{i}", gpus_per_node) for i in range(1, nodes + 1)]
    objs.append(gpuscaler_crd())
    return objs


def scenario_objects(scenario: str, nodes: int, gpus_per_node: int, window_s: float = 30.0) -> list[Obj]:
    """The objects to create at start-up, in order. ``window_s``: the built-in GPUScalers' window."""
    objs = base_objects(nodes, gpus_per_node)
    window = f"{window_s:g}s"
    if scenario == "empty":
        return objs
    if scenario == "demo":
        return [*objs, demo_deployment(), demo_gpuscaler(window=window)]
    if scenario == "demo-llm":
        return [*objs, *llm_demo_objects(window)]
    path = Path(scenario)
    if not path.is_file():
        raise ValueError(f"scenario must be 'demo', 'empty' or a YAML file of objects; no file {scenario!r}")
    loaded = [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    for doc in loaded:
        if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
            raise ValueError(f"{scenario}: every document needs apiVersion and kind")
    flat: list[Obj] = []
    for doc in loaded:
        flat.extend(doc.get("items") or [] if doc["kind"].endswith("List") else [doc])
    # CRDs first, so that their kinds exist before their objects.
    flat.sort(key=lambda d: 0 if d.get("kind") == "CustomResourceDefinition" else 1)
    return [*objs, *flat]
