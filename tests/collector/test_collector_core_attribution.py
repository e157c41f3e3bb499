"""The pure core: device → pod mapping, per-process split, workloads, batch."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from gpuscale.wire import UNSET, EngineSignals, GpuOwner, PodEngine, WorkloadRef
from gpuscale_collector.core.attribution import Attribution, build_batch, owners_of, pids_to_resolve
from gpuscale_collector.core.cgroup import CgroupIdentity
from gpuscale_collector.core.devices import (
    ContainerRef,
    DeviceAssignment,
    canonical_device_id,
    owners_by_device,
)
from gpuscale_collector.core.readings import DeviceReading, ProcessReading
from gpuscale_collector.core.workloads import (
    NeedReplicaSet,
    OwnerRef,
    PodInfo,
    replica_set_workload,
    resolve_workload,
)

GPU0 = "GPU-11111111-2222-3333-4444-555555555555"
GPU1 = "GPU-66666666-7777-8888-9999-000000000000"
MIG_NEW = "MIG-aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"


def gpu(
    uuid: str = GPU0, *, processes: tuple[ProcessReading, ...] | None = None, **kw: object
) -> DeviceReading:
    return DeviceReading(uuid=uuid, index=0, model="H100", util=50.0, processes=processes, **kw)  # type: ignore[arg-type]  # test helper passes optional fields through


def assign(
    pod: str, container: str, *ids: str, ns: str = "default", resource: str = "nvidia.com/gpu"
) -> DeviceAssignment:
    return DeviceAssignment(ns, pod, container, resource, ids)


def pod(uid: str, name: str, *, ns: str = "default", containers: dict[str, str] | None = None) -> PodInfo:
    return PodInfo(uid=uid, namespace=ns, name=name, containers=containers)


@dataclass(frozen=True)
class Case:
    name: str
    reading: DeviceReading
    assignments: tuple[DeviceAssignment, ...] = ()
    pids: dict[int, CgroupIdentity] = field(default_factory=dict)
    pods: tuple[PodInfo, ...] = ()
    workloads: dict[tuple[str, str], WorkloadRef] = field(default_factory=dict)
    expected: tuple[
        tuple[str, str, str, float | None, float | None], ...
    ] = ()  # (pod, container, workload, sm, fb)


CASES = [
    Case("no holders, no processes", gpu(), expected=()),
    Case(
        "whole GPU to one container, workload resolved",
        gpu(),
        assignments=(assign("bert-7d9f-x", "server", GPU0), assign("other", "c", GPU1)),
        workloads={("default", "bert-7d9f-x"): WorkloadRef("Deployment", "bert")},
        expected=(("bert-7d9f-x", "server", "Deployment/bert", None, None),),
    ),
    Case(
        "unresolved workload falls back to the pod",
        gpu(),
        assignments=(assign("solo", "main", GPU0),),
        expected=(("solo", "main", "Pod/solo", None, None),),
    ),
    Case(
        "MIG device by its new-style id",
        gpu(MIG_NEW, mig_parent=GPU0, mig_gi=1, mig_ci=0),
        assignments=(assign("m1", "c", MIG_NEW, resource="nvidia.com/mig-1g.10gb"),),
        expected=(("m1", "c", "Pod/m1", None, None),),
    ),
    Case(
        "MIG device by its old-style id",
        gpu(MIG_NEW, mig_parent=GPU0, mig_gi=2, mig_ci=0),
        assignments=(assign("m2", "c", f"MIG-{GPU0}/2/0", resource="nvidia.com/mig-3g.40gb"),),
        expected=(("m2", "c", "Pod/m2", None, None),),
    ),
    Case(
        "other resources are not GPUs",
        gpu(),
        assignments=(assign("x", "c", GPU0, resource="example.com/fpga"),),
        expected=(),
    ),
    Case(
        "time-sliced replicas of one GPU, split per process",
        gpu(
            processes=(
                ProcessReading(pid=10, fb_used_mib=1000.0, sm_util=30.0),
                ProcessReading(pid=11, fb_used_mib=500.0, sm_util=5.0),
                ProcessReading(pid=20, fb_used_mib=2000.0, sm_util=60.0),
                ProcessReading(pid=99, fb_used_mib=10.0, sm_util=1.0),  # a host process
            )
        ),
        assignments=(assign("a", "main", f"{GPU0}::0"), assign("b", "main", f"{GPU0}::1")),
        pids={
            10: CgroupIdentity("uid-a", "ca"),
            11: CgroupIdentity("uid-a", "ca"),
            20: CgroupIdentity("uid-b", "cb"),
        },
        pods=(pod("uid-a", "a", containers={"ca": "main"}), pod("uid-b", "b", containers={"cb": "main"})),
        expected=(("a", "main", "Pod/a", 35.0, 1500.0), ("b", "main", "Pod/b", 60.0, 2000.0)),
    ),
    Case(
        "a holder with no process on the GPU reads as idle",
        gpu(processes=(ProcessReading(pid=10, fb_used_mib=100.0, sm_util=20.0),)),
        assignments=(assign("a", "main", GPU0), assign("b", "main", GPU0)),
        pids={10: CgroupIdentity("uid-a", "ca")},
        pods=(pod("uid-a", "a", containers={"ca": "main"}), pod("uid-b", "b")),
        expected=(("a", "main", "Pod/a", 20.0, 100.0), ("b", "main", "Pod/b", 0.0, 0.0)),
    ),
    Case(
        "process of a pod that pod-resources does not list (MPS without device ids)",
        gpu(processes=(ProcessReading(pid=10, fb_used_mib=100.0, sm_util=None),)),
        pids={10: CgroupIdentity("uid-c", "cc")},
        pods=(pod("uid-c", "c", ns="ml", containers={"cc": "worker"}),),
        expected=(("c", "worker", "Pod/c", None, 100.0),),
    ),
    Case(
        "container name from the pod's only holder when the API gave no statuses",
        gpu(processes=(ProcessReading(pid=10, fb_used_mib=100.0, sm_util=10.0),)),
        assignments=(assign("a", "main", GPU0),),
        pids={10: CgroupIdentity("uid-a", "unknown-cid")},
        pods=(pod("uid-a", "a"),),
        expected=(("a", "main", "Pod/a", 10.0, 100.0),),
    ),
    Case(
        "process of an unknown pod uid is not published",
        gpu(processes=(ProcessReading(pid=10, fb_used_mib=100.0, sm_util=10.0),)),
        pids={10: CgroupIdentity("uid-zzz", None)},
        expected=(),
    ),
    Case(
        "holders are not called idle while a pod process is unplaced (no API yet)",
        gpu(processes=(ProcessReading(pid=10, fb_used_mib=100.0, sm_util=20.0),)),
        assignments=(assign("a", "main", GPU0), assign("b", "main", GPU0)),
        pids={10: CgroupIdentity("uid-a", "ca")},
        expected=(("a", "main", "Pod/a", None, None), ("b", "main", "Pod/b", None, None)),
    ),
    Case(
        "summed sm_util is capped at 100",
        gpu(processes=(ProcessReading(10, 1.0, 80.0), ProcessReading(11, 1.0, 70.0))),
        pids={10: CgroupIdentity("uid-a", None), 11: CgroupIdentity("uid-a", None)},
        pods=(pod("uid-a", "a"),),
        expected=(("a", "", "Pod/a", 100.0, 2.0),),
    ),
]


def summary(owners: tuple[GpuOwner, ...]) -> tuple[tuple[str, str, str, float | None, float | None], ...]:
    return tuple(
        (o.pod, o.container, f"{o.workload.kind}/{o.workload.name}", o.sm_util, o.fb_used_mib) for o in owners
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_owners_of(case: Case) -> None:
    attribution = Attribution(
        device_holders=owners_by_device(case.assignments),
        pid_identity=case.pids,
        pods_by_uid={p.uid: p for p in case.pods},
        workloads=case.workloads,
    )
    assert summary(owners_of(case.reading, attribution)) == case.expected


def test_owner_carries_pod_uid_when_known() -> None:
    attribution = Attribution(
        device_holders=owners_by_device([assign("a", "main", GPU0)]), pods_by_uid={"uid-a": pod("uid-a", "a")}
    )
    (owner,) = owners_of(gpu(), attribution)
    assert owner.pod_uid == "uid-a"


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [(f"{GPU0}::3", GPU0), (GPU0, GPU0), (MIG_NEW, MIG_NEW), (f"MIG-{GPU0}/1/0", f"MIG-{GPU0}/1/0")],
)
def test_canonical_device_id(raw: str, canonical: str) -> None:
    assert canonical_device_id(raw) == canonical


def test_owners_by_device_lists_each_container_once() -> None:
    mapping = owners_by_device(
        [assign("a", "c", f"{GPU0}::0", f"{GPU0}::1"), assign("b", "c", f"{GPU0}::2"), assign("a", "c", GPU1)]
    )
    assert mapping == {
        GPU0: (ContainerRef("default", "a", "c"), ContainerRef("default", "b", "c")),
        GPU1: (ContainerRef("default", "a", "c"),),
    }


def test_lost_gpu_publishes_no_values_and_no_owners() -> None:
    lost = DeviceReading(uuid=GPU0, index=3, model="H100", util=99.0, health="GpuIsLost")
    batch = build_batch("n", 1.0, 1, 1.0, [lost], Attribution(owners_by_device([assign("a", "c", GPU0)])))
    (sample,) = batch.gpus
    assert sample.health == "GpuIsLost"
    assert (sample.util, sample.fb_used_mib, sample.power_w, sample.owners) == (None, None, None, ())


def test_backend_owners_pass_through() -> None:
    owner = GpuOwner("ns", "p", "c", "u", WorkloadRef("StatefulSet", "db"))
    batch = build_batch("n", 1.0, 7, 0.5, [gpu(owners=(owner,))], Attribution())
    assert batch.gpus[0].owners == (owner,)
    assert (batch.node, batch.seq, batch.interval_s) == ("n", 7, 0.5)


def test_engine_signals_travel_once_per_pod_however_many_gpus_it_holds() -> None:
    llm = GpuOwner("ns", "llm-0", "c", "uid-llm-0", WorkloadRef("Deployment", "llm"))
    plain = GpuOwner("ns", "bert-0", "c", "uid-bert-0", WorkloadRef("Deployment", "bert"))
    signals = EngineSignals("vllm", requests_waiting=3.0)
    engines = {("ns", "llm-0"): signals, ("ns", "gone-0"): EngineSignals("vllm")}
    readings = [gpu(owners=(llm,)), gpu(GPU1, owners=(llm,)), gpu(GPU1, owners=(plain,))]
    batch = build_batch("n", 1.0, 7, 0.5, readings, Attribution(engines=engines))
    assert batch.engines == (PodEngine("uid-llm-0", signals),)
    assert all(o.engine is UNSET for g in batch.gpus for o in g.owners)
    assert build_batch("n", 1.0, 8, 0.5, readings, Attribution()).engines is UNSET
    # A pod whose uid is not known yet gets none: an empty uid would name every such pod.
    unknown = GpuOwner("ns", "llm-0", "c", "", WorkloadRef("Deployment", "llm"))
    assert (
        build_batch("n", 1.0, 9, 0.5, [gpu(owners=(unknown,))], Attribution(engines=engines)).engines is UNSET
    )


def test_pids_to_resolve() -> None:
    readings = [
        gpu(processes=(ProcessReading(1, None, None),)),
        gpu(GPU1),
        gpu(processes=(ProcessReading(2, None, None),)),
    ]
    assert pids_to_resolve(readings) == {1, 2}


# --- workloads ---------------------------------------------------------------

RS = OwnerRef("ReplicaSet", "bert-7d9f")


@pytest.mark.parametrize(
    ("name", "owners", "rs_owners", "expected"),
    [
        ("bare pod", (), {}, WorkloadRef("Pod", "p")),
        ("statefulset", (OwnerRef("StatefulSet", "db"),), {}, WorkloadRef("StatefulSet", "db")),
        ("replicaset not fetched yet", (RS,), {}, NeedReplicaSet("default", "bert-7d9f")),
        (
            "deployment via replicaset",
            (RS,),
            {("default", "bert-7d9f"): WorkloadRef("Deployment", "bert")},
            WorkloadRef("Deployment", "bert"),
        ),
        ("bare replicaset", (RS,), {("default", "bert-7d9f"): None}, WorkloadRef("ReplicaSet", "bert-7d9f")),
        (
            "non-controller ref only",
            (OwnerRef("ConfigMap", "x", controller=False), OwnerRef("Job", "j")),
            {},
            WorkloadRef("Job", "j"),
        ),
        (
            "several refs, none controller",
            (OwnerRef("A", "a", False), OwnerRef("B", "b", False)),
            {},
            WorkloadRef("Pod", "p"),
        ),
    ],
)
def test_resolve_workload(
    name: str,
    owners: tuple[OwnerRef, ...],
    rs_owners: dict[tuple[str, str], WorkloadRef | None],
    expected: object,
) -> None:
    assert resolve_workload(PodInfo("u", "default", "p", owners), rs_owners) == expected, name


def test_replica_set_workload() -> None:
    assert replica_set_workload((OwnerRef("Deployment", "bert"),)) == WorkloadRef("Deployment", "bert")
    assert replica_set_workload(()) is None
