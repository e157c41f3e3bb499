"""Scale-out: a split stage re-publishes each node batch per workload, and NATS subject
mapping routes each workload to the one instance (``--partition i/N``) that owns it.
Subjects, queue group, stream and mapping are in :mod:`gpuscale.subjects` (``aggregator_*``).
Purely computational."""

from __future__ import annotations

from msgspec.structs import replace

from gpuscale.subjects import WorkloadKey
from gpuscale.wire import GpuOwner, SampleBatch


def split_by_workload(batch: SampleBatch) -> dict[WorkloadKey, SampleBatch]:
    """One sub-batch per workload: the GPUs it holds, with only its owners."""
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
        )
        for key, by_gpu in grouped.items()
    }
