"""The decider's I/O-light heart: policies, workloads, and the evaluation path.

:class:`Decider` receives metrics messages, evaluates the policy of the
workload with the pure core, publishes a decision when a change is wanted
and hands the GPUScaler status to a sink when it changed. Its I/O goes
through small injected parts (replica source, state store, publisher,
status sink, leadership), so the same class runs against NATS and
Kubernetes in production, against kube-sim in the tests, and in-process in
the benchmark.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from prometheus_client import Counter, Gauge, Histogram

from gpuscale.codec import Reader
from gpuscale.kube import KubeError, ScaleTargetRef
from gpuscale.logging import OncePerKey, get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.subjects import SubjectError, WorkloadKey, parse_workload
from gpuscale.wire import Decision, WireError, WorkloadMetrics
from gpuscale_decider.core.algorithm import (
    Evaluation,
    Observation,
    ScalerState,
    evaluate,
    longest_period,
    record_scale,
    seed_last_scale,
)
from gpuscale_decider.core.policy import GPUScaler, PolicyError
from gpuscale_decider.core.status import (
    blocked_status,
    evaluation_status,
    invalid_status,
    parse_rfc3339,
    status_differs,
)
from gpuscale_decider.policies import InvalidPolicy
from gpuscale_decider.sources import ReplicaSource, StateStore

Publish = Callable[[Decision], Awaitable[None]]


class StatusSink(Protocol):
    def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Queue a status write (latest wins); never blocks the caller."""
        ...


class NoStatus:
    """File mode: there is no GPUScaler object to write to."""

    def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        return None


class DeciderMetrics:
    def __init__(self, metrics: ServiceMetrics) -> None:
        r = metrics.registry
        self.evaluations = Counter("gpuscale_decider_evaluations_total", "Policy evaluations", registry=r)
        self.evaluation_seconds = Histogram(
            "gpuscale_decider_evaluation_seconds",
            "Time from a metrics message's arrival to its evaluated result",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0),
            registry=r,
        )
        self.decisions = Counter(
            "gpuscale_decider_decisions_total", "Decisions published", ["direction"], registry=r
        )
        # Per-workload series for dashboards (deploy/grafana): bounded by the number of GPUScalers.
        workload = ["namespace", "kind", "name"]
        self.workload_decisions = Counter(
            "gpuscale_decisions_total",
            "Decisions published per workload",
            [*workload, "direction"],
            registry=r,
        )
        self.metric_value = Gauge(
            "gpuscale_workload_metric_value",
            "Window average of a policy metric over fresh pods",
            [*workload, "metric"],
            registry=r,
        )
        self.metric_target = Gauge(
            "gpuscale_workload_metric_target",
            "The policy's target for a metric",
            [*workload, "metric"],
            registry=r,
        )
        self.replicas_current = Gauge(
            "gpuscale_workload_replicas_current", "Replicas of the scale target", workload, registry=r
        )
        self.replicas_desired = Gauge(
            "gpuscale_workload_replicas_desired", "Replicas the policy wants", workload, registry=r
        )

        self.publish_failures = Counter(
            "gpuscale_decider_publish_failures_total", "Decisions that could not be published", registry=r
        )
        self.policies = Gauge("gpuscale_decider_policies", "GPUScaler policies held", ["state"], registry=r)
        self.invalid_policies = Counter(
            "gpuscale_decider_invalid_policies_total",
            "Invalid GPUScaler objects seen, by the first bad field",
            ["field"],
            registry=r,
        )
        self.unmatched = Counter(
            "gpuscale_decider_metrics_without_policy_total",
            "Metrics messages for workloads no GPUScaler targets",
            registry=r,
        )
        self.scale_read_failures = Counter(
            "gpuscale_decider_scale_read_failures_total",
            "Failed reads of a target's scale subresource",
            ["status"],
            registry=r,
        )
        self.status_writes = Counter(
            "gpuscale_decider_status_writes_total", "GPUScaler status writes requested", registry=r
        )

    def observe(
        self,
        key: WorkloadKey,
        targets: Mapping[str, float],
        averages: Mapping[str, float] | None,
        current: int,
        desired: int,
    ) -> None:
        labels = {"namespace": key.namespace, "kind": key.kind, "name": key.name}
        self.replicas_current.labels(**labels).set(current)
        self.replicas_desired.labels(**labels).set(desired)
        for metric, target in targets.items():
            self.metric_target.labels(**labels, metric=metric).set(target)
            if averages is not None and metric in averages:
                self.metric_value.labels(**labels, metric=metric).set(averages[metric])
            else:  # no fresh value: no series, rather than a stale one
                with contextlib.suppress(KeyError):
                    self.metric_value.remove(key.namespace, key.kind, key.name, metric)

    def forget(self, key: WorkloadKey, metrics: Iterable[str]) -> None:
        values = (key.namespace, key.kind, key.name)
        for gauge in (self.replicas_current, self.replicas_desired):
            with contextlib.suppress(KeyError):
                gauge.remove(*values)
        for metric in metrics:
            for gauge in (self.metric_value, self.metric_target):
                with contextlib.suppress(KeyError):
                    gauge.remove(*values, metric)


