"""`kubectl get hpa -A -o yaml | gpuscale convert - | kubectl apply -f -` (docs/MIGRATING.md):
a tenant's HPA text quoted in the notes stays inside its comment line, escaped, so
the output holds only the GPUScalers converted and drives no terminal."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys

import pytest
import yaml

from gpuscale_kubesim import KubeSim

from ..kubesim.conftest import Kubectl
from .conftest import namespaces

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

# A metric name the API server accepts (a path segment: no "/" or "%") that ends the note's comment
# line and adds a privileged Pod in kube-system to what the operator applies, then retitles the terminal.
INJECTED = (
    "x\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: pwn, namespace: kube-system}\n"
    "spec: {hostPID: true, containers: [{name: c, image: evil, securityContext: {privileged: true}}]}\n"
    "#\x1b]0;owned\x07\u2028\x85"
)


def hpa(namespace: str, external_name: str | None) -> dict[str, object]:
    metrics: list[dict[str, object]] = [
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "DCGM_FI_DEV_GPU_UTIL"},
                "target": {"type": "AverageValue", "averageValue": "70"},
            },
        }
    ]
    if external_name is not None:
        metrics.append(
            {
                "type": "External",
                "external": {
                    "metric": {"name": external_name},
                    "target": {"type": "AverageValue", "averageValue": "1"},
                },
            }
        )
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "h", "namespace": namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bert"},
            "minReplicas": 1,
            "maxReplicas": 4,
            "metrics": metrics,
        },
    }


async def test_a_tenants_metric_name_cannot_add_objects_to_what_the_operator_applies(
    kube_sim: KubeSim, kubectl: Kubectl
) -> None:
    await namespaces(kubectl, "team-a", "team-b")
    await kubectl("apply", "-f", "-", stdin=json.dumps(hpa("team-a", None)))
    await kubectl("apply", "-f", "-", stdin=json.dumps(hpa("team-b", INJECTED)))
    listing = await kubectl("get", "hpa", "-A", "-o", "yaml")
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuscale_cli.main",
        "convert",
        "-",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(listing.encode()), timeout=60)
    text, errors = out.decode(), err.decode()
    assert process.returncode == 0, errors
    assert all(c.isprintable() for c in (text + errors).replace("\n", "")), repr(text + errors)
    docs = [d for d in yaml.safe_load_all(text) if d is not None]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in docs] == [
        ("GPUScaler", "team-a"),
        ("GPUScaler", "team-b"),
    ]
    assert docs[0] == docs[1] | {"metadata": docs[0]["metadata"]}  # the same policy; team-a's is as before
    assert "\\x1b]0;owned\\x07\\u2028" in text  # shown, escaped, in its one note line
    assert all(line.startswith("gpuscale convert: ") for line in errors.splitlines()), errors
