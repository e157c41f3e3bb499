"""The decider's Kubernetes side: GPUScaler list+watch, the pod watch, status
writes, and the search for other controllers (HPA, KEDA) on the same targets."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient

from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube import FieldsDropped, Forbidden, KubeError, NotFound, backoff_delay, request_json
from gpuscale.kubewatch import Reflector
from gpuscale.logging import OncePerKey, get_logger
from gpuscale.policy import (
    API_GROUP,
    API_VERSION,
    PLURAL,
    PolicyError,
    object_identity,
    parse_gpuscaler,
)
from gpuscale.policyfile import InvalidPolicy
from gpuscale.subjects import WorkloadKey
from gpuscale_decider.registry import Registry

# Status keys the decider owns: a merge patch sets the ones it leaves out to null.
STATUS_KEYS: Final = (
    "observedGeneration",
    "reference",
    "targets",
    "currentReplicas",
    "desiredReplicas",
    "currentMetrics",
    "lastScaleTime",
    "reason",
    "conditions",
)


def _identity(obj: Mapping[str, Any]) -> tuple[str, str]:
    return object_identity(obj)


def apply_object(decider: Registry, obj: Mapping[str, Any]) -> None:
    """An added or modified GPUScaler object."""
    status = obj.get("status") if isinstance(obj.get("status"), Mapping) else None
    try:
        scaler = parse_gpuscaler(obj)
    except PolicyError as e:
        ns, name = _identity(obj)
        decider.add_invalid(InvalidPolicy(ns, name, e, obj), status)
        return
    decider.upsert_policy(scaler, status)


class GPUScalerWatcher:
    """Every GPUScaler of the cluster, listed then watched, into the registry."""

    def __init__(self, api: ApiClient, registry: Registry) -> None:
        self.registry = registry
        path = f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}"
        self.reflector = Reflector(api, path, on_list=self._listed, on_event=self._event, what="gpuscalers")
        self.synced = self.reflector.synced

    async def run(self, stop: asyncio.Event) -> None:
        await self.reflector.run(stop)

    def _listed(self, items: Sequence[Mapping[str, Any]]) -> None:
        valid = []
        invalid = []
        statuses: dict[tuple[str, str], Mapping[str, Any]] = {}
        for obj in items:
            try:
                scaler = parse_gpuscaler(obj)
            except PolicyError as e:
                invalid.append(InvalidPolicy(*_identity(obj), e, obj))
                continue
            valid.append(scaler)
            if isinstance(obj.get("status"), Mapping):
                statuses[(scaler.namespace, scaler.name)] = obj["status"]
        self.registry.set_policies(valid, invalid, statuses)

    def _event(self, kind: str, obj: Mapping[str, Any]) -> None:
        if kind == "DELETED":
            self.registry.remove_policy(*_identity(obj))
        else:
            apply_object(self.registry, obj)


class StatusWriter:
    """Writes GPUScaler statuses in the background, latest per object wins."""

    def __init__(self, api: ApiClient, is_leader: Callable[[], bool] = lambda: True) -> None:
        self.api = api
        self.is_leader = is_leader
        self._pending: dict[tuple[str, str], dict[str, Any]] = {}
        self._wake = asyncio.Event()
        self._once = OncePerKey()
        self.written = 0
        self.log = get_logger(component="status_writer")

    def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
        self._pending[(namespace, name)] = status
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        attempt = 0
        stop_task = asyncio.create_task(stop.wait())
        try:
            while not stop.is_set():
                wake = asyncio.create_task(self._wake.wait())
                await asyncio.wait({wake, stop_task}, return_when=asyncio.FIRST_COMPLETED)
                wake.cancel()
                self._wake.clear()
                while self._pending and not stop.is_set():
                    (namespace, name), status = next(iter(self._pending.items()))
                    del self._pending[(namespace, name)]
                    if not self.is_leader():
                        continue
                    ok = await self._write(namespace, name, status)
                    if ok:
                        attempt = 0
                        continue
                    # keep the newest: put it back unless a newer one arrived meanwhile
                    self._pending.setdefault((namespace, name), status)
                    attempt += 1
                    await sleep_unless_stopped(stop, backoff_delay(attempt, 0.5, 10.0, random.random()))  # noqa: S311 - jitter
        finally:
            stop_task.cancel()

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
            if self._once.first("forbidden", e.missing_permission):
                self.log.error(
                    "status_write_forbidden", missing_permission=e.missing_permission, error=str(e)
                )
            return True  # retrying cannot grant RBAC; the next change tries again
        except KubeError as e:
            if self._once.first("write", namespace, name, str(e.status)):
                self.log.warning("status_write_failed", gpuscaler=f"{namespace}/{name}", error=str(e))
            return not e.retryable
        self._once.forget("write", namespace, name, "0")
        self.written += 1
        return True


def _other_controllers(
    hpas: Mapping[str, Any], scaled_objects: Mapping[str, Any] | None
) -> dict[WorkloadKey, str]:
    found: dict[WorkloadKey, str] = {}
    for item in hpas.get("items") or []:
        meta = item.get("metadata") or {}
        ref = (item.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("kind") and ref.get("name") and meta.get("namespace"):
            key = WorkloadKey(meta["namespace"], ref["kind"], ref["name"])
            found[key] = f"HorizontalPodAutoscaler {meta['namespace']}/{meta.get('name')}"
    for item in (scaled_objects or {}).get("items") or []:
        meta = item.get("metadata") or {}
        ref = (item.get("spec") or {}).get("scaleTargetRef") or {}
        if ref.get("name") and meta.get("namespace"):
            key = WorkloadKey(meta["namespace"], ref.get("kind") or "Deployment", ref["name"])
            found.setdefault(key, f"KEDA ScaledObject {meta['namespace']}/{meta.get('name')}")
    return found


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
        hpas = await request_json(self.api, "GET", "/apis/autoscaling/v2/horizontalpodautoscalers")
        try:
            scaled: Mapping[str, Any] | None = await request_json(
                self.api, "GET", "/apis/keda.sh/v1alpha1/scaledobjects"
            )
        except NotFound:
            scaled = None  # KEDA is not installed
        self.apply(_other_controllers(hpas, scaled))

    async def run(self, stop: asyncio.Event, first: Awaitable[Any] | None = None) -> None:
        if first is not None:
            await first
        while not stop.is_set():
            try:
                await self.check()
                self._once.forget("failed")
            except KubeError as e:
                if self._once.first("failed"):
                    self.log.warning("conflict_check_failed", error=str(e))
            await sleep_unless_stopped(stop, self.interval_s)
