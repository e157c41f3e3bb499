"""/metrics over HTTP: dcgm-exporter's names and labels, series that follow the pods."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.wire import GpuOwner, WorkloadRef
from gpuscale_collector.core.exposition import MigInfo
from gpuscale_collector.core.readings import DeviceReading

pytestmark = pytest.mark.integration

DCGM_NAMES = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_PROF_SM_ACTIVE",
)
LABELS = {
    "gpu",
    "UUID",
    "pci_bus_id",
    "device",
    "modelName",
    "Hostname",
    "DCGM_FI_DRIVER_VERSION",
    "container",
    "namespace",
    "pod",
}


class ScriptedBackend:
    """Our own backend interface, fed by the test."""

    name = "scripted"
    provides_owners = True

    def __init__(self) -> None:
        self.readings: list[DeviceReading] = []

    async def start(self) -> None:
        pass

    async def read(self) -> list[DeviceReading]:
        return list(self.readings)

    def mig_info(self) -> dict[str, MigInfo]:
        return {}

    async def close(self) -> None:
        pass


def owner(pod: str, sm: float | None = None, fb: float | None = None) -> GpuOwner:
    return GpuOwner(
        "ml", pod, "server", f"uid-{pod}", WorkloadRef("Deployment", "bert"), sm_util=sm, fb_used_mib=fb
    )


def reading(index: int, *owners: GpuOwner) -> DeviceReading:
    return DeviceReading(
        uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
        index=index,
        model="NVIDIA H100 80GB HBM3",
        util=80.0 + index,
        mem_util=30.0,
        fb_used_mib=1000.0,
        fb_free_mib=80559.0,
        temp_c=60.0,
        power_w=450.5,
        sm_active=64.0,
        owners=owners,
    )


async def scrape(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = await resp.text()
    return {f.name: f for f in text_string_to_metric_families(text)}


async def test_metrics_carry_dcgm_names_and_labels(kit: Any) -> None:
    backend = ScriptedBackend()
    backend.readings = [reading(0, owner("bert-a")), reading(1)]
    async with kit.running(kit.settings(node_name="gpu-node-7"), backend=backend) as rc:
        await kit.wait_for(lambda: rc.collector.last_batch is not None, what="a tick")
        families = await scrape(rc.url)
    for name in DCGM_NAMES:
        family = families[name]
        assert family.type == "gauge"
        assert len(family.samples) == 2, name
        for s in family.samples:
            assert set(s.labels) == LABELS, (name, s.labels)
    util = {s.labels["gpu"]: s for s in families["DCGM_FI_DEV_GPU_UTIL"].samples}
    assert util["0"].labels == {
        "gpu": "0",
        "UUID": "GPU-00000000-0000-0000-0000-000000000000",
        "pci_bus_id": "",  # this scripted backend reads no PCI address
        "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3",
        "Hostname": "gpu-node-7",
        "DCGM_FI_DRIVER_VERSION": "",
        "container": "server",
        "namespace": "ml",
        "pod": "bert-a",
    }
    assert util["0"].value == 80.0
    assert (util["1"].labels["pod"], util["1"].labels["namespace"], util["1"].labels["container"]) == (
        "",
        "",
        "",
    )
    assert families["DCGM_FI_DEV_GPU_UTIL"].documentation == "GPU utilization (in %)."
    assert {s.value for s in families["DCGM_FI_PROF_SM_ACTIVE"].samples} == {0.64}
    assert families["DCGM_FI_DEV_POWER_USAGE"].samples[0].value == 450.5
    # The collector's own counters are there too.
    assert families["gpuscale_collector_ticks"].samples[0].value >= 1
    assert "gpuscale_collector_buffer_dropped" in families
    assert "gpuscale_collector_tick_duration_seconds" in families


async def test_series_of_a_pod_that_went_away_disappear(kit: Any) -> None:
    backend = ScriptedBackend()
    backend.readings = [reading(0, owner("old", sm=40.0, fb=900.0), owner("other", sm=10.0, fb=100.0))]
    async with kit.running(kit.settings(), backend=backend) as rc:
        await kit.wait_for(lambda: rc.collector.last_batch is not None, what="a tick")
        before = await scrape(rc.url)
        assert sorted(s.labels["pod"] for s in before["DCGM_FI_DEV_GPU_UTIL"].samples) == ["old", "other"]
        assert {s.labels["pod"]: s.value for s in before["gpuscale_process_sm_util"].samples} == {
            "old": 40.0,
            "other": 10.0,
        }
        assert {s.labels["pod"]: s.value for s in before["gpuscale_process_fb_used_mib"].samples} == {
            "old": 900.0,
            "other": 100.0,
        }
        backend.readings = [reading(0, owner("new", sm=5.0))]
        seq = rc.collector.seq
        await kit.wait_for(lambda: rc.collector.seq > seq + 1, what="next tick")
        after = await scrape(rc.url)
    assert [s.labels["pod"] for s in after["DCGM_FI_DEV_GPU_UTIL"].samples] == ["new"]
    assert [s.labels["pod"] for s in after["gpuscale_process_sm_util"].samples] == ["new"]
    assert after["gpuscale_process_fb_used_mib"].samples == []
