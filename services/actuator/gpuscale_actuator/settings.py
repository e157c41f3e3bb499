"""Actuator options (docs/ARCHITECTURE.md#options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import (
    CommonSettings,
    LeaseSettings,
    boolean,
    existing_file,
    lease_name_option,
    option,
    path,
    port,
    positive_int,
    seconds,
)


@dataclass(frozen=True)
class ActuatorSettings(LeaseSettings, CommonSettings):
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
    lease_name: str = lease_name_option("gpuscale-actuator")
    max_decision_age: float = option(
        60.0,
        "--max-decision-age",
        env="GPUSCALE_MAX_DECISION_AGE",
        parse=seconds,
        help="decisions older than this are skipped as stale (seconds)",
    )
    policies: Path | None = option(
        None,
        "--policies",
        env="GPUSCALE_POLICIES",
        parse=existing_file,
        help="the GPUScalers to check decisions against, from the decider's YAML file instead of the cluster",
    )
    max_in_flight: int = option(
        16,
        "--max-in-flight",
        env="GPUSCALE_MAX_IN_FLIGHT",
        parse=positive_int,
        help="decisions applied at the same time, each to another target (one at a time per target)",
    )
    ack_wait: float = option(
        60.0,
        "--ack-wait",
        env="GPUSCALE_ACK_WAIT",
        parse=seconds,
        help="JetStream redelivers a decision not acked within this time (seconds)",
    )
