"""Each service's /metrics registry as the service builds it when it starts, before any message:
the shared ServiceMetrics plus the service's own metrics class (no server needed)."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from prometheus_client import CollectorRegistry

from gpuscale.metrics import ServiceMetrics
from gpuscale_actuator.app import REJECT_REASONS, ActuatorMetrics
from gpuscale_aggregator.app import AggregatorMetrics
from gpuscale_aggregator.core.ingest import NODE_MISMATCH
from gpuscale_collector.prom import CollectorMetrics
from gpuscale_decider.metrics import DeciderMetrics
from gpuscale_kedascaler.app import KedaScalerMetrics
from gpuscale_natsauth.app import NatsAuthMetrics


def _ctx(base: ServiceMetrics) -> Any:
    return SimpleNamespace(metrics=base)  # the metrics classes read ctx.metrics only


BUILDERS: dict[str, Callable[[ServiceMetrics], object]] = {
    "collector": lambda base: CollectorMetrics(base.registry),
    "aggregator": lambda base: AggregatorMetrics(_ctx(base)),
    "decider": DeciderMetrics,
    "actuator": ActuatorMetrics,
    "kedascaler": lambda base: KedaScalerMetrics(_ctx(base)),
    "natsauth": lambda base: NatsAuthMetrics(_ctx(base)),
}

# What each service reads, and the reasons it may reject it for besides the wire contract's.
READS: dict[str, dict[str, tuple[str, ...]]] = {
    "aggregator": {"samples": (NODE_MISMATCH,), "windows": ()},
    "decider": {"metrics": (), "actions": ()},
    "actuator": {"desired": REJECT_REASONS},
    "kedascaler": {"metrics": ()},
}


def started(service: str) -> CollectorRegistry:
    """The registry as the service has it when it starts, before any message."""
    base = ServiceMetrics(service)
    BUILDERS[service](base)
    return base.registry
