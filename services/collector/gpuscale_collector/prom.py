"""/metrics: dcgm-exporter's series rendered from the last batch on scrape, plus the collector's own."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from gpuscale.wire import SampleBatch
from gpuscale_collector.core.exposition import FAMILIES, Family, MigInfo, render
from gpuscale_collector.core.readings import DcgmFields


class _DcgmName(str):
    """A counter family's name that the text exposition does not suffix with ``_total``:
    dcgm-exporter writes ``# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter`` and
    dashboards query that exact name."""

    __slots__ = ()

    def __add__(self, other: str) -> str:
        return str(self) if other == "_total" else str.__add__(self, other)


def _family(family: Family) -> Metric:
    name = _DcgmName(family.name) if family.kind == "counter" else family.name
    return Metric(name, family.help, family.kind)


class DcgmCollector(Collector):
    def __init__(
        self,
        latest: Callable[[], SampleBatch | None],
        hostname: str,
        mig: Callable[[], Mapping[str, MigInfo]],
        dcgm: Callable[[], Mapping[str, DcgmFields]] = dict,
    ) -> None:
        self._latest = latest
        self._hostname = hostname
        self._mig = mig
        self._dcgm = dcgm

    def describe(self) -> Iterator[Metric]:
        for family in FAMILIES:
            yield _family(family)

    def collect(self) -> Iterator[Metric]:
        rows = render(self._latest(), self._hostname, self._mig(), self._dcgm())
        for family, series in rows.items():
            metric = _family(family)
            for labels, value in series:
                metric.add_sample(family.name, dict(labels), value)
            yield metric


class CollectorMetrics:
    """The collector's own health counters."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.ticks = Counter("gpuscale_collector_ticks_total", "Sampling ticks completed", registry=registry)
        self.ticks_skipped = Counter(
            "gpuscale_collector_ticks_skipped_total",
            "Ticks skipped because the previous one overran the interval",
            registry=registry,
        )
        self.tick_seconds = Histogram(
            "gpuscale_collector_tick_duration_seconds",
            "Time to read the GPUs and build one batch",
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
            registry=registry,
        )
        self.nvml_errors = Counter(
            "gpuscale_collector_nvml_errors_total",
            "NVML calls that failed or are not supported, by call",
            ["call"],
            registry=registry,
        )
        self.buffer_batches = Gauge(
            "gpuscale_collector_buffer_batches",
            "Batches waiting for NATS",
            registry=registry,
        )
        self.buffer_dropped = Counter(
            "gpuscale_collector_buffer_dropped_total",
            "Batches dropped from a full buffer while NATS was unreachable (oldest first)",
            registry=registry,
        )
        self.pod_resources_up = Gauge(
            "gpuscale_collector_pod_resources_up",
            "1 when the last kubelet pod-resources List succeeded",
            registry=registry,
        )
        self.gpus = Gauge(
            "gpuscale_collector_gpus", "GPUs (and MIG devices) in the last batch", registry=registry
        )
