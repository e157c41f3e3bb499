"""Which GPUScaler scales which workload: one per workload (a second is told
``ConflictingController`` and takes over if the first goes); invalid objects are
reported with every bad field, never acted on."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from gpuscale.kube import ScaleTargetRef
from gpuscale.logging import OncePerKey, get_logger
from gpuscale.policy import GPUScaler, PolicyError
from gpuscale.policyfile import InvalidPolicy
from gpuscale.subjects import WorkloadKey
from gpuscale.wire import WorkloadMetrics
from gpuscale_decider.core.conditions import Reason
from gpuscale_decider.core.events import EventSpec, condition_events
from gpuscale_decider.core.reconcile import Evaluation, Memory
from gpuscale_decider.core.status import blocked_status, invalid_status, parse_rfc3339, status_differs
from gpuscale_decider.metrics import DeciderMetrics


class StatusSink(Protocol):
    def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        """Queue a status write (latest wins); never blocks the caller."""


class NoStatus:
    """File mode: no GPUScaler object to write to."""

    def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        return None


class EventSink(Protocol):
    def record(self, namespace: str, name: str, uid: str, events: Sequence[EventSpec]) -> None:
        """Queue Events about one GPUScaler; never blocks the caller."""


class NoEvents:
    """File mode: no GPUScaler object for Events to name."""

    def record(self, namespace: str, name: str, uid: str, events: Sequence[EventSpec]) -> None:
        return None


@dataclass
class Workload:
    """One GPUScaler's target and what the shell keeps for it."""

    scaler: GPUScaler
    key: WorkloadKey
    ref: ScaleTargetRef
    status_seen: Mapping[str, Any] | None = None  # the object's status when it was listed
    memory: Memory | None = None  # None: not loaded from the state store yet
    metrics: WorkloadMetrics | None = None  # the newest metrics message, read as the policy reads it
    received_at: float = 0.0  # when it arrived, on this process's clock
    conflict: str | None = None  # who else scales this target
    last_evaluation: Evaluation | None = None
    last_evaluated: float = 0.0
    dirty: bool = False
    busy: bool = False
    again: bool = False
    failed: str | None = None  # the error its last evaluation raised, as reported on it; None: it worked
    failure_logged_at: float | None = None  # monotonic: failures are logged at most once a minute
    recovery_to_log: bool = False  # a failure was logged: log its end too

    @property
    def last_scale_time(self) -> float | None:
        seen = parse_rfc3339((self.status_seen or {}).get("lastScaleTime"))
        return seen if self.memory is None else self.memory.state.last_scale_time or seen


def target_key(scaler: GPUScaler) -> WorkloadKey:
    ref = scaler.spec.scale_target_ref
    return WorkloadKey(scaler.namespace, ref.kind, ref.name)


def scale_ref(scaler: GPUScaler) -> ScaleTargetRef:
    ref = scaler.spec.scale_target_ref
    return ScaleTargetRef(ref.api_version, ref.kind, ref.name, scaler.namespace)


