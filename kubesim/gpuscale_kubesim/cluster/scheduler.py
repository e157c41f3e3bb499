"""The scheduler: a pending pod goes to the node with the most free GPUs that has enough
(``resources.limits["nvidia.com/gpu"]``, one by default), or stays Pending, Unschedulable;
one with scheduling gates stays Pending, SchedulingGated, until they are removed."""

from __future__ import annotations

import copy
from dataclasses import dataclass

from gpuscale_kubesim.apiserver.resources import ResourceDef, format_time
from gpuscale_kubesim.apiserver.store import Store

from .common import GPU_RESOURCE, Now, Obj, existing_transition, gpus_requested
from .events import Recorder

SCHEDULER = "default-scheduler"


@dataclass(frozen=True, slots=True)
class Placement:
    node: str
    gpus: list[int]


class Scheduler:
    def __init__(self, store: Store, rd_pod: ResourceDef, rd_node: ResourceDef, recorder: Recorder) -> None:
        self.store = store
        self.rd_pod = rd_pod
        self.rd_node = rd_node
        self.recorder = recorder

    def node_capacity(self) -> dict[str, int]:
        """GPUs each node can give (allocatable, else capacity)."""
        out = {}
        for node in self.store.raw_items(self.rd_node):
            status = node.get("status") or {}
            raw = (status.get("allocatable") or status.get("capacity") or {}).get(GPU_RESOURCE, 0)
            try:
                out[node["metadata"]["name"]] = int(raw)
            except (TypeError, ValueError):
                out[node["metadata"]["name"]] = 0
        return out

    def place(self, pod: Obj, capacity: dict[str, int], used: dict[str, set[int]]) -> Placement | None:
        """Where the pod goes (its GPUs marked used), or None: no node has room."""
        need = gpus_requested(pod)
        wanted_node = (pod.get("spec") or {}).get("nodeName")
        candidates = (
            [wanted_node]
            if wanted_node
            else sorted(capacity, key=lambda n: (-(capacity[n] - len(used[n])), n))
        )
        for node in candidates:
            if node not in capacity and not wanted_node:
                continue
            free = [i for i in range(capacity.get(node, 0)) if i not in used.setdefault(node, set())]
            if len(free) < need and not wanted_node:
                continue
            gpus = free[:need]
            used.setdefault(node, set()).update(gpus)  # a pod pinned to a node that does not exist has none
            return Placement(node, gpus)
        return None

    def bound(self, pod: Obj, placement: Placement, now: Now) -> None:
        meta = pod["metadata"]
        self.recorder.event(
            pod,
            "Scheduled",
            f"Successfully assigned {meta['namespace']}/{meta['name']} to {placement.node}",
            SCHEDULER,
            now.wall,
        )

    def unschedulable(self, pod: Obj, nodes: int, now: Now) -> None:
        message = f"0/{nodes} nodes are available: {nodes} Insufficient {GPU_RESOURCE}."
        since = existing_transition(pod, "PodScheduled", "False")
        if since is None:
            self.recorder.event(pod, "FailedScheduling", message, SCHEDULER, now.wall, "Warning")
        self._not_scheduled(pod, "Unschedulable", message, since, now)

    def gated(self, pod: Obj, now: Now) -> None:
        """A pod with scheduling gates is not tried (no event), and says why."""
        conditions = (pod.get("status") or {}).get("conditions") or []
        if not any(c.get("reason") == "SchedulingGated" for c in conditions if isinstance(c, dict)):
            message = "Scheduling is blocked due to non-empty scheduling gates"
            self._not_scheduled(pod, "SchedulingGated", message, None, now)

    def _not_scheduled(self, pod: Obj, reason: str, message: str, since: str | None, now: Now) -> None:
        new = copy.deepcopy(pod)
        new.setdefault("status", {})["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": since or format_time(now.wall),
            }
        ]
        new["status"]["phase"] = "Pending"
        self.store.put(self.rd_pod, new)
