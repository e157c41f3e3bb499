"""The actuator's /metrics: entries taken, outcomes reported, PATCH latency, the lease."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from gpuscale.metrics import ServiceMetrics
from gpuscale.wire import Outcome

SERVICE: Final = "actuator"
KIND: Final = "desired"  # the label of rejected entries in gpuscale_messages_rejected_total
REJECT_REASONS: Final = ("bad_key", "key_mismatch")


class ActuatorMetrics:
    def __init__(self, base: ServiceMetrics) -> None:
        r = base.registry
        self.consumed = Counter(
            "gpuscale_actuator_desired_updates_total", "Desired-count entries received", registry=r
        )
        self.outcomes = Counter(
            "gpuscale_actuator_outcomes_total", "Convergences reported, by outcome", ["outcome"], registry=r
        )
        # Born at 0 (and the rejections too), so an alert's increase() sees the first failure.
        for outcome in Outcome:
            self.outcomes.labels(outcome=outcome.value)
        base.reads(KIND, REJECT_REASONS)
        self.patch_latency = Histogram(
            "gpuscale_actuator_patch_latency_seconds",
            "Time of the PATCH that changes replicas (retries included)",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
            registry=r,
        )
        self.leader = Gauge("gpuscale_actuator_leader", "1 while this replica holds the lease", registry=r)
        self.kube_retries = Counter(
            "gpuscale_actuator_kube_retries_total", "API calls retried, by error", ["error"], registry=r
        )
        self.refused = Counter(
            "gpuscale_actuator_refused_total",
            "Desired counts refused before any API call, by cause",
            ["cause"],
            registry=r,
        )
        self.in_flight = Gauge(
            "gpuscale_actuator_targets_in_flight", "Targets being converged now", registry=r
        )
        self.resyncs = Counter(
            "gpuscale_actuator_resyncs_total", "Rounds that converged every entry again", registry=r
        )
