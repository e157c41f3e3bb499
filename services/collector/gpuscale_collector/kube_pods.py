"""The pods of this node and their workloads, from the Kubernetes API.

Watches only this node's pods (field selector ``spec.nodeName=<node>``),
resuming from the last resourceVersion and relisting on 410 Gone, and
caches each ReplicaSet's owner (ReplicaSet → Deployment) so a pod costs one
ReplicaSet read in its lifetime. Plain JSON through :mod:`.kubeapi` (not
kubernetes-asyncio: the collector's memory budget).
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuscale.aio import sleep_unless_stopped
from gpuscale.logging import get_logger
from gpuscale.wire import WorkloadRef
from gpuscale_collector.core.cgroup import container_id_of_status
from gpuscale_collector.core.engines import SCRAPE_ANNOTATIONS
from gpuscale_collector.core.workloads import (
    NeedReplicaSet,
    OwnerRef,
    PodInfo,
    replica_set_workload,
    resolve_workload,
)
from gpuscale_collector.kubeapi import ApiStatus, ConfigError, KubeApi, load_config

WATCH_TIMEOUT_S = 240


def _owners(meta: Mapping[str, Any]) -> tuple[OwnerRef, ...]:
    return tuple(
        OwnerRef(
            kind=str(r.get("kind", "")), name=str(r.get("name", "")), controller=bool(r.get("controller"))
        )
        for r in meta.get("ownerReferences") or ()
        if isinstance(r, Mapping)
    )


def pod_info_of(pod: Mapping[str, Any]) -> PodInfo:
    """A Pod object (JSON) → what the collector keeps."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    containers: dict[str, str] = {}
    for cs in [*(status.get("containerStatuses") or ()), *(status.get("initContainerStatuses") or ())]:
        if isinstance(cs, Mapping) and cs.get("containerID"):
            containers[container_id_of_status(str(cs["containerID"]))] = str(cs.get("name", ""))
    ready = None
    for condition in status.get("conditions") or ():
        if isinstance(condition, Mapping) and condition.get("type") == "Ready":
            ready = condition.get("status") == "True"
    notes = meta.get("annotations") or {}
    annotations = (
        {k: str(v) for k, v in notes.items() if k in SCRAPE_ANNOTATIONS} if isinstance(notes, Mapping) else {}
    )
    return PodInfo(
        uid=str(meta.get("uid") or ""),
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        owners=_owners(meta),
        containers=containers,
        ready=ready,
        ip=str(status.get("podIP") or ""),
        annotations=annotations or None,
    )


