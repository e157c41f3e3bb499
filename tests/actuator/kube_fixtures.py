"""Objects and clients the actuator tests seed kube-sim with."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from kubernetes_asyncio.client import ApiClient

from gpuscale.kube import new_api_client, request_json
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload, gpuscaler


def workload(kind: str, name: str, replicas: int, namespace: str = "default") -> dict[str, Any]:
    """A minimal apps/v1 Deployment or StatefulSet."""
    return gpu_workload(name, replicas, kind=kind, namespace=namespace, gpus=None)


def policy_for(kind: str, name: str, *, api_version: str = "apps/v1", **spec: Any) -> dict[str, Any]:
    """The GPUScaler ``<name>`` on the target: the actuator applies no decision without one."""
    obj = gpuscaler(name, name, **spec)
    obj["spec"]["scaleTargetRef"] = {"apiVersion": api_version, "kind": kind, "name": name}
    return obj


async def seed(sim: KubeSim, kind: str, name: str, replicas: int, **spec: Any) -> None:
    """A workload and the GPUScaler that scales it."""
    await sim.create(workload(kind, name, replicas))
    await sim.create(policy_for(kind, name, **spec))


@asynccontextmanager
async def api_client(kubeconfig: str | Path) -> AsyncIterator[ApiClient]:
    api = await new_api_client(Path(kubeconfig))
    try:
        yield api
    finally:
        await api.close()


async def get_object(api: ApiClient, path: str) -> dict[str, Any]:
    return await request_json(api, "GET", path)


def deployment_path(name: str, namespace: str = "default") -> str:
    return f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"


async def events_about(api: ApiClient, name: str, namespace: str = "default") -> list[dict[str, Any]]:
    """The actuator's Events about ``name`` (kube-sim's controllers write their own too)."""
    doc = await request_json(api, "GET", f"/apis/events.k8s.io/v1/namespaces/{namespace}/events")
    return [
        e
        for e in doc.get("items") or []
        if (e.get("regarding") or {}).get("name") == name
        and e.get("reportingController") == "gpuscale.io/actuator"
    ]


# What the actuator may do in the RBAC tests: everything it needs except patch.
ACTUATOR_RULES_WITHOUT_PATCH = [
    {"apiGroups": ["apps"], "resources": ["deployments", "deployments/scale"], "verbs": ["get", "list"]},
    {"apiGroups": ["gpuscale.io"], "resources": ["gpuscalers"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    {"apiGroups": ["", "events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
]


# deploy/base/rbac-actuator.yaml's least privilege: patch only through */scale.
ACTUATOR_RULES_SCALE_ONLY = [
    {
        "apiGroups": ["apps"],
        "resources": ["deployments/scale", "statefulsets/scale"],
        "verbs": ["get", "patch"],
    },
    {"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["get"]},
    *ACTUATOR_RULES_WITHOUT_PATCH[1:],
]


@asynccontextmanager
async def rbac_kube_sim(
    tmp_path: Path, rules: list[dict[str, Any]] = ACTUATOR_RULES_WITHOUT_PATCH
) -> AsyncIterator[tuple[KubeSim, Path]]:
    """A kube-sim that checks tokens: its own kubeconfig is admin, the one
    returned authenticates as an actuator with ``rules`` (default: no ``patch``)."""
    sim = KubeSim(
        port=0,
        scenario="empty",
        startup_delay_s=0.2,
        termination_delay_s=0.1,
        tokens={"admin-token": None, "actuator-token": rules},
    )
    await sim.start()
    try:
        yield sim, sim.write_kubeconfig(tmp_path / "actuator.kubeconfig", token="actuator-token")  # noqa: S106 - a kube-sim test token, not a secret
    finally:
        await sim.stop()


def scalable_crd(
    group: str = "example.com", kind: str = "InferencePool", plural: str = "inferencepools"
) -> dict[str, Any]:
    """A CustomResourceDefinition whose objects serve ``/scale`` (replicas at spec.replicas)."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.lower(), "kind": kind},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                    },
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                }
            ],
        },
    }
