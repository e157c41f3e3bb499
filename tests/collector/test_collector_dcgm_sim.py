"""The simulated GPUs give every dcgm-only counter, following their load, so the
demo's dashboards are full."""

from __future__ import annotations

from gpuscale_collector.core.exposition import DCGM_ONLY
from gpuscale_collector.core.readings import DeviceReading
from gpuscale_collector.core.sim import SimCounters, sim_readings


def values(readings: list[DeviceReading]) -> list[dict[str, float]]:
    assert all(r.dcgm is not None for r in readings)
    return [dict(r.dcgm.values) for r in readings if r.dcgm is not None]


def test_every_dcgm_only_counter_is_simulated_and_follows_the_load() -> None:
    counters = SimCounters()
    (idle,) = values(counters.advance(sim_readings("n", 1, 0.0), 0.0))
    (busy,) = values(counters.advance(sim_readings("n", 1, 90.0), 1.0))
    assert set(idle) == set(busy) == set(DCGM_ONLY)
    for name in (
        "DCGM_FI_DEV_SM_CLOCK",
        "DCGM_FI_DEV_MEMORY_TEMP",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
    ):
        assert busy[name] > idle[name], name
    for name in (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "DCGM_FI_PROF_DRAM_ACTIVE",
    ):
        assert 0.0 <= busy[name] <= 1.0, name  # DCGM's ratios, not %


def test_energy_and_nvlink_totals_accumulate_power_and_traffic_over_time() -> None:
    counters = SimCounters()
    readings = sim_readings("n", 2, 50.0)
    first = values(counters.advance(readings, 0.0))
    second = values(counters.advance(readings, 2.0))
    power_w = readings[0].power_w or 0.0
    for before, after in zip(first, second, strict=True):
        grown = after["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] - before["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
        assert abs(grown - power_w * 2.0 * 1000.0) <= 1.0  # mJ
        assert after["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"] > before["DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"]


def test_totals_of_gpus_no_longer_read_are_dropped() -> None:
    counters = SimCounters()
    counters.advance(sim_readings("n", 8, 50.0), 1.0)
    counters.advance(sim_readings("n", 2, 50.0), 1.0)
    assert len(counters.energy_mj) == len(counters.nvlink_kib) == 2


def test_each_simulated_gpu_has_its_own_pci_address() -> None:
    readings = SimCounters().advance(sim_readings("n", 8, 10.0), 0.0)
    buses = {r.dcgm.pci_bus_id for r in readings if r.dcgm}
    assert len(buses) == 8
