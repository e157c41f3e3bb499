"""Actuator options (DESIGN.md §2)."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import CommonSettings, boolean, non_empty, option, path, port, seconds


def default_identity() -> str:
    """The lease holder name when --identity is not given: host name and pid."""
    return f"{socket.gethostname()}-{os.getpid()}"


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
    lease_name: str = option(
        "gpuscale-actuator",
        "--lease-name",
        env="GPUSCALE_LEASE_NAME",
        parse=non_empty,
        help="coordination.k8s.io Lease that elects the one acting actuator",
    )
    lease_namespace: str = option(
        "default",
        "--lease-namespace",
        env=("GPUSCALE_LEASE_NAMESPACE", "POD_NAMESPACE"),
        parse=non_empty,
        help="namespace of the Lease",
    )
    identity: str = option(
        "",
        "--identity",
        env="GPUSCALE_IDENTITY",
        parse=non_empty,
        help="this replica's name in the Lease (empty: host name and pid)",
    )
    max_decision_age: float = option(
        60.0,
        "--max-decision-age",
        env="GPUSCALE_MAX_DECISION_AGE",
        parse=seconds,
        help="decisions older than this are skipped as stale (seconds)",
    )
    lease_duration: float = option(
        15.0,
        "--lease-duration",
        env="GPUSCALE_LEASE_DURATION",
        parse=seconds,
        help="how long a leader's lease lasts without renewal (seconds)",
    )
    renew_deadline: float = option(
        10.0,
        "--renew-deadline",
        env="GPUSCALE_RENEW_DEADLINE",
        parse=seconds,
        help="a leader that cannot renew for this long steps down (seconds)",
    )
    retry_period: float = option(
        2.0,
        "--retry-period",
        env="GPUSCALE_RETRY_PERIOD",
        parse=seconds,
        help="how often candidates try and leaders renew (seconds)",
    )
    ack_wait: float = option(
        60.0,
        "--ack-wait",
        env="GPUSCALE_ACK_WAIT",
        parse=seconds,
        help="JetStream redelivers a decision not acked within this time (seconds)",
    )

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline > self.retry_period * 1.2:
            raise ValueError(
                "need --lease-duration > --renew-deadline > 1.2 x --retry-period "
                f"(got {self.lease_duration}, {self.renew_deadline}, {self.retry_period})"
            )

    @property
    def holder_identity(self) -> str:
        return self.identity or default_identity()