class Registry:
    def __init__(self, m: DeciderMetrics, status: StatusSink, clock: Any, events: EventSink) -> None:
        self.m = m
        self.status = status
        self.events = events
        self.clock = clock
        self.workloads: dict[WorkloadKey, Workload] = {}
        self.by_name: dict[tuple[str, str], WorkloadKey] = {}
        self.invalid: dict[tuple[str, str], InvalidPolicy] = {}
        self.reported: dict[tuple[str, str], dict[str, Any]] = {}  # statuses of the ones not acted on
        self.duplicates: dict[tuple[str, str], GPUScaler] = {}
        # The duplicates by the target they wait for, oldest first: a deletion looks up its own target's
        # rather than walking every duplicate of the cluster.
        self._waiting: dict[WorkloadKey, dict[tuple[str, str], None]] = {}
        self.conflicts: dict[WorkloadKey, str] = {}
        # Workloads no GPUScaler targets any more, and their targets: the leader's tick removes their entries.
        self.retired: dict[WorkloadKey, ScaleTargetRef] = {}
        self._once = OncePerKey()
        self.log = get_logger(component="decider")

    def set_policies(
        self,
        valid: Iterable[GPUScaler],
        invalid: Iterable[InvalidPolicy],
        statuses: Mapping[tuple[str, str], Mapping[str, Any]] | None = None,
    ) -> None:
        """Replace every policy (file load, or a relist of the cluster)."""
        valid, invalid = list(valid), list(invalid)
        names = {(s.namespace, s.name) for s in valid} | {(i.namespace, i.name) for i in invalid}
        for gone in [n for n in (*self.by_name, *self.invalid, *self.duplicates) if n not in names]:
            self.remove_policy(*gone)
        for bad in invalid:
            self.add_invalid(bad)
        for scaler in valid:
            self.upsert_policy(scaler, (statuses or {}).get((scaler.namespace, scaler.name)))
        self._count()

    def upsert_policy(self, scaler: GPUScaler, status: Mapping[str, Any] | None = None) -> None:
        name = (scaler.namespace, scaler.name)
        self.invalid.pop(name, None)
        self.reported.pop(name, None)
        key = target_key(scaler)
        old_key = self.by_name.get(name)
        if old_key is not None and old_key != key:
            self.remove_policy(*name)
        owner = self.workloads.get(key)
        if owner is not None and (owner.scaler.namespace, owner.scaler.name) != name:
            self._add_duplicate(name, scaler)
            if self._once.first("duplicate", *name):
                self.log.warning("policy_duplicate_target", gpuscaler=scaler.key, owner=owner.scaler.key)
            target = scaler.spec.scale_target_ref.reference()
            message = f"GPUScaler {owner.scaler.key} already scales {target}"
            reason = Reason.CONFLICTING_CONTROLLER
            blocked = blocked_status(
                scaler.spec, scaler.generation, reason, message, None, None, status, self.clock()
            )
            self._report(name, scaler.uid, blocked, status)
            return
        self._drop_duplicate(name)
        if owner is not None:
            owner.scaler, owner.ref = scaler, scale_ref(scaler)
            if status is not None:  # our own writes come back through the watch
                owner.status_seen = status
        else:
            self.workloads[key] = Workload(
                scaler, key, scale_ref(scaler), status_seen=status, conflict=self.conflicts.get(key)
            )
            self.by_name[name] = key
            self.retired.pop(key, None)
            self.log.info("policy_loaded", gpuscaler=scaler.key, target=str(key))
        self._count()

    def add_invalid(self, bad: InvalidPolicy, status: Mapping[str, Any] | None = None) -> None:
        name = (bad.namespace, bad.name)
        if name in self.by_name:
            self.remove_policy(*name)
        known = self.invalid.get(name)
        if known is None or known.error.problems != bad.error.problems:
            first_field = bad.error.fields[0] if bad.error.fields else "object"
            self.m.invalid_policies.labels(field=first_field).inc()
            self.log.warning(
                "policy_invalid",
                gpuscaler=f"{bad.namespace}/{bad.name}",
                fields=bad.error.fields,
                problems=bad.error.summary(),
            )
        self.invalid[name] = bad
        raw = bad.raw if isinstance(bad.raw, Mapping) else {}
        meta = raw.get("metadata")
        generation, uid = (meta.get("generation"), meta.get("uid")) if isinstance(meta, Mapping) else (0, "")
        spec = raw.get("spec")
        paused = isinstance(spec, Mapping) and spec.get("paused") is True
        previous = self.reported.get(name) or status
        generation = generation if isinstance(generation, int) else 0
        reported = invalid_status(generation, bad.error, previous, self.clock(), paused)
        self._report(name, uid if isinstance(uid, str) else "", reported, previous)
        self._count()

    def remove_policy(self, namespace: str, name: str) -> None:
        key_name = (namespace, name)
        self.m.forget_conditions(namespace, name)
        self.invalid.pop(key_name, None)
        self.reported.pop(key_name, None)
        self._drop_duplicate(key_name)
        key = self.by_name.pop(key_name, None)
        if key is not None:
            removed = self.workloads.pop(key, None)
            if removed is not None:
                self.m.forget(key, [m.name for m in removed.scaler.spec.metrics])
            self.log.info("policy_removed", gpuscaler=f"{namespace}/{name}", target=str(key))
            # A duplicate waiting for this workload may take it now (the oldest).
            waiting = self._waiting.get(key)
            if waiting:
                dup = self.duplicates[next(iter(waiting))]
                self.upsert_policy(dup)
            if removed is not None and key not in self.workloads:
                self.retired[key] = removed.ref
        self._count()

    def _add_duplicate(self, name: tuple[str, str], scaler: GPUScaler) -> None:
        key, known = target_key(scaler), self.duplicates.get(name)
        if known is not None and target_key(known) != key:
            self._drop_duplicate(name)  # it waited for another target
        self.duplicates[name] = scaler  # an edit keeps its place in the queue, as before
        self._waiting.setdefault(key, {})[name] = None

    def _drop_duplicate(self, name: tuple[str, str]) -> None:
        dup = self.duplicates.pop(name, None)
        if dup is None:
            return
        key = target_key(dup)
        waiting = self._waiting.get(key)
        if waiting is not None:
            waiting.pop(name, None)
            if not waiting:
                del self._waiting[key]

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

    def resubmit(self) -> None:
        """A new leader writes what it knows (the old one may have died mid-write)."""
        for (namespace, name), status in self.reported.items():
            self.m.conditions(namespace, name, status)
            self.status.submit(namespace, name, status)

    def errors(self) -> list[tuple[str, PolicyError]]:
        return [(f"{ns}/{name}", bad.error) for (ns, name), bad in self.invalid.items()]

    def _report(
        self, name: tuple[str, str], uid: str, status: dict[str, Any], previous: Mapping[str, Any] | None
    ) -> None:
        if status_differs(previous, status) and status_differs(self.reported.get(name), status):
            before = self.reported.get(name) or previous
            self.reported[name] = status
            self.write_status(name, uid, status, before)

    def write_status(
        self, name: tuple[str, str], uid: str, status: dict[str, Any], before: Mapping[str, Any] | None
    ) -> None:
        """Submit a changed status, with its condition series and the Events its change makes."""
        self.m.status_writes.inc()
        self.m.conditions(*name, status)
        self.status.submit(*name, status)
        events = condition_events(before, status)
        if events:
            self.events.record(*name, uid, events)

    def _count(self) -> None:
        self.m.policies.labels(state="valid").set(len(self.workloads))
        self.m.policies.labels(state="invalid").set(len(self.invalid))
