"""The commands docs/DEPLOYING.md tells an operator to type, run as written.

The install, credential rotation and reload blocks are taken from the document
and run by bash with the real kubectl (pointed at kube-sim), openssl and
nats-server. `kubectl rollout status` lines are left out: kube-sim runs no
DaemonSet controller to report a rollout's progress.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from gpuscale.embedded_nats import find_binary
from gpuscale_kubesim import KubeSim

from ..k8s_objects import FIXTURE_CRDS
from ..waiting import eventually_sync
from .deploy_support import REPO, nats_roles

KUBECTL = shutil.which("kubectl")
DOC = REPO / "docs" / "DEPLOYING.md"
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        KUBECTL is None or shutil.which("openssl") is None, reason="needs kubectl and openssl"
    ),
]


def block_after(heading: str, index: int = 0) -> str:
    """The ``index``-th ```sh block of the section under ``heading``."""
    text = DOC.read_text()
    start = text.index(f"\n{heading}\n")
    blocks = re.findall(r"```sh\n(.*?)```", text[start:], re.S)
    return str(blocks[index])


def runnable(block: str) -> str:
    return "\n".join(line for line in block.splitlines() if "rollout status" not in line)


async def bash(script: str, kube_sim: KubeSim, tmp_path: Path, cwd: Path = REPO) -> str:
    """``script`` with `kubectl` talking to kube-sim, run in ``cwd``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    wrapper = bin_dir / "kubectl"
    wrapper.write_text(
        f'#!/bin/sh\nexec {KUBECTL} --kubeconfig={kube_sim.kubeconfig_path} --cache-dir={tmp_path}/cache "$@"\n'
    )
    wrapper.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    process = await asyncio.create_subprocess_exec(
        "bash", "-euo", "pipefail", "-c", script, cwd=cwd, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), timeout=120)
    text = out.decode()
    assert process.returncode == 0, f"{script}\n---\n{text}"
    return text


def secret_passwords(kube_sim: KubeSim) -> dict[str, str]:
    secret = kube_sim.get("v1", "Secret", "gpuscale-nats-credentials", "gpuscale")
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


async def test_install_then_rotate_the_passwords_as_documented(kube_sim: KubeSim, tmp_path: Path) -> None:
    await bash(
        "kubectl delete crd gpuscalers.gpuscale.io && kubectl delete namespace gpuscale", kube_sim, tmp_path
    )
    for crd in ("servicemonitors.yaml", "prometheusrules.yaml"):
        await bash(f"kubectl apply -f {FIXTURE_CRDS / crd}", kube_sim, tmp_path)

    install = block_after("## Install")
    steps = [line for line in install.split("\n\n") if line.strip()]
    # Steps 1 and 2 as written.
    await bash(steps[0] + "\n" + steps[1], kube_sim, tmp_path)
    first = secret_passwords(kube_sim)
    assert set(first) == {f"{r}-password" for r in nats_roles()}
    assert "setup" in nats_roles()
    assert all(re.fullmatch(r"[0-9a-f]{48}", p) for p in first.values()), "URL-safe hex"
    # Step 3 as written, in a copy of the checkout's deploy/ (it writes deploy/overlays/local):
    # the images are the user's registry's, never one that publishes nothing.
    checkout = tmp_path / "checkout"
    shutil.copytree(REPO / "deploy", checkout / "deploy")
    out = await bash(steps[2], kube_sim, tmp_path, cwd=checkout)
    assert "daemonset.apps/gpuscale-collector created" in out, out
    images = {
        container["image"]
        for kind, name in [("DaemonSet", "gpuscale-collector"), ("Deployment", "gpuscale-decider")]
        for container in kube_sim.get("apps/v1", kind, name, "gpuscale")["spec"]["template"]["spec"][
            "containers"
        ]
    }
    assert images
    assert all(image.startswith("registry.example.com/gpuscale/") for image in images), images
    # Step 5 as written: the example's workload exists for its GPUScaler.
    await bash(steps[4], kube_sim, tmp_path, cwd=checkout)
    kube_sim.get("apps/v1", "Deployment", "bert-intent-detection", "default")
    kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", "bert-intent-detection", "default")

    rotate = block_after("### Rotating the passwords")
    await bash(runnable(rotate), kube_sim, tmp_path)
    second = secret_passwords(kube_sim)
    assert set(second) == set(first)
    assert all(second[k] != first[k] for k in first), "every password is new"
    # Every workload got a new template (what makes the pods restart with the new Secret).
    for kind, name in [
        ("StatefulSet", "nats"),
        ("Deployment", "gpuscale-aggregator"),
        ("Deployment", "gpuscale-decider"),
        ("Deployment", "gpuscale-actuator"),
        ("DaemonSet", "gpuscale-collector"),
    ]:
        annotations = kube_sim.get("apps/v1", kind, name, "gpuscale")["spec"]["template"]["metadata"].get(
            "annotations", {}
        )
        assert "kubectl.kubernetes.io/restartedAt" in annotations, f"{kind}/{name} was not restarted"


def test_the_documented_reload_signal_reloads_a_running_nats_server(tmp_path: Path) -> None:
    """`nats-server --signal reload=<pid file>`, the command the doc runs in each NATS pod."""
    reload_line = next(
        line for line in block_after("### Rotating the passwords", 1).splitlines() if "--signal" in line
    )
    assert "nats-server --signal reload=/var/run/nats/nats.pid" in reload_line
    nats_conf = (REPO / "deploy" / "base" / "nats" / "nats.conf").read_text()
    assert "pid_file: /var/run/nats/nats.pid" in nats_conf
    pid_file = tmp_path / "nats.pid"
    log = tmp_path / "nats.log"
    conf = tmp_path / "nats.conf"
    conf.write_text(f'listen: 127.0.0.1:-1\npid_file: "{pid_file}"\nmax_payload: 1MB\n')
    server = subprocess.Popen([find_binary(), "-c", str(conf), "-l", str(log)])
    try:
        eventually_sync(pid_file.exists, 10, "the pid file")
        conf.write_text(f'listen: 127.0.0.1:-1\npid_file: "{pid_file}"\nmax_payload: 2MB\n')
        subprocess.run([find_binary(), "--signal", f"reload={pid_file}"], check=True, timeout=10)
        eventually_sync(
            lambda: "Reloaded server configuration" in log.read_text(), 10, "the reload in the log"
        )
        assert server.poll() is None, "reloading must not stop the server"
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_no_documented_command_mixes_resource_forms() -> None:
    """`kubectl rollout restart statefulset/nats deployment` fails ("there is no need to specify
    a resource type as a separate argument when passing arguments in resource/name form")."""
    for doc in (DOC, REPO / "docs" / "GPUSCALER.md", REPO / "README.md"):
        for line in doc.read_text().splitlines():
            if "kubectl" in line and "rollout" in line:
                words = line.split("rollout", 1)[1].split()[1:]
                args = [w for w in words if not w.startswith("-") and w not in ("gpuscale",)]
                forms = {"/" in a for a in args}
                assert len(forms) <= 1, f"{doc.name}: {line.strip()}"
