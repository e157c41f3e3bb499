"""The real kubectl, with its default validation, against kube-sim: ``kubectl apply -k
deploy/`` installs gpuscale as on a real cluster, the pipeline then runs on what it
applied; ``kubectl explain`` reads the served OpenAPI; invalid manifests get the
server's errors."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_kubesim import KubeSim

from ..decider.decider_harness import (
    metrics_message,
    publish_metrics,
    running_decider,
    running_pods,
    settings_for,
    watch_decisions,
)
from ..k8s_objects import FIXTURE_CRDS, gpu_workload
from ..waiting import eventually
from .conftest import Kubectl

KUBECTL = shutil.which("kubectl")
REPO = Path(__file__).resolve().parents[2]
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine"),
]


async def fresh_cluster(kubectl: Kubectl) -> None:
    """kube-sim starts with the GPUScaler CRD and the gpuscale namespace: remove them, as on a new cluster."""
    await kubectl("delete", "customresourcedefinition", "gpuscalers.gpuscale.io")
    await kubectl("delete", "namespace", "gpuscale")


@pytest.mark.slow
async def test_apply_k_deploy_then_the_pipeline_runs_on_what_it_applied(
    kube_sim: KubeSim, kubectl: Kubectl, nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    await fresh_cluster(kubectl)
    # A cluster with the Prometheus Operator: its ServiceMonitor and PrometheusRule CRDs are there.
    await kubectl("apply", "-f", str(FIXTURE_CRDS / "servicemonitors.yaml"))
    await kubectl("apply", "-f", str(FIXTURE_CRDS / "prometheusrules.yaml"))

    out = await kubectl(
        "apply", "-k", str(REPO / "deploy" / "cluster")
    )  # kubectl's default validation: strict
    assert "namespace/gpuscale created" in out
    assert "customresourcedefinition.apiextensions.k8s.io/gpuscalers.gpuscale.io created" in out
    out = await kubectl("apply", "-k", str(REPO / "deploy"))
    for line in (
        "daemonset.apps/gpuscale-collector created",
        "deployment.apps/gpuscale-decider created",
        "statefulset.apps/nats created",
        "poddisruptionbudget.policy/nats created",
        "clusterrolebinding.rbac.authorization.k8s.io/gpuscale-actuator created",
        "configmap/nats-config created",
        "service/nats created",
        "servicemonitor.monitoring.coreos.com/gpuscale-collector created",
        "prometheusrule.monitoring.coreos.com/gpuscale created",
    ):
        assert line in out, out
    assert "Warning" not in out, out
    # Applying again changes nothing (kubectl computes the patches from the served OpenAPI). PDBs say
    # "configured" every time on a real cluster too: their selector's patch strategy is "replace".
    again = await kubectl("apply", "-k", str(REPO / "deploy"))
    changed = [line for line in again.splitlines() if not line.endswith(" unchanged")]
    assert all(line.startswith("poddisruptionbudget.policy/") for line in changed), again

    # The example GPUScaler and its target, as a user would apply them.
    await kubectl("apply", "-f", str(REPO / "deploy" / "examples" / "gpuscaler-bert-intent-detection.yaml"))
    await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(gpu_workload("bert-intent-detection", gpus=None)))
    table = (await kubectl("get", "gpuscalers")).splitlines()
    assert table[0].split() == [
        "NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS",
        "READY", "ACTIVE", "PAUSED", "FALLBACK", "AGE",
    ]  # fmt: skip
    # Before the decider wrote anything, REFERENCE (from the spec) already names the target.
    assert table[1].split()[:2] == ["bert-intent-detection", "bert-intent-detection"]

    def scaler() -> dict[str, Any]:
        return kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", "bert-intent-detection")

    # The decider reads the applied GPUScaler and writes its status: the seeds' example, 1 pod at 23 % of 20.
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with running_decider(settings) as running, watch_decisions(nats_client) as watch:
        await eventually(lambda: running.decider.workloads, what="the applied GPUScaler listed")
        pods = await running_pods(kube_sim, "bert-intent-detection", 1)
        await publish_metrics(nats_client, metrics_message("bert-intent-detection", 23.0, 1, pods=pods))
        decision = await watch.next(1)
        assert (decision.from_replicas, decision.to_replicas) == (1, 2)
        await eventually(lambda: (scaler().get("status") or {}).get("desiredReplicas") == 2, what="status")
        await eventually(
            lambda: any(
                e.get("reason") == "ScaleUpDecided" for e in kube_sim.list_objects("v1", "Event", "default")
            ),
            what="the decision's Event on the GPUScaler",
        )
    status = scaler()["status"]
    # The explanation is a declared field: a real server keeps it.
    assert status["reason"], status
    assert "23" in status["reason"]
    described = await kubectl("get", "gpuscaler", "bert-intent-detection", "-o", "jsonpath={.status.reason}")
    assert described == status["reason"]
    row = (await kubectl("get", "gpuscalers", "-o", "wide")).splitlines()[1].split()
    # NAME REFERENCE TARGETS MINPODS MAXPODS REPLICAS READY ACTIVE PAUSED FALLBACK AGE KIND REASON
    assert row[1:3] == ["bert-intent-detection", "23/20"]
    assert row[6:10] == ["True", "True", "False", "False"]
    assert row[11:] == ["Deployment", "GPUScalerReady"]
    # `kubectl describe` lists the decision as an Event on the GPUScaler itself.
    described = await kubectl("describe", "gpuscaler", "bert-intent-detection")
    assert "Events:" in described
    assert "ScaleUpDecided" in described, described
    assert "New size: 2 (from 1)" in described


async def test_apply_k_deploy_needs_the_servicemonitor_crd(kubectl: Kubectl) -> None:
    """Without the Prometheus Operator, monitoring.coreos.com is not served: apply says so."""
    out = await kubectl("apply", "-k", str(REPO / "deploy"), check=False)
    assert 'no matches for kind "ServiceMonitor" in version "monitoring.coreos.com/v1"' in out, out
    # deploy/base alone needs nothing but Kubernetes.
    await kubectl("apply", "-k", str(REPO / "deploy" / "base"))


async def test_kubectl_explain_reads_the_served_schemas(kubectl: Kubectl) -> None:
    top = await kubectl("explain", "gpuscaler")
    assert "KIND:       GPUScaler" in top
    assert "GPUScaler scales a Deployment or StatefulSet" in top
    behavior = await kubectl("explain", "gpuscaler.spec.behavior")
    assert "scaleUp\t<Object>" in behavior
    assert "scaleDown\t<Object>" in behavior
    reason = await kubectl("explain", "gpuscaler.status.reason")
    assert "FIELD: reason <string>" in reason
    replicas = await kubectl("explain", "deployment.spec.replicas")
    assert "Number of desired pods" in replicas
    # The older explain reads /openapi/v2 in its protobuf form.
    metrics = await kubectl("explain", "gpuscaler.spec.metrics", "--output=plaintext-openapiv2")
    assert "The metrics to scale on" in metrics
    assert "target\t<number> -required-" in metrics


async def test_kubectl_shows_the_servers_errors(kubectl: Kubectl, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        """
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: bad}
spec:
  scaleTargetRef: {kind: Job, name: web}
  maxReplicas: 0
  metrics: [{name: gpu_util, target: 70}]
