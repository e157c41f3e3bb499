"""deploy/overlays: the platforms and settings a real cluster needs, rendered,
checked, and applied to kube-sim with the real kubectl (default validation), then
uninstalled, keeping the state.

- gpu-operator: the base as it is (the operator's node label, RuntimeClass and taint);
- device-plugin: no GPU Operator (no node label of its own, no RuntimeClass);
- both: images from your registry at the package's version, gpuscale's PriorityClass.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
import yaml

from gpuscale_kubesim import KubeSim

from ..k8s_objects import FIXTURE_CRDS, gpuscaler
from ..kubesim.conftest import Kubectl
from .deploy_support import DEPLOY, EXAMPLES, OVERLAYS, REPO, Obj, find, of_kind, render, workloads

KUBECTL = shutil.which("kubectl")
VERSION = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
GPU_OPERATOR = "overlays/gpu-operator"
DEVICE_PLUGIN = "overlays/device-plugin"


def test_the_overlays_are_there() -> None:
    assert set(OVERLAYS) == {GPU_OPERATOR, DEVICE_PLUGIN}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_gpuscale_image_comes_from_one_registry_at_the_package_version(overlay: str) -> None:
    assert VERSION is not None
    images = {
        c["image"]
        for w in workloads(render(DEPLOY / overlay))
        for c in w["spec"]["template"]["spec"]["containers"]
        if "gpuscale-" in c["image"]
    }
    assert len(images) == 4, images
    registries = {i.rsplit("/", 1)[0] for i in images}
    assert registries == {"registry.example.com/gpuscale"}
    assert {i.rsplit(":", 1)[1] for i in images} == {VERSION.group(1)}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_pod_gets_gpuscales_priority_class(overlay: str) -> None:
    objects = render(DEPLOY / overlay)
    (priority,) = of_kind(objects, "PriorityClass")
    assert priority["metadata"]["name"] == "gpuscale"
    # Above ordinary pods, below every system class (2,000,000,000) and the user maximum.
    assert 0 < priority["value"] < 1_000_000_000
    assert priority["globalDefault"] is False
    for w in workloads(objects):
        assert w["spec"]["template"]["spec"].get("priorityClassName") == "gpuscale", w["metadata"]["name"]


def _collector(directory: str) -> Obj:
    pod: Obj = find(render(DEPLOY / directory), "DaemonSet", "gpuscale-collector")["spec"]["template"]["spec"]
    return pod


def test_with_the_gpu_operator_the_collector_uses_its_label_runtime_class_and_taint() -> None:
    pod = _collector(GPU_OPERATOR)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    # Otherwise the base's pod, unchanged but for the image (the base is made for the GPU Operator).
    base = _collector("")
    assert "priorityClassName" not in base
    for spec in (pod, base):
        for c in spec["containers"]:
            c.pop("image")
    assert {k: v for k, v in pod.items() if k != "priorityClassName"} == base


def test_without_the_gpu_operator_the_collector_needs_no_operator_label_or_runtime_class() -> None:
    pod = _collector(DEVICE_PLUGIN)
    assert "nodeSelector" not in pod
    assert "runtimeClassName" not in pod
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    keys = {t["matchExpressions"][0]["key"] for t in terms}
    assert keys == {
        "nvidia.com/gpu.present",
        "feature.node.kubernetes.io/pci-10de.present",
        "cloud.google.com/gke-accelerator",
        "gpuscale.io/gpu-node",
    }
    assert all(len(t["matchExpressions"]) == 1 for t in terms), "each term alone selects a node (ORed)"
    taints = {(t["key"], t.get("value")) for t in pod["tolerations"]}
    assert taints == {("nvidia.com/gpu", None), ("sku", "gpu")}
    # NVML still comes from the runtime: the variables that ask for it stay.
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "utility")


def test_a_node_labelled_by_hand_matches_the_device_plugin_collector() -> None:
    """The nodeSelectorTerms as the scheduler reads them, against nodes of each platform."""
    pod = _collector(DEVICE_PLUGIN)
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]

    def schedulable(labels: dict[str, str]) -> bool:
        def matches(e: Obj) -> bool:
            if e["operator"] == "Exists":
                return e["key"] in labels
            return labels.get(e["key"]) in e["values"]

        return any(all(matches(e) for e in t["matchExpressions"]) for t in terms)

    assert schedulable({"gpuscale.io/gpu-node": "true"})
    assert schedulable({"cloud.google.com/gke-accelerator": "nvidia-h100-80gb"})
    assert schedulable({"feature.node.kubernetes.io/pci-10de.present": "true"})
    assert not schedulable({"kubernetes.io/os": "linux"})
    assert not schedulable({"gpuscale.io/gpu-node": "false"})


# --- applied to kube-sim, then uninstalled ----------------------------------------------


@pytest.fixture
def kubectl(kube_sim: KubeSim, tmp_path: Path) -> Kubectl:
    if KUBECTL is None:
        pytest.skip("kubectl is not installed on this machine")
    return Kubectl(kube_sim, tmp_path / "kubectl-cache")


CREDENTIALS = {
    f"{role}-password": f"{role}0123456789abcdef"
    for role in ("collector", "aggregator", "decider", "actuator", "observer")
}


@pytest.mark.integration
@pytest.mark.parametrize("overlay", OVERLAYS)
async def test_the_overlay_installs_with_kubectl_and_uninstalls_keeping_the_state(
    kube_sim: KubeSim, kubectl: Kubectl, overlay: str
) -> None:
    # A new cluster with the Prometheus Operator's CRDs.
    await kubectl("delete", "customresourcedefinition", "gpuscalers.gpuscale.io")
    await kubectl("delete", "namespace", "gpuscale")
    for crd in ("servicemonitors.yaml", "prometheusrules.yaml"):
        await kubectl("apply", "-f", str(FIXTURE_CRDS / crd))

    # The documented install: cluster-scoped parts, the Secret, then the overlay.
    out = await kubectl("apply", "-k", str(DEPLOY / "cluster"))
    assert "namespace/gpuscale created" in out
    assert "customresourcedefinition.apiextensions.k8s.io/gpuscalers.gpuscale.io created" in out
    # As docs/DEPLOYING.md says: made client-side, applied (the same command rotates them).
    secret = await kubectl(
        "-n", "gpuscale", "create", "secret", "generic", "gpuscale-nats-credentials",
        *(f"--from-literal={k}={v}" for k, v in CREDENTIALS.items()), "--dry-run=client", "-o", "yaml",
    )  # fmt: skip
    await kubectl("apply", "-f", "-", stdin=secret)
    out = await kubectl("apply", "-k", str(DEPLOY / overlay))
    assert "Warning" not in out, out
    assert "priorityclass.scheduling.k8s.io/gpuscale created" in out
    assert "daemonset.apps/gpuscale-collector created" in out
    assert "prometheusrule.monitoring.coreos.com/gpuscale created" in out
    collector = kube_sim.get("apps/v1", "DaemonSet", "gpuscale-collector", "gpuscale")
    applied = collector["spec"]["template"]["spec"]
    assert applied["priorityClassName"] == "gpuscale"
    assert ("runtimeClassName" in applied) == (overlay == GPU_OPERATOR)
    again = await kubectl("apply", "-k", str(DEPLOY / overlay))
    changed = [line for line in again.splitlines() if not line.endswith(" unchanged")]
    assert all(line.startswith("poddisruptionbudget.policy/") for line in changed), again

    # A user's policy, in their namespace.
    example = yaml.safe_load((EXAMPLES / "gpuscaler-bert-intent-detection.yaml").read_text())
    await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(example))
    await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(gpuscaler("other", namespace="gpuscale")))

    # Uninstall: everything the overlay made goes; the state stays.
    out = await kubectl("delete", "-k", str(DEPLOY / overlay))
    assert 'statefulset.apps "nats" deleted' in out
    assert "namespace" not in out
    assert "customresourcedefinition" not in out
    assert "secret" not in out
    kube_sim.get("v1", "Secret", "gpuscale-nats-credentials", "gpuscale")
    kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", "bert-intent-detection", "default")
    kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", "other", "gpuscale")
    assert kube_sim.list_objects("apps/v1", "StatefulSet", "gpuscale") == []
    # Reinstalling finds everything where it was.
    out = await kubectl("apply", "-k", str(DEPLOY / overlay))
    assert "statefulset.apps/nats created" in out
