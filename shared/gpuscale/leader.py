"""Leader election on a ``coordination.k8s.io/v1`` Lease (client-go's algorithm).

A lease expires by the candidate's own clock since it saw the record change, so skew between
nodes cannot hand out two leases. The timing rules are pure functions; :class:`LeaderElector`
is the I/O loop."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient

from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube import (
    Conflict,
    Forbidden,
    KubeError,
    NotFound,
    format_micro_time,
    parse_time,
    request_json,
)
from gpuscale.logging import get_logger

__all__ = [
    "LeaderElector",
    "LeaseRecord",
    "lease_body",
    "lease_from_object",
    "may_acquire",
]

_JITTER: Final = 1.2  # client-go's JitterFactor for the retry period


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """The parts of a Lease the algorithm reads. Times are unix seconds."""

    holder: str
    lease_duration_s: float
    acquire_time: float | None
    renew_time: float | None
    transitions: int
    resource_version: str

    def same_record(self, other: LeaseRecord | None) -> bool:
        """Did nobody write the lease between two reads? (resourceVersion is the proof)."""
        return other is not None and other.resource_version == self.resource_version


def lease_from_object(obj: Mapping[str, Any]) -> LeaseRecord:
    spec = obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    duration = spec.get("leaseDurationSeconds")
    return LeaseRecord(
        holder=str(spec.get("holderIdentity") or ""),
        lease_duration_s=float(duration) if isinstance(duration, int | float) else 0.0,
        acquire_time=parse_time(spec.get("acquireTime")),
        renew_time=parse_time(spec.get("renewTime")),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
    )


def may_acquire(record: LeaseRecord, identity: str, observed_at: float, now: float) -> bool:
    """May ``identity`` write the lease now: held, free, or unchanged for its duration by our clock?"""
    if record.holder in ("", identity):
        return True
    return now >= observed_at + record.lease_duration_s


def lease_body(
    name: str,
    namespace: str,
    current: LeaseRecord | None,
    identity: str,
    now: float,
    lease_duration_s: float,
) -> dict[str, Any]:
    """The Lease to write to hold the lease as ``identity``; ``current``'s resourceVersion makes it conditional."""
    renewing = current is not None and current.holder == identity
    transitions = 0 if current is None else current.transitions + (0 if renewing else 1)
    acquire_time = current.acquire_time if renewing and current and current.acquire_time else now
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if current is not None and current.resource_version:
        metadata["resourceVersion"] = current.resource_version
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": identity,
            "leaseDurationSeconds": max(1, round(lease_duration_s)),
            "acquireTime": format_micro_time(acquire_time),
            "renewTime": format_micro_time(now),
            "leaseTransitions": transitions,
        },
    }


