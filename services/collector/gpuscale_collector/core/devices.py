"""Device → pod mapping from what the kubelet's pod-resources API lists."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True, slots=True)
class ContainerRef:
    """A container that holds a device, as pod-resources names it (no UID there)."""

    namespace: str
    pod: str
    container: str


@dataclass(frozen=True, slots=True)
class DeviceAssignment:
    """One row of pod-resources: a container and the device ids of one resource."""

    namespace: str
    pod: str
    container: str
    resource_name: str
    device_ids: tuple[str, ...]


def is_gpu_resource(resource_name: str) -> bool:
    return resource_name == GPU_RESOURCE or resource_name.startswith(MIG_RESOURCE_PREFIX)


def canonical_device_id(device_id: str) -> str:
    """The physical device behind a device-plugin id.

    The NVIDIA device plugin's time-slicing/MPS replicas are ``<uuid>::<n>``;
    all replicas of one GPU are that GPU. MIG ids (``MIG-<uuid>``,
    ``MIG-GPU-<uuid>/<gi>/<ci>``) and GPU UUIDs are kept as they are."""
    base, sep, _replica = device_id.partition("::")
    return base if sep else device_id


def owners_by_device(assignments: Iterable[DeviceAssignment]) -> dict[str, tuple[ContainerRef, ...]]:
    """Device id → the containers holding it, in first-seen order, without repeats.

    Several containers per device is the shared-GPU case (time-slicing, MPS)."""
    found: dict[str, list[ContainerRef]] = {}
    for a in assignments:
        if not is_gpu_resource(a.resource_name):
            continue
        ref = ContainerRef(a.namespace, a.pod, a.container)
        for raw in a.device_ids:
            holders = found.setdefault(canonical_device_id(raw), [])
            if ref not in holders:
                holders.append(ref)
    return {k: tuple(v) for k, v in found.items()}


def holders_of(
    device_ids: Iterable[str], mapping: Mapping[str, tuple[ContainerRef, ...]]
) -> tuple[ContainerRef, ...]:
    """Containers holding a device known under any of ``device_ids``."""
    out: list[ContainerRef] = []
    for device_id in device_ids:
        for ref in mapping.get(device_id, ()):
            if ref not in out:
                out.append(ref)
    return tuple(out)
