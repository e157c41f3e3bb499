"""APIService objects (apiregistration.k8s.io/v1), as an external metrics provider installs them:
kube-sim stores and validates them like a real API server (it proxies nothing)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from gpuscale_kubesim import KubeSim

from .conftest import Kubectl
from .test_kubesim_kubectl_strict import fresh_cluster

REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine"),
]


async def test_apply_k_the_keda_scaler_overlay(kube_sim: KubeSim, kubectl: Kubectl) -> None:
    await fresh_cluster(kubectl)
    await kubectl("apply", "-k", str(REPO / "deploy" / "cluster"))  # the namespace and the CRD, first
    out = await kubectl("apply", "-k", str(REPO / "deploy" / "examples" / "with-keda-scaler"))
    for line in (
        "apiservice.apiregistration.k8s.io/v1beta1.external.metrics.k8s.io created",
        "deployment.apps/gpuscale-keda-scaler created",
        "service/gpuscale-keda-scaler created",
        "clusterrolebinding.rbac.authorization.k8s.io/gpuscale-external-metrics-reader created",
        "deployment.apps/gpuscale-decider created",
    ):
        assert line in out, out
    assert "Warning" not in out, out
    stored = kube_sim.get(
        "apiregistration.k8s.io/v1", "APIService", "v1beta1.external.metrics.k8s.io", namespace=None
    )
    assert stored["spec"]["service"] == {"name": "gpuscale-keda-scaler", "namespace": "gpuscale", "port": 443}
    table = (await kubectl("get", "apiservices")).splitlines()
    assert table[0].split() == ["NAME", "SERVICE", "AGE"]
    assert table[1].split()[:2] == ["v1beta1.external.metrics.k8s.io", "gpuscale/gpuscale-keda-scaler"]


async def test_an_invalid_apiservice_is_refused(kubectl: Kubectl) -> None:
    broken = {
        "apiVersion": "apiregistration.k8s.io/v1",
        "kind": "APIService",
        "metadata": {"name": "v1beta1.external.metrics.k8s.io"},
        "spec": {"group": "external.metrics.k8s.io", "version": "v1beta1", "groupPriorityMinimum": "high"},
    }
    out = await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(broken), check=False)
    assert "groupPriorityMinimum" in out, out
