"""One team's HPAs and ScaledObjects against the decider's search for other controllers
(kube-sim through kubernetes-asyncio): what it costs, and whose GPUScalers it marks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuscale.kube import client as kube_client
from gpuscale.kube import new_api_client
from gpuscale.subjects import WorkloadKey
from gpuscale_decider.kubeio import ConflictFinder
from gpuscale_kubesim import KubeSim

from ..k8s_objects import keda_crd

pytestmark = pytest.mark.integration

FAT = 250 * 1024  # annotations on each of a team's objects (the API allows 256 KiB)


def hpa(namespace: str, name: str, target: str, notes: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"team.example/notes": notes}},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": 1,
            "maxReplicas": 2,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}}}],
        },
    }  # fmt: skip


def scaled_object(namespace: str, name: str, target: str, notes: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": namespace, "annotations": {"team.example/notes": notes}},
        "spec": {"scaleTargetRef": {"name": target}, "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]},
    }  # fmt: skip


async def test_a_teams_many_fat_objects_cost_one_page_and_mark_only_its_own(
    kube_sim: KubeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Team b keeps 60 HPAs and 60 ScaledObjects of 250 KiB each (30 MiB), one of each naming
    "llm", team a's target, in its own namespace. The search read each list whole, in one answer
    every 30 s: 15 MiB here, as much as a team stores (the decider's limit is 128Mi). Now a page of
    20 at a time; team a's "llm" is marked by its own HPA only, team b's by team b's."""
    for ns in ("team-a", "team-b"):
        await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    await kube_sim.create(keda_crd())
    await kube_sim.create(hpa("team-a", "llm-hpa", "llm"))
    for i in range(60):
        target = "llm" if i == 0 else f"svc-{i}"
        await kube_sim.create(hpa("team-b", f"h{i}", target, "x" * FAT))
        await kube_sim.create(scaled_object("team-b", f"s{i}", target, "x" * FAT))
    answers: list[int] = []

    async def measured(*args: Any, **kwargs: Any) -> dict[str, Any]:
        doc = await request_json(*args, **kwargs)
        answers.append(len(json.dumps(doc)))
        return doc

    request_json = kube_client.request_json  # each page is read through it
    monkeypatch.setattr(kube_client, "request_json", measured)
    found: list[dict[WorkloadKey, str]] = []
    api = await new_api_client(Path(kube_sim.kubeconfig_path))
    try:
        finder = ConflictFinder(api, found.append, interval_s=60)
        await finder.check()
    finally:
        await api.close()
    conflicts = found[-1]
    assert conflicts[WorkloadKey("team-a", "Deployment", "llm")] == "HorizontalPodAutoscaler team-a/llm-hpa"
    assert conflicts[WorkloadKey("team-b", "Deployment", "llm")] == "HorizontalPodAutoscaler team-b/h0"
    assert len(conflicts) == 61  # team b's 60 targets (its HPA wins over its ScaledObject) and team a's one
    assert all(k.namespace == "team-b" for k, who in conflicts.items() if "team-b/" in who)
    assert max(answers) < 20 * (FAT + 4096), f"largest answer {max(answers) / 2**20:.1f} MiB"
