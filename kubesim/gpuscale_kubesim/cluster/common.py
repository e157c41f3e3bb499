"""What the cluster's roles share: the clock reading, pod state, owner references."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final, Protocol

from gpuscale_kubesim.apiserver.resources import ResourceDef

Obj = dict[str, Any]
GPU_RESOURCE: Final = "nvidia.com/gpu"
LOAD_ANNOTATION: Final = "sim.gpuscale.io/load"  # a workload's load profile, e.g. "step" or "constant:120"


@dataclass(frozen=True, slots=True)
class Now:
    """One reading of the clocks, taken once per pass and handed to every role.

    ``mono`` times the simulation (start-up and termination delays, load
    profiles); ``wall`` is what timestamps in objects say.
    """

    mono: float
    wall: float


@dataclass
class PodState:
    """What the kubelet knows about one pod."""

    node: str
    gpus: list[int]
    scheduled_at: float  # monotonic
    ready: bool = False
    started: bool = False  # its model loaded: its server may listen, Ready once it does
    terminating_since: float | None = None

    @property
    def serving(self) -> bool:
        return (self.ready or self.started) and self.terminating_since is None


@dataclass(frozen=True, slots=True)
class Owner:
    kind: str  # Deployment | StatefulSet | ReplicaSet | Pod
    name: str


def must(rd: ResourceDef | None) -> ResourceDef:
    if rd is None:
        raise RuntimeError("a built-in kind is missing from the registry")
    return rd


def hash_chars(data: Any, n: int = 10) -> str:
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).digest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(alphabet[b % len(alphabet)] for b in digest[:n])


def gpus_requested(pod: Obj) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(
            GPU_RESOURCE
        )
        try:
            total += int(value) if value is not None else 0
        except (TypeError, ValueError):
            continue
    return total or 1


def controller_uid(obj: Obj) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def owner_ref(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def invert(text: str) -> str:
    """A sort key that orders strings descending (newest first)."""
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def existing_transition(obj: Obj, type_: str, status: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == status:
            return str(cond.get("lastTransitionTime"))
    return None


def drop_zero(status: Obj, keep: tuple[str, ...] = ()) -> Obj:
    """Kubernetes omits zero counters from workload status (omitempty)."""
    return {k: v for k, v in status.items() if v not in (0, "") or k in keep}


class PodNetwork(Protocol):
    """Gives each pod its IP (the kubelet asks once per pod) and takes it back."""

    def address(self, pod: Obj) -> str: ...

    def release(self, uid: str) -> None: ...


class CountingNetwork:
    """10.244.0.0/16 addresses in order, as a cluster's pod CIDR hands them out;
    nothing listens on them."""

    def __init__(self) -> None:
        self._counter = 0

    def address(self, pod: Obj) -> str:
        self._counter += 1
        return f"10.244.{self._counter // 250}.{self._counter % 250 + 2}"

    def release(self, uid: str) -> None:
        return None
