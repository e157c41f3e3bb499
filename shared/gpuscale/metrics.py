"""Each service's own Prometheus registry and the counters they all share."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from gpuscale.apiwarnings import API_WARNINGS
from gpuscale.logging import get_logger
from gpuscale.wire import ERROR_CODES

# The reasons consumers add to the wire contract's codes on the rejected counter's label.
SUBJECT_REASONS: Final = ("bad_subject", "subject_mismatch")


class ServiceMetrics:
    """Counters every service exposes; services add their own to ``registry``.

    Every label is low-cardinality: a sender cannot grow the series without bound."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.registry = CollectorRegistry(auto_describe=True)
        self.messages_in = Counter(
            "gpuscale_messages_in_total", "Messages received", ["kind"], registry=self.registry
        )
        self.messages_out = Counter(
            "gpuscale_messages_out_total", "Messages published", ["kind"], registry=self.registry
        )
        self.messages_rejected = Counter(
            "gpuscale_messages_rejected_total",
            "Messages dropped as invalid, by reason",
            ["kind", "reason"],
            registry=self.registry,
        )
        self.nats_reconnects = Counter(
            "gpuscale_nats_reconnects_total", "Reconnections to NATS", registry=self.registry
        )
        self.nats_disconnects = Counter(
            "gpuscale_nats_disconnects_total", "Disconnections from NATS", registry=self.registry
        )
        self.nats_errors = Counter(
            "gpuscale_nats_errors_total",
            "Errors reported by the NATS client, by type",
            ["error"],
            registry=self.registry,
        )
        self.nats_connection_lost = Counter(
            "gpuscale_nats_connection_lost_total",
            "Connections the server closed for good (the service starts over)",
            registry=self.registry,
        )
        self.nats_connected = Gauge(
            "gpuscale_nats_connected", "1 while connected to NATS", registry=self.registry
        )
        self.loop_lag = Histogram(
            "gpuscale_event_loop_lag_seconds",
            "How late the event loop ran a 0.5 s timer",
            buckets=(0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0),
            registry=self.registry,
        )
        self.unknown_fields = Counter(
            "gpuscale_messages_unknown_fields_total",
            "Fields and metric names a newer producer sent that this version does not know: "
            "counted once per name when first seen, then ignored (the rest of the message is used)",
            ["kind", "field"],
            registry=self.registry,
        )
        self.http_refused = Counter(
            "gpuscale_http_refused_total",
            "Connections and requests the /metrics, /healthz, /readyz server refused, by reason",
            ["reason"],
            registry=self.registry,
        )
        for reason in ("too_many_connections", "bad_request", "handler_error"):
            self.http_refused.labels(reason=reason)
        self.info = Gauge("gpuscale_service_info", "Always 1", ["service"], registry=self.registry)
        self.info.labels(service=service).set(1)
        self.registry.register(_ApiWarningsCollector())

    def reads(self, kind: str, extra_reasons: Iterable[str] = ()) -> None:
        """Birth every ``messages_rejected{kind, reason}`` series this consumer can count at 0.

        A series Prometheus first sees at 1 has no increase, so an alert on
        ``increase()``/``rate()`` would miss the first rejection after a start."""
        for reason in (*ERROR_CODES, *SUBJECT_REASONS, *extra_reasons):
            self.messages_rejected.labels(kind=kind, reason=reason)

    def unknown_field(self, kind: str, field: str) -> None:
        """A :data:`gpuscale.codec.UnknownSink`: count the name once and say so once."""
        self.unknown_fields.labels(kind=kind, field=field).inc()
        get_logger(service=self.service).info("unknown_field_ignored", kind=kind, field=field)


class _ApiWarningsCollector(Collector):
    """``gpuscale_kube_api_warnings_total{kind}``: the API server's warnings this process got."""

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(
            "gpuscale_kube_api_warnings",
            "Warning headers from the Kubernetes API server (dropped_field: it did not keep a field we sent)",
            labels=["kind"],
        )
        for kind in ("dropped_field", "other"):
            family.add_metric([kind], API_WARNINGS.counts.get(kind, 0))
        yield family
