"""The keda-scaler's /metrics: messages kept or refused, requests answered, streams open."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge

from gpuscale.runtime import ServiceContext

KIND: Final = "metrics"


class KedaScalerMetrics:
    def __init__(self, ctx: ServiceContext) -> None:
        registry = ctx.metrics.registry
        self.messages_in = ctx.metrics.messages_in.labels(kind=KIND)
        self.rejected = ctx.metrics.messages_rejected
        ctx.metrics.reads(KIND)  # born at 0: an alert sees the first rejection
        self.ignored = Counter(
            "gpuscale_kedascaler_messages_ignored_total",
            "Valid metrics messages not kept: out_of_order (older than the one kept)",
            ["reason"],
            registry=registry,
        )
        self.requests = Counter(
            "gpuscale_kedascaler_requests_total",
            "Requests answered, by API (grpc, external_metrics), method and outcome "
            "(ok, invalid, no_metrics, stale, no_fresh_pods, metric_not_reported, not_found; refused: "
            "too_large, other_namespace, too_many_streams, forbidden; the HTTPS port's TLS handshake, "
            "method handshake: too_many_handshakes, handshake_timeout, handshake_failed)",
            ["api", "method", "outcome"],
            registry=registry,
        )
        self.unauthenticated = Gauge(
            "gpuscale_kedascaler_unauthenticated",
            "1 while an API serves callers without a client certificate (--grpc-plaintext, "
            "--api-any-client): alert on it",
            ["api"],
            registry=registry,
        )
        self.workloads = Gauge(
            "gpuscale_kedascaler_workloads", "Workloads with metrics received recently", registry=registry
        )
        self.streams = Gauge(
            "gpuscale_kedascaler_active_streams",
            "Open StreamIsActive streams (external-push)",
            registry=registry,
        )
