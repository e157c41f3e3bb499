"""dcgm-exporter's other default counters through the NVML backend, NVML scripted
at pynvml's function boundary with what a real H200 returned
(bench/results/nvml-h200-2026-11-26): its types, units and NOT_SUPPORTED errors."""

from __future__ import annotations

from typing import Any

import pynvml

from gpuscale.wire import SampleBatch
from gpuscale_collector.backends import nvml_api
from gpuscale_collector.backends.nvml import SLOW_EVERY_TICKS, XID_EVENTS_PER_TICK, NvmlBackend
from gpuscale_collector.core.attribution import Attribution, build_batch
from gpuscale_collector.core.exposition import XID_ERRORS, render
from gpuscale_collector.core.readings import DeviceReading

GPU0 = "GPU-fcb7ca97-bfcc-fefd-ace7-bc505d8b2d51"
GPU1 = "GPU-11111111-1111-1111-1111-111111111111"
MIB = 1024 * 1024


def h200(kit: Any, uuid: str = GPU0, **overrides: Any) -> Any:
    """The H200 under load as NVML described it: a lone PCIe card, so no NVLink."""
    values: dict[str, Any] = {
        "name": "NVIDIA H200",
        "util": 100,
        "mem_util": 22,
        "used_mib": 1170.8,  # v2's used; v1 said 1785.9 with the 615.1 MiB reserve in it
        "free_mib": 141985.1,
        "reserved_mib": 615.1,
        "temp_c": 56,
        "power_mw": 690_713,
        "gpm": True,
        "sm_active": 91.798,
        "graphics": 95.56,
        "nvlink": False,
    }
    values.update(overrides)
    return kit.Gpu(uuid, **values)


def started(fake: Any) -> tuple[NvmlBackend, list[str]]:
    errors: list[str] = []
    backend = NvmlBackend(on_error=errors.append)
    backend.start_sync()
    return backend, errors


def dcgm_values(reading: DeviceReading) -> dict[str, float]:
    assert reading.dcgm is not None
    return dict(reading.dcgm.values)


def test_an_h200_gives_every_default_counter_nvml_has_in_dcgm_exporters_units(
    fake_nvml: Any, kit: Any
) -> None:
    fake_nvml.gpus = [h200(kit)]
    backend, errors = started(fake_nvml)
    backend.read_sync()  # GPM needs two samples: the ratios come from the second tick
    (r,) = backend.read_sync()
    assert r.dcgm is not None
    assert (r.dcgm.pci_bus_id, r.dcgm.driver_version, r.dcgm.xid) == ("00000000:00:06.0", "999.99", 0)
    # FB_USED without the driver's reserve, as dcgm-exporter and nvidia-smi count it.
    assert (r.fb_used_mib, r.fb_free_mib) == (1170.8, 141985.1)
    assert dcgm_values(r) == {
        "DCGM_FI_DEV_SM_CLOCK": 1410.0,
        "DCGM_FI_DEV_MEM_CLOCK": 3201.0,
        "DCGM_FI_DEV_ENC_UTIL": 0.0,
        "DCGM_FI_DEV_DEC_UTIL": 0.0,
        "DCGM_FI_DEV_MEMORY_TEMP": 47.0,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 12_942_822.0,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0.0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0.0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0.0,
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0.0,  # passthrough: no vGPU licence to hold
        "DCGM_FI_DEV_FB_RESERVED": 615.1,
        # GPM's % as DCGM's 0-1 ratios, its MiB/s as bytes/s.
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.9556,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.89114,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.16119,
        "DCGM_FI_PROF_PCIE_TX_BYTES": round(1296.993 * MIB, 6),
        "DCGM_FI_PROF_PCIE_RX_BYTES": round(1219.704 * MIB, 6),
    }
    # No NVLink on a lone card: absent, and each refused field counted once.
    assert sorted(errors) == [
        "field:NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
        "field:NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
    ]


