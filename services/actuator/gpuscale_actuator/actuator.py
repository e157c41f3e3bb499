"""The actuator's loop: each workload's desired count in (JetStream KV), PATCH …/scale out.

Level-triggered (docs/ARCHITECTURE.md#fault-model): a retry, a restart or a new leader
converges again without harm."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import heapq
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final, cast

from kubernetes_asyncio.client import ApiClient
from nats.js.kv import KV_DEL, KV_PURGE, KeyValue

from gpuscale import codec, subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube import KubeError, record_event
from gpuscale.leader import LeaderElector
from gpuscale.logging import LogThrottle, OncePerKey, get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS
from gpuscale.wire import Decision, Outcome, WireError
from gpuscale_actuator.core.admit import Refusal, admit
from gpuscale_actuator.core.plan import action_for, event_for
from gpuscale_actuator.metrics import KIND, SERVICE, ActuatorMetrics
from gpuscale_actuator.policies import PolicyView
from gpuscale_actuator.settings import ActuatorSettings
from gpuscale_actuator.writer import Result, RetryLater, ScaleWriter

RETRY_LATER_S: Final = 5.0  # first wait for a target the API server keeps failing on
RETRY_LATER_MAX_S: Final = 60.0  # ... doubling up to this
WATCH_POLL_S: Final = 0.5  # also how long a stop waits for the watch loop
SHUTDOWN_WAIT_S: Final = 3.0  # targets being converged may finish this long after a stop


@dataclass(slots=True)
class Target:
    """One entry of the bucket and its convergence."""

    data: bytes
    revision: int
    dirty: bool = True
    failures: int = 0  # retryable failures in a row: this target's own backoff
    retry_at: float = 0.0  # monotonic
    reported: tuple[int, str | None, str | None] | None = None  # (revision, outcome, error) last reported
    fresh: bool = True  # a new desired count not yet tried: goes ahead of what only a resync woke


class Slots:
    """At most ``size`` targets converged at once, handed out by priority: a target with a new
    desired count goes ahead of every target that only a resync woke (one already waiting is
    moved ahead when its count changes), so one team's many targets never queue another
    team's new count behind their resync. FIFO within each priority."""

    def __init__(self, size: int) -> None:
        self._free = size
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiting: dict[str, tuple[asyncio.Future[None], bool]] = {}  # key -> (its wait, urgent)
        self._seq = itertools.count()

    def _push(self, urgent: bool, fut: asyncio.Future[None]) -> None:
        heapq.heappush(self._heap, (0 if urgent else 1, next(self._seq), fut))
        if len(self._heap) > 2 * len(self._waiting) + 64:  # waits handed out ahead of their turn
            self._heap = [e for e in self._heap if not e[2].done()]
            heapq.heapify(self._heap)

    async def acquire(self, key: str, *, urgent: bool) -> None:
        if self._free > 0:
            self._free -= 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting[key] = (fut, urgent)
        self._push(urgent, fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.release()  # handed a slot as it was cancelled: pass it on
            raise
        finally:
            if self._waiting.get(key, (None,))[0] is fut:
                del self._waiting[key]

    def hurry(self, key: str) -> None:
        """``key`` has a new desired count: if it waits behind resync work, move it ahead."""
        waiting = self._waiting.get(key)
        if waiting is not None and not waiting[1] and not waiting[0].done():
            self._waiting[key] = (waiting[0], True)
            self._push(True, waiting[0])

    def release(self) -> None:
        while self._heap:
            fut = heapq.heappop(self._heap)[2]
            if not fut.done():
                fut.set_result(None)  # the slot passes straight to the next in line
                return
        self._free += 1


class Actuator:
    def __init__(
        self,
        settings: ActuatorSettings,
        base_metrics: ServiceMetrics,
        metrics: ActuatorMetrics,
        nc: NATS,
        desired: KeyValue,
        api: ApiClient,
        elector: LeaderElector,
        stop: asyncio.Event,
        policies: PolicyView,
    ) -> None:
        self.settings = settings
        self.base_metrics = base_metrics
        self.metrics = metrics
        self.nc = nc
        self.desired = desired
        self.api = api
        self.elector = elector
        self.stop = stop
        self.policies = policies
        self.once = OncePerKey()
        self.throttle = LogThrottle()  # rejected entries: by reason, once a minute
        self.log = get_logger(service=SERVICE, identity=elector.identity)
        self.reader = codec.Reader(Decision, on_unknown=base_metrics.unknown_field)
        self.targets: dict[str, Target] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._slots = Slots(settings.max_in_flight)
        self._in_flight = 0
        self._fatal: BaseException | None = None  # what killed a worker kills the service, as in one task
        self.writer = ScaleWriter(api, settings, elector, stop, metrics, self.log, self.once)

    # --- the bucket ------------------------------------------------------------

    def on_entry(self, key: str, data: bytes | None, revision: int) -> None:
        """An entry changed (``data`` None: deleted, nothing more to converge)."""
        if data is None:
            self.targets.pop(key, None)
            return
        self.base_metrics.messages_in.labels(kind=KIND).inc()
        self.metrics.consumed.inc()
        known = self.targets.get(key)
        if known is None:
            known = self.targets[key] = Target(data, revision)
        else:
            known.data, known.revision, known.dirty, known.fresh = data, revision, True, True
            known.failures, known.retry_at = 0, 0.0  # a new count is tried at once
        self._slots.hurry(key)  # waiting behind resync work: not any more
        self._wake(key)

    def resync(self) -> None:
        """Level-triggered: every entry is converged again, the failed ones included."""
        self.metrics.resyncs.inc()
        for key, target in self.targets.items():
            target.dirty = True
            self._wake(key)

    def _wake(self, key: str) -> None:
        if key in self._workers or self.stop.is_set():
            return
        worker = self._workers[key] = asyncio.create_task(self._work(key))
        worker.add_done_callback(functools.partial(self._worker_done, key))

    def _worker_done(self, key: str, worker: asyncio.Task[None]) -> None:
        self._workers.pop(key, None)
        if not worker.cancelled() and worker.exception() is not None:
            self._fatal = worker.exception()
            return
        target = self.targets.get(key)
        if target is not None and target.dirty and self.elector.is_leader:
            self._wake(key)  # changed while the worker was finishing

    async def _work(self, key: str) -> None:
        while not self.stop.is_set():
            target = self.targets.get(key)
            if target is None or not target.dirty:
                return
            if not self.elector.is_leader:
                return  # the leader converges; a new leader resyncs everything
            wait = target.retry_at - time.monotonic()
            if wait > 0:  # in short naps: a new count clears the wait
                await sleep_unless_stopped(self.stop, min(wait, 1.0))
                continue
            await self._slots.acquire(key, urgent=target.fresh)
            target = self.targets.get(key)  # deleted, or written anew, while waiting?
            if target is None or not target.dirty:
                self._slots.release()
                return
            target.dirty = target.fresh = False
            try:
                self._in_flight += 1
                self.metrics.in_flight.set(self._in_flight)
                try:
                    await self._converge(key, target)
                except Exception as e:  # nothing an entry does may stop the worker
                    self.log.error(
                        "converge_error", key=key[:200], error=f"{type(e).__name__}: {e}", exc_info=e
                    )
                    self._retry_later(target)
                finally:
                    self._in_flight -= 1
                    self.metrics.in_flight.set(self._in_flight)
            finally:
                self._slots.release()

    def _retry_later(self, target: Target) -> float:
        target.failures += 1
        delay = min(RETRY_LATER_MAX_S, RETRY_LATER_S * 2.0 ** min(target.failures - 1, 10))
        target.retry_at, target.dirty = time.monotonic() + delay, True
        return delay

    # --- one target ---------------------------------------------------------------

    async def _converge(self, key: str, target: Target) -> None:
        revision = target.revision
        try:
            desired = self.reader.decode(target.data, time.time())
            self._check_key(key, desired)
        except WireError as e:
            if target.reported != (revision, "rejected", e.code):  # once per entry, not per resync
                target.reported = (revision, "rejected", e.code)
                self._reject(key, e)
            return
        log = self.log.bind(
            decision_id=desired.id, workload=f"{desired.namespace}/{desired.kind}/{desired.name}"
        )
        try:
            refusal = self._admit(desired)
            if refusal is not None:
                result = Result(Outcome.REFUSED, None, None, refusal.detail)
            else:
                result = await self.writer.apply(desired)
        except RetryLater as e:
            delay = self._retry_later(target)
            log.warning("converge_retry_later", error=str(e), retry_in_s=delay, failures=target.failures)
            return
        target.failures = 0
        if result.outcome is None:
            target.reported = None  # converged: a later failure of this entry is news again
            return
        if not self._new(target, revision, result):
            return
        if refusal is not None:
            self.metrics.refused.labels(cause=refusal.cause.value).inc()
        await self._report(desired, result, log)

    @staticmethod
    def _new(target: Target, revision: int, result: Result) -> bool:
        """Report an outcome once per entry: a resync that finds the same refusal says nothing new."""
        seen = (revision, result.outcome.value if result.outcome else None, result.error)
        if target.reported == seen:
            return False
        target.reported = seen
        return True

    def _admit(self, desired: Decision) -> Refusal | None:
        if not self.policies.synced.is_set():
            raise RetryLater("the GPUScalers are not listed yet")
        return admit(desired, self.policies.in_namespace(desired.namespace))

    def _check_key(self, key: str, desired: Decision) -> None:
        try:
            named = subjects.parse_desired_key(key)
        except subjects.SubjectError as e:
            raise WireError("bad_key", str(e)) from None
        if (named.namespace, named.kind, named.name) != (desired.namespace, desired.kind, desired.name):
            raise WireError("key_mismatch", f"key names {named}, the entry names another workload")

    def _reject(self, key: str, e: WireError) -> None:
        self.base_metrics.messages_rejected.labels(kind=KIND, reason=e.code).inc()
        held = self.throttle.allow("desired", e.code)
        if held is not None:
            self.log.warning(
                "desired_rejected", key=key[:200], reason=e.code, detail=e.detail, suppressed=held
            )

    async def _report(self, desired: Decision, result: Result, log: Any) -> None:
        assert result.outcome is not None  # only outcomes are reported
        self.metrics.outcomes.labels(outcome=result.outcome.value).inc()
        action = action_for(
            desired,
            result.outcome,
            replicas_before=result.replicas_before,
            replicas_after=result.replicas_after,
            error=result.error,
            now=time.time(),
        )
        key = subjects.WorkloadKey(desired.namespace, desired.kind, desired.name)
        try:
            await self.nc.publish(subjects.actions(key), codec.encode(action))
            self.base_metrics.messages_out.labels(kind="actions").inc()
        except Exception as e:  # noqa: BLE001 - the write is made; a lost record must not undo it
            log.warning("action_publish_failed", error=f"{type(e).__name__}: {e}")
        fields = {
            "outcome": result.outcome.value,
            "replicas_before": result.replicas_before,
            "replicas_after": result.replicas_after,
            "to_replicas": desired.to_replicas,
        }
        if result.outcome == Outcome.FAILED:
            log.warning("desired_not_applied", error=result.error, **fields)
        elif result.outcome in (Outcome.APPLIED, Outcome.CONFLICT_RETRIED):
            log.info("desired_applied", **fields)
        else:
            log.info("desired_skipped", why=result.error, **fields)
        spec = event_for(desired, result.outcome, result.replicas_after, result.error)
        if spec is None:
            return
        try:
            await record_event(
                self.api,
                desired.target,
                spec.reason,
                spec.message,
                spec.type,
                uid=result.uid,
                reporting_instance=self.elector.identity,
            )
        except KubeError as e:
            log.warning("event_record_failed", error=str(e)[:300])

    # --- the loops -------------------------------------------------------------------

    async def watch(self) -> None:
        """Follow the bucket: its current entries first, then every change."""
        while not self.stop.is_set():
            if self._fatal is not None:
                raise self._fatal
            # A server that restarted forgot the watch's consumer: watch anew from a reconnect on.
            reconnects = self.nc.stats["reconnects"]
            try:
                watcher = await self.desired.watchall()
                # nats-py's watcher is untyped: its two calls, typed here.
                updates = cast(Callable[..., Awaitable[Any]], watcher.updates)
                stop_watch = cast(Callable[[], Awaitable[None]], watcher.stop)
            except Exception as e:  # noqa: BLE001 - NATS outage: wait, go on
                self._watch_failed(e)
                await sleep_unless_stopped(self.stop, WATCH_POLL_S)  # JetStream not back yet answers at once
                continue
            self.log.info("desired_watch_started", bucket=self.desired._name)
            try:
                while not self.stop.is_set():
                    if self._fatal is not None:
                        raise self._fatal
                    if self.nc.stats["reconnects"] != reconnects:
                        self.log.info("desired_watch_restarting", reason="reconnected")
                        break
                    try:
                        entry = await updates(timeout=WATCH_POLL_S)
                    except TimeoutError:
                        continue
                    if entry is None:
                        continue  # the current entries are all in
                    deleted = entry.operation in (KV_DEL, KV_PURGE)
                    self.on_entry(
                        entry.key, None if deleted else bytes(entry.value or b""), entry.revision or 0
                    )
                    self.once.forget("watch", "any")
            except Exception as e:  # the watch broke (NATS away): start it again
                if self._fatal is not None and e is self._fatal:
                    raise
                self._watch_failed(e)
            finally:
                with contextlib.suppress(Exception):
                    await stop_watch()
        await self._drain_workers()

    def _watch_failed(self, e: Exception) -> None:
        if self.once.first("watch", "any"):
            self.log.warning("desired_watch_failed", error=f"{type(e).__name__}: {e}")

    async def resync_loop(self) -> None:
        """Every ``--resync-interval``, and at once on taking the lease, converge every entry."""
        was_leader = False
        next_at = time.monotonic() + self.settings.resync_interval
        while not self.stop.is_set():
            leader = self.elector.is_leader
            if leader and (not was_leader or time.monotonic() >= next_at):
                self.resync()
                next_at = time.monotonic() + self.settings.resync_interval
            was_leader = leader
            await sleep_unless_stopped(self.stop, min(0.2, self.settings.resync_interval))

    async def _drain_workers(self) -> None:
        if self._workers:
            await asyncio.wait(set(self._workers.values()), timeout=SHUTDOWN_WAIT_S)
        for worker in list(self._workers.values()):
            worker.cancel()
