"""The actuator's I/O shell: decisions in (JetStream), PATCH …/scale out.

Exactly once per decision id
----------------------------
JetStream delivers at least once: a decision whose ack was lost (a crash
between the PATCH and the ack, a dropped connection) comes back. What makes
the second delivery harmless:

1. For kinds whose replicas are ``spec.replicas`` (Deployment, StatefulSet,
   ReplicaSet) the actuator writes replicas AND the annotation
   ``gpuscale.io/last-decision-id`` in ONE merge PATCH of the object,
   conditional on the resourceVersion it read. Kubernetes applies the two
   together or not at all, so "scaled" and "recorded" cannot diverge: a
   redelivered decision finds its own id on the target and is acked without
   a second write. This is the truly exactly-once path. Decisions for one
   target are handled one at a time, in the order they arrive, so no later
   decision for that target can overwrite the annotation while an earlier
   one is being applied. It needs ``get`` and ``patch`` on the
   objects themselves; where RBAC grants only ``*/scale`` (least privilege)
   the 403 is noticed once and the actuator works as in 2.
2. For other resources with ``/scale`` (custom resources, whose replicas may
   live anywhere), only the scale subresource can be patched and the record
   is the JetStream KV bucket :data:`APPLIED_BUCKET`, written after the PATCH
   and before the ack. A crash in between leaves no record, but the
   redelivered decision then finds the target at ``to_replicas``, not at its
   ``from_replicas``, and is skipped as stale: it is still not applied twice
   unless something else put the replicas back in that instant.

The KV record is checked for every kind (cheap, and it also covers a
redelivery after the annotation was overwritten by a later decision).

Before any of that, a decision must be admissible (``core.admit``): it names
a Kubernetes object, a GPUScaler targets that object, is not paused, and its
bounds hold the new count. Anything else is refused, reported and acked.

One target never waits on another: up to ``--max-in-flight`` decisions are
applied at once, each to a different target; a target whose API calls keep
failing backs off on its own (nak with a growing delay) while the others go on.
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import KeyNotFoundError, NotFoundError
from nats.js.kv import KeyValue
from prometheus_client import Counter, Gauge, Histogram

from gpuscale import codec, subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube import (
    REPLICAS_IN_SPEC,
    Conflict,
    Forbidden,
    KubeError,
    NotFound,
    ScaleClient,
    ScaleState,
    new_api_client,
    ping,
    record_event,
    retry_with_backoff,
    scale_state_from_object,
)
from gpuscale.leader import LeaderElector
from gpuscale.logging import LogThrottle, OncePerKey, get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, declare_kv, declare_stream, drain, is_connected, jetstream
from gpuscale.runtime import ServiceContext, run
from gpuscale.wire import Decision, Outcome, ScaleTargetRef, WireError
from gpuscale_actuator.core import delivery
from gpuscale_actuator.core.admit import Refusal, admit
from gpuscale_actuator.core.delivery import not_a_delivery
from gpuscale_actuator.core.plan import (
    LAST_DECISION_ANNOTATION,
    Step,
    StepKind,
    action_for,
    event_for,
    is_too_old,
    plan_step,
    too_old_step,
)
from gpuscale_actuator.policies import PolicyView
from gpuscale_actuator.settings import ActuatorSettings

SERVICE: Final = "actuator"
DURABLE: Final = subjects.ACTUATOR_DURABLE
APPLIED_BUCKET: Final = subjects.ACTUATOR_APPLIED_BUCKET
RETRY_LATER_S: Final = 5.0  # first nak delay for a target the API server keeps failing on
RETRY_LATER_MAX_S: Final = 60.0  # ... doubling up to this
PING_PERIOD_S: Final = 5.0
FETCH_TIMEOUT_S: Final = 0.5  # also how long a stop waits for the fetch loop
SHUTDOWN_WAIT_S: Final = 3.0  # decisions in hand may finish this long after a stop


@dataclass
class Hooks:
    """Test seams inside the shell. ``after_patch`` runs right after a
    successful PATCH, before the applied record and the ack: the crash window."""

    after_patch: Callable[[Decision], Awaitable[None]] | None = None


class ActuatorMetrics:
    def __init__(self, base: ServiceMetrics) -> None:
        r = base.registry
        self.consumed = Counter(
            "gpuscale_actuator_decisions_consumed_total", "Decisions received", registry=r
        )
        self.outcomes = Counter(
            "gpuscale_actuator_outcomes_total", "Decisions handled, by outcome", ["outcome"], registry=r
        )
        # Born at 0 (and the rejections too), so an alert's increase() sees the first failure.
        for outcome in Outcome:
            self.outcomes.labels(outcome=outcome.value)
        base.reads(Decision.KIND, delivery.REASONS)
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
            "Decisions refused before any API call, by cause",
            ["cause"],
            registry=r,
        )
        self.in_flight = Gauge(
            "gpuscale_actuator_decisions_in_flight", "Decisions being applied now", registry=r
        )
        self.redelivered_applied = Counter(
            "gpuscale_actuator_redelivered_applied_total",
            "Redelivered decisions recognised as already applied (not applied again)",
            registry=r,
        )


def applied_key(decision_id: str) -> str:
    """A KV key for any decision id (KV keys allow only [-_=.a-zA-Z0-9/])."""
    return base64.urlsafe_b64encode(decision_id.encode()).decode().rstrip("=")


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome
    replicas_before: int | None
    replicas_after: int | None
    error: str | None
    already_applied: bool = False
    uid: str | None = None


class RetryLater(Exception):
    """The API server stayed unavailable through the retries: not a final outcome."""


class Actuator:
    def __init__(
        self,
        settings: ActuatorSettings,
        base_metrics: ServiceMetrics,
        metrics: ActuatorMetrics,
        nc: NATS,
        applied: KeyValue,
        api: ApiClient,
        elector: LeaderElector,
        stop: asyncio.Event,
        hooks: Hooks,
        policies: PolicyView,
    ) -> None:
        self.settings = settings
        self.base_metrics = base_metrics
        self.metrics = metrics
        self.nc = nc
        self.applied = applied
        self.api = api
        self.scale = ScaleClient(api)
        self.elector = elector
        self.stop = stop
        self.hooks = hooks
        self.policies = policies
        self.once = OncePerKey()
        self.throttle = LogThrottle()  # rejected decisions: by reason, once a minute
        self.log = get_logger(service=SERVICE, identity=elector.identity)
        self.reader = codec.Reader(Decision, on_unknown=base_metrics.unknown_field)
        # (group, kind) whose objects RBAC lets us not read or patch: /scale only.
        self.scale_only: set[tuple[str, str]] = set()
        self._touches: set[asyncio.Task[None]] = set()
        # One queue and one worker per target; failures per target for its own backoff.
        self._queues: dict[str, collections.deque[Any]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        self._failures: dict[str, int] = {}
        self._in_flight = 0
        self._slot_freed = asyncio.Event()
        self._fatal: BaseException | None = None  # what killed a worker kills the service, as in one task

    # --- one message -----------------------------------------------------

    async def handle(self, msg: Any) -> None:
        """Handle one JetStream message: ack when final, nak when not, term when invalid."""
        self.base_metrics.messages_in.labels(kind=Decision.KIND).inc()
        self.metrics.consumed.inc()
        now = time.time()
        try:
            decision = self.reader.decode(msg.data, now)
            self._check_subject(msg.subject, decision)
        except WireError as e:
            self._reject(msg.subject, e)
            await msg.term()
            return
        log = self.log.bind(
            decision_id=decision.id,
            workload=f"{decision.namespace}/{decision.kind}/{decision.name}",
        )
        target = msg.subject
        try:
            refusal = (
                None if is_too_old(decision, now, self.settings.max_decision_age) else self._admit(decision)
            )
            if refusal is not None:
                self.metrics.refused.labels(cause=refusal.cause.value).inc()
                result = Result(Outcome.REFUSED, None, None, refusal.detail)
            else:
                result = await self._apply(decision, now, msg)
        except RetryLater as e:
            failures = self._failures[target] = self._failures.get(target, 0) + 1
            delay = min(RETRY_LATER_MAX_S, RETRY_LATER_S * 2 ** min(failures - 1, 10))
            log.warning("decision_retry_later", error=str(e), retry_in_s=delay, failures=failures)
            await msg.nak(delay=delay)
            return
        self._failures.pop(target, None)
        await self._report(decision, result, log)
        await msg.ack()

    def _admit(self, decision: Decision) -> Refusal | None:
        if not self.policies.synced.is_set():
            raise RetryLater("the GPUScalers are not listed yet")
        return admit(decision, self.policies.in_namespace(decision.namespace))

    def _check_subject(self, subject: str, decision: Decision) -> None:
        try:
            key = subjects.parse_workload(subject, "decisions")
        except subjects.SubjectError as e:
            raise WireError("bad_subject", str(e)) from None
        if (key.namespace, key.kind, key.name) != (decision.namespace, decision.kind, decision.name):
            raise WireError("subject_mismatch", f"subject names {key}, payload names another workload")

    def _reject(self, subject: str, e: WireError) -> None:
        self.base_metrics.messages_rejected.labels(kind=Decision.KIND, reason=e.code).inc()
        held = self.throttle.allow("decision", e.code)
        if held is not None:
            self.log.warning(
                "decision_rejected", subject=subject[:200], reason=e.code, detail=e.detail, suppressed=held
            )

    async def _apply(self, decision: Decision, now: float, msg: Any) -> Result:
        early = too_old_step(decision, now, self.settings.max_decision_age)
        if early is not None:
            return Result(early.outcome or Outcome.SKIPPED_STALE, None, None, early.why)
        ref = decision.target
        recorded = await self._is_recorded(decision.id)
        try:
            for attempt in (1, 2):
                state, last_id, uid, atomic = await self._read(ref, msg)
                step = plan_step(
                    decision,
                    current_replicas=state.replicas,
                    last_decision_id=last_id,
                    already_recorded=recorded,
                    dry_run=self.settings.dry_run,
                    attempt=attempt,
                )
                if step.kind == StepKind.REPORT:
                    return self._report_result(step, state, uid)
                try:
                    try:
                        after = await self._patch(decision, ref, step, state, atomic, msg)
                    except Forbidden as e:
                        if not atomic:
                            raise
                        self._fall_back_to_scale(ref, e)
                        # The Scale's resourceVersion is the object's: the same precondition holds.
                        after = await self._patch(decision, ref, step, state, False, msg)
                except Conflict as e:
                    self.log.info("patch_conflict", decision_id=decision.id, attempt=attempt, error=e.message)
                    continue
                await self._record_applied(decision.id)
                return Result(step.outcome or Outcome.APPLIED, state.replicas, after.replicas, None, uid=uid)
            return Result(
                Outcome.FAILED,
                None,
                None,
                "409 Conflict twice: the target keeps changing under us; the decider decides again",
            )
        except NotFound as e:
            return Result(Outcome.FAILED, None, None, f"target {ref} not found: {e.message}")
        except Forbidden as e:
            error = f"missing RBAC permission: {e.missing_permission}"
            if self.once.first("forbidden", e.missing_permission):
                self.log.error("rbac_permission_missing", permission=e.missing_permission, target=str(ref))
            return Result(Outcome.FAILED, None, None, error)
        except KubeError as e:
            if e.retryable:
                raise RetryLater(str(e)) from None
            return Result(Outcome.FAILED, None, None, f"API server refused: {e}")

    def _report_result(self, step: Step, state: ScaleState, uid: str | None) -> Result:
        outcome = step.outcome or Outcome.SKIPPED_STALE
        error = None if outcome == Outcome.APPLIED else step.why
        return Result(
            outcome, state.replicas, state.replicas, error, already_applied=step.already_applied, uid=uid
        )

    async def _retrying(self, fn: Callable[[], Awaitable[Any]], msg: Any) -> Any:
        def on_retry(e: KubeError, attempt: int, delay: float) -> None:
            self.metrics.kube_retries.labels(error=type(e).__name__).inc()
            self.log.info("kube_retry", error=str(e)[:200], attempt=attempt, delay_s=round(delay, 3))
            # Backing off can outlast ack_wait: tell JetStream we are on it, so that
            # a replica that just took the lease over is not handed the same decision.
            touch = asyncio.create_task(_in_progress(msg))
            self._touches.add(touch)
            touch.add_done_callback(self._touches.discard)

        return await retry_with_backoff(
            fn, attempts=6, base_s=0.2, cap_s=5.0, stop=self.stop, on_retry=on_retry
        )

    def _atomic(self, ref: ScaleTargetRef) -> bool:
        """May this target take replicas and the annotation in one object PATCH?"""
        key = (ref.group, ref.kind)
        return key in REPLICAS_IN_SPEC and key not in self.scale_only

    def _fall_back_to_scale(self, ref: ScaleTargetRef, e: Forbidden) -> None:
        """RBAC allows only ``*/scale`` (least privilege, docs/ARCHITECTURE.md#security): work through
        it, with the applied-decisions record as the exactly-once guard."""
        self.scale_only.add((ref.group, ref.kind))
        self.log.warning(
            "object_access_forbidden_using_scale",
            kind=ref.kind,
            group=ref.group,
            permission=e.missing_permission,
            consequence="exactly-once relies on the applied-decisions record, not on an atomic annotation",
        )

    async def _read(self, ref: ScaleTargetRef, msg: Any) -> tuple[ScaleState, str | None, str | None, bool]:
        """(state, last applied decision id, uid, atomic) of the target."""
        if self._atomic(ref):
            try:
                obj: dict[str, Any] = await self._retrying(functools.partial(self.scale.get_object, ref), msg)
            except Forbidden as e:
                self._fall_back_to_scale(ref, e)
            else:
                meta = obj.get("metadata") or {}
                last = (meta.get("annotations") or {}).get(LAST_DECISION_ANNOTATION)
                uid = meta.get("uid")
                return (
                    scale_state_from_object(obj),
                    str(last) if last else None,
                    str(uid) if uid else None,
                    True,
                )
        state: ScaleState = await self._retrying(functools.partial(self.scale.get, ref), msg)
        return state, None, None, False

    async def _patch(
        self, decision: Decision, ref: ScaleTargetRef, step: Step, state: ScaleState, atomic: bool, msg: Any
    ) -> ScaleState:
        if not self.elector.is_leader:
            # Fencing: we lost the lease while handling this decision; the new leader gets it.
            raise RetryLater("lost the lease before the PATCH")
        replicas = step.replicas if step.replicas is not None else decision.to_replicas
        annotations = {LAST_DECISION_ANNOTATION: decision.id} if atomic else None
        started = time.perf_counter()
        after: ScaleState = await self._retrying(
            functools.partial(
                self.scale.patch_replicas, ref, replicas, state.resource_version, annotations=annotations
            ),
            msg,
        )
        self.metrics.patch_latency.observe(time.perf_counter() - started)
        if self.hooks.after_patch is not None:
            await self.hooks.after_patch(decision)
        return after

    async def _is_recorded(self, decision_id: str) -> bool:
        try:
            await self.applied.get(applied_key(decision_id))
        except (KeyNotFoundError, NotFoundError):
            return False
        except Exception as e:  # noqa: BLE001 - NATS trouble: the annotation and the from_replicas check still guard
            self.log.warning("applied_record_unreadable", error=f"{type(e).__name__}: {e}")
            return False
        return True

    async def _record_applied(self, decision_id: str) -> None:
        for attempt in range(3):
            try:
                await self.applied.put(applied_key(decision_id), str(time.time()).encode())
                return
            except Exception as e:  # noqa: BLE001 - best effort: see the module docstring for what still guards
                if attempt == 2:
                    self.log.warning("applied_record_failed", decision_id=decision_id, error=str(e))
                    return
                await asyncio.sleep(0.2 * (attempt + 1))

    async def _report(self, decision: Decision, result: Result, log: Any) -> None:
        self.metrics.outcomes.labels(outcome=result.outcome.value).inc()
        now = time.time()
        action = action_for(
            decision,
            result.outcome,
            replicas_before=result.replicas_before,
            replicas_after=result.replicas_after,
            error=result.error,
            now=now,
        )
        key = subjects.WorkloadKey(decision.namespace, decision.kind, decision.name)
        try:
            await self.nc.publish(subjects.actions(key), codec.encode(action))
            self.base_metrics.messages_out.labels(kind="actions").inc()
        except Exception as e:  # noqa: BLE001 - the outcome is already final; a lost report must not undo it
            log.warning("action_publish_failed", error=f"{type(e).__name__}: {e}")
        fields = {
            "outcome": result.outcome.value,
            "replicas_before": result.replicas_before,
            "replicas_after": result.replicas_after,
            "to_replicas": decision.to_replicas,
        }
        if result.already_applied:
            self.metrics.redelivered_applied.inc()
            log.info("decision_already_applied", **fields)
            return
        if result.outcome == Outcome.FAILED:
            log.warning("decision_failed", error=result.error, **fields)
        elif result.outcome in (Outcome.APPLIED, Outcome.CONFLICT_RETRIED):
            log.info("decision_applied", **fields)
        else:
            log.info("decision_skipped", why=result.error, **fields)
        spec = event_for(decision, result.outcome, result.replicas_after, result.error)
        if spec is None:
            return
        ref = decision.target
        try:
            await record_event(
                self.api,
                ref,
                spec.reason,
                spec.message,
                spec.type,
                uid=result.uid,
                reporting_instance=self.elector.identity,
            )
        except KubeError as e:
            log.warning("event_record_failed", error=str(e)[:300])

    # --- the loop ----------------------------------------------------------

    async def consume(self, js: JetStreamContext) -> None:
        """Fetch decisions while leading and hand each to its target's worker,
        never more than ``--max-in-flight`` at a time."""
        sub = None
        limit = self.settings.max_in_flight
        while not self.stop.is_set():
            if self._fatal is not None:
                raise self._fatal
            if not self.elector.is_leader:
                await _first(self.elector.wait_until_leader(), self.stop.wait())
                if not self.elector.is_leader:  # leading, but our renewals lapsed: no busy loop
                    await sleep_unless_stopped(self.stop, 0.2)
                continue
            if self._in_flight >= limit:
                self._slot_freed.clear()
                await _first(self._slot_freed.wait(), self.stop.wait())
                continue
            try:
                if sub is None:
                    sub = await self._subscribe(js)
                msgs = await sub.fetch(limit - self._in_flight, timeout=FETCH_TIMEOUT_S)
            except TimeoutError:
                continue
            except Exception as e:  # noqa: BLE001 - NATS outage or consumer trouble: wait, go on
                if self.once.first("fetch", type(e).__name__):
                    self.log.warning("decisions_fetch_failed", error=f"{type(e).__name__}: {e}")
                await sleep_unless_stopped(self.stop, 1.0)
                continue
            self.once.forget("fetch", "TimeoutError")
            for msg in msgs:
                if self._is_delivery(msg):
                    self._dispatch(msg)
        await self._drain_workers()
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _subscribe(self, js: JetStreamContext) -> Any:
        # Create or update: a consumer made by an older actuator (one decision at
        # a time) takes the in-flight limit of this one.
        await js.add_consumer(subjects.DECISIONS_STREAM, consumer_config(self.settings))
        sub = await js.pull_subscribe(
            subjects.DECISIONS_ALL, durable=DURABLE, stream=subjects.DECISIONS_STREAM
        )
        self.log.info("consumer_bound", durable=DURABLE, stream=subjects.DECISIONS_STREAM)
        return sub

    def _is_delivery(self, msg: Any) -> bool:
        """Anything in the fetch that JetStream did not deliver is dropped: counted, logged
        once a minute per reason, never acked (there is nothing to ack) and never a task."""
        reason = not_a_delivery(str(msg.subject), str(msg.reply or ""))
        if reason is None:
            return True
        self.base_metrics.messages_rejected.labels(kind=Decision.KIND, reason=reason).inc()
        held = self.throttle.allow("fetched", reason)
        if held is not None:
            self.log.warning(
                "fetched_message_ignored",
                reason=reason,
                subject=str(msg.subject)[:200],
                suppressed=held,
                detail="not a delivery of the decisions consumer; see gpuscale_messages_rejected_total",
            )
        return False

    def _dispatch(self, msg: Any) -> None:
        """Queue ``msg`` behind the decisions for the same target (its subject)."""
        self._in_flight += 1
        self.metrics.in_flight.set(self._in_flight)
        target = str(msg.subject)
        self._queues.setdefault(target, collections.deque()).append(msg)
        if target not in self._workers:
            worker = self._workers[target] = asyncio.create_task(self._work(target))
            worker.add_done_callback(self._worker_done)

    def _worker_done(self, worker: asyncio.Task[None]) -> None:
        if not worker.cancelled() and worker.exception() is not None:
            self._fatal = worker.exception()
            self._slot_freed.set()

    async def _work(self, target: str) -> None:
        queue = self._queues[target]
        try:
            while queue:
                msg = queue.popleft()
                try:
                    if not self.elector.is_leader:
                        await msg.nak()  # the new leader takes it
                    else:
                        await self.handle(msg)
                except Exception as e:  # nothing a message does may stop the worker
                    self.log.error("decision_handling_error", error=f"{type(e).__name__}: {e}", exc_info=e)
                    with contextlib.suppress(Exception):
                        await msg.nak(delay=RETRY_LATER_S)
                finally:
                    self._in_flight -= 1
                    self.metrics.in_flight.set(self._in_flight)
                    self._slot_freed.set()
        finally:
            del self._workers[target]
            if not queue:
                del self._queues[target]

    async def _drain_workers(self) -> None:
        """At shutdown: let the decisions in hand finish (bounded); the rest are redelivered."""
        for queue in self._queues.values():
            while queue:
                msg = queue.popleft()
                self._in_flight -= 1
                with contextlib.suppress(Exception):
                    await msg.nak()
        if self._workers:
            await asyncio.wait(set(self._workers.values()), timeout=SHUTDOWN_WAIT_S)


def consumer_config(settings: ActuatorSettings) -> ConsumerConfig:
    return ConsumerConfig(
        durable_name=DURABLE,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=settings.ack_wait,
        max_ack_pending=settings.max_in_flight,  # the server holds back the rest: see the module docstring
        max_deliver=-1,
        filter_subject=subjects.DECISIONS_ALL,
    )


async def _in_progress(msg: Any) -> None:
    with contextlib.suppress(Exception):  # a lost +WPI only risks an early redelivery, which is idempotent
        await msg.in_progress()


async def _first(*aws: Awaitable[Any]) -> None:
    tasks = [asyncio.ensure_future(a) for a in aws]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()


async def ensure_decisions_stream(js: JetStreamContext) -> None:
    """Create the decisions stream if absent (the decider owns its config)."""
    await declare_stream(js, subjects.DECISIONS)


async def _setup_jetstream(js: JetStreamContext, stop: asyncio.Event, log: Any) -> KeyValue | None:
    attempt = 0
    while not stop.is_set():
        try:
            await ensure_decisions_stream(js)
            return await declare_kv(js, subjects.ACTUATOR_APPLIED)
        except Exception as e:  # noqa: BLE001 - JetStream not ready yet: retry until it is
            attempt += 1
            if attempt == 1 or attempt % 10 == 0:
                log.warning("jetstream_setup_failed", attempt=attempt, error=f"{type(e).__name__}: {e}")
            await sleep_unless_stopped(stop, min(0.5 * attempt, 5.0))
    return None


async def _watch_api(api: ApiClient, state: dict[str, Any], stop: asyncio.Event, log: Any) -> None:
    while not stop.is_set():
        ok, detail = await ping(api)
        if ok != state["ok"]:
            log.info("kube_api_reachable" if ok else "kube_api_unreachable", detail=detail)
        state["ok"], state["detail"] = ok, detail
        await sleep_unless_stopped(stop, PING_PERIOD_S)


async def serve(ctx: ServiceContext, hooks: Hooks | None = None) -> None:
    settings: ActuatorSettings = ctx.settings
    identity = settings.holder_identity
    log = get_logger(service=SERVICE, identity=identity)
    metrics = ActuatorMetrics(ctx.metrics)
    api_state: dict[str, Any] = {"ok": False, "detail": "not checked yet"}
    nc: NATS | None = None
    ctx.http.add_readiness("nats", lambda: is_connected(nc))
    ctx.http.add_readiness("kubernetes", lambda: (bool(api_state["ok"]), str(api_state["detail"])))
    api = await new_api_client(settings.kubeconfig)
    tasks: list[asyncio.Task[Any]] = []
    try:
        tasks.append(asyncio.create_task(_watch_api(api, api_state, ctx.stop, log)))
        try:
            nc = await connect(
                list(settings.nats_url),
                ctx.metrics,
                name=f"gpuscale-actuator-{identity}",
                creds=str(settings.nats_creds) if settings.nats_creds else None,
                tls_ca=str(settings.nats_tls_ca) if settings.nats_tls_ca else None,
                stop=ctx.stop,
                on_closed=ctx.reopen,
            )
        except Exception:
            if ctx.stop.is_set():
                return
            raise
        js = jetstream(nc)
        applied = await _setup_jetstream(js, ctx.stop, log)
        if applied is None:
            return
        elector = LeaderElector(
            api,
            settings.lease_name,
            settings.lease_namespace,
            identity,
            lease_duration_s=settings.lease_duration,
            renew_deadline_s=settings.renew_deadline,
            retry_period_s=settings.retry_period,
            on_started_leading=lambda: metrics.leader.set(1),
            on_stopped_leading=lambda: metrics.leader.set(0),
        )
        policies = PolicyView(api, settings.policies)
        ctx.http.add_readiness(
            "gpuscalers",
            lambda: (policies.synced.is_set(), "listed" if policies.synced.is_set() else "not listed yet"),
        )
        actuator = Actuator(
            settings, ctx.metrics, metrics, nc, applied, api, elector, ctx.stop, hooks or Hooks(), policies
        )
        log.info("actuator_started", dry_run=settings.dry_run, lease=settings.lease_name)
        tasks.append(asyncio.create_task(policies.run(ctx.stop)))
        tasks.append(asyncio.create_task(elector.run(ctx.stop)))
        await actuator.consume(js)
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        ctx.stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await drain(nc)
        await api.close()


def main(settings: ActuatorSettings) -> int:
    return run(SERVICE, settings, serve)
