"""What the NVML backend keeps of each GPU and MIG device between ticks, and the fixed choices of what it reads."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpuscale.wire import HEALTH_OK
from gpuscale_collector.backends import nvml_api as api

# MIG layouts change only when an admin reconfigures the GPU: look again now and then.
MIG_RESCAN_TICKS = 30
# Counters that change slowly and cost milliseconds a call (energy 3-5 ms, row remapper
# ~1.5 ms on an H200): read every this many ticks, the last value served between.
SLOW_EVERY_TICKS = 10
# At most this many XID events taken from a GPU's event set per tick (the last one is shown).
XID_EVENTS_PER_TICK = 16
# One nvmlDeviceGetFieldValues per GPU per tick: memory temperature and NVLink data (KiB, all links).
FIELDS = (
    "NVML_FI_DEV_MEMORY_TEMP",
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX",
    "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX",
)
NVLINK_FIELDS = frozenset(FIELDS[1:])
# GPM metric -> (DCGM field, factor to dcgm-exporter's unit): % -> ratio, MiB/s -> B/s.
GPM_TO_DCGM = {
    "NVML_GPM_METRIC_GRAPHICS_UTIL": ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", 0.01),
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL": ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", 0.01),
    "NVML_GPM_METRIC_DRAM_BW_UTIL": ("DCGM_FI_PROF_DRAM_ACTIVE", 0.01),
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC": ("DCGM_FI_PROF_PCIE_TX_BYTES", float(api.MIB)),
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC": ("DCGM_FI_PROF_PCIE_RX_BYTES", float(api.MIB)),
}
UTIL_UNSUPPORTED = "UtilizationNotSupported"
NO_SAMPLE_YET = "NoSampleYet"


@dataclass
class Gpm:
    """Two GPM sample buffers used in turn: each tick's metric spans the interval."""

    samples: list[Any]
    have_previous: bool = False
    current: int = 0


@dataclass
class Mig:
    handle: Any
    uuid: str
    model: str
    gpu_instance_id: int
    compute_instance_id: int
    gpm: Gpm | None = None
    unsupported: set[str] = field(default_factory=set)
    process_since_us: int = 0


@dataclass
class Gpu:
    index: int
    handle: Any
    uuid: str
    model: str
    unsupported: set[str] = field(default_factory=set)
    lost: str | None = None  # the error name while lost
    gpm: Gpm | None = None
    gpm_checked: bool = False
    process_since_us: int = 0
    migs: list[Mig] = field(default_factory=list)
    mig_on: bool = False
    ticks_since_mig_scan: int = MIG_RESCAN_TICKS
    pci_bus_id: str = ""
    xid_set: Any = None  # the NVML event set of this GPU's critical XIDs
    xid: int | None = None  # last XID since start; None until the event set exists
    slow: dict[str, float] = field(default_factory=dict)  # SLOW_EVERY_TICKS values, last read
    ticks_since_slow: int = SLOW_EVERY_TICKS


def mig_health(graphics: float | None, *, gpm_ok: bool) -> str:
    if graphics is not None:
        return HEALTH_OK
    # Without GPM a MIG device has no utilization at all; with it, the first tick has one sample.
    return NO_SAMPLE_YET if gpm_ok else UTIL_UNSUPPORTED


def pct(v: float | None) -> float | None:
    return None if v is None else round(min(max(v, 0.0), 100.0), 2)
