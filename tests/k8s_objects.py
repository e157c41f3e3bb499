"""Kubernetes objects the tests create in kube-sim: one builder each, shared by every suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml


def gpu_workload(
    name: str,
    replicas: int = 1,
    *,
    kind: str = "Deployment",
    namespace: str = "default",
    gpus: int | None = 1,
    node: str | None = None,
    image: str = "example.com/model:1",
    pod_annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """An apps/v1 Deployment or StatefulSet whose pods are labelled ``app=<name>``.

    ``gpus``: the ``nvidia.com/gpu`` limit (None: no limit; kube-sim then gives one GPU).
    ``node``: pin the pods to a node, as a test of one node's collector needs.
    ``pod_annotations``: on the pod template (:func:`vllm_annotations`: kube-sim plays vLLM).
    """
    labels = {"app": name}
    container: dict[str, Any] = {"name": "server", "image": image}
    if gpus is not None:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    pod_spec: dict[str, Any] = {"containers": [container]}
    if node is not None:
        pod_spec["nodeName"] = node
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": labels},
        "template": {"metadata": {"labels": labels}, "spec": pod_spec},
    }
    if pod_annotations:
        spec["template"]["metadata"]["annotations"] = dict(pod_annotations)
    if kind == "StatefulSet":
        spec["serviceName"] = name
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": spec,
    }


def vllm_annotations(port: int = 8000, path: str | None = None) -> dict[str, str]:
    """A pod that serves vLLM's /metrics (kube-sim plays it) where the collector looks."""
    notes = {"sim.gpuscale.io/engine": "vllm", "gpuscale.io/metrics-port": str(port)}
    if path is not None:
        notes["gpuscale.io/metrics-path"] = path
    return notes


def gpuscaler(
    name: str,
    target: str | None = None,
    *,
    namespace: str = "default",
    min_replicas: int = 1,
    max_replicas: int = 10,
    metrics: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A GPUScaler on the Deployment ``target`` (default: the same name); ``spec`` adds fields."""
    body: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target or name},
        "minReplicas": min_replicas,
        "maxReplicas": max_replicas,
        "metrics": metrics if metrics is not None else [{"name": "gpu_util", "target": 70}],
        **spec,
    }
    return {
        "apiVersion": "gpuscale.io/v1alpha1",
        "kind": "GPUScaler",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def service_account(name: str, namespace: str = "default") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}


def node_pod(
    name: str,
    node: str,
    *,
    service_account: str,
    namespace: str = "default",
    image: str = "example.com/agent:1",
) -> dict[str, Any]:
    """A pod already placed on ``node`` running as ``service_account``: what a DaemonSet creates."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": {"app": "node-agent"}},
        "spec": {
            "serviceAccountName": service_account,
            "nodeName": node,
            "containers": [{"name": "agent", "image": image}],
        },
    }


FIXTURE_CRDS = Path(__file__).resolve().parent / "fixtures" / "crds"


def keda_crd() -> dict[str, Any]:
    """The ScaledObject CRD: create it where a test means "KEDA is installed"."""
    crd: dict[str, Any] = yaml.safe_load((FIXTURE_CRDS / "keda-scaledobjects.yaml").read_text())
    return crd


def servicemonitor_crd() -> dict[str, Any]:
    """The ServiceMonitor CRD: a cluster with the Prometheus Operator has it."""
    crd: dict[str, Any] = yaml.safe_load((FIXTURE_CRDS / "servicemonitors.yaml").read_text())
    return crd


def prometheusrule_crd() -> dict[str, Any]:
    """The PrometheusRule CRD: a cluster with the Prometheus Operator has it."""
    crd: dict[str, Any] = yaml.safe_load((FIXTURE_CRDS / "prometheusrules.yaml").read_text())
    return crd
