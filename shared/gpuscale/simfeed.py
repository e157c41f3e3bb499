"""The simulated-GPU feed kube-sim serves and the collector's sim backend reads. Pure.

Owned here so that neither side imports the other."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

NODE_GPUS_PATH: Final = "/sim/v1/nodes/{node}/gpus"
DEFAULT_MODEL: Final = "NVIDIA H100 80GB HBM3"


def node_gpus_path(node: str) -> str:
    return NODE_GPUS_PATH.format(node=node)


class FeedError(ValueError):
    """A feed payload that does not follow the contract."""


def _number(doc: dict[str, Any], key: str, where: str, *, required: bool = False) -> float | None:
    value = doc.get(key)
    if value is None:
        if required:
            raise FeedError(f"{where}.{key} is required")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise FeedError(f"{where}.{key} must be a number")
    return float(value)


def _string(doc: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str) or (default is None and not value):
        raise FeedError(f"{where}.{key} must be a non-empty string")
    return value


@dataclass(frozen=True, slots=True)
class FeedWorkload:
    kind: str  # Deployment, StatefulSet, ReplicaSet, Pod
    name: str


@dataclass(frozen=True, slots=True)
class FeedOwner:
    """The pod (and container) that holds a GPU, with the workload that owns the pod."""

    namespace: str
    pod: str
    container: str
    pod_uid: str
    workload: FeedWorkload
    ready: bool | None = None  # None: unknown
    sm_util: float | None = None
    fb_used_mib: float | None = None

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "namespace": self.namespace,
            "pod": self.pod,
            "container": self.container,
            "pod_uid": self.pod_uid,
            "workload": {"kind": self.workload.kind, "name": self.workload.name},
            "ready": self.ready,
        }
        if self.sm_util is not None:
            doc["sm_util"] = self.sm_util
        if self.fb_used_mib is not None:
            doc["fb_used_mib"] = self.fb_used_mib
        return doc

    @classmethod
    def from_json(cls, doc: Any, where: str) -> FeedOwner:
        if not isinstance(doc, dict):
            raise FeedError(f"{where} must be an object")
        namespace = doc.get("namespace")
        pod = doc.get("pod")
        if not isinstance(namespace, str) or not namespace or not isinstance(pod, str) or not pod:
            raise FeedError(f"{where} needs namespace and pod")
        workload = doc.get("workload") or {}
        if not isinstance(workload, dict):
            raise FeedError(f"{where}.workload must be an object")
        ready = doc.get("ready")
        if ready is not None and not isinstance(ready, bool):
            raise FeedError(f"{where}.ready must be true, false or null")
        return cls(
            namespace=namespace,
            pod=pod,
            container=str(doc.get("container") or ""),
            pod_uid=str(doc.get("pod_uid") or ""),
            workload=FeedWorkload(str(workload.get("kind") or "Pod"), str(workload.get("name") or pod)),
            ready=ready,
            sm_util=_number(doc, "sm_util", where),
            fb_used_mib=_number(doc, "fb_used_mib", where),
        )


@dataclass(frozen=True, slots=True)
class FeedGpu:
    """One GPU as NVML would read it now."""

    index: int
    uuid: str
    model: str
    util: float
    mem_util: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_active: float | None = None
    owners: tuple[FeedOwner, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "model": self.model,
            "util": self.util,
            "mem_util": self.mem_util,
            "fb_used_mib": self.fb_used_mib,
            "fb_free_mib": self.fb_free_mib,
            "temp_c": self.temp_c,
            "power_w": self.power_w,
            "sm_active": self.sm_active,
            "owners": [o.to_json() for o in self.owners],
        }

    @classmethod
    def from_json(cls, doc: Any, where: str) -> FeedGpu:
        if not isinstance(doc, dict):
            raise FeedError(f"{where} must be an object")
        index = doc.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise FeedError(f"{where}.index must be a whole number >= 0")
        owners = doc.get("owners") or []
        if not isinstance(owners, list):
            raise FeedError(f"{where}.owners must be a list")
        return cls(
            index=index,
            uuid=_string(doc, "uuid", where, f"GPU-sim-{index}"),
            model=_string(doc, "model", where, DEFAULT_MODEL),
            util=_number(doc, "util", where) or 0.0,
            mem_util=_number(doc, "mem_util", where),
            fb_used_mib=_number(doc, "fb_used_mib", where),
            fb_free_mib=_number(doc, "fb_free_mib", where),
            temp_c=_number(doc, "temp_c", where),
            power_w=_number(doc, "power_w", where),
            sm_active=_number(doc, "sm_active", where),
            owners=tuple(FeedOwner.from_json(o, f"{where}.owners[{i}]") for i, o in enumerate(owners)),
        )


@dataclass(frozen=True, slots=True)
class NodeGpus:
    """The answer for one node: its GPUs at ``ts`` (the simulator's wall clock, unix seconds)."""

    node: str
    ts: float
    gpus: tuple[FeedGpu, ...]

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "ts": self.ts, "gpus": [g.to_json() for g in self.gpus]}

    @classmethod
    def from_json(cls, doc: Any) -> NodeGpus:
        if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
            raise FeedError("expected an object with a gpus list")
        node = doc.get("node", "")
        if not isinstance(node, str):
            raise FeedError("node must be a string")
        return cls(
            node=node,
            ts=_number(doc, "ts", "payload") or 0.0,
            gpus=tuple(FeedGpu.from_json(g, f"gpus[{i}]") for i, g in enumerate(doc["gpus"])),
        )