class NodePods:
    """Live view of this node's pods: uid → PodInfo and (ns, pod) → workload
    (each pod's IP and scrape annotations too: the engine scraper's targets)."""

    def __init__(self, node: str, kubeconfig: Path | None) -> None:
        self.node = node
        self.kubeconfig = kubeconfig
        self.pods_by_uid: dict[str, PodInfo] = {}
        self.workloads: dict[tuple[str, str], WorkloadRef] = {}
        self._rs_owners: dict[tuple[str, str], WorkloadRef | None] = {}
        self._api: KubeApi | None = None
        self._log = get_logger(component="kube_pods", node=node)
        self.synced = asyncio.Event()

    def _selector(self) -> dict[str, str]:
        return {"fieldSelector": f"spec.nodeName={self.node}"}

    async def run(self, stop: asyncio.Event) -> None:
        """List + watch until ``stop``; every failure backs off and relists."""
        delay = 0.5
        while not stop.is_set():
            try:
                if self._api is None:
                    self._api = KubeApi(load_config(self.kubeconfig))
                rv = await self._relist()
                delay = 0.5
                await self._watch(rv, stop)
                continue
            except asyncio.CancelledError:
                raise
            except ConfigError as e:
                self._log.error("pod_watch_config_error", error=str(e))
            except ApiStatus as e:
                if e.status == 410:
                    self._log.info("pod_watch_expired_relisting")
                    continue
                self._log.warning("pod_watch_failed", status=e.status, reason=e.reason, retry_in_s=delay)
            except Exception as e:  # noqa: BLE001 - the API may fail in any way; we back off and relist
                self._log.warning("pod_watch_failed", error=f"{type(e).__name__}: {e}", retry_in_s=delay)
            await sleep_unless_stopped(stop, delay * (1 + random.random()))  # noqa: S311 - jitter, not crypto
            delay = min(delay * 2, 30.0)

    async def close(self) -> None:
        if self._api is not None:
            await self._api.close()
            self._api = None

    async def _relist(self) -> str:
        assert self._api is not None
        result = await self._api.get("/api/v1/pods", self._selector())
        self.pods_by_uid = {}
        for pod in result.get("items") or ():
            await self._upsert(pod_info_of(pod))
        self._refresh_workloads()
        self.synced.set()
        self._log.info("pods_listed", pods=len(self.pods_by_uid))
        return str((result.get("metadata") or {}).get("resourceVersion") or "")

    async def _watch(self, resource_version: str, stop: asyncio.Event) -> None:
        assert self._api is not None
        params = {
            **self._selector(),
            "resourceVersion": resource_version,
            "timeoutSeconds": str(WATCH_TIMEOUT_S),
            "allowWatchBookmarks": "true",
        }
        events = self._api.watch("/api/v1/pods", params, read_timeout_s=WATCH_TIMEOUT_S + 30).__aiter__()
        stopper = asyncio.ensure_future(stop.wait())
        nxt: asyncio.Future[Any] | None = None
        try:
            while not stop.is_set():
                nxt = asyncio.ensure_future(events.__anext__())
                done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    return
                try:
                    event = nxt.result()
                except StopAsyncIteration:
                    return  # the server closed the watch: relist (cheap for one node)
                await self._apply(event)
        finally:
            stopper.cancel()
            if nxt is not None and not nxt.done():
                # The generator is "running" until its cancelled read has ended: closed
                # before, it raises instead of hanging up the response.
                nxt.cancel()
                await asyncio.wait({nxt})
                if not nxt.cancelled():
                    nxt.exception()  # retrieved: the stop wins over what the read ended with
            await events.aclose()  # type: ignore[attr-defined]  # an async generator

    async def _apply(self, event: Mapping[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if kind == "BOOKMARK" or not isinstance(obj, Mapping) or not isinstance(obj.get("metadata"), Mapping):
            return
        info = pod_info_of(obj)
        if kind == "DELETED":
            self.pods_by_uid.pop(info.uid, None)
        else:
            await self._upsert(info)
        self._refresh_workloads()

    async def _upsert(self, info: PodInfo) -> None:
        self.pods_by_uid[info.uid] = info
        result = resolve_workload(info, self._rs_owners)
        if isinstance(result, NeedReplicaSet):
            await self._fetch_replica_set(result)

    async def _fetch_replica_set(self, need: NeedReplicaSet) -> None:
        assert self._api is not None
        path = f"/apis/apps/v1/namespaces/{quote(need.namespace, safe='')}/replicasets/{quote(need.name, safe='')}"
        try:
            rs = await self._api.get(path)
        except ApiStatus as e:
            if e.status != 404:
                raise
            self._rs_owners[(need.namespace, need.name)] = None
            return
        self._rs_owners[(need.namespace, need.name)] = replica_set_workload(_owners(rs.get("metadata") or {}))

    def _refresh_workloads(self) -> None:
        workloads: dict[tuple[str, str], WorkloadRef] = {}
        live_rs: set[tuple[str, str]] = set()
        for info in self.pods_by_uid.values():
            result = resolve_workload(info, self._rs_owners)
            if isinstance(result, WorkloadRef):
                workloads[(info.namespace, info.name)] = result
            for ref in info.owners:
                if ref.kind == "ReplicaSet":
                    live_rs.add((info.namespace, ref.name))
        # Forget ReplicaSets no pod here uses any more (bounded cache).
        self._rs_owners = {k: v for k, v in self._rs_owners.items() if k in live_rs}
        self.workloads = workloads
