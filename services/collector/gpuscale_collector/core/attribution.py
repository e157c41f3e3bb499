"""Readings + who holds what → the wire samples of one tick.

Ownership from pod-resources (devices) merged with NVML processes (shared GPUs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from gpuscale.wire import (
    HEALTH_OK,
    MAX_OWNERS_PER_GPU,
    UNSET,
    EngineSignals,
    GpuOwner,
    GpuSample,
    PodEngine,
    SampleBatch,
    UnsetType,
    WorkloadRef,
)
from gpuscale_collector.core.cgroup import CgroupIdentity
from gpuscale_collector.core.devices import ContainerRef, holders_of
from gpuscale_collector.core.readings import DeviceReading
from gpuscale_collector.core.workloads import PodInfo


@dataclass(frozen=True)
class Attribution:
    """Everything known about the node's pods at one tick."""

    device_holders: Mapping[str, tuple[ContainerRef, ...]] = field(default_factory=dict)
    pid_identity: Mapping[int, CgroupIdentity] = field(default_factory=dict)
    pods_by_uid: Mapping[str, PodInfo] = field(default_factory=dict)
    workloads: Mapping[tuple[str, str], WorkloadRef] = field(default_factory=dict)
    # (namespace, pod) → the pod's inference-server gauges scraped lately
    engines: Mapping[tuple[str, str], EngineSignals] = field(default_factory=dict)


@dataclass
class _Share:
    sm_util: float | None = None
    fb_used_mib: float | None = None


def _add(a: float | None, b: float | None) -> float | None:
    if b is None:
        return a
    return b if a is None else a + b


def _process_shares(
    reading: DeviceReading, attribution: Attribution, holders: tuple[ContainerRef, ...]
) -> tuple[dict[ContainerRef, _Share], bool]:
    """Per-container sums, and whether every pod process on the GPU was placed."""
    shares: dict[ContainerRef, _Share] = {}
    complete = True
    for proc in reading.processes or ():
        identity = attribution.pid_identity.get(proc.pid)
        if identity is None:
            continue  # not in a pod (a host process, or the PID is gone)
        pod = attribution.pods_by_uid.get(identity.pod_uid)
        if pod is None:
            complete = False  # a pod we know nothing about (yet): no name to publish
            continue
        ref = ContainerRef(pod.namespace, pod.name, _container_name(pod, identity, holders))
        share = shares.setdefault(ref, _Share())
        share.sm_util = _add(share.sm_util, proc.sm_util)
        share.fb_used_mib = _add(share.fb_used_mib, proc.fb_used_mib)
    return shares, complete


def _container_name(pod: PodInfo, identity: CgroupIdentity, holders: tuple[ContainerRef, ...]) -> str:
    if identity.container_id is not None and pod.containers:
        name = pod.containers.get(identity.container_id)
        if name is not None:
            return name
    # Without the API's container statuses: the pod's only container holding this device.
    names = {h.container for h in holders if h.namespace == pod.namespace and h.pod == pod.name}
    return names.pop() if len(names) == 1 else ""


def owners_of(reading: DeviceReading, attribution: Attribution) -> tuple[GpuOwner, ...]:
    holders = holders_of(reading.device_ids(), attribution.device_holders)
    shares, complete = _process_shares(reading, attribution, holders)
    # A holder with no process of its own is idle only if every pod process was placed.
    processes_known = reading.processes is not None and complete
    # The device plugin's holders first; past the wire's bound the aggregator would refuse the
    # GPU entry whole (every team's pod on it), so processes of further containers are left out.
    order = (list(holders) + [ref for ref in shares if ref not in holders])[:MAX_OWNERS_PER_GPU]
    uid_by_pod = {(p.namespace, p.name): p.uid for p in attribution.pods_by_uid.values()}
    ready_by_pod = {(p.namespace, p.name): p.ready for p in attribution.pods_by_uid.values()}
    owners: list[GpuOwner] = []
    for ref in order:
        share = shares.get(ref)
        if share is not None:
            sm = None if share.sm_util is None else min(share.sm_util, 100.0)
            fb = share.fb_used_mib
        elif processes_known:
            sm, fb = 0.0, 0.0  # holds the device, runs nothing on it
        else:
            sm, fb = None, None
        workload = attribution.workloads.get((ref.namespace, ref.pod)) or WorkloadRef("Pod", ref.pod)
        owners.append(
            GpuOwner(
                namespace=ref.namespace,
                pod=ref.pod,
                container=ref.container,
                pod_uid=uid_by_pod.get((ref.namespace, ref.pod), ""),
                workload=workload,
                sm_util=sm,
                fb_used_mib=fb,
                ready=ready_by_pod.get((ref.namespace, ref.pod)),
            )
        )
    return tuple(owners)


def to_sample(reading: DeviceReading, attribution: Attribution) -> GpuSample:
    if reading.health != HEALTH_OK:
        # A lost GPU publishes no values, never its last ones.
        return GpuSample(
            uuid=reading.uuid,
            index=reading.index,
            model=reading.model,
            util=None,
            mem_util=None,
            fb_used_mib=None,
            fb_free_mib=None,
            temp_c=None,
            power_w=None,
            sm_active=None,
            mig=reading.mig_parent,
            health=reading.health,
            owners=(),
        )
    owners = reading.owners if reading.owners is not None else owners_of(reading, attribution)
    return GpuSample(
        uuid=reading.uuid,
        index=reading.index,
        model=reading.model,
        util=reading.util,
        mem_util=reading.mem_util,
        fb_used_mib=reading.fb_used_mib,
        fb_free_mib=reading.fb_free_mib,
        temp_c=reading.temp_c,
        power_w=reading.power_w,
        sm_active=reading.sm_active,
        mig=reading.mig_parent,
        health=reading.health,
        owners=owners,
    )


def pod_engines(
    gpus: Sequence[GpuSample], engines: Mapping[tuple[str, str], EngineSignals]
) -> tuple[PodEngine, ...] | UnsetType:
    """The engine signals of the pods that hold the node's GPUs, once per pod (UNSET: none).
    A pod whose uid is not known yet has none: an empty uid would name every such pod."""
    if not engines:
        return UNSET
    found: dict[str, PodEngine] = {}
    for g in gpus:
        for o in g.owners:
            if (
                o.pod_uid
                and o.pod_uid not in found
                and (signals := engines.get((o.namespace, o.pod))) is not None
            ):
                found[o.pod_uid] = PodEngine(o.pod_uid, signals)
    return tuple(found.values()) or UNSET


def build_batch(
    node: str,
    ts: float,
    seq: int,
    interval_s: float,
    readings: Sequence[DeviceReading],
    attribution: Attribution,
) -> SampleBatch:
    gpus = tuple(to_sample(r, attribution) for r in readings)
    engines = pod_engines(gpus, attribution.engines)
    return SampleBatch(node=node, ts=ts, seq=seq, interval_s=interval_s, gpus=gpus, engines=engines)


def pids_to_resolve(readings: Sequence[DeviceReading]) -> set[int]:
    """PIDs whose cgroup the shell must read this tick."""
    return {p.pid for r in readings for p in (r.processes or ())}
