"""Aggregator options (DESIGN.md §2)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscale.settings import CommonSettings, choice, option, port, seconds


@dataclass(frozen=True)
class AggregatorSettings(CommonSettings):
    http_port: int = option(
        9401,
        "--http-port",
        env="GPUSCALE_HTTP_PORT",
        parse=port,
        help="HTTP port for /metrics, /healthz, /readyz",
    )
    window_s: float = option(
        30.0, "--window", env="GPUSCALE_WINDOW", parse=seconds, help="averaging window in seconds"
    )
    publish_interval_s: float = option(
        2.0,
        "--publish-interval",
        env="GPUSCALE_PUBLISH_INTERVAL",
        parse=seconds,
        help="seconds between metrics messages",
    )
    samples_storage: str = option(
        "file",
        "--samples-storage",
        env="GPUSCALE_SAMPLES_STORAGE",
        parse=choice("file", "memory"),
        help="storage of the samples replay stream",
    )

    def __post_init__(self) -> None:
        if self.publish_interval_s > self.window_s:
            raise ValueError("--publish-interval must not be longer than --window")
