"""Pod attribution through a real kubelet pod-resources gRPC server on a unix socket.

The server is grpc.aio with the generated PodResourcesLister servicer; the
collector runs its NVML path over a scripted device table.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from structlog.testing import capture_logs

from gpuscale.wire import WorkloadRef
from gpuscale_collector.core.workloads import PodInfo
from gpuscale_collector.podresources import api_pb2, api_pb2_grpc
from gpuscale_collector.podresources.client import PodResourcesClient, PodResourcesUnavailable

pytestmark = pytest.mark.integration

GPU0 = "GPU-0a0a0a0a-0000-0000-0000-000000000000"
GPU1 = "GPU-1b1b1b1b-0000-0000-0000-000000000000"
GPU2 = "GPU-2c2c2c2c-0000-0000-0000-000000000000"
MIG_A = "MIG-aaaaaaaa-1111-1111-1111-111111111111"
MIG_B = "MIG-bbbbbbbb-2222-2222-2222-222222222222"
UID_S1 = "11111111-aaaa-bbbb-cccc-000000000001"
UID_S2 = "11111111-aaaa-bbbb-cccc-000000000002"
CID_S1 = "c1" * 32
CID_S2 = "c2" * 32


class Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]  # generated base class is untyped
    def __init__(self) -> None:
        self.pods: list[api_pb2.PodResources] = []
        self.calls = 0

    async def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        return api_pb2.ListPodResourcesResponse(pod_resources=self.pods)


class PodsView:
    """Stands in for the collector's own pod-watch adapter (NodePods)."""

    def __init__(
        self, pods_by_uid: dict[str, PodInfo], workloads: dict[tuple[str, str], WorkloadRef]
    ) -> None:
        self.pods_by_uid = pods_by_uid
        self.workloads = workloads

    async def close(self) -> None:
        pass


def pod(name: str, ns: str, *containers: tuple[str, str, list[str]]) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=name,
        namespace=ns,
        containers=[
            api_pb2.ContainerResources(
                name=cname,
                devices=[api_pb2.ContainerDevices(resource_name=resource, device_ids=ids)],
                cpu_ids=[2, 3],
            )
            for cname, resource, ids in containers
        ],
    )


@pytest.fixture
async def kubelet(tmp_path: Path) -> AsyncIterator[tuple[Lister, Path]]:
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    socket.parent.mkdir()
    lister = Lister()
    server = grpc.aio.server()
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(lister, server)
    server.add_insecure_port(f"unix://{socket}")
    await server.start()
    try:
        yield lister, socket
    finally:
        await server.stop(None)


def owners(batch: Any) -> dict[str, list[tuple[str, str, str, float | None]]]:
    return {g.uuid: [(o.namespace, o.pod, o.container, o.sm_util) for o in g.owners] for g in batch.gpus}


async def test_client_reads_the_real_wire(kubelet: tuple[Lister, Path]) -> None:
    lister, socket = kubelet
    lister.pods = [
        pod("a", "default", ("main", "nvidia.com/gpu", [GPU0]), ("side", "example.com/nic", ["eth9"])),
    ]
    client = PodResourcesClient(socket)
    try:
        rows = await client.list()
    finally:
        await client.close()
    assert [(r.pod, r.container, r.resource_name, r.device_ids) for r in rows] == [
        ("a", "main", "nvidia.com/gpu", (GPU0,)),
        ("a", "side", "example.com/nic", ("eth9",)),
    ]