def release_body(name: str, namespace: str, current: LeaseRecord, now: float) -> dict[str, Any]:
    """Give the lease up: empty holder and a 1 s duration, as client-go's ReleaseOnCancel."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "resourceVersion": current.resource_version},
        "spec": {
            "holderIdentity": "",
            "leaseDurationSeconds": 1,
            "acquireTime": format_micro_time(now),
            "renewTime": format_micro_time(now),
            "leaseTransitions": current.transitions,
        },
    }


class LeaderElector:
    """Run :meth:`run` in a task; read :attr:`is_leader` or await the transitions.

    ``release_on_stop=False`` keeps the lease on the way out, as a crash would (for tests)."""

    def __init__(
        self,
        api_client: ApiClient,
        lease_name: str,
        namespace: str,
        identity: str,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        *,
        on_started_leading: Callable[[], None] | None = None,
        on_stopped_leading: Callable[[], None] | None = None,
        release_on_stop: bool = True,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        if not lease_duration_s > renew_deadline_s > retry_period_s * _JITTER:
            raise ValueError(
                "need lease_duration_s > renew_deadline_s > retry_period_s * 1.2 "
                f"(got {lease_duration_s}, {renew_deadline_s}, {retry_period_s})"
            )
        self.api = api_client
        self.lease_name = lease_name
        self.namespace = namespace
        self.identity = identity
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self.on_started_leading = on_started_leading
        self.on_stopped_leading = on_stopped_leading
        self.release_on_stop = release_on_stop
        self._wall = wall_clock
        self._leading = asyncio.Event()
        self._not_leading = asyncio.Event()
        self._not_leading.set()
        self._observed: LeaseRecord | None = None
        self._observed_at = 0.0  # monotonic time we first saw _observed
        self._last_renew = 0.0  # monotonic time of our last successful write
        self._last_error = ""  # logged once until it changes or a try succeeds
        self._log = get_logger(component="leader", lease=f"{namespace}/{lease_name}", identity=identity)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.lease_name}"

    @property
    def is_leader(self) -> bool:
        # Also false once our own renewals lapsed, even before the loop notices.
        return self._leading.is_set() and (_monotonic() - self._last_renew) < self.renew_deadline_s

    @property
    def holder(self) -> str:
        """Who held the lease when we last read it ('' when free or unknown)."""
        return self._observed.holder if self._observed else ""

    async def wait_until_leader(self) -> None:
        await self._leading.wait()

    async def wait_until_not_leader(self) -> None:
        await self._not_leading.wait()

    async def run(self, stop: asyncio.Event) -> None:
        """Campaign and renew until ``stop``; release the lease on the way out."""
        try:
            while not stop.is_set():
                ok = await self._try_acquire_or_renew()
                now = _monotonic()
                if ok:
                    self._last_renew = now
                    if not self._leading.is_set():
                        self._became_leader()
                elif self._leading.is_set() and (
                    now - self._last_renew >= self.renew_deadline_s
                    or (self._observed is not None and self._observed.holder != self.identity)
                ):
                    self._lost(
                        "renew_deadline_passed"
                        if self._observed is None or self._observed.holder == self.identity
                        else "taken_over"
                    )
                # client-go: a jittered retry period between tries.
                period = self.retry_period_s * (1.0 + random.random() * (_JITTER - 1.0))  # noqa: S311 - jitter, not crypto
                await sleep_unless_stopped(stop, period)
        finally:
            if self._leading.is_set():
                await self._release()

    async def _try_acquire_or_renew(self) -> bool:
        now_wall = self._wall()
        now = _monotonic()
        try:
            obj = await request_json(self.api, "GET", self.path)
        except NotFound:
            obj = None
        except KubeError as e:
            self._note_error("lease_read_failed", e)
            return False
        if obj is None:
            body = lease_body(
                self.lease_name, self.namespace, None, self.identity, now_wall, self.lease_duration_s
            )
            try:
                created = await request_json(
                    self.api, "POST", f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases", body
                )
            except Conflict:
                return False  # another candidate created it first: it leads
            except KubeError as e:
                self._note_error("lease_create_failed", e)
                return False
            self._observe(lease_from_object(created), now)
            self._last_error = ""
            return True
        record = lease_from_object(obj)
        if not record.same_record(self._observed):
            self._observe(record, now)
        if not may_acquire(record, self.identity, self._observed_at, now):
            return False
        body = lease_body(
            self.lease_name, self.namespace, record, self.identity, now_wall, self.lease_duration_s
        )
        try:
            written = await request_json(self.api, "PUT", self.path, body)
        except Conflict:
            return False  # someone wrote between our read and our write: they won
        except KubeError as e:
            self._note_error("lease_write_failed", e)
            return False
        self._observe(lease_from_object(written), now)
        self._last_error = ""
        return True

    def _observe(self, record: LeaseRecord, now: float) -> None:
        self._observed = record
        self._observed_at = now

    def _note_error(self, event: str, e: KubeError) -> None:
        key = f"{event}:{type(e).__name__}"
        if key == self._last_error:
            return  # the same fault every retry period: one line is enough
        self._last_error = key
        fields: dict[str, Any] = {"error": str(e)[:300], "status": e.status}
        if isinstance(e, Forbidden):
            fields["missing_permission"] = e.missing_permission
        self._log.warning(event, **fields)

    def _became_leader(self) -> None:
        self._not_leading.clear()
        self._leading.set()
        self._log.info("leader_acquired", lease_duration_s=self.lease_duration_s)
        if self.on_started_leading is not None:
            self.on_started_leading()

    def _lost(self, why: str) -> None:
        self._leading.clear()
        self._not_leading.set()
        self._log.warning("leader_lost", why=why, holder=self.holder)
        if self.on_stopped_leading is not None:
            self.on_stopped_leading()

    async def _release(self) -> None:
        self._leading.clear()
        self._not_leading.set()
        record = self._observed
        if self.release_on_stop and record is not None and record.holder == self.identity:
            try:
                await asyncio.wait_for(
                    request_json(
                        self.api,
                        "PUT",
                        self.path,
                        release_body(self.lease_name, self.namespace, record, self._wall()),
                    ),
                    3.0,
                )
                self._log.info("leader_released")
            except (KubeError, TimeoutError) as e:
                self._log.warning("leader_release_failed", error=str(e))
        if self.on_stopped_leading is not None:
            self.on_stopped_leading()


def _monotonic() -> float:
    return time.monotonic()
