"""Actuator options (DESIGN.md §2)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import CommonSettings, boolean, option, path, port


@dataclass(frozen=True)
class ActuatorSettings(CommonSettings):
    http_port: int = option(
        9403,
        "--http-port",
        env="GPUSCALE_HTTP_PORT",
        parse=port,
        help="HTTP port for /metrics, /healthz, /readyz",
    )
    kubeconfig: Path | None = option(
        None, "--kubeconfig", env="KUBECONFIG", parse=path, help="kubeconfig; in-cluster config inside a pod"
    )
    dry_run: bool = option(
        False,
        "--dry-run",
        env="GPUSCALE_DRY_RUN",
        parse=boolean,
        is_flag=True,
        help="consume and report decisions, change nothing",
    )
