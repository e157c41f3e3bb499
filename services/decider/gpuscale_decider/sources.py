"""Where the decider reads replicas from and keeps its state.

Replica source: the decider re-reads the target's scale subresource on each
evaluation, reusing a read for at most ``--scale-cache`` seconds
(:class:`KubeReplicaSource`). That is one GET per workload per second at
most: right for tens to hundreds of workloads. At thousands, an
informer-style watch of the targets feeding the same cache is what a
production controller should do instead; the interface is one method, so a
watch-fed source drops in. The benchmark uses :class:`StaticReplicaSource` to
measure the decider's own evaluation path without an API server.

State store: the recommendation history and scale events per workload
(:class:`gpuscale_decider.core.algorithm.ScalerState`) in a JetStream KV
bucket, so a restarted decider neither forgets a stabilization window nor
breaks a cooldown.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Protocol

from kubernetes_asyncio.client import ApiClient
from nats.js.errors import KeyNotFoundError
from nats.js.kv import KeyValue

from gpuscale.kube import ScaleClient, ScaleTargetRef
from gpuscale.subjects import WorkloadKey, escape_token
from gpuscale_decider.core.algorithm import ScalerState


class ReplicaSource(Protocol):
    async def replicas(self, ref: ScaleTargetRef, now: float) -> int:
        """The target's ``spec.replicas`` (raises gpuscale.kube.KubeError)."""
        ...

    def forget(self, ref: ScaleTargetRef) -> None:
        """Drop a cached read so the next call reads afresh."""
        ...


class StaticReplicaSource:
    """Replicas from a dict: tests without an API server and the benchmark."""

    def __init__(self, replicas: dict[tuple[str, str, str], int] | None = None, default: int = 1) -> None:
        self.counts = replicas or {}
        self.default = default

    async def replicas(self, ref: ScaleTargetRef, now: float) -> int:
        return self.counts.get((ref.namespace, ref.kind, ref.name), self.default)

    def set(self, ref: ScaleTargetRef, replicas: int) -> None:
        self.counts[(ref.namespace, ref.kind, ref.name)] = replicas

    def forget(self, ref: ScaleTargetRef) -> None:
        return None


@dataclass
class _Cached:
    replicas: int
    read_at: float


class KubeReplicaSource:
    """GET …/scale, reused for ``ttl_s``; concurrent callers share one request."""

    def __init__(self, api: ApiClient, ttl_s: float) -> None:
        self.client = ScaleClient(api)
        self.ttl_s = ttl_s
        self._cache: dict[ScaleTargetRef, _Cached] = {}
        self._inflight: dict[ScaleTargetRef, asyncio.Future[int]] = {}

    async def replicas(self, ref: ScaleTargetRef, now: float) -> int:
        cached = self._cache.get(ref)
        if cached is not None and now - cached.read_at < self.ttl_s:
            return cached.replicas
        inflight = self._inflight.get(ref)
        if inflight is not None:
            return await asyncio.shield(inflight)
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._inflight[ref] = future
        try:
            state = await self.client.get(ref)
        except BaseException as e:
            future.set_exception(e)
            future.exception()  # retrieved: callers that shared it re-raise it themselves
            raise
        finally:
            self._inflight.pop(ref, None)
        self._cache[ref] = _Cached(state.replicas, now)
        future.set_result(state.replicas)
        return state.replicas

    def forget(self, ref: ScaleTargetRef) -> None:
        self._cache.pop(ref, None)


def state_key(key: WorkloadKey) -> str:
    """``ns.Kind.name`` with each token escaped as subjects are; KV keys do not
    allow ``~``, so the escape mark becomes ``=`` (which escape_token itself
    never leaves bare), keeping the mapping one-to-one."""
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
