"""nats-auth options: the auth callout that gives each collector its own node's subject."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import (
    CommonSettings,
    existing_file,
    http_port_option,
    kubeconfig_option,
    non_empty,
    option,
    positive_float,
    positive_int,
    seconds,
)


@dataclass(frozen=True)
class NatsAuthSettings(CommonSettings):
    http_port: int = http_port_option(9404)
    issuer_seed_file: Path | None = option(
        None,
        "--issuer-seed-file",
        env="GPUSCALE_NATS_AUTH_ISSUER_SEED_FILE",
        parse=existing_file,
        help="file holding the nkey seed (SA...) of the account that signs the answers; "
        "nats-server's auth_callout.issuer is its public key (required to run)",
        metavar="FILE",
    )
    audience: str = option(
        "nats.gpuscale.io",
        "--audience",
        env="GPUSCALE_NATS_AUTH_AUDIENCE",
        parse=non_empty,
        help="audience of the collectors' projected ServiceAccount tokens",
    )
    collector_namespace: str = option(
        "gpuscale",
        "--collector-namespace",
        env=("GPUSCALE_COLLECTOR_NAMESPACE", "POD_NAMESPACE"),
        parse=non_empty,
        help="namespace of the collector DaemonSet",
    )
    collector_service_account: str = option(
        "gpuscale-collector",
        "--collector-service-account",
        env="GPUSCALE_COLLECTOR_SERVICE_ACCOUNT",
        parse=non_empty,
        help="ServiceAccount of the collector pods: tokens of any other are refused",
    )
    nats_account: str = option(
        "GPUSCALE",
        "--nats-account",
        env="GPUSCALE_NATS_ACCOUNT",
        parse=non_empty,
        help="NATS account the collectors are placed in (deploy/base/nats/auth.conf)",
    )
    max_user_ttl: float = option(
        3600.0,
        "--max-user-ttl",
        env="GPUSCALE_NATS_AUTH_MAX_USER_TTL",
        parse=seconds,
        help="a collector's NATS user expires after this (or when its token does, if sooner); "
        "the collector then logs in again with its current token",
    )
    max_concurrent: int = option(
        64,
        "--max-concurrent",
        env="GPUSCALE_NATS_AUTH_MAX_CONCURRENT",
        parse=positive_int,
        help="connection requests checked at the same time (each costs a TokenReview)",
    )
    review_rate: float = option(
        20.0,
        "--review-rate",
        env="GPUSCALE_NATS_AUTH_REVIEW_RATE",
        parse=positive_float,
        help="TokenReviews per second at most, on average (a login past it is refused and retried); "
        "a flood of made-up tokens costs the API server no more than this",
    )
    review_burst: int = option(
        100,
        "--review-burst",
        env="GPUSCALE_NATS_AUTH_REVIEW_BURST",
        parse=positive_int,
        help="TokenReviews at once after a quiet spell (every collector logging in after a NATS restart)",
    )
    remember_grants: float = option(
        60.0,
        "--remember-grants",
        env="GPUSCALE_NATS_AUTH_REMEMBER_GRANTS",
        parse=seconds,
        help="a token that was let in is let in again without a review for this long (never past "
        "its expiry); also how long a deleted pod's token may still log in",
    )
    remember_refusals: float = option(
        10.0,
        "--remember-refusals",
        env="GPUSCALE_NATS_AUTH_REMEMBER_REFUSALS",
        parse=seconds,
        help="a token the review refused is refused again without a review for this long",
    )
    kubeconfig: Path | None = kubeconfig_option()
