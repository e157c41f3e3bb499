"""The decider's shell: read the scale and pods, call the pure
:func:`~gpuscale_decider.core.reconcile.reconcile` step, write what it says. Its I/O
parts are injected, so it runs against NATS and Kubernetes, kube-sim, or in-process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Final

from gpuscale.clocks import due
from gpuscale.kube import KubeError
from gpuscale.logging import LogThrottle, OncePerKey, get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.subjects import WorkloadKey
from gpuscale.wire import Decision
from gpuscale_decider.advice import Advisor, Publish, nowhere, wire_decision
from gpuscale_decider.core.conditions import Reason
from gpuscale_decider.core.demand import metrics_read
from gpuscale_decider.core.events import decision_event
from gpuscale_decider.core.reconcile import (
    Config,
    Memory,
    Step,
    Target,
    Written,
    action_seen,
    observation_of,
    reconcile,
    same_window,
    write_failed,
)
from gpuscale_decider.core.replicas import PodView
from gpuscale_decider.core.state import ScalerState, seed_last_scale
from gpuscale_decider.core.status import blocked_status, status_differs
from gpuscale_decider.intake import Intake
from gpuscale_decider.metrics import (
    STAGE_ACTION,
    STAGE_MESSAGE,
    STAGE_RETIRE,
    STAGE_SAVE,
    STAGE_TICK,
    STAGE_WINDOW,
    DeciderMetrics,
)
from gpuscale_decider.pods import MAX_SELECTOR_CHARS
from gpuscale_decider.registry import EventSink, NoEvents, NoStatus, Registry, StatusSink, Workload
from gpuscale_decider.sources import PodSource, Retirement, ScaleSource, StateStore
from gpuscale_decider.windows import PublishWindow, WindowRequester
from gpuscale_decider.windows import nowhere as no_aggregator

# A GPUScaler whose evaluation keeps failing and working is logged at most this often.
FAILURE_LOG_S: Final = 60.0
# What of an error goes into a status and a log line.
ERROR_TEXT_MAX: Final = 300


class Decider:
    def __init__(
        self,
        metrics: ServiceMetrics,
        scales: ScaleSource,
        pods: PodSource,
        store: StateStore,
        publish: Publish,
        *,
        status: StatusSink | None = None,
        events: EventSink | None = None,
        publish_advice: Publish | None = None,
        publish_window: PublishWindow | None = None,
        retirement: Retirement | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        config: Config = Config(),  # noqa: B008 - a frozen value, never mutated
    ) -> None:
        self.metrics = metrics
        self.m = DeciderMetrics(metrics)
        self.scales, self.pods, self.store, self.publish = scales, pods, store, publish
        self.status = status or NoStatus()
        self.retirement = retirement
        self.events = events or NoEvents()
        self.is_leader = is_leader
        self.clock = clock
        self.config = config
        self.registry = Registry(self.m, self.status, lambda: self.clock(), self.events)
        self._once = OncePerKey()
        self._saves_failing = LogThrottle()
        self._save_failed_at: WorkloadKey | None = None  # the next flush starts after it
        self._sending: set[asyncio.Task[None]] = set()
        self._retiring: asyncio.Task[None] | None = None
        self.intake = Intake(metrics)
        self.advisor = Advisor(metrics, self.m, publish_advice or nowhere)
        self.windows = WindowRequester(
            metrics, self.m, publish_window or no_aggregator, lambda w, e: self._caught(w, STAGE_WINDOW, e)
        )
        self.log = get_logger(component="decider")

    @property
    def workloads(self) -> dict[WorkloadKey, Workload]:
        return self.registry.workloads

    def on_leadership_change(self) -> None:
        """A new leader reloads state (the previous one may have moved on); only a
        leader's condition series are current."""
        for w in self.workloads.values():
            w.memory, w.dirty, w.failed = None, False, None
        self.m.forget_conditions()

    async def on_message(self, msg: Any) -> None:
        await self.handle_metrics(msg.subject, msg.data)

    async def handle_metrics(self, subject: str, data: bytes) -> None:
        started = time.perf_counter()
        now = self.clock()
        received = self.intake.metrics_message(subject, data, now)
        if received is None:
            return
        key, m = received
        w = self.workloads.get(key)
        if w is None:
            self.m.unmatched.inc()
            return
        # The newest arrival wins: ordering and freshness on this process's clock.
        w.metrics, w.received_at = m, now
        if not same_window(m.window_s, w.scaler.spec.window_s) and self.is_leader():
            await self.windows.mismatch(w, now)
        await self.evaluate(w, now)
        self.m.evaluation_seconds.observe(time.perf_counter() - started)

    async def on_action(self, msg: Any) -> None:
        await self.handle_action(msg.subject, msg.data)

    async def handle_action(self, subject: str, data: bytes) -> None:
        now = self.clock()
        received = self.intake.action_message(subject, data, now)
        if received is None:
            return
        key, action = received
        w = self.workloads.get(key)
        desired = w.memory.state.desired if w is not None and w.memory is not None else None
        if w is None or w.memory is None or desired is None or desired.decision_id != action.decision_id:
            return
        self.m.actions.labels(outcome=action.outcome).inc()
        try:
            state = action_seen(w.memory.state, action)
        except Exception as e:  # noqa: BLE001 - this GPUScaler's failure is its own; only its status waits
            self._caught(w, STAGE_ACTION, e)
            return
        w.memory, w.dirty = Memory(state, w.memory.written), True
        self.scales.forget(w.ref)  # the next evaluation (metrics message or tick) reads afresh
        self.log.info(
            "decision_reported", workload=str(key), decision_id=action.decision_id, outcome=action.outcome
        )

    async def evaluate(self, w: Workload, now: float, stage: str = STAGE_MESSAGE) -> Step | None:
        """One evaluation of ``w``; what it raises is ``w``'s alone (counted, logged, on its status)."""
        if not self.is_leader():
            return None
        if w.busy:  # one evaluation per workload at a time; the running one goes again
            w.again = True
            return None
        w.busy = True
        try:
            step = await self._step(w, now)
            while w.again:
                w.again = False
                step = await self._step(w, self.clock())
        except Exception as e:  # noqa: BLE001 - this GPUScaler's failure is its own: reported on it
            w.again = False
            self._failed(w, stage, e, now)
            return None
        finally:
            w.busy = False
        if w.failed is not None:  # it works again; its own status has replaced the failure's
            w.failed = None
            if w.recovery_to_log:
                w.recovery_to_log = False
                self.log.info("evaluation_recovered", target=str(w.key), gpuscaler=w.scaler.key)
        return step

    async def _step(self, w: Workload, now: float) -> Step:
        if w.memory is None:
            loaded = await self.store.load(w.key) or ScalerState()
            # Judged against the object's status as seen: a new leader repeats no write or Event.
            w.memory = Memory(seed_last_scale(loaded, w.last_scale_time), Written(status=w.status_seen))
        target, pods = await self._read(w, now)
        seen, reads = w.metrics, metrics_read(w.scaler.spec.metrics)  # the policy may have changed since
        observation = None if seen is None else observation_of(seen, w.received_at, *reads)
        step = reconcile(w.memory, w.scaler, target, pods, observation, now, self.config)
        w.memory, w.dirty, w.last_evaluated = step.memory, True, now
        if self.workloads.get(w.key) is not w:
            return step  # removed while its reads were awaited: nothing of it is written or counted again
        for note, desired in step.notes:
            self.log.info(
                note.value, target=str(w.key), decision_id=desired.decision_id, replicas=target.replicas
            )
        if step.evaluation is not None:
            e = w.last_evaluation = step.evaluation
            self.m.evaluations.inc()
            spec = w.scaler.spec
            targets = {m.name: m.target for m in spec.metrics}
            bounds = (spec.min_replicas, spec.max_replicas)
            self.m.observe(w.key, targets, e.usage if e.fresh else None, e.current, e.desired, bounds)
        if step.decision is not None:
            # Written in the background: the subscription never waits for an ack.
            task = asyncio.create_task(self._send(w, wire_decision(w, step.decision, now)))
            self._sending.add(task)
            task.add_done_callback(self._sending.discard)
        if step.advice is not None:
            await self.advisor.advise(w, step.advice, now)
            if self.workloads.get(w.key) is not w:
                return step  # removed while its advice was published
        if step.status is not None:
            self.m.status_writes.inc()
            self.status.submit(w.scaler.namespace, w.scaler.name, step.status)
        written = step.memory.written.status
        if written is not None:  # also when unchanged: a new leader reports what the object says
            self.m.conditions(w.scaler.namespace, w.scaler.name, written)
        if step.events:
            self.events.record(w.scaler.namespace, w.scaler.name, w.scaler.uid, step.events)
        return step

    async def _read(self, w: Workload, now: float) -> tuple[Target, tuple[PodView, ...] | None]:
        try:
            scale = await self.scales.read(w.ref, now)
        except KubeError as e:
            self.m.scale_read_failures.labels(status=str(e.status)).inc()
            if self._once.first("scale", str(w.key), str(e.status)):
                self.log.warning("scale_read_failed", target=str(w.key), status=e.status, error=str(e))
            why = f"reading its scale subresource failed: {e}"
            return Target(error="the target does not exist" if e.status == 404 else why), None
        self._once.forget("scale", str(w.key), "404")
        if len(scale.selector) > MAX_SELECTOR_CHARS:
            self.m.scale_read_failures.labels(status="selector_too_long").inc()
            if self._once.first("selector", str(w.key)):
                self.log.warning("target_selector_too_long", target=str(w.key), chars=len(scale.selector))
            return Target(
                error=f"its selector is {len(scale.selector):,} characters long, over the "
                f"{MAX_SELECTOR_CHARS:,} gpuscale reads"
            ), None
        self._once.forget("selector", str(w.key))
        pods = self.pods.select(w.key.namespace, scale.selector) if scale.selector else None
        return Target(scale.replicas, scale.selector, conflict=w.conflict), pods

    def _caught(self, w: Workload, stage: str, e: Exception) -> None:
        """A failure on ``w`` outside its evaluation: counted, logged once per stage."""
        self.m.evaluation_errors.labels(stage=stage).inc()
        if self._once.first(stage, str(w.key)):
            self._log_failure("gpuscaler_handling_failed", w, stage, e)

    def _failed(self, w: Workload, stage: str, e: Exception, now: float) -> None:
        """``w``'s evaluation raised: count, log (once a minute at most), and say so on its
        status (``FailedEvaluation``, a Warning Event) until one works."""
        self.m.evaluation_errors.labels(stage=stage).inc()
        w.last_evaluated = now
        if w.failed == type(e).__name__:
            return  # reported already (the same fault again): no text, no log, no write
        w.failed = type(e).__name__
        at = time.monotonic()
        if w.failure_logged_at is None or at - w.failure_logged_at >= FAILURE_LOG_S:
            w.failure_logged_at, w.recovery_to_log = at, True
            self._log_failure("evaluation_failed", w, stage, e)
        try:
            self._report_failure(w, _error_text(e), now)
        except Exception as report_error:  # noqa: BLE001 - the report is best effort: the count and log stand
            if self._once.first("failure_report", str(w.key)):
                self.log.error(
                    "evaluation_failure_unreported", target=str(w.key), error=_error_text(report_error)
                )

    def _log_failure(self, event: str, w: Workload, stage: str, e: Exception) -> None:
        error = _error_text(e)
        self.log.error(event, stage=stage, target=str(w.key), gpuscaler=w.scaler.key, error=error, exc_info=e)

    def _report_failure(self, w: Workload, error: str, now: float) -> None:
        scaler = w.scaler
        previous = w.memory.written.status if w.memory is not None else w.status_seen
        seen = w.metrics
        fresh = seen is not None and 0.0 <= now - w.received_at <= scaler.spec.window_s
        message = (
            f"evaluating this GPUScaler failed ({error}): nothing is changed on the target until an "
            "evaluation succeeds"
        )
        averages = seen.averages.to_dict() if fresh and seen is not None else None
        reason = Reason.FAILED_EVALUATION
        status = blocked_status(
            scaler.spec, scaler.generation, reason, message, None, averages, previous, now
        )
        # What the next evaluation's status is compared with: a success writes over it.
        if w.memory is not None:
            w.memory = Memory(w.memory.state, Written(status, None, now))
        else:
            w.status_seen = status
        if status_differs(previous, status):
            self.registry.write_status((scaler.namespace, scaler.name), scaler.uid, status, previous)

    async def _send(self, w: Workload, decision: Decision) -> None:
        """A failed write clears the count the step holds as written: the next evaluation writes again."""
        try:
            await self.publish(decision)
        except Exception as e:  # noqa: BLE001 - NATS down or timed out: count, log, decide again next message
            self.m.publish_failures.inc()
            if self._once.first("publish", str(w.key)):
                self.log.warning(
                    "decision_publish_failed", target=str(w.key), error=f"{type(e).__name__}: {e}"
                )
            if w.memory is not None:
                w.memory = Memory(write_failed(w.memory.state, decision.id), w.memory.written)
            return
        self._once.forget("publish", str(w.key))
        direction = "up" if decision.to_replicas > decision.from_replicas else "down"
        self.m.decisions.labels(direction=direction).inc()
        self.m.workload_decisions.labels(w.key.namespace, w.key.kind, w.key.name, direction).inc()
        self.metrics.messages_out.labels(kind="decisions").inc()
        self.scales.forget(w.ref)
        event = decision_event(decision.from_replicas, decision.to_replicas, decision.reason, decision.id)
        self.events.record(w.scaler.namespace, w.scaler.name, w.scaler.uid, (event,))
        self.log.info(
            "decision_published",
            workload=str(w.key),
            gpuscaler=w.scaler.key,
            decision_id=decision.id,
            from_replicas=decision.from_replicas,
            to_replicas=decision.to_replicas,
            reason=decision.reason,
        )
        await self._save(w)

    async def _save(self, w: Workload) -> bool:
        if w.memory is None or not w.dirty:
            return True
        try:
            await self.store.save(w.key, w.memory.state)
        except Exception as e:  # noqa: BLE001 - NATS may be away; the next tick retries
            self.m.evaluation_errors.labels(stage=STAGE_SAVE).inc()
            held = self._saves_failing.allow("state_save", type(e).__name__)
            if held is not None:  # one line a minute: with NATS away every workload fails alike
                self.log.warning(
                    "state_save_failed", target=str(w.key), error=_error_text(e), suppressed=held
                )
            return False
        w.dirty = False
        return True

    async def idle(self, timeout_s: float = 10.0) -> None:
        """Wait for decisions still being published (shutdown, tests)."""
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=timeout_s)

    async def tick(self, interval_s: float) -> None:
        """Re-evaluate workloads that got no metrics for a while, and save changed state."""
        self.intake.clock_watch.check()
        if not self.is_leader():
            self.registry.retired.clear()  # the leader removes their entries
            return
        now = self.clock()
        if self.registry.retired or (self.retirement is not None and self.retirement.markers):
            self._retire_in_background(now)
        await self.windows.tick(list(self.workloads.values()), now)
        for w in list(self.workloads.values()):
            if due(w.last_evaluated, now, interval_s):
                await self.evaluate(w, now, STAGE_TICK)
        await self.flush()

    def _retire_in_background(self, now: float) -> None:
        """One retirement at a time, beside the evaluations: a slow or refused purge delays none."""
        if self._retiring is None or self._retiring.done():
            self._retiring = asyncio.create_task(self.retire(now))
            self._sending.add(self._retiring)
            self._retiring.add_done_callback(self._sending.discard)

    async def retire(self, now: float) -> None:
        """Remove the entries of workloads no GPUScaler targets any more (:class:`Retirement`);
        those not removed when NATS refuses are tried again on the next tick."""
        retired, self.registry.retired = self.registry.retired, {}
        for ref in retired.values():
            self.scales.forget(ref)
        if self.retirement is None:
            return
        try:
            while retired:
                key = next(iter(retired))
                if key not in self.workloads:
                    await self.retirement.retire(key, now)
                del retired[key]
            await self.retirement.sweep(now)
        except Exception as e:  # noqa: BLE001 - NATS away: the rest are tried again on the next tick
            for key, ref in retired.items():
                self.registry.retired.setdefault(key, ref)
            self.m.evaluation_errors.labels(stage=STAGE_RETIRE).inc()
            held = self._saves_failing.allow("retire", type(e).__name__)
            if held is not None:
                self.log.warning("retire_failed", error=_error_text(e), suppressed=held)

    async def flush(self) -> None:
        """Save what changed. A failed save ends the round (one timeout per tick); the next
        starts after it, so a workload whose save keeps failing holds up no other."""
        workloads = list(self.workloads.values())
        start = next((i + 1 for i, w in enumerate(workloads) if w.key == self._save_failed_at), 0)
        for w in workloads[start:] + workloads[:start]:
            if not await self._save(w):
                self._save_failed_at = w.key
                return
        self._save_failed_at = None


def _error_text(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}"
    return text if len(text) <= ERROR_TEXT_MAX else f"{text[: ERROR_TEXT_MAX - 3]}..."
