"""What the kube-sim tests share: a real client and the real kubectl against the ``kube_sim`` fixture."""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient, ApiException

from gpuscale.kube import new_api_client
from gpuscale_kubesim import KubeSim

KUBECTL = shutil.which("kubectl")


@pytest.fixture
async def api(kube_sim: KubeSim) -> AsyncIterator[ApiClient]:
    """A kubernetes-asyncio client of the ``kube_sim`` fixture."""
    api = await new_api_client(Path(kube_sim.kubeconfig_path))
    try:
        yield api
    finally:
        await api.close()


def status_of(e: ApiException) -> dict[str, Any]:
    """The Status body of a refused request."""
    body: dict[str, Any] = json.loads(e.body)
    return body


def causes(e: ApiException) -> dict[str, tuple[str, str]]:
    """A 422's causes: field -> (reason, message)."""
    return {c["field"]: (c["reason"], c["message"]) for c in status_of(e)["details"]["causes"]}


class Kubectl:
    """The real kubectl with kube-sim's kubeconfig and its own cache."""

    def __init__(self, sim: KubeSim, cache: Path) -> None:
        self.sim = sim
        self.cache = cache

    async def __call__(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        """kubectl's output (stdout and stderr); ``check``: it must succeed, else it must fail."""
        assert KUBECTL is not None
        process = await asyncio.create_subprocess_exec(
            KUBECTL,
            f"--kubeconfig={self.sim.kubeconfig_path}",
            f"--cache-dir={self.cache}",
            "--request-timeout=20s",
            *args,
            stdin=asyncio.subprocess.PIPE if stdin is not None else None,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(process.communicate(stdin.encode() if stdin else None), timeout=90)
        text = out.decode() + err.decode()
        if check:
            assert process.returncode == 0, f"kubectl {' '.join(args)} failed: {text}"
        return text


@pytest.fixture
def kubectl(kube_sim: KubeSim, tmp_path: Path) -> Kubectl:
    return Kubectl(kube_sim, tmp_path / "kubectl-cache")
