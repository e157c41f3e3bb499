"""Fixtures of the CLI tests: the real kubectl against the ``kube_sim`` fixture."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuscale_kubesim import KubeSim

from ..kubesim.conftest import Kubectl


@pytest.fixture
def kubectl(kube_sim: KubeSim, tmp_path: Path) -> Kubectl:
    return Kubectl(kube_sim, tmp_path / "kubectl-cache")


async def namespaces(kubectl: Kubectl, *names: str) -> None:
    """Each namespace created as a user would, through the real kubectl."""
    for name in names:
        namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        await kubectl("apply", "-f", "-", stdin=json.dumps(namespace))
