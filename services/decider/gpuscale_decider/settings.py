"""Decider options (DESIGN.md §2)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import CommonSettings, existing_file, option, path, port


@dataclass(frozen=True)
class DeciderSettings(CommonSettings):
    http_port: int = option(
        9402,
        "--http-port",
        env="GPUSCALE_HTTP_PORT",
        parse=port,
        help="HTTP port for /metrics, /healthz, /readyz",
    )
    kubeconfig: Path | None = option(
        None, "--kubeconfig", env="KUBECONFIG", parse=path, help="kubeconfig; in-cluster config inside a pod"
    )
    policies: Path | None = option(
        None,
        "--policies",
        env="GPUSCALE_POLICIES",
        parse=existing_file,
        help="GPUScaler objects from a YAML file instead of watching the cluster",
    )
