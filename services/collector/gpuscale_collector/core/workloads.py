"""Pod → owning workload, from ownerReferences (pure; the shell fetches objects)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuscale.wire import WorkloadRef
from gpuscale.wire_limits import MAX_KIND_CHARS, MAX_NAME_CHARS


@dataclass(frozen=True, slots=True)
class OwnerRef:
    kind: str
    name: str
    controller: bool = True


@dataclass(frozen=True, slots=True)
class PodInfo:
    """What the collector keeps of a pod on its node."""

    uid: str
    namespace: str
    name: str
    owners: tuple[OwnerRef, ...] = ()
    # container id (no runtime:// prefix) → container name
    containers: Mapping[str, str] | None = None
    ready: bool | None = None  # the pod's Ready condition
    ip: str = ""  # status.podIP: where its inference server's metrics are scraped
    # The annotations that say where (core.engines.SCRAPE_ANNOTATIONS), no others.
    annotations: Mapping[str, str] | None = None


def controller_of(owners: Sequence[OwnerRef]) -> OwnerRef | None:
    """The managing controller: the ref with controller=true, else the only one. None also
    when its kind or name is longer than the wire carries (the API server checks them only for
    being non-empty): the pod is then its own workload, where a GPU entry naming that controller
    would be refused whole, with every other team's pod sharing the GPU."""
    ref = next((r for r in owners if r.controller), owners[0] if len(owners) == 1 else None)
    if ref is None or not (0 < len(ref.kind) <= MAX_KIND_CHARS and 0 < len(ref.name) <= MAX_NAME_CHARS):
        return None
    return ref


@dataclass(frozen=True, slots=True)
class NeedReplicaSet:
    """Resolution needs the ReplicaSet's own owner: fetch it, then ask again."""

    namespace: str
    name: str


def resolve_workload(
    pod: PodInfo, replica_set_owners: Mapping[tuple[str, str], WorkloadRef | None]
) -> WorkloadRef | NeedReplicaSet:
    """Pod → ReplicaSet → Deployment; StatefulSet (and any other controller) as is;
    a bare pod is its own workload (kind Pod). ``replica_set_owners`` maps
    (namespace, replicaset) to the ReplicaSet's controller, or None for a bare
    ReplicaSet (which is then the workload)."""
    ref = controller_of(pod.owners)
    if ref is None:
        return WorkloadRef("Pod", pod.name)
    if ref.kind != "ReplicaSet":
        return WorkloadRef(ref.kind, ref.name)
    key = (pod.namespace, ref.name)
    if key not in replica_set_owners:
        return NeedReplicaSet(pod.namespace, ref.name)
    owner = replica_set_owners[key]
    return owner if owner is not None else WorkloadRef("ReplicaSet", ref.name)


def replica_set_workload(owners: Sequence[OwnerRef]) -> WorkloadRef | None:
    """A ReplicaSet's controller as a workload (a Deployment), or None if it has none."""
    ref = controller_of(owners)
    return None if ref is None else WorkloadRef(ref.kind, ref.name)
