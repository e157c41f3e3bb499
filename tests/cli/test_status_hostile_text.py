"""A tenant's GPUScaler text reaches the operator's terminal through `gpuscale
status`: control characters in it are shown escaped, never sent raw (a terminal
acts on ESC sequences: retitles, clears, rewrites lines, writes the clipboard)."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys

import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale_kubesim import KubeSim

from ..kubesim.conftest import Kubectl
from .conftest import namespaces

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl is not installed")

# OSC 52 (write the clipboard), clear screen, carriage return over the line, a bidi override, BEL.
HOSTILE = "x\x1b]52;c;cm0gLXJmIC8K\x07\x1b[2J\rTEAM-A OK\u202e\x9b31m"


def scaler(namespace: str, target: str) -> str:
    return json.dumps(
        {
            "apiVersion": "gpuscale.io/v1alpha1",
            "kind": "GPUScaler",
            "metadata": {"name": "gs", "namespace": namespace},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": target},
                "maxReplicas": 4,
                "metrics": [{"name": "gpu_util", "target": 70}],
            },
        }
    )


async def test_a_tenants_escape_sequences_are_shown_escaped_and_the_other_row_is_intact(
    kube_sim: KubeSim, kubectl: Kubectl, nats_server: EmbeddedNats
) -> None:
    await namespaces(kubectl, "team-a", "team-b")
    await kubectl("apply", "-f", "-", stdin=scaler("team-a", "bert"))
    await kubectl("apply", "-f", "-", stdin=scaler("team-b", HOSTILE))  # the CRD lets any 253 characters in
    args = ["--kubeconfig", str(kube_sim.kubeconfig_path), "--nats-url", nats_server.url, "--listen", "0.1"]
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuscale_cli.main",
        "status",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(), timeout=60)
    text = out.decode()
    assert process.returncode == 0, err.decode()
    assert all(c.isprintable() for c in text.replace("\n", "")), repr(text)
    rows = {line.split()[0]: line.split() for line in text.splitlines() if line.startswith("team-")}
    assert rows["team-a"][:6] == ["team-a", "gs", "Deployment/bert", "<unknown>/70", "1", "4"]
    assert "Deployment/x\\x1b]52;c;cm0gLXJmIC8K\\x07\\x1b[2J\\rTEAM-A" in rows["team-b"][2:4]
    assert rows["team-b"][3:5] == ["OK\\u202e\\x9b31m", "<unknown>/70"]
