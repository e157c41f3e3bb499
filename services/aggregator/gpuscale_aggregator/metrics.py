"""The aggregator's /metrics: what it took, ignored, replayed and published."""

from __future__ import annotations

from typing import Final

from prometheus_client import Counter, Gauge, Histogram

from gpuscale.runtime import ServiceContext
from gpuscale.wire import SampleBatch, WindowRequest

from .core.ingest import NODE_MISMATCH

KIND: Final = SampleBatch.KIND
OBSERVE_EVERY: Final = 8  # processing-time histograms observe one batch in this many
_FAST_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_AGE_BUCKETS: Final = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class AggregatorMetrics:
    def __init__(self, ctx: ServiceContext) -> None:
        registry = ctx.metrics.registry
        self.batches_in = ctx.metrics.messages_in.labels(kind=KIND)
        self.rejected = ctx.metrics.messages_rejected
        ctx.metrics.reads(KIND, (NODE_MISMATCH,))  # born at 0: an alert sees the first rejection
        ctx.metrics.reads(WindowRequest.KIND)
        self.metrics_out = ctx.metrics.messages_out.labels(kind="metrics")
        self.samples_in = Counter(
            "gpuscale_aggregator_gpu_samples_total",
            "GPU samples taken into the windows (one per GPU entry of an accepted batch)",
            registry=registry,
        )
        self.gpus_rejected = Counter(
            "gpuscale_aggregator_gpu_samples_rejected_total",
            "GPU entries dropped from otherwise sound batches, by reason",
            ["reason"],
            registry=registry,
        )
        self.ignored = Counter(
            "gpuscale_aggregator_batches_ignored_total",
            "Valid batches not used: duplicate, out_of_order, too_old (before the window), replay_overlap",
            ["reason"],
            registry=registry,
        )
        self.seq_resets = Counter(
            "gpuscale_aggregator_seq_resets_total",
            "Batches accepted with a lower seq because their ts is newer (collector restarted)",
            registry=registry,
        )
        self.workloads = Gauge(
            "gpuscale_aggregator_workloads", "Workloads with samples in the window", registry=registry
        )
        self.pods = Gauge("gpuscale_aggregator_pods", "Pods with samples in the window", registry=registry)
        self.publish_seconds = Histogram(
            "gpuscale_aggregator_publish_cycle_seconds",
            "Work of one publish cycle (publish the workloads due, expire every workload)",
            buckets=_FAST_BUCKETS,
            registry=registry,
        )
        self.publish_wall_seconds = Histogram(
            "gpuscale_aggregator_publish_cycle_wall_seconds",
            "Start to end of one publish cycle, including the batches handled between its slices",
            buckets=_FAST_BUCKETS,
            registry=registry,
        )
        self.process_seconds = Histogram(
            "gpuscale_aggregator_batch_processing_seconds",
            f"Receive to window updated for one batch (1 in {OBSERVE_EVERY} observed)",
            buckets=_FAST_BUCKETS,
            registry=registry,
        )
        self.batch_age = Histogram(
            "gpuscale_aggregator_batch_age_seconds",
            f"Batch ts to window updated: transit + queueing + processing, and its node's clock offset "
            f"(1 in {OBSERVE_EVERY} observed)",
            buckets=_AGE_BUCKETS,
            registry=registry,
        )
        self.replay_seconds = Gauge(
            "gpuscale_aggregator_replay_seconds", "Duration of the last start-up replay", registry=registry
        )
        self.replayed = Counter(
            "gpuscale_aggregator_replayed_batches_total",
            "Batches read back from the stream at start-up",
            registry=registry,
        )
        self.too_large_total = Counter(
            "gpuscale_aggregator_metrics_too_large_total",
            "Metrics messages not published: larger than the NATS server's max_payload",
            registry=registry,
        )
        self.too_large = Gauge(
            "gpuscale_aggregator_workloads_too_large",
            "Workloads whose last metrics message exceeded max_payload",
            registry=registry,
        )
        self.backlog = Gauge(
            "gpuscale_aggregator_live_backlog",
            "Batches received but not yet processed (nats-py pending queue)",
            registry=registry,
        )
        self.window_requests = Counter(
            "gpuscale_aggregator_window_requests_total",
            "Window requests taken (result: as_asked, clamped) or not (too_many_workloads); "
            'undecodable ones are in gpuscale_messages_rejected_total{kind="windows"}',
            ["result"],
            registry=registry,
        )
        self.windowed = Gauge(
            "gpuscale_aggregator_workload_windows",
            "Workloads averaged over a window their GPUScaler asked for",
            registry=registry,
        )
        self.wall_step = Gauge(
            "gpuscale_aggregator_wall_clock_step_seconds",
            "How far the host's wall clock has stepped since start (negative: back); the window "
            "keeps its own steady time (the wall clock at start plus monotonic seconds), timestamps "
            "in and out follow the wall clock",
            registry=registry,
        )
        published = Counter(
            "gpuscale_aggregator_messages_published_total",
            "Metrics messages published, by why: complete (every fresh pod of the workload has "
            "reported since its last message) or deadline (--publish-interval since its last message)",
            ["why"],
            registry=registry,
        )
        self.published_complete = published.labels(why="complete")
        self.published_deadline = published.labels(why="deadline")
        self.span = Gauge(
            "gpuscale_aggregator_window_span_seconds",
            "The longest window a GPUScaler asks for now (up to --max-window): samples older are dropped",
            registry=registry,
        )
        self.own_rings = Gauge(
            "gpuscale_aggregator_pods_with_own_ring",
            "Pods whose workload asks for a window longer than --window: each holds a ring of the "
            "length asked (memory its own workload pays), given back when the request ends",
            registry=registry,
        )
