"""The decider's Kubernetes side: GPUScaler list+watch, the pod watch, status
writes, and the search for other controllers (HPA, KEDA) on the same targets."""

from __future__ import annotations

import abc
import asyncio
import random
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient

from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube import (
    FieldsDropped,
    Forbidden,
    KubeError,
    NotFound,
    ScaleTargetRef,
    backoff_delay,
    each_page,
    record_event,
    request_json,
)
from gpuscale.kubewatch import ApiClientTransport, Reflector
from gpuscale.logging import OncePerKey, get_logger
from gpuscale.policy import (
    API_GROUP,
    API_VERSION,
    KIND,
    PLURAL,
    GPUScaler,
    PolicyError,
    object_identity,
    parse_gpuscaler,
)
from gpuscale.policyfile import InvalidPolicy
from gpuscale.subjects import WorkloadKey
from gpuscale_decider.core.events import EventSpec
from gpuscale_decider.registry import Registry

# Status keys the decider owns: a merge patch sets the ones it leaves out to null.
STATUS_KEYS: Final = (
    *("observedGeneration", "reference", "targets", "currentReplicas", "desiredReplicas"),
    *("currentMetrics", "lastScaleTime", "reason", "conditions"),
)


def _parse(obj: Mapping[str, Any]) -> GPUScaler | InvalidPolicy:
    try:
        return parse_gpuscaler(obj)
    except PolicyError as e:
        return InvalidPolicy(*object_identity(obj), e, obj)


class _Background(abc.ABC):
    """A queue drained in the background: woken by ``_wake`` until ``stop``."""

    def __init__(self, component: str) -> None:
        self._wake = asyncio.Event()
        self._once = OncePerKey()
        self.log = get_logger(component=component)

    async def run(self, stop: asyncio.Event) -> None:
        stop_task = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                waiting = asyncio.create_task(self._wake.wait())
                await asyncio.wait({waiting, stop_task}, return_when=asyncio.FIRST_COMPLETED)
                waiting.cancel()
                self._wake.clear()
                await self._drain(stop)
        finally:
            stop_task.cancel()

    @abc.abstractmethod
    async def _drain(self, stop: asyncio.Event) -> None:
        """Write what is queued (a subclass's one job)."""

    def _forbidden(self, event: str, e: Forbidden) -> None:
        """Logged once per missing permission: retrying cannot grant RBAC."""
        if self._once.first("forbidden", e.missing_permission):
            self.log.error(event, missing_permission=e.missing_permission, error=str(e))


