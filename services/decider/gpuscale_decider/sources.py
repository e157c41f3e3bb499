"""Where the decider reads scales and pods from and keeps its state: the scale
subresource (cached briefly), the pods behind a selector, and a KV bucket of
per-workload state so a restart keeps stabilization windows and cooldowns."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from typing import Final, Protocol

from kubernetes_asyncio.client import ApiClient
from nats.js import JetStreamContext
from nats.js.api import Header
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KV_OP, KV_PURGE, MSG_ROLLUP_SUBJECT, KeyValue

from gpuscale.clocks import due
from gpuscale.kube import ScaleClient, ScaleState, ScaleTargetRef
from gpuscale.subjects import WorkloadKey, desired_key, escape_token
from gpuscale_decider.core.replicas import Phase, PodView
from gpuscale_decider.core.state import ScalerState


class ScaleSource(Protocol):
    async def read(self, ref: ScaleTargetRef, now: float) -> ScaleState:
        """The target's scale subresource (raises gpuscale.kube.KubeError)."""

    def forget(self, ref: ScaleTargetRef) -> None:
        """Drop a cached read so the next call reads afresh."""


class PodSource(Protocol):
    def select(self, namespace: str, selector: str) -> tuple[PodView, ...] | None:
        """The pods matching ``selector`` (None: not listed yet)."""


class StaticScaleSource:
    """Scales from a dict (tests, the benchmark); a target's selector is ``app=<name>``."""

    def __init__(self, replicas: dict[tuple[str, str, str], int] | None = None, default: int = 1) -> None:
        self.counts = replicas or {}
        self.default = default

    async def read(self, ref: ScaleTargetRef, now: float) -> ScaleState:
        replicas = self.counts.get((ref.namespace, ref.kind, ref.name), self.default)
        return ScaleState(replicas, "1", f"app={ref.name}", replicas)

    def set(self, ref: ScaleTargetRef, replicas: int) -> None:
        self.counts[(ref.namespace, ref.kind, ref.name)] = replicas

    def forget(self, ref: ScaleTargetRef) -> None:
        return None


class StaticPods:
    """Pods by ``(namespace, selector)``; without an entry, ``app=<name>`` gets as
    many Running pods ``<name>-<i>`` as the scale source says."""

    def __init__(self, scales: StaticScaleSource | None = None) -> None:
        self.scales = scales
        self.pods: dict[tuple[str, str], tuple[PodView, ...]] = {}

    def set(self, namespace: str, selector: str, pods: Iterable[PodView]) -> None:
        self.pods[(namespace, selector)] = tuple(pods)

    def select(self, namespace: str, selector: str) -> tuple[PodView, ...] | None:
        found = self.pods.get((namespace, selector))
        if found is not None or self.scales is None or not selector.startswith("app="):
            return found
        name = selector.removeprefix("app=")
        count = next(
            (n for (ns, _, target), n in self.scales.counts.items() if ns == namespace and target == name),
            self.scales.default,
        )
        return tuple(PodView(f"{name}-{i}", Phase.RUNNING) for i in range(count))


class KubeScaleSource:
    """GET …/scale, reused for ``ttl_s``; concurrent callers share one request."""

    def __init__(self, api: ApiClient, ttl_s: float) -> None:
        self.client = ScaleClient(api)
        self.ttl_s = ttl_s
        self._cache: dict[ScaleTargetRef, tuple[ScaleState, float]] = {}  # scale, read at
        self._inflight: dict[ScaleTargetRef, asyncio.Future[ScaleState]] = {}

    async def read(self, ref: ScaleTargetRef, now: float) -> ScaleState:
        cached = self._cache.get(ref)
        if cached is not None and not due(cached[1], now, self.ttl_s):
            return cached[0]
        inflight = self._inflight.get(ref)
        if inflight is not None:
            return await asyncio.shield(inflight)
        future: asyncio.Future[ScaleState] = asyncio.get_running_loop().create_future()
        self._inflight[ref] = future
        try:
            scale = await self.client.get(ref)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: callers that shared it re-raise it themselves
            raise
        finally:
            self._inflight.pop(ref, None)
        self._cache[ref] = (scale, now)
        future.set_result(scale)
        return scale

    def forget(self, ref: ScaleTargetRef) -> None:
        self._cache.pop(ref, None)


def state_key(key: WorkloadKey) -> str:
    """``ns.Kind.name``, tokens escaped as subjects are but with ``=`` for ``~``
    (not allowed in KV keys, and never left bare by escape_token): one-to-one."""
    return ".".join(escape_token(t).replace("~", "=") for t in (key.namespace, key.kind, key.name))


class StateStore(Protocol):
    async def load(self, key: WorkloadKey) -> ScalerState | None: ...

    async def save(self, key: WorkloadKey, state: ScalerState) -> None: ...


class MemoryStateStore:
    def __init__(self) -> None:
        self.states: dict[WorkloadKey, ScalerState] = {}

    async def load(self, key: WorkloadKey) -> ScalerState | None:
        return self.states.get(key)

    async def save(self, key: WorkloadKey, state: ScalerState) -> None:
        self.states[key] = state


class KvStateStore:
    """One KV entry per workload, JSON (readable with ``nats kv get``)."""

    def __init__(self, kv: KeyValue) -> None:
        self.kv = kv

    async def load(self, key: WorkloadKey) -> ScalerState | None:
        try:
            entry = await self.kv.get(state_key(key))
        except KeyNotFoundError:
            return None
        if entry is None or not entry.value:
            return None
        try:
            return ScalerState.from_dict(json.loads(entry.value))
        except ValueError:
            return None  # a damaged entry: start afresh rather than crash

    async def save(self, key: WorkloadKey, state: ScalerState) -> None:
        await self.kv.put(state_key(key), json.dumps(state.to_dict(), separators=(",", ":")).encode())


# A retired entry's purge marker stays this long, so that the actuator's watch sees its count go.
MARKER_KEEP_S: Final = 600.0


class Retirement:
    """The desired count and state of a workload no GPUScaler targets any more, removed in two
    steps: a purge marker at once (the actuator drops the count), the marker MARKER_KEEP_S later.
    Kept, every target one team ever named holds bytes until the full buckets refuse every
    other team's new workloads (JetStream's KV discards new keys, not old ones)."""

    def __init__(self, js: JetStreamContext, desired_bucket: str, state_bucket: str) -> None:
        self.js = js
        self.buckets = (desired_bucket, state_bucket)
        # key -> when its markers were written and where (stream, subject, sequence): oldest first.
        self.markers: dict[WorkloadKey, tuple[float, list[tuple[str, str, int]]]] = {}

    async def retire(self, key: WorkloadKey, now: float) -> None:
        written = []
        for bucket, name in zip(self.buckets, (desired_key(key), state_key(key)), strict=True):
            subject = f"$KV.{bucket}.{name}"
            ack = await self.js.publish(subject, headers={KV_OP: KV_PURGE, Header.ROLLUP: MSG_ROLLUP_SUBJECT})
            written.append((f"KV_{bucket}", subject, ack.seq))
        self.markers.pop(key, None)
        self.markers[key] = (now, written)

    async def sweep(self, now: float) -> None:
        """Remove the markers MARKER_KEEP_S old: up to their own sequence, never a later value."""
        while self.markers:
            key, (at, written) = next(iter(self.markers.items()))
            if now - at < MARKER_KEEP_S:
                return
            for stream, subject, seq in written:  # a purge up to a sequence may be repeated
                await self.js.purge_stream(stream, seq=seq + 1, subject=subject)
            del self.markers[key]  # only once removed: a refused purge is tried on the next tick
