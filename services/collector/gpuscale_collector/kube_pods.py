"""The pods of this node and their workloads, from the Kubernetes API.

Each ReplicaSet's owner is cached, so a pod costs one ReplicaSet read in its lifetime."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

from gpuscale.kube.errors import BadRequest, NotFound
from gpuscale.kubewatch import Reflector
from gpuscale.logging import get_logger
from gpuscale.quoting import quoted
from gpuscale.wire import WorkloadRef
from gpuscale_collector.core.cgroup import container_id_of_status
from gpuscale_collector.core.engines import MAX_ANNOTATION_CHARS, SCRAPE_ANNOTATIONS
from gpuscale_collector.core.workloads import (
    NeedReplicaSet,
    OwnerRef,
    PodInfo,
    replica_set_workload,
    resolve_workload,
)
from gpuscale_collector.kubeapi import KubeApi, load_config


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
    # One character past the most: enough for scrape_target to refuse it, not 256 KiB a pod.
    annotations = (
        {k: str(v)[: MAX_ANNOTATION_CHARS + 1] for k, v in notes.items() if k in SCRAPE_ANNOTATIONS}
        if isinstance(notes, Mapping)
        else {}
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
        self.pods_by_uid: dict[str, PodInfo] = {}
        self.workloads: dict[tuple[str, str], WorkloadRef] = {}
        self._rs_owners: dict[tuple[str, str], WorkloadRef | None] = {}
        self._api = KubeApi(lambda: load_config(kubeconfig))
        self._reflector = Reflector(
            self._api,
            "/api/v1/pods",
            params={"fieldSelector": f"spec.nodeName={node}"},
            on_list=self._listed,
            on_event=self._event,
            what=f"pods on {node}",
        )
        self.synced = self._reflector.synced

    async def run(self, stop: asyncio.Event) -> None:
        """List + watch until ``stop``; every failure backs off and relists."""
        await self._reflector.run(stop)

    async def close(self) -> None:
        await self._api.close()

    async def _listed(self, pods: Sequence[Mapping[str, Any]]) -> None:
        self.pods_by_uid = {}
        for pod in pods:
            await self._upsert(pod_info_of(pod))
        self._refresh_workloads()

    async def _event(self, kind: str, obj: Mapping[str, Any]) -> None:
        if not isinstance(obj.get("metadata"), Mapping):
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
        path = f"/apis/apps/v1/namespaces/{quote(need.namespace, safe='')}/replicasets/{quote(need.name, safe='')}"
        try:
            rs = await self._api.get(path)
        except (NotFound, BadRequest) as e:
            # Gone, or a name the API server will not read (a pod's ownerReference may name anything):
            # the pod is its own workload. Raising here failed the list of every pod on the node.
            self._rs_owners[(need.namespace, need.name)] = None
            if isinstance(e, BadRequest):
                get_logger(component="node_pods", node=self.node).warning(
                    "replicaset_unreadable",
                    namespace=need.namespace,
                    name=quoted(need.name, 100),
                    error=str(e)[:200],
                )
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
