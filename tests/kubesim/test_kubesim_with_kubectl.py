"""The real kubectl against kube-sim: get, scale, create -f, delete, printer columns, events."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpuscale_kubesim import KubeSim

from ..waiting import eventually
from .conftest import Kubectl

KUBECTL = shutil.which("kubectl")
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(KUBECTL is None, reason="kubectl is not installed on this machine"),
]

NS = "default"

DEPLOYMENT_YAML = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: llama
  labels: {app: llama}
spec:
  replicas: 2
  selector:
    matchLabels: {app: llama}
  template:
    metadata:
      labels: {app: llama}
    spec:
      containers:
      - name: vllm
        image: vllm/vllm-openai:v0.6.3
        resources:
          limits: {nvidia.com/gpu: 1}
"""


def rows(table: str) -> list[list[str]]:
    return [line.split() for line in table.strip().splitlines()]


async def test_create_get_scale_delete_deployment(
    kube_sim: KubeSim, kubectl: Kubectl, tmp_path: Path
) -> None:
    manifest = tmp_path / "deployment.yaml"
    manifest.write_text(DEPLOYMENT_YAML)
    assert "created (server dry run)" in await kubectl("create", "-f", str(manifest), "--dry-run=server")
    assert kube_sim.list_objects("apps/v1", "Deployment", NS) == [], "a dry run stores nothing"
    assert "deployment.apps/llama created" in await kubectl("create", "-f", str(manifest))

    await eventually(
        lambda: kube_sim.get("apps/v1", "Deployment", "llama")["status"].get("readyReplicas") == 2
    )
    table = rows(await kubectl("get", "deployments"))
    assert table[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert table[1][:4] == ["llama", "2/2", "2", "2"]

    assert "deployment.apps/llama scaled" in await kubectl("scale", "deployment", "llama", "--replicas=3")
    assert kube_sim.get("apps/v1", "Deployment", "llama")["spec"]["replicas"] == 3
    await eventually(lambda: len(kube_sim.pods(NS, "app=llama")) == 3)

    pods = rows(await kubectl("get", "pods", "-o", "wide", "-l", "app=llama"))
    assert pods[0][:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert all(row[0].startswith("llama-") and row[-1].startswith("gpu-node-") for row in pods[1:])

    assert 'deployment.apps "llama" deleted' in await kubectl("delete", "-f", str(manifest))
    await eventually(lambda: kube_sim.pods(NS, "app=llama") == [])
    assert "NotFound" in await kubectl("get", "deployment", "llama", check=False)


async def test_a_pod_with_scheduling_gates_waits_for_them_and_kubectl_says_so(
    kube_sim: KubeSim, kubectl: Kubectl
) -> None:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "gated", "namespace": NS},
        "spec": {
            "schedulingGates": [{"name": "example.com/quota"}],
            "containers": [{"name": "s", "image": "x"}],
        },
    }
    await kube_sim.create(pod)
    gated = await eventually(lambda: kube_sim.get("v1", "Pod", "gated", NS)["status"].get("conditions"))
    assert [(c["type"], c["status"], c["reason"]) for c in gated] == [
        ("PodScheduled", "False", "SchedulingGated")
    ]
    assert not kube_sim.get("v1", "Pod", "gated", NS)["spec"].get("nodeName")
    assert rows(await kubectl("get", "pod", "gated"))[1][:3] == ["gated", "0/1", "SchedulingGated"]
    assert "FailedScheduling" not in await kubectl("get", "events")  # a gated pod is not tried


async def test_get_gpuscalers_shows_the_printer_columns(kube_sim: KubeSim, kubectl: Kubectl) -> None:
    await kube_sim.create(
        {
            "apiVersion": "gpuscale.io/v1alpha1",
            "kind": "GPUScaler",
            "metadata": {"name": "bert", "namespace": NS},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bert"},
                "minReplicas": 1,
                "maxReplicas": 10,
                "metrics": [{"name": "gpu_util", "target": 70}],
            },
        }
    )
    custom = kube_sim.resource("gpuscale.io/v1alpha1", "GPUScaler")
    kube_sim.store.patch(
        custom,
        NS,
        "bert",
        {
            "status": {
                "reference": "Deployment/bert",
                "targets": "83/70",
                "currentReplicas": 2,
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "ConflictingController"},
                    {"type": "ScalingActive", "status": "True", "reason": "ValidMetricFound"},
                    {"type": "Paused", "status": "False", "reason": "NotPaused"},
                    {"type": "Fallback", "status": "False", "reason": "FallbackInactive"},
                ],
            }
        },
        "application/merge-patch+json",
        "status",
    )
    table = rows(await kubectl("get", "gpuscalers"))
    assert table[0] == [
        "NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "READY", "ACTIVE", "PAUSED", "FALLBACK", "AGE",
    ]  # fmt: skip
    # REFERENCE from the spec; READY..FALLBACK from the conditions (JSONPath filters).
    assert table[1][:10] == ["bert", "bert", "83/70", "1", "10", "2", "False", "True", "False", "False"]
    assert rows(await kubectl("get", "gs"))[1][:3] == ["bert", "bert", "83/70"]  # the short name
    wide = rows(await kubectl("get", "gs", "-o", "wide"))
    assert wide[0][-2:] == ["KIND", "REASON"]
    assert wide[1][-2:] == ["Deployment", "ConflictingController"]


async def test_get_events_shows_what_controllers_recorded(kube_sim: KubeSim, kubectl: Kubectl) -> None:
    await kube_sim.create(
        {
            "apiVersion": "events.k8s.io/v1",
            "kind": "Event",
            "metadata": {"name": "bert.scaled", "namespace": NS},
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Deployment", "name": "bert", "namespace": NS},
            "reason": "GPUScaled",
            "note": "scaled from 1 to 3: gpu_util 90 over target 70",
            "type": "Normal",
            "action": "Scale",
            "reportingController": "gpuscale.io/actuator",
            "reportingInstance": "actuator-0",
        }
    )
    text = await kubectl("get", "events")
    header, *lines = text.strip().splitlines()
    assert header.split() == ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert any(
        "GPUScaled" in line and "deployment/bert" in line and "scaled from 1 to 3" in line for line in lines
    )


async def test_get_nodes_and_api_resources(kubectl: Kubectl) -> None:
    nodes = rows(await kubectl("get", "nodes"))
    assert nodes[0] == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [r[:2] for r in nodes[1:]] == [["gpu-node-1", "Ready"], ["gpu-node-2", "Ready"]]
    resources = await kubectl("api-resources")
    assert "gpuscalers" in resources
    assert "GPUScaler" in resources
    assert "gpuscale.io/v1alpha1" in resources