def test_nvlink_bandwidth_is_the_data_sent_and_received_over_all_links(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [kit.Gpu(GPU1, nvlink_kib=(1_000, 2_500))]
    backend, errors = started(fake_nvml)
    (r,) = backend.read_sync()
    assert dcgm_values(r)["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] == 3_500.0
    assert errors == []


def test_a_refused_counter_is_absent_counted_once_and_not_asked_again(fake_nvml: Any, kit: Any) -> None:
    refused = {
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetTotalEnergyConsumption",
        "nvmlDeviceGetEncoderUtilization",
        "NVML_FI_DEV_MEMORY_TEMP",  # a field of the batched field-values call
        "NVML_GPM_METRIC_ANY_TENSOR_UTIL",  # a metric of the batched GPM call
    }
    fake_nvml.gpus = [h200(kit, unsupported=refused)]
    backend, errors = started(fake_nvml)
    for _ in range(2 * SLOW_EVERY_TICKS + 1):
        (r,) = backend.read_sync()
    values = dcgm_values(r)
    for name in (
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEM_CLOCK",
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "DCGM_FI_DEV_ENC_UTIL",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    ):
        assert name not in values, name
    assert values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 0.9556  # the rest of the GPM call still served
    assert values["DCGM_FI_DEV_DEC_UTIL"] == 0.0
    assert fake_nvml.count("nvmlDeviceGetTotalEnergyConsumption", GPU0) == 1
    assert fake_nvml.count("nvmlDeviceGetEncoderUtilization", GPU0) == 1
    assert fake_nvml.count(f"nvmlDeviceGetClockInfo:{pynvml.NVML_CLOCK_SM}", GPU0) == 1
    assert fake_nvml.count(f"nvmlDeviceGetClockInfo:{pynvml.NVML_CLOCK_MEM}", GPU0) == 1
    assert sorted(e for e in errors if "NVLINK" not in e) == [
        "clock_mem",
        "clock_sm",
        "encoder_utilization",
        "field:NVML_FI_DEV_MEMORY_TEMP",
        "gpm:NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        "total_energy",
    ]


def test_slow_counters_are_read_every_few_ticks_and_served_between(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [h200(kit)]
    backend, _ = started(fake_nvml)
    served = []
    for tick in range(2 * SLOW_EVERY_TICKS):
        if tick == 1:
            fake_nvml.gpus[0].energy_mj += 690_713  # a second at 690 W
        served.append(dcgm_values(backend.read_sync()[0])["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"])
    assert fake_nvml.count("nvmlDeviceGetTotalEnergyConsumption", GPU0) == 2
    assert fake_nvml.count("nvmlDeviceGetRemappedRows", GPU0) == 2
    assert served[:SLOW_EVERY_TICKS] == [12_942_822.0] * SLOW_EVERY_TICKS
    assert served[SLOW_EVERY_TICKS:] == [12_942_822.0 + 690_713] * SLOW_EVERY_TICKS


def test_a_driver_without_memory_v2_serves_v1_used_and_no_reserved(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [h200(kit, unsupported={"nvmlDeviceGetMemoryInfo_v2"})]
    backend, errors = started(fake_nvml)
    for _ in range(3):
        (r,) = backend.read_sync()
    assert r.fb_used_mib == 1785.9  # v1: the reserve included, all this driver can say
    assert "DCGM_FI_DEV_FB_RESERVED" not in dcgm_values(r)
    assert errors.count("memory_v2") == 1
    assert fake_nvml.count("nvmlDeviceGetMemoryInfo_v2", GPU0) == 1


def test_an_xid_is_served_as_the_last_value_with_its_code_and_message(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [h200(kit), h200(kit, GPU1, pci_bus_id="00000000:00:07.0")]
    backend, _ = started(fake_nvml)
    assert [r.dcgm.xid for r in backend.read_sync() if r.dcgm] == [0, 0]
    fake_nvml.gpus[0].xids = [13, 79]
    readings = backend.read_sync()
    assert [r.dcgm.xid for r in readings if r.dcgm] == [79, 0]  # the other GPU unaffected
    assert [r.dcgm.xid for r in backend.read_sync() if r.dcgm] == [79, 0]  # it stays until the next
    batch = build_batch("node-a", 1.0, 1, 1.0, readings, Attribution())
    rows = render(batch, "node-a", dcgm={r.uuid: r.dcgm for r in readings if r.dcgm})
    xid = {dict(labels)["UUID"]: (dict(labels), v) for labels, v in rows[XID_ERRORS]}
    assert (xid[GPU0][0]["err_code"], xid[GPU0][0]["err_msg"], xid[GPU0][1]) == (
        "79",
        "GPU has fallen off the bus",
        79.0,
    )
    assert (xid[GPU1][0]["err_code"], xid[GPU1][0]["err_msg"], xid[GPU1][1]) == ("0", "No Error", 0.0)
    assert xid[GPU1][0]["pci_bus_id"] == "00000000:00:07.0"


def test_a_flood_of_xids_costs_a_bounded_number_of_waits_a_tick(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [h200(kit)]
    backend, _ = started(fake_nvml)
    backend.read_sync()
    fake_nvml.gpus[0].xids = [31] * 1000 + [48]
    fake_nvml.calls.clear()
    (r,) = backend.read_sync()
    assert fake_nvml.count("nvmlEventSetWait", GPU0) == XID_EVENTS_PER_TICK
    assert r.dcgm is not None
    assert r.dcgm.xid == 31


def test_a_vgpu_guest_with_a_licence_says_licensed(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [h200(kit, virtualization_mode=pynvml.NVML_GPU_VIRTUALIZATION_MODE_VGPU)]
    backend, _ = started(fake_nvml)
    (r,) = backend.read_sync()
    assert dcgm_values(r)["DCGM_FI_DEV_VGPU_LICENSE_STATUS"] == 1.0


def test_mig_devices_carry_their_parents_board_counters(fake_nvml: Any, kit: Any) -> None:
    migs = [kit.Mig("MIG-aaaa", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", gi=1, ci=0)]
    fake_nvml.gpus = [kit.Gpu(GPU1, gpm=True, migs=migs, pci_bus_id="00000000:1B:00.0")]
    backend, _ = started(fake_nvml)
    backend.read_sync()
    (r,) = backend.read_sync()
    assert r.uuid == "MIG-aaaa"
    assert r.dcgm is not None
    assert r.dcgm.pci_bus_id == "00000000:1B:00.0"
    values = dcgm_values(r)
    assert values["DCGM_FI_DEV_SM_CLOCK"] == 1410.0
    assert values["DCGM_FI_PROF_GR_ENGINE_ACTIVE"] == 0.55  # the GPU instance's own, from GPM


def test_the_new_counters_stay_off_the_wire(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [h200(kit)]
    backend, _ = started(fake_nvml)
    readings = backend.read_sync()
    batch = build_batch("node-a", 1.0, 1, 1.0, readings, Attribution())
    assert isinstance(batch, SampleBatch)
    fields = set(type(batch.gpus[0]).__struct_fields__)
    assert not {f for f in fields if "clock" in f or "energy" in f or "xid" in f or "dcgm" in f}
    assert nvml_api.GPM_METRICS[0] == "NVML_GPM_METRIC_SM_UTIL"
