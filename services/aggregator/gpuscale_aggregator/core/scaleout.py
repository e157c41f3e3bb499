"""Scale-out: a split stage re-publishes each node batch per workload, and NATS subject
mapping routes each workload to the one instance (``--partition i/N``) that owns it.
Subjects, queue group, stream and mapping are in :mod:`gpuscale.subjects` (``aggregator_*``).
Purely computational."""

from __future__ import annotations

from collections.abc import Iterable

from msgspec.structs import replace

from gpuscale.subjects import WorkloadKey
from gpuscale.wire import UNSET, GpuOwner, PodEngine, SampleBatch, UnsetType


def split_by_workload(batch: SampleBatch) -> dict[WorkloadKey, SampleBatch]:
    """One sub-batch per workload: the GPUs it holds, with only its owners and their pods' engines."""
    grouped: dict[WorkloadKey, dict[int, list[GpuOwner]]] = {}
    for position, gpu in enumerate(batch.gpus):
        for owner in gpu.owners:
            key = WorkloadKey(owner.namespace, owner.workload.kind, owner.workload.name)
            grouped.setdefault(key, {}).setdefault(position, []).append(owner)
    return {
        key: SampleBatch(
            batch.node,
            batch.ts,
            batch.seq,
            batch.interval_s,
            tuple(replace(batch.gpus[position], owners=tuple(owners)) for position, owners in by_gpu.items()),
            _engines_of(batch.engines, by_gpu.values()),
        )
        for key, by_gpu in grouped.items()
    }


def _engines_of(
    engines: tuple[PodEngine, ...] | UnsetType, owners: Iterable[list[GpuOwner]]
) -> tuple[PodEngine, ...] | UnsetType:
    if not engines:
        return UNSET
    pods = {o.pod_uid for group in owners for o in group}
    return tuple(e for e in engines if e.pod_uid in pods) or UNSET