"""
    )
    out = await kubectl("apply", "-f", str(bad), check=False)
    assert "created" not in out
    assert 'The GPUScaler "bad" is invalid' in out
    assert 'spec.scaleTargetRef.kind: Unsupported value: "Job"' in out
    assert (
        "spec.maxReplicas: Invalid value: 0: spec.maxReplicas in body should be greater than or equal to 1"
        in out
    )

    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(
        """
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: typo}
spec:
  scaleTargetRef: {kind: Deployment, name: web}
  maxReplicas: 3
  metrics: [{name: gpu_util, target: 70}]
  minReplica: 2
"""
    )
    out = await kubectl("apply", "-f", str(unknown), check=False)
    assert 'strict decoding error: unknown field "spec.minReplica"' in out
    out = await kubectl("apply", "-f", str(unknown), "--validate=warn")
    assert 'Warning: unknown field "spec.minReplica"' in out
    assert "gpuscaler.gpuscale.io/typo created" in out


async def test_kubectl_is_refused_a_target_below_a_milli_unit_and_a_window_past_a_day(
    kubectl: Kubectl, tmp_path: Path
) -> None:
    # 5e-10 would be 0 milli-units, the divisor of every evaluation.
    tiny = tmp_path / "tiny.yaml"
    tiny.write_text(
        """
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: tiny}
spec:
  scaleTargetRef: {kind: Deployment, name: web}
  maxReplicas: 3
  metrics: [{name: gpu_util, target: 5e-10}]
  window: 25h
"""
    )
    out = await kubectl("apply", "-f", str(tiny), check=False)
    assert "created" not in out
    assert 'The GPUScaler "tiny" is invalid' in out
    assert "must be at least 0.001: the target is computed on in milli-units" in out
    assert "spec.window: Invalid value" in out
    assert "must be at most 24h" in out
