"""The aggregator's I/O shell: NATS in, windows (the pure core), NATS out.

It publishes only after replaying the samples stream, so its first message covers the full window."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import math
import time
from collections.abc import Hashable, Sequence
from typing import Any, Final

from nats.aio.msg import Msg

from gpuscale import codec, subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.clockwatch import ClockWatch
from gpuscale.codec import Reader
from gpuscale.logging import LogThrottle, OncePerKey, get_logger
from gpuscale.natsio import NATS, connect, drain, is_connected
from gpuscale.runtime import ServiceContext, run
from gpuscale.steadyclock import SteadyClock
from gpuscale.subjects import SubjectError
from gpuscale.wire import SampleBatch, WindowRequest, WireError

from .core import scaleout
from .core.ingest import ACCEPTED, DUPLICATE, NODE_MISMATCH, SEQ_RESET, Aggregator, mismatch_detail
from .core.pods import COMPILED_LOOP
from .core.window import WindowConfig, WorkloadTuple
from .metrics import KIND, OBSERVE_EVERY, AggregatorMetrics
from .publishing import MetricsPublisher
from .replay import PENDING_BYTES_LIMIT, PENDING_MSGS_LIMIT, read_stream
from .settings import AggregatorSettings
from .windows import WindowRequests

__all__ = ["AggregatorMetrics", "AggregatorService", "main", "serve"]

SERVICE: Final = "aggregator"
YIELD_EVERY: Final = 64
HELD_LIMIT: Final = 200_000  # live batches held while the replay runs (~2.5 KB each for an 8-GPU node)
PUBLISH_SLICE: Final = 100  # workloads per slice of a publish cycle, between yields to the event loop
GC_GEN0_THRESHOLD: Final = 20_000
CLOCK_CHECK_S: Final = 10.0  # how often nodes' clock offsets are looked at for the log
WALL_STEP_WARN_S: Final = 1.0  # a wall clock this far from the steady one has stepped: said once


class AggregatorService:
    def __init__(
        self, ctx: ServiceContext, *, tune_gc: bool = False, clock: SteadyClock | None = None
    ) -> None:
        """``tune_gc``: tune the garbage collector (a process of its own only, never a test runner).
        ``clock``: the window's steady time; what crosses the process boundary is on the wall clock."""
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
                publish_interval_s=self.settings.publish_interval_s,
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
        self.split_reader = Reader(SampleBatch, on_unknown=ctx.metrics.unknown_field)
        self.log = get_logger(service=SERVICE)
        self.once = OncePerKey()
        self.throttle = LogThrottle()
        self.publisher = MetricsPublisher(self.m, self.log, self.throttle, self.once)
        self.windows = WindowRequests(
            self.core,
            self.m,
            ctx.metrics.messages_in,
            self._reject_window,
            self.log,
            self.throttle,
            self.once,
            ctx.metrics.unknown_field,
        )
        self.nc: NATS | None = None
        self.replay_done = False
        # Live messages held while the replay runs; None once live.
        self._held: list[tuple[str, bytes, float]] | None = []
        self._node_by_token: dict[str, str] = {}
        self._tick = 0
        self._live_sub: Any = None
        self._due = asyncio.Event()  # ingest completed a workload's tick: its message is due
        self._too_large: set[WorkloadTuple] = set()  # workloads whose last message was too large
        self._paused_s = 0.0  # time long passes gave to the event loop (not their work)
        part = self.settings.partition
        self.partition_index: int = part[0] if part is not None else 0
        self.partitions: int = part[1] if part is not None else 1
        self.partitioned = part is not None

    async def on_live(self, msg: Msg) -> None:
        held = self._held
        if held is not None:
            if len(held) < HELD_LIMIT:
                held.append((msg.subject, msg.data, self.clock()))  # placed by when it arrived
            else:  # bounded memory while JetStream is slow to replay
                self.m.ignored.labels(reason="held_overflow").inc()
            return
        self.handle(msg.subject, msg.data, self.clock())
        if self.core.store.complete:
            self._due.set()
        if self._tick % YIELD_EVERY == 0:
            # Let nats-py's reader (and PING/PONG) run, or a long backlog looks like a dead connection.
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
                return
        try:
            batch, rejected_gpus = self.core.reader.read(data, now + self._wall_offset_s)
        except WireError as e:
            self._reject(e.code, e.detail, subject_node or subject[:200])
            return
        if self.partitioned:
            source = (batch.node, workload_token)
        status = self.core.ingest_batch(batch, now, subject_node=subject_node, source=source)
        if status in (ACCEPTED, SEQ_RESET):
            self.m.samples_in.inc(len(batch.gpus))
            if rejected_gpus:
                self._count_rejected_gpus(batch.node, rejected_gpus)
            if status == SEQ_RESET:
                self.m.seq_resets.inc()
                self.log.info("collector_seq_reset", node=batch.node)
            if observe:
                done = time.perf_counter()
                self.m.process_seconds.observe(done - started)
                self.m.batch_age.observe(max(0.0, self.clock() + self._wall_offset_s - batch.ts))
        elif status == NODE_MISMATCH:
            self._reject(status, mismatch_detail(batch.node, subject_node), subject_node or "")
        elif overlap and status == DUPLICATE:
            self.m.ignored.labels(reason="replay_overlap").inc()
        else:
            self.m.ignored.labels(reason=status).inc()
            held = self.throttle.allow("ignored", status)
            if held is not None:
                self.log.info("batch_ignored", node=batch.node, reason=status, suppressed=held)

    def _count_rejected_gpus(self, node: str, rejected: Sequence[tuple[int, WireError]]) -> None:
        for _, err in rejected:
            self.m.gpus_rejected.labels(reason=err.code).inc()
            held = self.throttle.allow("gpu", err.code)
            if held is not None:
                self.log.warning(
                    "gpu_sample_rejected", node=node, reason=err.code, detail=err.detail, suppressed=held
                )

    def _subject_node(self, subject: str) -> str | None:
        """The node of a samples subject; None (rejected) when it is not one."""
        node = self._node_by_token.get(subject)
        if node is None:
            try:
                node = subjects.parse_samples(subject)
            except SubjectError:
                self._reject("bad_subject", f"not a samples subject: {subject[:200]!r}", subject[:200])
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

    async def on_window(self, msg: Msg) -> None:
        self.windows.handle(msg.subject, msg.data, self.clock(), self._wall_offset_s)

    async def on_split(self, msg: Msg) -> None:
        """Queue-group member: validate a node batch, re-publish per workload."""
        node = self._subject_node(msg.subject)
        if node is None:
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
            with contextlib.suppress(Exception):  # during a reconnect it is buffered or lost
                await nc.publish(subjects.aggregator_wsamples(key), codec.encode(sub_batch))

    async def replay(self, nc: NATS) -> None:
        """Rebuild the windows from the stream; give up after one window (live data fills it by then)."""
        started = time.monotonic()
        deadline = started + self.settings.window_s
        attempt = 0
        count = 0
        while not self.ctx.stop.is_set():
            try:
                count = await asyncio.wait_for(
                    read_stream(nc, self.settings, self.ctx.stop, self._feed_stored, self.m.replayed),
                    max(1.0, deadline - time.monotonic()),
                )
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
        elapsed = time.monotonic() - started
        self.m.replay_seconds.set(elapsed)
        self.replay_done = True
        self.log.info("replay_done", batches=count, held_live=len(held), seconds=round(elapsed, 3))

    def _feed_stored(self, subject: str, data: bytes, stored: float) -> None:
        """A replayed batch, placed by when the stream stored it, on the window's clock."""
        self.handle(subject, data, stored - self._wall_offset_s)

    async def publish_loop(self) -> None:
        """Publishes what is due as ticks complete or deadlines pass; the cycle every publish interval."""
        store, due, interval = self.core.store, self._due, self.settings.publish_interval_s
        next_cycle = self.clock()
        while not self.ctx.stop.is_set():
            due.clear()  # before taking: a tick completing meanwhile wakes the next pass
            now = self.clock()
            if now >= next_cycle:
                await self.publish_once()
                next_cycle += interval
                if next_cycle < self.clock():  # fell behind: skip missed cycles instead of bursting
                    next_cycle = self.clock() + interval
            else:
                await self.publish_due()
            wake = min(next_cycle, store.next_due() or math.inf)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(due.wait(), max(0.0, wake - self.clock()))

    async def publish_due(self) -> int:
        """Workloads whose tick is complete, then those whose deadline passed: how many went out."""
        store = self.core.store
        published = await self._publish_each(store.take_complete(self.clock()), self.m.published_complete)
        return published + await self._publish_each(
            store.take_overdue(self.clock()), self.m.published_deadline
        )

    async def _publish_each(self, workloads: list[WorkloadTuple], counter: Any) -> int:
        published = 0
        now = self.clock()
        for count, workload in enumerate(workloads, start=1):
            message = self.core.message_of(workload, now, wall_offset_s=self._wall_offset_s)
            if message is not None:
                sent = await self.publisher.publish(self.nc, workload, message)
                published += sent is True
                if sent is None:
                    self._too_large.add(workload)
                elif sent:
                    self._too_large.discard(workload)
            if count % PUBLISH_SLICE == 0:
                await self._pause()
                now = self.clock()
        if published:
            counter.inc(published)
            self.m.metrics_out.inc(published)
        if workloads:
            self.m.too_large.set(len(self._too_large))
        return published

    async def _pause(self) -> None:
        """Lets the batches held back by a long pass in."""
        paused = time.perf_counter()
        await asyncio.sleep(0)
        self._paused_s += time.perf_counter() - paused

    async def publish_once(self) -> int:
        """The cycle: what is due published, every workload expired, the gauges set."""
        started = time.perf_counter()
        paused = self._paused_s
        self._wall_offset_s = offset = self.clock.step_s()
        self.m.wall_step.set(offset)
        published = await self.publish_due()
        now = self.clock()
        for workloads, _ in enumerate(self.core.iter_messages(now, build=False), start=1):
            if workloads % PUBLISH_SLICE == 0:
                await self._pause()
        store = self.core.store
        self._too_large.intersection_update(store.workloads)
        self.m.too_large.set(len(self._too_large))
        done = time.perf_counter()
        self.m.publish_seconds.observe(done - started - (self._paused_s - paused))
        self.m.publish_wall_seconds.observe(done - started)
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
            compiled_loop=COMPILED_LOOP,
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
        # The hot path allocates per batch and nothing in the windows forms cycles: collect rarely.
        if self.tune_gc:
            gc.collect()
            gc.freeze()
            gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)
        publishing = asyncio.create_task(self.publish_loop())
        try:
            await ctx.stop.wait()
        finally:
            publishing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await publishing
            await drain(nc)
            self.log.info("aggregator_stopped")


async def serve(ctx: ServiceContext) -> None:
    await AggregatorService(ctx, tune_gc=True).serve()


def main(settings: AggregatorSettings) -> int:
    return run(SERVICE, settings, serve)