@dataclass
class Pending:
    """A published decision the actuator is working on."""

    decision_id: str
    from_replicas: int
    to_replicas: int
    deadline: float


@dataclass
class Workload:
    scaler: GPUScaler
    key: WorkloadKey
    ref: ScaleTargetRef
    state: ScalerState | None = None
    observation: Observation | None = None
    averages: dict[str, float] = field(default_factory=dict)
    pods_stale: int = 0
    pending: Pending | None = None
    conflict: str | None = None  # who else scales this target
    last_status: dict[str, Any] | None = None
    last_scale_time: float | None = None
    last_evaluated: float = 0.0
    last_evaluation: Evaluation | None = None
    dirty: bool = False
    busy: bool = False
    status_signature: tuple[Any, ...] | None = None
    status_checked_at: float = 0.0
    again: bool = False


def target_key(scaler: GPUScaler) -> WorkloadKey:
    ref = scaler.spec.scale_target_ref
    return WorkloadKey(scaler.namespace, ref.kind, ref.name)


def scale_ref(scaler: GPUScaler) -> ScaleTargetRef:
    ref = scaler.spec.scale_target_ref
    return ScaleTargetRef(ref.api_version, ref.kind, ref.name, scaler.namespace)


class Decider:
    def __init__(
        self,
        metrics: ServiceMetrics,
        replicas: ReplicaSource,
        store: StateStore,
        publish: Publish,
        *,
        status: StatusSink | None = None,
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.time,
        actuation_timeout_s: float = 30.0,
        max_metrics_age_s: float | None = None,
        decider_metrics: DeciderMetrics | None = None,
        status_refresh_s: float = 15.0,
    ) -> None:
        self.metrics = metrics
        self.m = decider_metrics or DeciderMetrics(metrics)
        self.replicas = replicas
        self.store = store
        self.publish = publish
        self.status = status or NoStatus()
        self.is_leader = is_leader
        self.clock = clock
        self.actuation_timeout_s = actuation_timeout_s
        self.max_metrics_age_s = max_metrics_age_s
        self.workloads: dict[WorkloadKey, Workload] = {}
        self.by_name: dict[tuple[str, str], WorkloadKey] = {}
        self.invalid: dict[tuple[str, str], InvalidPolicy] = {}
        self.invalid_status: dict[tuple[str, str], dict[str, Any]] = {}
        self.duplicates: dict[tuple[str, str], GPUScaler] = {}
        self.conflicts: dict[WorkloadKey, str] = {}
        self.status_refresh_s = status_refresh_s
        self._once = OncePerKey()
        self._subject_keys: dict[str, WorkloadKey] = {}
        self._sending: set[asyncio.Task[None]] = set()
        self._messages_in = metrics.messages_in.labels(kind="metrics")
        # Fields and metric names a newer aggregator sends are skipped, counted
        # once per name and logged once; a metric a policy asks for that a
        # message lacks is missing data (no fresh value), not a rejection.
        self._reader = Reader(WorkloadMetrics, on_unknown=metrics.unknown_field)
        self.log = get_logger(component="decider")

    # --- policies ----------------------------------------------------------------

    def set_policies(
        self,
        valid: Iterable[GPUScaler],
        invalid: Iterable[InvalidPolicy],
        statuses: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    ) -> None:
        """Replace every policy (file load, or a relist of the cluster)."""
        valid = list(valid)
        names = {(s.namespace, s.name) for s in valid} | {(i.namespace, i.name) for i in invalid}
        for gone in [n for n in (*self.by_name, *self.invalid, *self.duplicates) if n not in names]:
            self.remove_policy(*gone)
        for bad in invalid:
            self.add_invalid(bad)
        for scaler in valid:
            self.upsert_policy(scaler, (statuses or {}).get((scaler.namespace, scaler.name)))
        self._count_policies()

    def upsert_policy(self, scaler: GPUScaler, status: Mapping[str, Any] | None = None) -> None:
        name = (scaler.namespace, scaler.name)
        self.invalid.pop(name, None)
        self.invalid_status.pop(name, None)
        key = target_key(scaler)
        old_key = self.by_name.get(name)
        if old_key is not None and old_key != key:
            self.remove_policy(*name)
            old_key = None
        owner = self.workloads.get(key)
        if owner is not None and (owner.scaler.namespace, owner.scaler.name) != name:
            # Two GPUScalers on one workload: the first keeps it, the second is told why not.
            self.duplicates[name] = scaler
            message = (
                f"GPUScaler {owner.scaler.key} already scales {scaler.spec.scale_target_ref.reference()}"
            )
            if self._once.first("duplicate", *name):
                self.log.warning("policy_duplicate_target", gpuscaler=scaler.key, owner=owner.scaler.key)
            self._submit_status(
                name,
                blocked_status(
                    scaler.spec,
                    scaler.generation,
                    "ConflictingController",
                    message,
                    None,
                    None,
                    status,
                    self.clock(),
                ),
                status,
            )
            return
        self.duplicates.pop(name, None)
        if owner is not None:
            owner.scaler = scaler
            owner.ref = scale_ref(scaler)
        else:
            w = Workload(scaler, key, scale_ref(scaler), conflict=self.conflicts.get(key))
            if status is not None:
                w.last_status = dict(status)
                w.last_scale_time = parse_rfc3339(status.get("lastScaleTime"))
            self.workloads[key] = w
            self.by_name[name] = key
            self.log.info("policy_loaded", gpuscaler=scaler.key, target=str(key))
        self._count_policies()

    def add_invalid(self, bad: InvalidPolicy, status: Mapping[str, Any] | None = None) -> None:
        name = (bad.namespace, bad.name)
        if name in self.by_name:
            self.remove_policy(*name)
        first_field = bad.error.fields[0] if bad.error.fields else "object"
        known = self.invalid.get(name)
        if known is None or known.error.problems != bad.error.problems:
            self.m.invalid_policies.labels(field=first_field).inc()
            self.log.warning(
                "policy_invalid",
                gpuscaler=f"{bad.namespace}/{bad.name}",
                fields=bad.error.fields,
                problems=bad.error.summary(),
            )
        self.invalid[name] = bad
        generation = 0
        if isinstance(bad.raw, Mapping) and isinstance(bad.raw.get("metadata"), Mapping):
            gen = bad.raw["metadata"].get("generation")
            generation = gen if isinstance(gen, int) else 0
        previous = self.invalid_status.get(name) or status
        new = invalid_status(generation, bad.error, previous, self.clock())
        self._submit_status(name, new, previous)
        self._count_policies()

    def remove_policy(self, namespace: str, name: str) -> None:
        key_name = (namespace, name)
        self.invalid.pop(key_name, None)
        self.invalid_status.pop(key_name, None)
        self.duplicates.pop(key_name, None)
        key = self.by_name.pop(key_name, None)
        if key is not None:
            removed = self.workloads.pop(key, None)
            if removed is not None:
                self.m.forget(key, [m.name for m in removed.scaler.spec.metrics])
            self.log.info("policy_removed", gpuscaler=f"{namespace}/{name}", target=str(key))
            # A duplicate waiting for this workload may take it now.
            for dup_name, dup in list(self.duplicates.items()):
                if target_key(dup) == key:
                    self.duplicates.pop(dup_name)
                    self.upsert_policy(dup)
                    break
        self._count_policies()

    def _count_policies(self) -> None:
        self.m.policies.labels(state="valid").set(len(self.workloads))
        self.m.policies.labels(state="invalid").set(len(self.invalid))

    def set_conflicts(self, conflicts: Mapping[WorkloadKey, str]) -> None:
        """Other controllers (HPA, KEDA) on our targets: key -> who."""
        self.conflicts = dict(conflicts)
        for key, w in self.workloads.items():
            who = self.conflicts.get(key)
            if who != w.conflict:
                if who is not None:
                    self.log.warning(
                        "conflicting_controller", gpuscaler=w.scaler.key, target=str(key), other=who
                    )
                else:
                    self.log.info("conflicting_controller_gone", gpuscaler=w.scaler.key, target=str(key))
                w.conflict = who

    def on_leadership_change(self) -> None:
        """A new leader reloads state: the previous one may have moved on."""
        for w in self.workloads.values():
            w.state = None
            w.pending = None
            w.dirty = False

    # --- metrics in ----------------------------------------------------------------

    async def on_message(self, msg: Any) -> None:
        """nats-py callback."""
        await self.handle_metrics(msg.subject, msg.data)

    async def handle_metrics(self, subject: str, data: bytes) -> None:
        started = time.perf_counter()
        now = self.clock()
        self._messages_in.inc()
        try:
            m = self._reader.decode(data, now)
            key = WorkloadKey(m.namespace, m.kind, m.name)
            if self._subject_key(subject) != key:
                raise WireError("subject_mismatch", f"payload names {key}, subject {subject}")
        except SubjectError as e:
            self._reject(subject, "bad_subject", str(e))
            return
        except WireError as e:
            self._reject(subject, e.code, e.detail)
            return
        if self.max_metrics_age_s is not None and now - m.ts > self.max_metrics_age_s:
            self._reject(
                subject, "too_old", f"ts is {now - m.ts:.1f} s old (limit {self.max_metrics_age_s:g} s)"
            )
            return
        w = self.workloads.get(key)
        if w is None:
            self.m.unmatched.inc()
            return
        if w.observation is None or m.ts >= w.observation.ts:
            averages = m.averages.to_dict()
            w.observation = Observation(m.ts, averages, m.pods_fresh)
            w.averages = averages
            w.pods_stale = m.pods_stale
        await self.evaluate(w, now)
        self.m.evaluation_seconds.observe(time.perf_counter() - started)

    def _subject_key(self, subject: str) -> WorkloadKey:
        key = self._subject_keys.get(subject)
        if key is None:
            key = parse_workload(subject, "metrics")
            if len(self._subject_keys) >= 100_000:  # bounded: a flood of new subjects can't grow memory
                self._subject_keys.clear()
            self._subject_keys[subject] = key
        return key

    def _reject(self, subject: str, reason: str, detail: str) -> None:
        self.metrics.messages_rejected.labels(kind="metrics", reason=reason).inc()
        if self._once.first(subject, reason):
            self.log.warning(
                "message_rejected", kind="metrics", subject=subject, reason=reason, detail=detail
            )

    # --- evaluation ----------------------------------------------------------------

    async def evaluate(self, w: Workload, now: float) -> Evaluation | None:
        if not self.is_leader():
            return None
        if w.busy:
            # One evaluation per workload at a time (no double decision); the
            # running one goes again with the newest observation.
            w.again = True
            return None
        w.busy = True
        try:
            result = await self._evaluate(w, now)
            while w.again:
                w.again = False
                result = await self._evaluate(w, self.clock())
            return result
        finally:
            w.busy = False

    async def _evaluate(self, w: Workload, now: float) -> Evaluation | None:
        spec = w.scaler.spec
        if w.state is None:
            loaded = await self.store.load(w.key)
            w.state = seed_last_scale(loaded or ScalerState(), w.last_scale_time)
        try:
            current = await self.replicas.replicas(w.ref, now)
        except KubeError as e:
            self.m.scale_read_failures.labels(status=str(e.status)).inc()
            if self._once.first("scale", str(w.key), str(e.status)):
                self.log.warning("scale_read_failed", target=str(w.key), status=e.status, error=str(e))
            why = (
                "the target does not exist"
                if e.status == 404
                else f"reading its scale subresource failed: {e}"
            )
            signature: tuple[Any, ...] = ("FailedGetScale", e.status, w.scaler.generation)
            if not self._status_due(w, signature, now):
                return None
            self._write_status(
                w,
                signature,
                now,
                blocked_status(
                    spec,
                    w.scaler.generation,
                    "FailedGetScale",
                    why,
                    None,
                    self._fresh_averages(w, now),
                    w.last_status,
                    now,
                ),
            )
            return None
        self._once.forget("scale", str(w.key), "404")

        if w.pending is not None:
            p = w.pending
            if current == p.to_replicas:
                self.log.info(
                    "decision_applied", target=str(w.key), decision_id=p.decision_id, replicas=current
                )
            elif current != p.from_replicas:
                self.log.info(
                    "target_changed_elsewhere", target=str(w.key), decision_id=p.decision_id, replicas=current
                )
            elif now >= p.deadline:
                self.log.warning(
                    "decision_not_applied_in_time",
                    target=str(w.key),
                    decision_id=p.decision_id,
                    waited_s=self.actuation_timeout_s,
                )
            else:
                return None  # the actuator is working on it: no new decision yet
            w.pending = None

        evaluation, w.state = evaluate(spec, current, w.observation, w.state, now)
        w.dirty = True
        w.last_evaluated = now
        w.last_evaluation = evaluation
        self.m.evaluations.inc()
        self.m.observe(
            w.key,
            {m.name: m.target for m in spec.metrics},
            self._fresh_averages(w, now),
            evaluation.current_replicas,
            evaluation.desired_replicas,
        )

        conditions = tuple((c.type, c.status, c.reason) for c in evaluation.conditions)
        if w.conflict is not None:
            signature = ("ConflictingController", w.conflict, current, evaluation.fresh, w.scaler.generation)
            if not self._status_due(w, signature, now):
                return evaluation
            self._write_status(
                w,
                signature,
                now,
                blocked_status(
                    spec,
                    w.scaler.generation,
                    "ConflictingController",
                    f"{w.conflict} already scales {spec.scale_target_ref.reference()}: gpuscale does not act on it",
                    current,
                    self._fresh_averages(w, now) if evaluation.fresh else None,
                    w.last_status,
                    now,
                ),
            )
            return evaluation
        if evaluation.change:
            await self._publish(w, evaluation, now)
        signature = (
            evaluation.current_replicas,
            evaluation.desired_replicas,
            conditions,
            evaluation.fresh,
            w.last_scale_time,
            w.scaler.generation,
        )
        if not self._status_due(w, signature, now):
            return evaluation
        self._write_status(
            w,
            signature,
            now,
            evaluation_status(
                spec, w.scaler.generation, evaluation, w.averages, w.last_scale_time, w.last_status, now
            ),
        )
        return evaluation

    def _fresh_averages(self, w: Workload, now: float) -> dict[str, float] | None:
        o = w.observation
        if o is None or o.pods_fresh <= 0 or now - o.ts > w.scaler.spec.window_s:
            return None
        return dict(o.averages)

    async def _publish(self, w: Workload, evaluation: Evaluation, now: float) -> None:
        if w.state is None:  # loaded at the top of _evaluate; kept for the type checker
            return
        spec = w.scaler.spec
        o = w.observation
        decision = Decision(
            id=str(uuid.uuid4()),
            ts=now,
            namespace=w.key.namespace,
            kind=w.key.kind,
            name=w.key.name,
            from_replicas=evaluation.current_replicas,
            to_replicas=evaluation.desired_replicas,
            reason=evaluation.reason,
            inputs={
                "gpuscaler": w.scaler.key,
                "averages": dict(o.averages) if o is not None else {},
                "metrics_ts": o.ts if o is not None else None,
                "targets": {m.name: m.target for m in spec.metrics},
                "pods_fresh": o.pods_fresh if o is not None else 0,
                "pods_stale": w.pods_stale,
                "pods_missing": max(0, evaluation.current_replicas - (o.pods_fresh if o is not None else 0)),
                "proposals": {p.name: p.replicas for p in evaluation.metrics},
                "recommendation": evaluation.recommendation,
                "stabilized": evaluation.stabilized,
                "recommendations": [[r.ts, r.value] for r in w.state.recommendations],
                "fallback": evaluation.fallback,
                "conditions": {c.type: c.reason for c in evaluation.conditions},
            },
            api_version=w.ref.api_version,
        )
        # Take the change as made at once (pending, rate-limit and cooldown
        # history, last scale time) and publish in the background: the
        # metrics subscription never waits for a JetStream ack. While the
        # decision is pending nothing else evaluates this workload, so a
        # failed publish can put the previous state back untouched.
        before = (w.state, w.last_scale_time)
        w.state = record_scale(
            w.state, decision.from_replicas, decision.to_replicas, now, longest_period(spec)
        )
        w.pending = Pending(
            decision.id, decision.from_replicas, decision.to_replicas, now + self.actuation_timeout_s
        )
        w.last_scale_time = now
        task = asyncio.create_task(self._send(w, decision, before))
        self._sending.add(task)
        task.add_done_callback(self._sending.discard)

    async def _send(self, w: Workload, decision: Decision, before: tuple[ScalerState, float | None]) -> None:
        try:
            await self.publish(decision)
        except Exception as e:  # noqa: BLE001 - NATS down or timed out: count, log, decide again next message
            self.m.publish_failures.inc()
            if self._once.first("publish", str(w.key)):
                self.log.warning(
                    "decision_publish_failed", target=str(w.key), error=f"{type(e).__name__}: {e}"
                )
            if w.pending is not None and w.pending.decision_id == decision.id:
                w.pending = None
                w.state, w.last_scale_time = before
            return
        self._once.forget("publish", str(w.key))
        direction = "up" if decision.to_replicas > decision.from_replicas else "down"
        self.m.decisions.labels(direction=direction).inc()
        self.m.workload_decisions.labels(w.key.namespace, w.key.kind, w.key.name, direction).inc()
        self.metrics.messages_out.labels(kind="decisions").inc()
        self.replicas.forget(w.ref)
        self.log.info(
            "decision_published",
            workload=str(w.key),
            gpuscaler=w.scaler.key,
            decision_id=decision.id,
            from_replicas=decision.from_replicas,
            to_replicas=decision.to_replicas,
            reason=decision.reason,
        )
        if w.state is None:
            return
        try:
            await self.store.save(w.key, w.state)
            w.dirty = False
        except Exception as e:  # noqa: BLE001 - the periodic flush retries
            self.log.warning("state_save_failed", target=str(w.key), error=f"{type(e).__name__}: {e}")

    async def idle(self, timeout_s: float = 10.0) -> None:
        """Wait for decisions still being published (shutdown, tests)."""
        if self._sending:
            await asyncio.wait(set(self._sending), timeout=timeout_s)

    # --- status ----------------------------------------------------------------------

    def _status_due(self, w: Workload, signature: tuple[Any, ...], now: float) -> bool:
        """Replicas, conditions or the spec changed: write now. Only the metric
        values moved: refresh them every ``status_refresh_s`` (HPA's sync
        period), not on every message."""
        return signature != w.status_signature or now - w.status_checked_at >= self.status_refresh_s

    def _write_status(
        self, w: Workload, signature: tuple[Any, ...], now: float, status: dict[str, Any]
    ) -> None:
        w.status_signature = signature
        w.status_checked_at = now
        if status_differs(w.last_status, status):
            w.last_status = status
            self.m.status_writes.inc()
            self.status.submit(w.scaler.namespace, w.scaler.name, status)

    def _submit_status(
        self, name: tuple[str, str], status: dict[str, Any], previous: Mapping[str, Any] | None
    ) -> None:
        if status_differs(previous, status) and status_differs(self.invalid_status.get(name), status):
            self.invalid_status[name] = status
            self.m.status_writes.inc()
            self.status.submit(name[0], name[1], status)

    def resubmit_statuses(self) -> None:
        """A new leader writes what it knows (the old one may have died mid-write)."""
        for name, status in self.invalid_status.items():
            self.status.submit(name[0], name[1], status)

    # --- periodic ------------------------------------------------------------------

    async def tick(self, interval_s: float) -> None:
        """Re-evaluate workloads that got no metrics for a while (staleness,
        fallback, pending timeouts), and save changed state."""
        now = self.clock()
        if not self.is_leader():
            return
        for w in list(self.workloads.values()):
            if now - w.last_evaluated >= interval_s:
                await self.evaluate(w, now)
        await self.flush()

    async def flush(self) -> None:
        for w in list(self.workloads.values()):
            if w.dirty and w.state is not None:
                try:
                    await self.store.save(w.key, w.state)
                    w.dirty = False
                except Exception as e:  # noqa: BLE001 - NATS may be away; the next tick retries
                    if self._once.first("state_save", str(w.key)):
                        self.log.warning(
                            "state_save_failed", target=str(w.key), error=f"{type(e).__name__}: {e}"
                        )
                    return

    def policy_error_summary(self) -> list[tuple[str, PolicyError]]:
        return [(f"{ns}/{name}", bad.error) for (ns, name), bad in self.invalid.items()]
