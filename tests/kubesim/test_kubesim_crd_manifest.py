"""The GPUScaler CRD kube-sim serves is the one deploy/ ships, and a valid one."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import yaml

from gpuscale_kubesim.apiserver.resources import from_crd

REPO = Path(__file__).resolve().parents[2]
DEPLOY_CRD = REPO / "deploy" / "cluster" / "crd-gpuscaler.yaml"


# kubectl get hpa's, KEDA's READY/ACTIVE/PAUSED/FALLBACK, and two for -o wide.
PRINTER_COLUMNS = [
    "Reference",
    "Targets",
    "MinPods",
    "MaxPods",
    "Replicas",
    "Ready",
    "Active",
    "Paused",
    "Fallback",
    "Age",
    "Kind",
    "Reason",
]


def packaged_crd_text() -> str:
    return importlib.resources.files("gpuscale_kubesim").joinpath("crds/gpuscaler.yaml").read_text()


def test_packaged_crd_is_identical_to_the_deploy_manifest() -> None:
    assert packaged_crd_text() == DEPLOY_CRD.read_text(), (
        "copy deploy/cluster/crd-gpuscaler.yaml to kubesim/gpuscale_kubesim/crds/gpuscaler.yaml"
    )


def test_crd_shape() -> None:
    crd = yaml.safe_load(DEPLOY_CRD.read_text())
    assert crd["metadata"]["name"] == "gpuscalers.gpuscale.io"
    spec = crd["spec"]
    assert (spec["group"], spec["scope"], spec["names"]["kind"]) == ("gpuscale.io", "Namespaced", "GPUScaler")
    assert spec["names"]["shortNames"] == ["gs"]
    version = spec["versions"][0]
    assert version["name"] == "v1alpha1"
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == PRINTER_COLUMNS
    props = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(props["spec"]["properties"]) == {
        "scaleTargetRef",
        "minReplicas",
        "maxReplicas",
        "metrics",
        "window",
        "tolerance",
        "behavior",
        "fallback",
        "paused",
        "notReadyPods",
        "mode",
    }
    rules = props["spec"]["properties"]["behavior"]["properties"]["scaleDown"]["properties"]
    assert set(rules) == {
        "stabilizationWindowSeconds",
        "cooldownSeconds",
        "tolerance",
        "policies",
        "selectPolicy",
    }
    assert {
        "currentReplicas",
        "desiredReplicas",
        "currentMetrics",
        "lastScaleTime",
        "conditions",
        "observedGeneration",
    } <= set(props["status"]["properties"])


def test_crd_is_structural_no_refs() -> None:
    """A CRD schema may not use $ref (the API server rejects it)."""
    assert "$ref" not in DEPLOY_CRD.read_text()


def test_design_example_validates_against_the_schema() -> None:
    import jsonschema  # dev dependency, only here

    crd = yaml.safe_load(DEPLOY_CRD.read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    example = yaml.safe_load(
        """
apiVersion: gpuscale.io/v1alpha1
kind: GPUScaler
metadata: {name: bert-intent-detection, namespace: default}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: bert-intent-detection}
  minReplicas: 1
  maxReplicas: 10
  metrics:
    - {name: gpu_util, target: 70}
    - {name: gpu_mem_used_ratio, target: 80}
  window: 30s
  tolerance: 0.1
  behavior:
    scaleUp:   {stabilizationWindowSeconds: 0,   cooldownSeconds: 0,
                policies: [{type: Percent, value: 100, periodSeconds: 15},
                           {type: Pods, value: 4, periodSeconds: 15}], selectPolicy: Max}
    scaleDown: {stabilizationWindowSeconds: 300, cooldownSeconds: 0,
                policies: [{type: Percent, value: 100, periodSeconds: 15}], selectPolicy: Max}
  fallback: {afterSeconds: 120, replicas: 2}
  paused: false
"""
    )
    validator = jsonschema.Draft4Validator(_draft4(schema))
    validator.validate(example)
    bad = dict(example, spec=dict(example["spec"], metrics=[{"name": "gpu_util", "target": 0}]))
    assert not validator.is_valid(bad), "a target must be greater than zero"
    no_target = dict(example, spec={k: v for k, v in example["spec"].items() if k != "scaleTargetRef"})
    assert not validator.is_valid(no_target)


def _draft4(schema: object) -> object:
    """OpenAPI v3.0's boolean exclusiveMinimum is JSON Schema draft 4's; drop 'nullable'."""
    if isinstance(schema, dict):
        return {k: _draft4(v) for k, v in schema.items() if k != "nullable"}
    if isinstance(schema, list):
        return [_draft4(v) for v in schema]
    return schema


def test_served_kind_has_the_printer_columns() -> None:
    (served,) = from_crd(yaml.safe_load(packaged_crd_text()))
    assert served.api_version == "gpuscale.io/v1alpha1"
    assert [c.name for c in served.table_columns()] == ["Name", *PRINTER_COLUMNS]
    assert served.subresources == frozenset({"status"})