class GPUScalerWatcher:
    """Every GPUScaler of the cluster, listed then watched, into the registry."""

    def __init__(self, api: ApiClient, registry: Registry) -> None:
        self.registry = registry
        path = f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}"
        self.reflector = Reflector(
            ApiClientTransport(api), path, on_list=self._listed, on_event=self._event, what="gpuscalers"
        )
        self.synced = self.reflector.synced

    async def run(self, stop: asyncio.Event) -> None:
        await self.reflector.run(stop)

    def _listed(self, items: Sequence[Mapping[str, Any]]) -> None:
        valid, invalid = [], []
        statuses: dict[tuple[str, str], Mapping[str, Any]] = {}
        for obj in items:
            parsed = _parse(obj)
            if isinstance(parsed, InvalidPolicy):
                invalid.append(parsed)
                continue
            valid.append(parsed)
            if isinstance(obj.get("status"), Mapping):
                statuses[(parsed.namespace, parsed.name)] = obj["status"]
        self.registry.set_policies(valid, invalid, statuses)

    def _event(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            self.registry.remove_policy(*object_identity(obj))
            return
        status = obj.get("status") if isinstance(obj.get("status"), Mapping) else None
        parsed = _parse(obj)
        if isinstance(parsed, InvalidPolicy):
            self.registry.add_invalid(parsed, status)
        else:
            self.registry.upsert_policy(parsed, status)


class StatusWriter(_Background):
    """Writes GPUScaler statuses in the background, latest per object wins."""

    def __init__(self, api: ApiClient, is_leader: Callable[[], bool] = lambda: True) -> None:
        super().__init__("status_writer")
        self.api = api
        self.is_leader = is_leader
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}
        self._attempt = 0
        self.written = 0

    def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._pending[(namespace, name)] = status
        self._wake.set()

    async def _drain(self, stop: asyncio.Event) -> None:
        while self._pending and not stop.is_set():
            (namespace, name), status = next(iter(self._pending.items()))
            del self._pending[(namespace, name)]
            if not self.is_leader():
                continue
            if await self._write(namespace, name, status):
                self._attempt = 0
                continue
            # keep the newest: put it back unless a newer one arrived meanwhile
            self._pending.setdefault((namespace, name), status)
            self._attempt += 1
            await sleep_unless_stopped(stop, backoff_delay(self._attempt, 0.5, 10.0, random.random()))  # noqa: S311 - jitter

    async def _write(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        body = {"status": {key: status.get(key) for key in STATUS_KEYS}}
        path = f"/apis/{API_GROUP}/{API_VERSION}/namespaces/{namespace}/{PLURAL}/{name}/status"
        try:
            await request_json(self.api, "PATCH", path, body, content_type="application/merge-patch+json")
        except NotFound:
            return True  # deleted meanwhile: nothing to report on
        except FieldsDropped as e:
            # Written, but the server dropped fields the CRD does not declare: a schema bug, not a retry.
            if self._once.first("dropped", *e.fields):
                self.log.error("status_fields_dropped", gpuscaler=f"{namespace}/{name}", fields=e.fields)
            return True
        except Forbidden as e:
            self._forbidden("status_write_forbidden", e)
            return True  # the next change tries again
        except KubeError as e:
            if self._once.first("write", namespace, name, str(e.status)):
                self.log.warning("status_write_failed", gpuscaler=f"{namespace}/{name}", error=str(e))
            return not e.retryable
        self._once.forget("write", namespace, name, "0")
        self.written += 1
        return True


EVENT_REPORTING_CONTROLLER: Final = "gpuscale.io/decider"


@dataclass
class EventLimiter:
    """client-go's event correlator, in short: an Event identical to one recorded in
    the last ``dedupe_s`` is dropped, and each object has a token bucket (``burst``
    Events, one more every ``refill_s``) so a flapping GPUScaler cannot flood the API server."""

    burst: int = 25
    refill_s: float = 300.0
    dedupe_s: float = 600.0
    max_objects: int = 10_000
    _tokens: dict[tuple[str, str], tuple[float, float]] = field(default_factory=dict)
    _seen: dict[tuple[Any, ...], float] = field(default_factory=dict)

    def admit(self, key: tuple[str, str], event: EventSpec, now: float) -> str:
        """ "recorded" (go ahead), "duplicate" or "rate_limited"."""
        signature = (*key, event.type, event.reason, event.message)
        last = self._seen.get(signature)
        if last is not None and now - last < self.dedupe_s:
            return "duplicate"
        tokens, at = self._tokens.get(key, (float(self.burst), now))
        tokens = min(float(self.burst), tokens + (now - at) / self.refill_s)
        if tokens < 1.0:
            self._tokens[key] = (tokens, now)
            return "rate_limited"
        self._tokens[key] = (tokens - 1.0, now)
        self._seen[signature] = now
        if len(self._seen) > self.max_objects or len(self._tokens) > self.max_objects:
            self._prune(now)
        return "recorded"

    def _prune(self, now: float) -> None:
        self._seen = {k: t for k, t in self._seen.items() if now - t < self.dedupe_s}
        full = self.burst * self.refill_s
        self._tokens = {k: v for k, v in self._tokens.items() if now - v[1] < full}


@dataclass(frozen=True, slots=True)
class _QueuedEvent:
    namespace: str
    name: str
    uid: str
    event: EventSpec


class EventWriter(_Background):
    """Records Events on GPUScalers in the background: best effort, leader only,
    rate-limited per object, a bounded queue that drops the oldest."""

    def __init__(
        self,
        api: ApiClient,
        *,
        count: Callable[[str], None] = lambda result: None,
        identity: str = "",
        is_leader: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,  # the limiter's: a wall clock set back would starve it
        limiter: EventLimiter | None = None,
        max_queue: int = 1000,
    ) -> None:
        super().__init__("event_writer")
        self.api = api
        self.count = count
        self.identity = identity
        self.is_leader = is_leader
        self.clock = clock
        self.limiter = limiter or EventLimiter()
        self._queue: deque[_QueuedEvent] = deque()
        self._max_queue = max_queue

    def record(self, namespace: str, name: str, uid: str, events: Sequence[EventSpec]) -> None:
        for event in events:
            if len(self._queue) >= self._max_queue:
                self._queue.popleft()
                self.count("dropped")
            self._queue.append(_QueuedEvent(namespace, name, uid, event))
        self._wake.set()

    async def _drain(self, stop: asyncio.Event) -> None:
        while self._queue and not stop.is_set():
            await self._write(self._queue.popleft())

    async def _write(self, queued: _QueuedEvent) -> None:
        if not self.is_leader():
            self.count("dropped")
            return
        verdict = self.limiter.admit((queued.namespace, queued.name), queued.event, self.clock())
        if verdict != "recorded":
            self.count(verdict)
            return
        event, name = queued.event, f"{queued.namespace}/{queued.name}"
        ref = ScaleTargetRef(f"{API_GROUP}/{API_VERSION}", KIND, queued.name, queued.namespace)
        try:
            await record_event(
                self.api,
                ref,
                event.reason,
                event.message,
                event.type,
                uid=queued.uid,
                reporting_instance=self.identity,
                reporting_controller=EVENT_REPORTING_CONTROLLER,
                action=event.action,
            )
        except Forbidden as e:
            self.count("failed")
            self._forbidden("event_write_forbidden", e)
            return
        except KubeError as e:
            self.count("failed")
            if self._once.first("failed", queued.namespace, queued.name):
                self.log.warning("event_write_failed", gpuscaler=name, error=str(e))
            return
        self._once.forget("failed", queued.namespace, queued.name)
        self.count("recorded")

    def idle(self) -> bool:
        return not self._queue


def _targets(
    objects: Mapping[str, Any] | None, what: str, default_kind: str | None
) -> Iterator[tuple[WorkloadKey, str]]:
    """(target, who) for each object's ``spec.scaleTargetRef``."""
    for item in (objects or {}).get("items") or []:
        meta = item.get("metadata") or {}
        ref = (item.get("spec") or {}).get("scaleTargetRef") or {}
        kind = ref.get("kind") or default_kind
        if kind and ref.get("name") and meta.get("namespace"):
            yield (
                WorkloadKey(meta["namespace"], kind, ref["name"]),
                f"{what} {meta['namespace']}/{meta.get('name')}",
            )


# Objects a page: each may hold 256 KiB of annotations, so one answer stays near 5 MiB, not the whole list.
CONFLICT_PAGE: Final = 20


class ConflictFinder:
    """Every ``interval_s``: HPAs and KEDA ScaledObjects that target a workload."""

    def __init__(
        self, api: ApiClient, apply: Callable[[dict[WorkloadKey, str]], None], interval_s: float
    ) -> None:
        self.api = api
        self.apply = apply
        self.interval_s = interval_s
        self._once = OncePerKey()
        self.log = get_logger(component="conflict_finder")

    async def check(self) -> None:
        hpas = await self._pairs(
            "/apis/autoscaling/v2/horizontalpodautoscalers", "HorizontalPodAutoscaler", None
        )
        try:
            scaled = await self._pairs(
                "/apis/keda.sh/v1alpha1/scaledobjects", "KEDA ScaledObject", "Deployment"
            )
        except NotFound:
            scaled = []  # KEDA is not installed
        found = dict(hpas)
        for key, who in scaled:
            found.setdefault(key, who)  # an HPA's name wins
        self.apply(found)

    async def _pairs(self, path: str, what: str, default_kind: str | None) -> list[tuple[WorkloadKey, str]]:
        """(target, who) of every object at ``path``, read a page at a time: only the pairs are kept."""
        pairs: list[tuple[WorkloadKey, str]] = []
        await each_page(
            self.api, path, lambda page: pairs.extend(_targets(page, what, default_kind)), limit=CONFLICT_PAGE
        )
        return pairs

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.check()
                self._once.forget("failed")
            except KubeError as e:
                if self._once.first("failed"):
                    self.log.warning("conflict_check_failed", error=str(e))
            await sleep_unless_stopped(stop, self.interval_s)
