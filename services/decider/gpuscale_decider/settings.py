"""Decider options (docs/ARCHITECTURE.md#options)."""

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
    non_empty,
    option,
    seconds,
)
from gpuscale.subjects import DECIDER_STATE_BUCKET


@dataclass(frozen=True)
class DeciderSettings(LeaseSettings, CommonSettings):
    http_port: int = http_port_option(9402)
    kubeconfig: Path | None = kubeconfig_option()
    policies: Path | None = option(
        None,
        "--policies",
        env="GPUSCALE_POLICIES",
        parse=existing_file,
        help="GPUScaler objects from a YAML file instead of watching the cluster",
    )
    lease_name: str = lease_name_option("gpuscale-decider")
    leader_election: bool = option(
        True,
        "--leader-election",
        env="GPUSCALE_LEADER_ELECTION",
        parse=boolean,
        help="elect one leader through the Lease (false: this replica always decides)",
    )
    max_metrics_age: float | None = option(
        None,
        "--max-metrics-age",
        env="GPUSCALE_MAX_METRICS_AGE",
        parse=seconds,
        help="never act on metrics older than this (seconds; default: each policy's window)",
    )
    scale_cache: float = option(
        1.0,
        "--scale-cache",
        env="GPUSCALE_SCALE_CACHE",
        parse=seconds,
        help="how long a read of a target's scale subresource is reused (seconds)",
    )
    actuation_timeout: float = option(
        30.0,
        "--actuation-timeout",
        env="GPUSCALE_ACTUATION_TIMEOUT",
        parse=seconds,
        help="until the scale subresource shows a desired count just written, count from it, this long at most",
    )
    conflict_check_interval: float = option(
        30.0,
        "--conflict-check-interval",
        env="GPUSCALE_CONFLICT_CHECK_INTERVAL",
        parse=seconds,
        help="how often to look for HPAs and KEDA ScaledObjects on the same targets (seconds)",
    )
    tick_interval: float = option(
        5.0,
        "--tick-interval",
        env="GPUSCALE_TICK_INTERVAL",
        parse=seconds,
        help="how often workloads without metrics are re-evaluated and state is saved (seconds)",
    )
    state_bucket: str = option(
        DECIDER_STATE_BUCKET,
        "--state-bucket",
        env="GPUSCALE_STATE_BUCKET",
        parse=non_empty,
        help="JetStream KV bucket holding recommendation history and scale events",
    )
