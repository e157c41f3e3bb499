"""The search for other controllers works whether KEDA is installed or not: without its
CRD the keda.sh API is not served (404), which means no ScaledObjects, not a failure."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscale.kube import new_api_client
from gpuscale.subjects import WorkloadKey
from gpuscale_decider.kubeio import ConflictFinder
from gpuscale_kubesim import KubeSim

from ..k8s_objects import keda_crd

pytestmark = pytest.mark.integration


def scaled_object(name: str, target: str) -> dict[str, object]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "scaleTargetRef": {"name": target},
            "triggers": [{"type": "cpu", "metadata": {"value": "50"}}],
        },
    }


async def test_conflicts_without_and_with_keda(kube_sim: KubeSim) -> None:
    found: list[dict[WorkloadKey, str]] = []
    api = await new_api_client(Path(kube_sim.kubeconfig_path))
    try:
        finder = ConflictFinder(api, found.append, interval_s=60)
        await finder.check()  # KEDA not installed: no error, nothing found
        assert found == [{}]

        await kube_sim.create(keda_crd())
        await kube_sim.create(scaled_object("llm-so", "llm"))
        await finder.check()
        assert found[-1] == {WorkloadKey("default", "Deployment", "llm"): "KEDA ScaledObject default/llm-so"}
    finally:
        await api.close()
