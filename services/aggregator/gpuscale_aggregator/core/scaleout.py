"""Scale-out: several aggregator instances, each workload owned by exactly one.

The problem: collectors publish per NODE (``gpuscale.v1.samples.<node>``) and a
workload's pods span nodes, so no split of the node subjects (queue group or
subject-mapping partition on the node token) gives one instance all of a
workload's pods. A per-workload subject is needed somewhere. Options weighed:

1. Collectors publish per-workload sub-batches: cheapest at run time, but it
   changes the v1 wire contract (subjects and batch shape) that other teams
   consume — needs the lead's approval, so not done here.
2. Every instance receives every batch and keeps the workloads whose hash
   falls in its share: no NATS mechanism at all (a home-made sharding layer),
   and every instance pays to decode the whole fleet's batches.
3. (chosen) Two stages, both on NATS' own mechanisms:

   - *split*: every instance joins the queue group ``gpuscale-aggregator-split``
     on ``gpuscale.v1.samples.>``; NATS hands each node batch to exactly one of
     them, which validates it (node token check included) and re-publishes
     it as one sub-batch per workload (same v1 batch shape, same node, ts and
     seq; only that workload's GPU owners) on
     ``gpuscale.v1.aggregator.wsamples.<ns>.<kind>.<name>``;
   - *own*: the NATS server's deterministic subject mapping
     (:func:`gpuscale.subjects.aggregator_partition_mapping`) rewrites that subject to
     ``gpuscale.v1.aggregator.part.<p>.<ns>.<kind>.<name>`` with
     ``p = partition(N, ns, kind, name)``; instance ``i`` of ``N``
     (``--partition i/N``) subscribes to ``...part.<i>.>`` and so sees every
     pod of its workloads and nothing else. Ordering is checked per
     (node, workload), since one node batch yields several sub-batches
     with the same seq.
   - *replay*: a stream ``GPUSCALE_AGGREGATOR_PARTS`` captures the mapped
     ``...part.>`` subjects (max age = window); instance ``i`` replays only
     ``...part.<i>.>``.

   Costs: each batch is decoded twice (split + own) and the sub-batches
   travel through NATS again, so the fleet needs ~2× the CPU of one
   unpartitioned instance for the same load, but it scales out across
   instances and processes. Changing N needs the same N in the server
   mapping (a config reload) and in every instance, which is why it is a
   deploy-time setting (one StatefulSet, ``--partition $(ordinal)/N``). An
   instance that dies leaves its partition unpublished until it restarts
   (and replays its window); the split stage has no such gap.

The subjects, the queue group, the stream and the server mapping are declared
in :mod:`gpuscale.subjects` (``aggregator_*``).
"""

from __future__ import annotations

from msgspec.structs import replace

from gpuscale.subjects import WorkloadKey
from gpuscale.wire import GpuOwner, SampleBatch


def split_by_workload(batch: SampleBatch) -> dict[WorkloadKey, SampleBatch]:
    """One sub-batch per workload: the GPUs it holds, with only its owners."""
    grouped: dict[WorkloadKey, list[tuple[int, GpuOwner]]] = {}
    for position, gpu in enumerate(batch.gpus):
        for owner in gpu.owners:
            key = WorkloadKey(owner.namespace, owner.workload.kind, owner.workload.name)
            grouped.setdefault(key, []).append((position, owner))
    out: dict[WorkloadKey, SampleBatch] = {}
    for key, entries in grouped.items():
        by_gpu: dict[int, list[GpuOwner]] = {}
        for position, owner in entries:
            by_gpu.setdefault(position, []).append(owner)
        gpus = tuple(
            replace(batch.gpus[position], owners=tuple(owners)) for position, owners in by_gpu.items()
        )
        out[key] = SampleBatch(batch.node, batch.ts, batch.seq, batch.interval_s, gpus)
    return out
