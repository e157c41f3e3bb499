"""The aggregator's I/O shell: NATS in, windows (the pure core), NATS out.

Start-up, in order: connect; subscribe live (core NATS callback, the fast
path) but hold what arrives; ensure the samples stream (max age = window) and
replay it from the start with an ephemeral pull consumer in big fetches; then
feed the held live batches (overlap with the replay is dropped by the
per-node seq check) and only then begin publishing, so the first metrics
message after a restart already covers the full window. /readyz turns ready
when NATS is connected and the replay is done.

Scale-out (``--partition i/N``): see :mod:`gpuscale_aggregator.core.scaleout`.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import Hashable, Sequence
from typing import Any, Final

from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from prometheus_client import Counter, Gauge, Histogram

from gpuscale import codec, subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.clockwatch import ClockWatch
from gpuscale.codec import Reader
from gpuscale.logging import LogThrottle, OncePerKey, get_logger
from gpuscale.natsio import NATS, connect, declare_stream, drain, is_connected, jetstream
from gpuscale.runtime import ServiceContext, run
from gpuscale.steadyclock import SteadyClock
from gpuscale.subjects import SubjectError, WorkloadKey
from gpuscale.wire import UNSET, SampleBatch, WindowRequest, WireError, WorkloadMetrics

from .core import scaleout
from .core.ingest import ACCEPTED, DUPLICATE, NODE_MISMATCH, REJECTED, Aggregator
from .core.window import WindowConfig
from .settings import AggregatorSettings

SERVICE: Final = "aggregator"
KIND: Final = SampleBatch.KIND
# Held while a slow cycle runs: nats-py drops (slow consumer) beyond these.
PENDING_MSGS_LIMIT: Final = 1_000_000
PENDING_BYTES_LIMIT: Final = 512 * 1024 * 1024
REPLAY_FETCH: Final = 5_000
YIELD_EVERY: Final = 64
# Live batches held while the replay runs (~2.5 KB each for an 8-GPU node).
HELD_LIMIT: Final = 200_000
# Yield to the event loop after this many workloads during a publish cycle,
# so a long cycle does not hold incoming batches back.
PUBLISH_SLICE: Final = 100
GC_GEN0_THRESHOLD: Final = 20_000
DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024  # NATS' own default, until the server says
CLOCK_CHECK_S: Final = 10.0  # how often nodes' clock offsets are looked at for the log
WALL_STEP_WARN_S: Final = 1.0  # a wall clock this far from the steady one has stepped: said once
# Processing-time histograms observe one batch in this many (cheap hot path).
OBSERVE_EVERY: Final = 8
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
            "Work of one publish cycle (expire, compute, encode, publish every workload)",
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
            "Workloads whose metrics message exceeded max_payload in the last publish cycle",
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
        self.capacity_changes = Counter(
            "gpuscale_aggregator_capacity_change_publishes_total",
            "Metrics messages published out of the cycle: a workload's capacity changed (a pod "
            "became ready) and every pod has been measured since",
            registry=registry,
        )
        self.saturations = Counter(
            "gpuscale_aggregator_saturation_publishes_total",
            "Metrics messages published out of the cycle: every fresh pod of a workload has just "
            "come to read gpu_util pinned at its ceiling over the recent span its policy asks for",
            registry=registry,
        )
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


class AggregatorService:
    def __init__(
        self, ctx: ServiceContext, *, tune_gc: bool = False, clock: SteadyClock | None = None
    ) -> None:
        """``tune_gc``: change the process's garbage collector settings (see
        serve); only for a process of its own, never inside a test runner.
        ``clock``: the window's time (a wall clock that steps back would keep
        what came before the step in the window for as long as the step). What
        crosses the process boundary is on the wall clock, as every other
        component's is: timestamps are checked against it and published on it
        (``_wall_offset_s``, the wall clock minus this one, taken each publish cycle)."""
        self.ctx = ctx
        self.clock = clock or SteadyClock()
        self._wall_offset_s = self.clock.step_s()
        self._wall_step_said = 0.0
        self.tune_gc = tune_gc
        self.settings: AggregatorSettings = ctx.settings
        self.core = Aggregator(
            WindowConfig(
                window_s=self.settings.window_s,
                bucket_s=self.settings.bucket_s,
                stale_intervals=self.settings.stale_intervals,
                source=self.settings.source,
                max_window_s=self.settings.max_window_s,
            ),
            on_unknown=ctx.metrics.unknown_field,
        )
        self.m = AggregatorMetrics(ctx)
        self.clock_watch = ClockWatch(
            self.core.clocks,
            ctx.metrics.registry,
            name="gpuscale_aggregator_node_clock_offset_seconds",
            documentation="Each node's usual batch arrival minus its ts (median of recent batches): "
            "its clock's offset from this aggregator's, plus transit. Batches are placed by arrival.",
            label="node",
            shift=lambda: self._wall_offset_s,  # arrivals are on the steady clock: offsets from the wall
        )
        self._next_clock_check = 0.0
        self.window_reader = Reader(WindowRequest, on_unknown=ctx.metrics.unknown_field)
        # The split stage (scale-out) reads node batches with a reader of its own.
        self.split_reader = Reader(SampleBatch, on_unknown=ctx.metrics.unknown_field)
        self.log = get_logger(service=SERVICE)
        self.once = OncePerKey()
        # What senders can repeat at will is logged by our own reason codes, once a minute.
        self.throttle = LogThrottle()
        self.nc: NATS | None = None
        self.replay_done = False
        # Live messages held while the replay runs; None once live.
        self._held: list[tuple[str, bytes, float]] | None = []
        self._node_by_token: dict[str, str] = {}
        self._subject_by_workload: dict[tuple[str, str, str], str] = {}
        self._tick = 0
        self._live_sub: Any = None
        # Workloads published out of the cycle since the last tick (at most one each).
        self._published_early: set[tuple[str, str, str]] = set()
        self._onset_wake = asyncio.Event()  # an onset was scheduled: look at when it is due
        part = self.settings.partition
        self.partition_index: int = part[0] if part is not None else 0
        self.partitions: int = part[1] if part is not None else 1
        self.partitioned = part is not None

    # --- ingest ----------------------------------------------------------------

    async def on_live(self, msg: Msg) -> None:
        held = self._held
        if held is not None:
            if len(held) < HELD_LIMIT:
                held.append((msg.subject, msg.data, self.clock()))  # placed by when it arrived
            else:  # bounded memory while JetStream is slow to replay
                self.m.ignored.labels(reason="held_overflow").inc()
            return
        self.handle(msg.subject, msg.data, self.clock())
        store = self.core.store
        if store.settled:
            await self.publish_news()
        if store.onset_scheduled:
            store.onset_scheduled = False
            self._onset_wake.set()
        if self._tick % YIELD_EVERY == 0:
            # nats-py runs callbacks back to back while its queue is not empty;
            # let its reader (and PING/PONG) run, or a long backlog looks like a
            # dead connection and the server cuts us off.
            await asyncio.sleep(0)

    def handle(self, subject: str, data: bytes, now: float, *, overlap: bool = False) -> None:
        """One batch from any path (live, held, replay). Never raises."""
        self.m.batches_in.inc()
        self._tick += 1
        observe = self._tick % OBSERVE_EVERY == 0
        started = time.perf_counter() if observe else 0.0
        subject_node: str | None
        source: Hashable | None = None
        if self.partitioned:
            subject_node = None
            # ...part.<i>.<ns>.<kind>.<name>: ordering is per node AND workload.
            workload_token = subjects.parse_aggregator_part(subject)
        else:
            subject_node = self._subject_node(subject)
            if subject_node is None:
                self._reject("bad_subject", f"not a samples subject: {subject[:200]!r}", subject[:200])
                return
        try:
            batch, rejected_gpus = self.core.reader.read(data, now + self._wall_offset_s)
        except WireError as e:
            self._reject(e.code, e.detail, subject_node or subject[:200])
            return
        if self.partitioned:
            source = (batch.node, workload_token)
        result = self.core.ingest_batch(
            batch, now, subject_node=subject_node, source=source, rejected_gpus=tuple(rejected_gpus)
        )
        status = result.status
        if status == ACCEPTED:
            self.m.samples_in.inc(result.samples)
            if result.rejected_gpus:
                self._count_rejected_gpus(result.node, result.rejected_gpus)
            if result.seq_reset:
                self.m.seq_resets.inc()
                self.log.info("collector_seq_reset", node=result.node)
            if observe:
                done = time.perf_counter()
                self.m.process_seconds.observe(done - started)
                self.m.batch_age.observe(max(0.0, self.clock() + self._wall_offset_s - batch.ts))
        elif status in (REJECTED, NODE_MISMATCH):
            self._reject(result.reason, result.detail, result.node or subject_node or "")
        elif overlap and status == DUPLICATE:
            self.m.ignored.labels(reason="replay_overlap").inc()
        else:
            self.m.ignored.labels(reason=status).inc()
            held = self.throttle.allow("ignored", status)
            if held is not None:
                self.log.info("batch_ignored", node=result.node, reason=status, suppressed=held)

    def _count_rejected_gpus(self, node: str, rejected: Sequence[tuple[int, WireError]]) -> None:
        for _, err in rejected:
            self.m.gpus_rejected.labels(reason=err.code).inc()
            held = self.throttle.allow("gpu", err.code)
            if held is not None:
                self.log.warning(
                    "gpu_sample_rejected", node=node, reason=err.code, detail=err.detail, suppressed=held
                )

    def _metrics_subject(self, workload: tuple[str, str, str]) -> str:
        subject = self._subject_by_workload.get(workload)
        if subject is None:
            if len(self._subject_by_workload) > 200_000:  # bounded, like the node cache
                self._subject_by_workload.clear()
            subject = self._subject_by_workload[workload] = subjects.metrics(WorkloadKey(*workload))
        return subject

    def _subject_node(self, subject: str) -> str | None:
        node = self._node_by_token.get(subject)
        if node is None:
            try:
                node = subjects.parse_samples(subject)
            except SubjectError:
                return None
            if len(self._node_by_token) > 100_000:  # bounded: a flood of names can't grow memory
                self._node_by_token.clear()
            self._node_by_token[subject] = node
        return node

    def _reject(
        self, reason: str, detail: str, source: str, kind: str = KIND, event: str = "batch_rejected"
    ) -> None:
        self.m.rejected.labels(kind=kind, reason=reason).inc()
        held = self.throttle.allow(event, reason)
        if held is not None:
            self.log.warning(event, source=source[:200], reason=reason, detail=detail[:300], suppressed=held)

    def _reject_window(self, reason: str, detail: str, source: str) -> None:
        self._reject(reason, detail, source, WindowRequest.KIND, "window_request_rejected")

    # --- what each GPUScaler needs -------------------------------------------------

    async def on_window(self, msg: Msg) -> None:
        self.handle_window(msg.subject, msg.data, self.clock())

    def handle_window(self, subject: str, data: bytes, now: float) -> None:
        """A policy's window for its workload (decider -> aggregators). Never raises."""
        kind = WindowRequest.KIND
        self.ctx.metrics.messages_in.labels(kind=kind).inc()
        try:
            key = subjects.parse_workload(subject, kind)
        except SubjectError as e:
            self._reject_window("bad_subject", str(e), subject[:200])
            return
        try:
            request = self.window_reader.decode(data, now + self._wall_offset_s)
        except WireError as e:
            self._reject_window(e.code, e.detail, str(key))
            return
        workload = (request.namespace, request.kind, request.name)
        if WorkloadKey(*workload) != key:
            self._reject_window(
                "subject_mismatch", f"payload for {'/'.join(workload)} on {subject}", str(key)
            )
            return
        store = self.core.store
        before = store.wanted.get(workload)
        recent = None if request.recent_s is UNSET else request.recent_s
        taken, why = store.request(workload, request.window_s, recent, now, request.ttl_s)
        self.m.window_requests.labels(result=why or "as_asked").inc()
        self.m.windowed.set(len(store.wanted))
        self.m.span.set(store.span_s)
        if taken is None:
            held = self.throttle.allow("window", why)
            if held is not None:
                self.log.warning("window_request_refused", workload=str(key), reason=why, suppressed=held)
            return
        changed = before is None or (before.window_s, before.recent_s) != (taken.window_s, taken.recent_s)
        # Logged per workload and value, once: a flip-flopping sender cannot flood the log.
        if changed and self.once.first("window", str(key), str(taken.window_s), str(taken.recent_s)):
            self.log.info(
                "window_applied",
                workload=str(key),
                window_s=taken.window_s,
                recent_s=taken.recent_s,
                asked_window_s=request.window_s,
                clamped=bool(why),
                max_window_s=store.config.max_window_s,
            )

    # --- scale-out: the split stage ---------------------------------------------

    async def on_split(self, msg: Msg) -> None:
        """Queue-group member: validate a node batch, re-publish per workload."""
        node = self._subject_node(msg.subject)
        if node is None:
            self._reject("bad_subject", f"not a samples subject: {msg.subject[:200]!r}", msg.subject[:200])
            return
        try:
            batch, rejected_gpus = self.split_reader.read(msg.data, self.clock() + self._wall_offset_s)
        except WireError as e:
            self._reject(e.code, e.detail, node)
            return
        self._count_rejected_gpus(node, rejected_gpus)
        if batch.node != node:
            self._reject(NODE_MISMATCH, f"payload node {batch.node!r} on {msg.subject!r}", node)
            return
        nc = self.nc
        if nc is None:
            return
        for key, sub_batch in scaleout.split_by_workload(batch).items():
            with contextlib.suppress(
                Exception
            ):  # a publish during reconnect is buffered or lost; never crash
                await nc.publish(subjects.aggregator_wsamples(key), codec.encode(sub_batch))

    # --- start-up replay ---------------------------------------------------------

    async def replay(self, nc: NATS) -> None:
        """Rebuild the windows from the stream; give up after one window (by then
        live data fills the window anyway)."""
        started = time.monotonic()
        deadline = started + self.settings.window_s
        attempt = 0
        count = 0
        while not self.ctx.stop.is_set():
            try:
                count = await asyncio.wait_for(self._replay_once(nc), max(1.0, deadline - time.monotonic()))
                break
            except Exception as e:  # noqa: BLE001 - JetStream may be down or starting; retry, then go live
                attempt += 1
                if time.monotonic() >= deadline:
                    self.log.warning("replay_abandoned", attempts=attempt, error=f"{type(e).__name__}: {e}")
                    break
                if attempt == 1 or attempt % 10 == 0:
                    self.log.warning("replay_failed", attempt=attempt, error=f"{type(e).__name__}: {e}")
                await sleep_unless_stopped(self.ctx.stop, 1.0)
        # Feed what arrived live meanwhile, then switch to live handling.
        held, self._held = self._held or [], None
        for subject, data, arrival in held:
            self.handle(subject, data, arrival, overlap=True)
        # Changes and onsets replayed are old news: the first cycle tells them.
        self.core.take_settled()
        self.core.store.onsets.clear()
        elapsed = time.monotonic() - started
        self.m.replay_seconds.set(elapsed)
        self.replay_done = True
        self.log.info("replay_done", batches=count, held_live=len(held), seconds=round(elapsed, 3))

    async def _replay_once(self, nc: NATS) -> int:
        js = jetstream(nc)
        window_s, storage = self.settings.window_s, self.settings.samples_storage
        if self.partitioned:
            spec = subjects.aggregator_parts_stream(window_s, storage)
            filter_subject = subjects.aggregator_partition(self.partition_index)
        else:
            spec = subjects.samples_stream(window_s, storage)
            filter_subject = subjects.SAMPLES_ALL
        await declare_stream(js, spec)
        stream = spec.name
        info = await js.stream_info(stream)
        last_seq = info.state.last_seq
        if info.state.messages == 0:
            return 0
        sub = await js.pull_subscribe(
            filter_subject,
            stream=stream,
            config=ConsumerConfig(
                deliver_policy=DeliverPolicy.ALL,
                ack_policy=AckPolicy.NONE,
                inactive_threshold=30.0,
                mem_storage=True,
                num_replicas=1,
            ),
            pending_msgs_limit=PENDING_MSGS_LIMIT,
            pending_bytes_limit=PENDING_BYTES_LIMIT,
        )
        count = 0
        try:
            while not self.ctx.stop.is_set():
                try:
                    msgs = await sub.fetch(REPLAY_FETCH, timeout=1.0)
                except TimeoutError:
                    break  # nothing more (the tail expired, or a filtered partition ended early)
                reached = False
                for msg in msgs:
                    # Placed by when the stream stored it (the NATS server's clock), so a
                    # restart puts every sample back where the live path had put it.
                    stored = msg.metadata.timestamp.timestamp()
                    self.handle(msg.subject, msg.data, stored - self._wall_offset_s)
                    count += 1
                    if msg.metadata.sequence.stream >= last_seq:
                        reached = True
                self.m.replayed.inc(len(msgs))
                if reached:
                    break
                await asyncio.sleep(0)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return count

    # --- publishing ----------------------------------------------------------------

    async def publish_loop(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.settings.publish_interval_s
        next_at = loop.time() + interval
        while not self.ctx.stop.is_set():
            await sleep_unless_stopped(self.ctx.stop, max(0.0, next_at - loop.time()))
            if self.ctx.stop.is_set():
                return
            await self.publish_once()
            next_at += interval
            if next_at < loop.time():  # fell behind: skip missed ticks instead of bursting
                next_at = loop.time() + interval

    async def onset_loop(self) -> None:
        """Publishes each saturation onset when it is due: the moment the last unpinned
        sample leaves a workload's recent span, which no batch marks (at 1 Hz that is
        when the third pinned sample comes, give or take the milliseconds a batch
        travels, so waiting for a batch would often cost a whole interval)."""
        store = self.core.store
        wake = self._onset_wake
        while not self.ctx.stop.is_set():
            due = store.next_onset()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(wake.wait(), None if due is None else max(0.0, due - self.clock()))
            wake.clear()
            try:
                store.confirm_onsets(self.clock())
                if store.saturated:
                    await self.publish_news()
            except Exception as e:  # a bug here must not end the loop: the tick still tells all
                store.onsets.clear()
                if self.once.first("onset", type(e).__name__):
                    self.log.exception("onset_check_failed", error=f"{type(e).__name__}: {e}")

    async def publish_news(self) -> None:
        """Workloads whose next message is news the decider should not wait a publish
        cycle for, published now: a capacity change settled (a scale-up's pod became
        ready and every pod has been measured since: the next step of a saturated
        scale-up rests on it) or a saturation onset (every pod just came to read
        pinned over its recent span: the pinned rule's first step rests on it). Once
        per workload between ticks, so pods that churn or flap cannot turn batches
        into publishes."""
        news = (
            ("capacity_change_published", self.m.capacity_changes, self.core.take_settled()),
            ("saturation_published", self.m.saturations, self.core.take_saturated()),
        )
        if self.nc is None:
            return
        now = self.clock()
        for event, counter, workloads in news:
            for workload in workloads:
                if workload in self._published_early:
                    continue
                message = self.core.message_of(workload, now, wall_offset_s=self._wall_offset_s)
                if message is None:
                    continue
                self._published_early.add(workload)
                if await self._publish(workload, message) is True:
                    counter.inc()
                    self.m.metrics_out.inc()
                    self.log.debug(
                        event,
                        workload="/".join(workload),
                        pods=message.pods_fresh,
                        since=message.since if message.since is not UNSET else None,
                    )

    async def _publish(self, workload: tuple[str, str, str], message: WorkloadMetrics) -> bool | None:
        """Publish one workload's message: True, False (NATS refused it), None (too large)."""
        nc = self.nc
        if nc is None:
            return False
        limit = nc.max_payload or DEFAULT_MAX_PAYLOAD
        data = codec.encode(message)
        if len(data) > limit:
            self._too_large(workload, message, len(data), limit)
            return None
        try:
            await nc.publish(self._metrics_subject(workload), data)
        except Exception as e:  # noqa: BLE001 - NATS away: the next cycle publishes fresh values
            if self.once.first("publish", type(e).__name__):
                self.log.warning("metrics_publish_failed", error=f"{type(e).__name__}: {e}")
            return False
        return True

    async def publish_once(self) -> int:
        started = slice_started = time.perf_counter()
        busy = 0.0
        now = self.clock()
        self._wall_offset_s = offset = self.clock.step_s()
        self.m.wall_step.set(offset)
        self._published_early.clear()
        published = too_large = 0
        messages = self.core.iter_messages(now, wall_offset_s=offset)
        for workloads, (workload, message) in enumerate(messages, start=1):
            if message is not None:
                sent = await self._publish(workload, message)
                published += sent is True
                too_large += sent is None
            if workloads % PUBLISH_SLICE == 0:
                busy += time.perf_counter() - slice_started
                await asyncio.sleep(0)
                slice_started = time.perf_counter()
        if published:
            self.m.metrics_out.inc(published)
        self.m.too_large.set(too_large)
        done = time.perf_counter()
        self.m.publish_seconds.observe(busy + done - slice_started)
        self.m.publish_wall_seconds.observe(done - started)
        store = self.core.store
        self.m.workloads.set(store.workload_count)
        self.m.pods.set(store.pod_count)
        self.m.span.set(store.span_s)  # requests that ended shrink it
        self.m.own_rings.set(store.own_ring_count)
        if now >= self._next_clock_check:
            self._next_clock_check = now + CLOCK_CHECK_S
            self.clock_watch.check()
            self._check_wall_step()
        sub = self._live_sub
        if sub is not None:
            self.m.backlog.set(sub.pending_msgs)
        return published

    def _check_wall_step(self) -> None:
        step = self._wall_offset_s
        if abs(step - self._wall_step_said) >= WALL_STEP_WARN_S:
            self._wall_step_said = step
            self.log.warning(
                "wall_clock_stepped",
                step_s=round(step, 3),
                detail="the window keeps its own steady time (the wall clock at start plus monotonic "
                "seconds), so what it holds stays in order; timestamps in and out follow the wall clock",
            )

    def _too_large(
        self, workload: tuple[str, str, str], message: WorkloadMetrics, size: int, limit: int
    ) -> None:
        """A message NATS would refuse: its workload gets no metrics (the decider
        says so in its status); counted, and the workload named in the log."""
        self.m.too_large_total.inc()
        held = self.throttle.allow("too_large")
        if held is not None:
            self.log.error(
                "metrics_too_large",
                workload="/".join(workload),
                pods=len(message.pods),
                bytes=size,
                max_payload=limit,
                suppressed=held,
                detail="raise max_payload in nats.conf (NATS allows up to 64 MB; 8 MB is its advice)",
            )

    # --- life cycle ------------------------------------------------------------------

    def ready(self) -> tuple[bool, str]:
        return (True, "replayed") if self.replay_done else (False, "replaying the samples stream")

    async def serve(self) -> None:
        ctx = self.ctx
        ctx.http.add_readiness("nats", lambda: is_connected(self.nc))
        ctx.http.add_readiness("replay", self.ready)
        try:
            self.nc = await connect(
                self.settings.nats_url,
                ctx.metrics,
                name=f"gpuscale-{SERVICE}",
                creds=str(self.settings.nats_creds) if self.settings.nats_creds else None,
                tls_ca=str(self.settings.nats_tls_ca) if self.settings.nats_tls_ca else None,
                reconnect_wait_s=0.5,
                stop=ctx.stop,
                on_closed=ctx.reopen,
            )
        except Exception:  # noqa: BLE001 - stop was requested before NATS ever answered
            return
        nc = self.nc
        self.log.info(
            "aggregator_starting",
            window_s=self.settings.window_s,
            max_window_s=self.settings.max_window_s,
            publish_interval_s=self.settings.publish_interval_s,
            partition=f"{self.partition_index}/{self.partitions}" if self.partitioned else "none",
        )
        live_subject = (
            subjects.aggregator_partition(self.partition_index) if self.partitioned else subjects.SAMPLES_ALL
        )
        self._live_sub = await nc.subscribe(
            live_subject,
            cb=self.on_live,
            pending_msgs_limit=PENDING_MSGS_LIMIT,
            pending_bytes_limit=PENDING_BYTES_LIMIT,
        )
        # Before the replay: a policy's window is known as early as possible.
        await nc.subscribe(subjects.WINDOWS_ALL, cb=self.on_window)
        if self.partitioned:
            await nc.subscribe(
                subjects.SAMPLES_ALL,
                queue=subjects.AGGREGATOR_SPLIT_QUEUE,
                cb=self.on_split,
                pending_msgs_limit=PENDING_MSGS_LIMIT,
                pending_bytes_limit=PENDING_BYTES_LIMIT,
            )
        await self.replay(nc)
        # The windows are many small, long-lived objects and the hot path
        # allocates per batch: with the default thresholds the collector runs
        # every few batches and its older generations scan the whole window.
        # Nothing in the windows forms cycles, so collect rarely.
        if self.tune_gc:
            gc.collect()
            gc.freeze()
            gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)
        loops = [asyncio.create_task(self.publish_loop()), asyncio.create_task(self.onset_loop())]
        try:
            await ctx.stop.wait()
        finally:
            for task in loops:
                task.cancel()
            for task in loops:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            await drain(nc)
            self.log.info("aggregator_stopped")


async def serve(ctx: ServiceContext) -> None:
    await AggregatorService(ctx, tune_gc=True).serve()


def main(settings: AggregatorSettings) -> int:
    return run(SERVICE, settings, serve)
