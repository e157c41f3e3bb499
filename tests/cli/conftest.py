"""Fixtures of the CLI tests: the real kubectl against the ``kube_sim`` fixture."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscale_kubesim import KubeSim

from ..kubesim.conftest import Kubectl


@pytest.fixture
def kubectl(kube_sim: KubeSim, tmp_path: Path) -> Kubectl:
    return Kubectl(kube_sim, tmp_path / "kubectl-cache")
