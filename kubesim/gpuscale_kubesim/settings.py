"""kube-sim options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import choice, option, path, port


@dataclass(frozen=True)
class KubeSimSettings:
    port: int = option(
        6443, "--port", env="GPUSCALE_KUBE_SIM_PORT", parse=port, help="API port (0: a free one)"
    )
    host: str = option("127.0.0.1", "--host", env="GPUSCALE_KUBE_SIM_HOST", help="address to listen on")
    kubeconfig_out: Path | None = option(
        None,
        "--kubeconfig-out",
        env="GPUSCALE_KUBE_SIM_KUBECONFIG_OUT",
        parse=path,
        help="write a kubeconfig for clients here",
    )
    scenario: str = option(
        "demo",
        "--scenario",
        env="GPUSCALE_KUBE_SIM_SCENARIO",
        help="built-in cluster ('demo', 'empty') or a YAML file of objects to create",
    )
    log_level: str = option(
        "info",
        "--log-level",
        env="GPUSCALE_LOG_LEVEL",
        parse=choice("debug", "info", "warning", "error"),
        help="log level",
    )