async def test_whole_gpu_mig_and_shared_gpu(
    kubelet: tuple[Lister, Path], fake_nvml: Any, kit: Any, proc_tree: Any
) -> None:
    lister, socket = kubelet
    fake_nvml.gpus = [
        kit.Gpu(GPU0),
        kit.Gpu(
            GPU1,
            gpm=True,
            migs=[
                kit.Mig(MIG_A, "NVIDIA H100 80GB HBM3 MIG 1g.10gb", gi=9, ci=0),
                kit.Mig(MIG_B, "NVIDIA H100 80GB HBM3 MIG 3g.40gb", gi=2, ci=0),
            ],
        ),
        kit.Gpu(
            GPU2,
            processes=[(501, 1024 * 1024 * 1024), (502, 512 * 1024 * 1024), (900, 0)],
            proc_util=[(501, 10**18, 30), (502, 10**18, 45)],
        ),
    ]
    lister.pods = [
        pod("bert-5d8f-abc", "ml", ("server", "nvidia.com/gpu", [GPU0])),
        pod("mig-new", "ml", ("worker", "nvidia.com/mig-1g.10gb", [MIG_A])),
        pod("mig-old", "ml", ("worker", "nvidia.com/mig-3g.40gb", [f"MIG-{GPU1}/2/0"])),
        pod("share-1", "ml", ("infer", "nvidia.com/gpu", [f"{GPU2}::0"])),
        pod("share-2", "ml", ("infer", "nvidia.com/gpu", [f"{GPU2}::1"])),
    ]
    us1 = UID_S1.replace("-", "_")
    proc_tree.add(
        501,
        f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{us1}.slice/cri-containerd-{CID_S1}.scope\n",
    )
    proc_tree.add(502, f"12:memory:/kubepods/pod{UID_S2}/{CID_S2}\n11:cpu:/kubepods/pod{UID_S2}/{CID_S2}\n")
    proc_tree.add(900, "0::/system.slice/nvidia-persistenced.service\n")
    settings = kit.settings(backend="nvml", pod_resources_socket=socket, proc_root=proc_tree.root)
    async with kit.started(settings) as collector:
        # What the pod watch would hold (its own adapter, tested against kube-sim elsewhere).
        collector.node_pods = PodsView(
            pods_by_uid={
                UID_S1: PodInfo(UID_S1, "ml", "share-1", containers={CID_S1: "infer"}),
                UID_S2: PodInfo(UID_S2, "ml", "share-2", containers={CID_S2: "infer"}),
            },
            workloads={("ml", "bert-5d8f-abc"): WorkloadRef("Deployment", "bert")},
        )
        first = await collector.tick(1_000.0)
        batch = await collector.tick(1_001.0)  # MIG utilization needs two GPM samples
    assert {g.uuid: g.health for g in first.gpus}[MIG_A] == "NoSampleYet"
    got = owners(batch)
    # NVML lists no process on these devices: their holders read as idle (sm_util 0).
    assert got[GPU0] == [("ml", "bert-5d8f-abc", "server", 0.0)]
    assert batch.gpus[0].owners[0].workload == WorkloadRef("Deployment", "bert")
    assert got[MIG_A] == [("ml", "mig-new", "worker", 0.0)]
    assert got[MIG_B] == [("ml", "mig-old", "worker", 0.0)]
    assert owners(first)[GPU2] == [("ml", "share-1", "infer", 30.0), ("ml", "share-2", "infer", 45.0)]
    # No new per-process sample in the second interval: unknown, not re-counted.
    assert got[GPU2] == [("ml", "share-1", "infer", None), ("ml", "share-2", "infer", None)]
    shared = next(g for g in batch.gpus if g.uuid == GPU2)
    assert [o.fb_used_mib for o in shared.owners] == [1024.0, 512.0]
    assert [o.pod_uid for o in shared.owners] == [UID_S1, UID_S2]
    assert {g.uuid: g.mig for g in batch.gpus}[MIG_A] == GPU1
    assert lister.calls == 1


async def test_socket_missing_no_owners_one_warning_then_picked_up(
    tmp_path: Path, fake_nvml: Any, kit: Any
) -> None:
    socket = tmp_path / "later" / "kubelet.sock"
    fake_nvml.gpus = [kit.Gpu(GPU0)]
    settings = kit.settings(backend="nvml", pod_resources_socket=socket, proc_root=tmp_path)
    async with kit.started(settings) as collector:
        with capture_logs() as logs:
            for i in range(12):  # two more refreshes with the socket still missing
                batch = await collector.tick(1_000.0 + i)
                assert batch.gpus[0].owners == ()
        warnings = [e for e in logs if e["event"] == "pod_resources_unavailable"]
        assert len(warnings) == 1
        assert warnings[0]["log_level"] == "warning"
        # The kubelet comes up: the next refresh finds it.
        socket.parent.mkdir()
        lister = Lister()
        lister.pods = [pod("late", "default", ("c", "nvidia.com/gpu", [GPU0]))]
        server = grpc.aio.server()
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(lister, server)
        server.add_insecure_port(f"unix://{socket}")
        await server.start()
        try:
            seen: list[Any] = []
            for i in range(5):
                seen.append((await collector.tick(2_000.0 + i)).gpus[0].owners)
            assert seen[-1]
            assert seen[-1][0].pod == "late"
        finally:
            await server.stop(None)


async def test_client_raises_unavailable_without_socket(tmp_path: Path) -> None:
    client = PodResourcesClient(tmp_path / "nope.sock")
    with pytest.raises(PodResourcesUnavailable, match="no socket"):
        await client.list()
