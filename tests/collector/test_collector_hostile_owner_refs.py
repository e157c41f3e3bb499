"""A tenant's pod whose ownerReferences name a controller the wire cannot carry.

Kubernetes checks an ownerReference's kind and name only for being non-empty
(apimachinery's validateOwnerReference): a pod may name a controller kind of 64+
characters or a name of 254+. The collector used to put that straight into the
batch; the aggregator then refused the whole GPU entry (KindName <= 63 characters,
ObjectName <= 253), and with it every other owner of a shared (time-sliced, MPS)
GPU: another team's pod lost its samples because of a field this team wrote."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from gpuscale import codec
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import WindowConfig
from gpuscale_collector.core.attribution import Attribution, build_batch
from gpuscale_collector.core.cgroup import CgroupIdentity
from gpuscale_collector.core.devices import DeviceAssignment, owners_by_device
from gpuscale_collector.core.readings import DeviceReading, ProcessReading
from gpuscale_collector.core.workloads import WorkloadRef, resolve_workload
from gpuscale_collector.kube_pods import pod_info_of

NOW = 1_700_000_000.0
GPU0 = "GPU-11111111-2222-3333-4444-555555555555"


def pod_object(ns: str, name: str, uid: str, owner_kind: str, owner_name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": ns,
            "name": name,
            "uid": uid,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": owner_kind,
                    "name": owner_name,
                    "uid": "u-" + uid,
                    "controller": True,
                }
            ],
        },
        "status": {
            "podIP": "10.0.0.9",
            "conditions": [{"type": "Ready", "status": "True"}],
            "containerStatuses": [{"name": "main", "containerID": f"containerd://c-{uid}"}],
        },
    }


HOSTILE_OWNERS = {
    "kind of 64 characters": ("K" * 64, "x"),
    "name of 254 characters": ("Deployment", "n" * 254),
    "kind of 10,000 characters": ("\u00e9" * 10_000, "x"),
}


@pytest.mark.parametrize(("kind", "name"), list(HOSTILE_OWNERS.values()), ids=list(HOSTILE_OWNERS))
def test_a_hostile_owner_reference_costs_no_other_team_its_shared_gpu(kind: str, name: str) -> None:
    hostile = pod_info_of(pod_object("team-a", "evil-0", "uid-a", kind, name))
    victim = pod_info_of(pod_object("team-b", "llm-0", "uid-b", "StatefulSet", "llm"))
    workloads: dict[tuple[str, str], WorkloadRef] = {}
    for info in (hostile, victim):
        ref = resolve_workload(info, {})
        assert isinstance(ref, WorkloadRef)
        workloads[(info.namespace, info.name)] = ref
    # One GPU, time-sliced between the two teams' pods.
    reading = DeviceReading(
        uuid=GPU0,
        index=0,
        model="H100",
        util=70.0,
        fb_used_mib=3000.0,
        fb_free_mib=77000.0,
        processes=(ProcessReading(10, 1000.0, 20.0), ProcessReading(20, 2000.0, 50.0)),
    )
    attribution = Attribution(
        device_holders=owners_by_device(
            (
                DeviceAssignment("team-a", "evil-0", "main", "nvidia.com/gpu", (f"{GPU0}::0",)),
                DeviceAssignment("team-b", "llm-0", "main", "nvidia.com/gpu", (f"{GPU0}::1",)),
            )
        ),
        pid_identity={10: CgroupIdentity("uid-a", "c-uid-a"), 20: CgroupIdentity("uid-b", "c-uid-b")},
        pods_by_uid={hostile.uid: hostile, victim.uid: victim},
        workloads=workloads,
    )
    batch = build_batch("node-a", NOW, 1, 1.0, [reading], attribution)

    agg = Aggregator(WindowConfig(window_s=30.0))
    result = agg.ingest(codec.encode(batch), NOW, subject_node="node-a")
    assert result.status == "accepted"
    assert result.rejected_gpus == (), [e.detail for _, e in result.rejected_gpus]
    seen = {(m.namespace, m.kind, m.name): [p.pod for p in m.pods] for m in agg.snapshot(NOW + 0.5)}
    assert seen.get(("team-b", "StatefulSet", "llm")) == ["llm-0"], seen


def test_a_tenant_with_many_containers_on_a_shared_gpu_costs_no_other_team_its_samples() -> None:
    """A pod holding one time-sliced replica whose 300 containers each run a process on
    the GPU (NVIDIA_VISIBLE_DEVICES set in each container: the toolkit honours it by
    default) made 301 owners: past the wire's 256 the aggregator refused the GPU entry
    whole, the other team's holder with it. The device plugin's holders come first."""
    n = 300
    hostile = pod_info_of(pod_object("team-a", "evil-0", "uid-a", "StatefulSet", "evil"))
    hostile = dataclasses.replace(hostile, containers={f"c{i}": f"side{i}" for i in range(n)})
    victim = pod_info_of(pod_object("team-b", "llm-0", "uid-b", "StatefulSet", "llm"))
    reading = DeviceReading(
        uuid=GPU0,
        index=0,
        model="H100",
        util=70.0,
        fb_used_mib=3000.0,
        fb_free_mib=77000.0,
        processes=(ProcessReading(20, 2000.0, 50.0), *(ProcessReading(100 + i, 1.0, 0.0) for i in range(n))),
    )
    attribution = Attribution(
        device_holders=owners_by_device(
            (
                DeviceAssignment("team-a", "evil-0", "side0", "nvidia.com/gpu", (f"{GPU0}::0",)),
                DeviceAssignment("team-b", "llm-0", "main", "nvidia.com/gpu", (f"{GPU0}::1",)),
            )
        ),
        pid_identity={
            20: CgroupIdentity("uid-b", "c-uid-b"),
            **{100 + i: CgroupIdentity("uid-a", f"c{i}") for i in range(n)},
        },
        pods_by_uid={hostile.uid: hostile, victim.uid: victim},
        workloads={
            ("team-a", "evil-0"): WorkloadRef("StatefulSet", "evil"),
            ("team-b", "llm-0"): WorkloadRef("StatefulSet", "llm"),
        },
    )
    batch = build_batch("node-a", NOW, 1, 1.0, [reading], attribution)
    agg = Aggregator(WindowConfig(window_s=30.0))
    result = agg.ingest(codec.encode(batch), NOW, subject_node="node-a")
    assert result.rejected_gpus == (), [e.detail for _, e in result.rejected_gpus]
    seen = {(m.namespace, m.kind, m.name): [p.pod for p in m.pods] for m in agg.snapshot(NOW + 0.5)}
    assert seen.get(("team-b", "StatefulSet", "llm")) == ["llm-0"], seen
