"""`gpuscale convert` on the seed write-ups' own HPA and ScaledObject examples.

Each result must be what the seed meant (target, bounds, metric and its
unit), valid against the GPUScaler CRD's schema (strict: a field the API
server would prune is an error), accepted by the decider's own policy
parser, and accepted by a strict API server (kube-sim, through the real
kubectl with its default server-side validation).
"""

from __future__ import annotations

import io
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale.policy import parse_gpuscaler
from gpuscale_cli.convert.app import run
from gpuscale_kubesim import KubeSim

from ..deploy.deploy_support import gpuscaler_validator
from ..kubesim.conftest import Kubectl

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "convert"


def convert(path: Path) -> tuple[int, list[dict[str, Any]], str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(str(path), io.StringIO(), out, err)
    docs = [d for d in yaml.safe_load_all(out.getvalue()) if d]
    return code, docs, out.getvalue(), err.getvalue()


def assert_valid(gpuscaler: dict[str, Any]) -> None:
    errors = [f"{list(e.path)}: {e.message}" for e in gpuscaler_validator().iter_errors(gpuscaler)]
    assert errors == []
    parse_gpuscaler(gpuscaler)  # raises PolicyError naming every bad field


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        pytest.param(
            "seed-000-keda-prometheus.yaml",
            [
                (
                    "58ecbfb07c7ae7056a96a3b1-image-common-production",
                    1,
                    12,
                    [{"name": "gpu_util", "target": 70}],
                )
            ],
            id="000-keda-avg-gpu-util",
        ),
        pytest.param(
            "seed-001-hpa-ack.yaml",
            [("bert-intent-detection", 1, 10, [{"name": "sm_util", "target": 20}])] * 2,
            id="001-hpa-process-sm-util",
        ),
        pytest.param(
            "seed-003-hpa-duty-cycle.yaml",
            [("bert-intent-detection", 1, 10, [{"name": "gpu_util", "target": 20}])],
            id="003-hpa-duty-cycle",
        ),
        pytest.param(
            "seed-004-hpa-duty-cycle.yaml",
            [("fast-style-transfer-serving", 1, 10, [{"name": "gpu_util", "target": 40}])],
            id="004-hpa-duty-cycle",
        ),
    ],
)
def test_each_seed_example_becomes_the_gpuscaler_it_meant(
    fixture: str, expected: list[tuple[str, int, int, list[dict[str, Any]]]]
) -> None:
    code, docs, _, _ = convert(FIXTURES / fixture)
    assert code == 0
    assert len(docs) == len(expected)
    for doc, (target, lo, hi, metrics) in zip(docs, expected, strict=True):
        assert doc["apiVersion"] == "gpuscale.io/v1alpha1"
        assert doc["kind"] == "GPUScaler"
        spec = doc["spec"]
        assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": target}
        assert (spec["minReplicas"], spec["maxReplicas"]) == (lo, hi)
        assert spec["metrics"] == metrics
        assert_valid(doc)


def test_the_keda_seed_keeps_its_namespace_and_says_what_changed() -> None:
    code, (doc,), text, err = convert(FIXTURES / "seed-000-keda-prometheus.yaml")
    assert code == 0
    assert doc["metadata"]["namespace"] == "production"
    assert doc["metadata"]["annotations"] == {
        "gpuscale.io/converted-from": "ScaledObject/58ecbfb07c7ae7056a96a3b1-image-common-production"
    }
    # KEDA's default minReplicaCount is 0: a GPUScaler cannot scale to zero, and says so.
    assert "minReplicaCount 0 (KEDA's default) -> 1" in err
    # The average divided by the threshold capped the old set-up at ceil(100/70) = 2 replicas.
    assert "ceil(100/70) = 2 replicas" in err
    # The placeholder apiVersion and the Prometheus connection are explained, in comments only.
    assert "scaleTargetRef.apiVersion 'apiVersion' -> apps/v1" in text
    assert "metricName, serverAddress: not needed" in text
    assert "serverAddress" not in err
    # Every stderr line is also a comment in the YAML.
    for line in err.splitlines():
        note = line.split("): ", 1)[1]
        assert note in text, note


def test_the_ack_v2_seed_warns_about_its_invalid_utilization_target() -> None:
    code, docs, _, err = convert(FIXTURES / "seed-001-hpa-ack.yaml")
    assert code == 0
    assert err.count("target type Utilization is only valid for Resource metrics") == 1
    # Both seed HPAs are named gpu-hpa and scale the same Deployment: applying both would clash.
    assert "applying both keeps only the last" in err
    assert "two GPUScalers on one target" in err
    assert [d["metadata"]["name"] for d in docs] == ["gpu-hpa", "gpu-hpa"]


def test_other_objects_in_the_file_are_skipped_and_named() -> None:
    code, docs, text, err = convert(FIXTURES / "seed-003-hpa-duty-cycle.yaml")
    assert code == 0
    assert [d["kind"] for d in docs] == ["GPUScaler"]
    assert "Deployment bert-intent-detection (extensions/v1beta1): not an HPA or ScaledObject; skipped" in err
    assert "Service bert-intent-detection-svc (v1): not an HPA or ScaledObject; skipped" in err
    assert "# Deployment bert-intent-detection (extensions/v1beta1): skipped." in text


def test_the_template_seed_is_unreadable_in_one_line() -> None:
    code, docs, text, err = convert(FIXTURES / "seed-000-keda-template.yaml")
    assert (code, docs, text) == (2, [], "")
    assert err.count("\n") == 1
    assert err.startswith("gpuscale convert: ")
    assert "seed-000-keda-template.yaml is not valid YAML at line 7, column 15: found unhashable key" in err


@pytest.mark.integration
@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed on this machine")
async def test_the_converted_seeds_are_accepted_by_a_strict_api_server(
    kube_sim: KubeSim, kubectl: Kubectl
) -> None:
    """kubectl's default validation is server-side Strict: an unknown or pruned field fails the apply."""
    for name in (
        "seed-000-keda-prometheus.yaml",
        "seed-003-hpa-duty-cycle.yaml",
        "seed-004-hpa-duty-cycle.yaml",
    ):
        _, _, text, _ = convert(FIXTURES / name)
        if "namespace: production" in text:
            namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "production"}}
            await kubectl("apply", "-f", "-", stdin=yaml.safe_dump(namespace))
        out = await kubectl("apply", "-f", "-", stdin=text)
        assert " created" in out or " configured" in out, out
        assert "Warning" not in out, out
    stored = kube_sim.get(
        "gpuscale.io/v1alpha1",
        "GPUScaler",
        "58ecbfb07c7ae7056a96a3b1-image-common-production",
        namespace="production",
    )
    assert stored["spec"]["metrics"] == [{"name": "gpu_util", "target": 70}]
    listed = await kubectl("get", "gpuscalers", "-A", "-o", "name")
    assert sorted(listed.split()) == [
        "gpuscaler.gpuscale.io/58ecbfb07c7ae7056a96a3b1-image-common-production",
        "gpuscaler.gpuscale.io/gpu-hpa",  # 003's; 004's has the same name and replaced it
    ]
