"""The pods of this node and their workloads, from the Kubernetes API.

Watches only this node's pods (field selector ``spec.nodeName=<node>``),
resuming from the last resourceVersion and relisting on 410 Gone, and
caches each ReplicaSet's owner (ReplicaSet → Deployment) so a pod costs one
ReplicaSet read in its lifetime. kubernetes_asyncio is imported here only.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path
from typing import Any

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

WATCH_TIMEOUT_S = 240


def pod_info_of(pod: Any) -> PodInfo:
    """A kubernetes-asyncio V1Pod → what the collector keeps."""
    meta = pod.metadata
    owners = tuple(
        OwnerRef(kind=r.kind, name=r.name, controller=bool(r.controller)) for r in meta.owner_references or ()
    )
    containers: dict[str, str] = {}
    status = pod.status
    for cs in [*(status.container_statuses or ()), *(status.init_container_statuses or ())] if status else ():
        if cs.container_id:
            containers[container_id_of_status(cs.container_id)] = cs.name
    ready = None
    for condition in (status.conditions or ()) if status else ():
        if condition.type == "Ready":
            ready = condition.status == "True"
    annotations = {k: v for k, v in (meta.annotations or {}).items() if k in SCRAPE_ANNOTATIONS}
    return PodInfo(
        uid=meta.uid or "",
        namespace=meta.namespace,
        name=meta.name,
        owners=owners,
        containers=containers,
        ready=ready,
        ip=(status.pod_ip or "") if status else "",
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
        self._api: Any = None
        self._log = get_logger(component="kube_pods", node=node)
        self.synced = asyncio.Event()

    async def run(self, stop: asyncio.Event) -> None:
        """List + watch until ``stop``; every failure backs off and relists."""
        from kubernetes_asyncio.client import ApiException  # lazy import: lazy: sim mode has no API

        from gpuscale.kube import new_api_client  # lazy import: imports kubernetes_asyncio

        delay = 0.5
        while not stop.is_set():
            try:
                if self._api is None:
                    self._api = await new_api_client(self.kubeconfig)
                rv = await self._relist()
                delay = 0.5
                await self._watch(rv, stop)
            except asyncio.CancelledError:
                raise
            except ApiException as e:
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

    def _core(self) -> Any:
        from kubernetes_asyncio import client  # lazy import: see run()

        return client.CoreV1Api(self._api)

    async def _relist(self) -> str:
        result = await self._core().list_pod_for_all_namespaces(field_selector=f"spec.nodeName={self.node}")
        self.pods_by_uid = {}
        for pod in result.items:
            await self._upsert(pod_info_of(pod))
        self._refresh_workloads()
        self.synced.set()
        self._log.info("pods_listed", pods=len(self.pods_by_uid))
        return str(result.metadata.resource_version or "")

    async def _watch(self, resource_version: str, stop: asyncio.Event) -> None:
        from kubernetes_asyncio import watch  # lazy import: see run()

        w = watch.Watch()
        stream = w.stream(
            self._core().list_pod_for_all_namespaces,
            field_selector=f"spec.nodeName={self.node}",
            resource_version=resource_version,
            timeout_seconds=WATCH_TIMEOUT_S,
            allow_watch_bookmarks=True,
        )
        stopper = asyncio.create_task(stop.wait())
        try:
            async with stream:
                while not stop.is_set():
                    nxt = asyncio.ensure_future(stream.__anext__())
                    done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                    if nxt not in done:
                        nxt.cancel()
                        return
                    try:
                        event = nxt.result()
                    except StopAsyncIteration:
                        return  # the server closed the watch: relist (cheap for one node)
                    await self._apply(event)
        finally:
            stopper.cancel()

    async def _apply(self, event: dict[str, Any]) -> None:
        kind = event.get("type")
        obj = event.get("object")
        if kind == "BOOKMARK" or obj is None or not hasattr(obj, "metadata"):
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
        from kubernetes_asyncio import client  # lazy import: see run()
        from kubernetes_asyncio.client import ApiException  # lazy import: see run()

        try:
            rs = await client.AppsV1Api(self._api).read_namespaced_replica_set(need.name, need.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
            self._rs_owners[(need.namespace, need.name)] = None
            return
        owners = tuple(
            OwnerRef(kind=r.kind, name=r.name, controller=bool(r.controller))
            for r in rs.metadata.owner_references or ()
        )
        self._rs_owners[(need.namespace, need.name)] = replica_set_workload(owners)

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
