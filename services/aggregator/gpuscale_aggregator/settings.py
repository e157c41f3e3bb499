"""Aggregator options (docs/ARCHITECTURE.md#options)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscale.settings import (
    CommonSettings,
    choice,
    default_identity,
    http_port_option,
    non_empty,
    option,
    positive_float,
    seconds,
)


def partition_spec(text: str) -> tuple[int, int] | None:
    """``i/N`` (this instance owns partition i of N, 0 <= i < N), or ``none``."""
    cleaned = text.strip().lower()
    if cleaned in ("", "none", "off"):
        return None
    index_text, sep, count_text = cleaned.partition("/")
    try:
        index, count = int(index_text), int(count_text)
    except ValueError:
        raise ValueError("expected i/N such as 0/3, or none") from None
    if not sep or count < 1 or not 0 <= index < count:
        raise ValueError("expected i/N with 0 <= i < N")
    return index, count


@dataclass(frozen=True)
class AggregatorSettings(CommonSettings):
    http_port: int = http_port_option(9401)
    window_s: float = option(
        30.0,
        "--window",
        env="GPUSCALE_WINDOW",
        parse=seconds,
        help="averaging window in seconds for workloads whose GPUScaler asks for none "
        "(each GPUScaler's spec.window reaches the aggregator from the decider)",
    )
    max_window_s: float = option(
        300.0,
        "--max-window",
        env="GPUSCALE_MAX_WINDOW",
        parse=seconds,
        help="the longest spec.window the aggregator keeps for a workload (memory grows with it)",
    )
    publish_interval_s: float = option(
        2.0,
        "--publish-interval",
        env="GPUSCALE_PUBLISH_INTERVAL",
        parse=seconds,
        help="the longest a workload waits between metrics messages (one is sent sooner once every "
        "fresh pod has reported since the last); also how often old buckets are expired",
    )
    samples_storage: str = option(
        "file",
        "--samples-storage",
        env="GPUSCALE_SAMPLES_STORAGE",
        parse=choice("file", "memory"),
        help="storage of the samples replay stream",
    )

    bucket_s: float = option(
        1.0,
        "--bucket",
        env="GPUSCALE_BUCKET",
        parse=seconds,
        help="width of the per-pod time buckets the window is kept in",
    )
    stale_intervals: float = option(
        3.0,
        "--stale-intervals",
        env="GPUSCALE_STALE_INTERVALS",
        parse=positive_float,
        help="a pod is stale after this many of its collector's sample intervals without a sample",
    )
    partition: tuple[int, int] | None = option(
        None,
        "--partition",
        env="GPUSCALE_PARTITION",
        parse=partition_spec,
        help="scale-out: own partition i of N workloads (i/N); needs the NATS server mapping in scaleout.py",
        metavar="I/N",
    )

    identity: str = option(
        "",
        "--identity",
        env="GPUSCALE_IDENTITY",
        parse=non_empty,
        help="this aggregator's name in its metrics messages (empty: host name and pid)",
    )

    @property
    def source(self) -> str:
        return self.identity or default_identity()

    def __post_init__(self) -> None:
        if self.publish_interval_s > self.window_s:
            raise ValueError("--publish-interval must not be longer than --window")
        if self.bucket_s > self.window_s:
            raise ValueError("--bucket must not be longer than --window")
        if self.max_window_s < self.window_s:
            raise ValueError("--max-window must not be shorter than --window")
