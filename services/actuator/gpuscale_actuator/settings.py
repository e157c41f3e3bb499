"""Actuator options (docs/ARCHITECTURE.md#options)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import (
    CommonSettings,
    LeaseSettings,
    boolean,
    existing_file,
    http_port_option,
    kubeconfig_option,
    lease_name_option,
    option,
    positive_int,
    seconds,
)


@dataclass(frozen=True)
class ActuatorSettings(LeaseSettings, CommonSettings):
    http_port: int = http_port_option(9403)
    kubeconfig: Path | None = kubeconfig_option()
    dry_run: bool = option(
        False,
        "--dry-run",
        env="GPUSCALE_DRY_RUN",
        parse=boolean,
        is_flag=True,
        help="read and report desired counts, change nothing",
    )
    lease_name: str = lease_name_option("gpuscale-actuator")
    policies: Path | None = option(
        None,
        "--policies",
        env="GPUSCALE_POLICIES",
        parse=existing_file,
        help="the GPUScalers to check desired counts against, from the decider's YAML file instead of the cluster",
    )
    max_in_flight: int = option(
        16,
        "--max-in-flight",
        env="GPUSCALE_MAX_IN_FLIGHT",
        parse=positive_int,
        help="targets converged at the same time (one write at a time per target)",
    )
    resync_interval: float = option(
        30.0,
        "--resync-interval",
        env="GPUSCALE_RESYNC_INTERVAL",
        parse=seconds,
        help="converge every workload to its desired count this often, failed ones included (seconds)",
    )
