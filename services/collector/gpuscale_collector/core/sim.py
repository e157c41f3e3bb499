"""Simulated GPUs: load sources (``constant:PCT``, ``steps:T=PCT,...``, ``kube-sim``) and their readings."""

from __future__ import annotations

import dataclasses
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any, Final

from gpuscale.simfeed import FeedError, FeedOwner, NodeGpus
from gpuscale.wire import GpuOwner, WorkloadRef
from gpuscale_collector.core.readings import DcgmFields, DeviceReading

SIM_MODEL: Final = "NVIDIA H100 80GB HBM3"
SIM_FB_TOTAL_MIB: Final = 81559.0
SIM_DRIVER_VERSION: Final = "550.90.07"
# An H100 SXM's figures: the driver's framebuffer reserve, idle and boost SM clock, HBM3 clock.
SIM_FB_RESERVED_MIB: Final = 511.0
SIM_SM_CLOCK_IDLE_MHZ: Final = 345.0
SIM_SM_CLOCK_MAX_MHZ: Final = 1980.0
SIM_MEM_CLOCK_MHZ: Final = 2619.0
# At full load: PCIe traffic (B/s each way) and NVLink data (KiB/s), as a busy inference server moves.
SIM_PCIE_BYTES_PER_S: Final = 1.3e9
SIM_NVLINK_KIB_PER_S: Final = 20.0 * 1024 * 1024
KUBE_SIM: Final = "kube-sim"
__all__ = [
    "KUBE_SIM",
    "FeedError",
    "SimCounters",
    "StepLoad",
    "parse_load_source",
    "readings_from_kube_sim",
    "sim_readings",
]


@dataclass(frozen=True, slots=True)
class StepLoad:
    """Load (%) as a function of seconds since start: ``steps[i] = (from_s, pct)``."""

    steps: tuple[tuple[float, float], ...]

    def at(self, elapsed_s: float) -> float:
        load = self.steps[0][1]
        for start, pct in self.steps:
            if elapsed_s >= start:
                load = pct
        return load


def _pct(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 100.0:
        raise ValueError(f"load {value} outside 0..100")
    return value


def parse_load_source(text: str) -> StepLoad | str:
    """``constant:50``, ``steps:0=30,60=90`` → a StepLoad; ``kube-sim`` → the name.
    Raises ValueError with a short reason."""
    text = text.strip()
    if text == KUBE_SIM:
        return KUBE_SIM
    kind, _, rest = text.partition(":")
    try:
        if kind == "constant":
            return StepLoad(((0.0, _pct(rest)),))
        if kind == "steps":
            steps: list[tuple[float, float]] = []
            for part in rest.split(","):
                at, sep, pct = part.partition("=")
                if not sep:
                    raise ValueError(f"step {part!r} is not T=PCT")
                start = float(at)
                if start < 0:
                    raise ValueError("a step time must not be negative")
                steps.append((start, _pct(pct)))
            if not steps:
                raise ValueError("no steps")
            return StepLoad(tuple(sorted(steps)))
    except ValueError as e:
        raise ValueError(f"bad load source {text!r}: {e}") from None
    raise ValueError("expected constant:PCT, steps:T=PCT,T=PCT... or kube-sim")


def sim_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{node}.gpu{index}.gpuscale.sim"))


def sim_readings(node: str, gpus: int, load_pct: float) -> list[DeviceReading]:
    """N identical GPUs at one load; memory, temperature and power follow it."""
    frac = load_pct / 100.0
    fb_used = round(SIM_FB_TOTAL_MIB * (0.05 + 0.6 * frac), 1)
    return [
        DeviceReading(
            uuid=sim_uuid(node, i),
            index=i,
            model=SIM_MODEL,
            util=load_pct,
            mem_util=round(load_pct * 0.6, 2),
            fb_used_mib=fb_used,
            fb_free_mib=round(SIM_FB_TOTAL_MIB - fb_used, 1),
            temp_c=round(30.0 + 45.0 * frac, 1),
            power_w=round(70.0 + 630.0 * frac, 1),
            sm_active=round(load_pct * 0.9, 2),
            owners=(),
        )
        for i in range(gpus)
    ]


def sim_pci_bus_id(index: int) -> str:
    return f"00000000:{(0x18 + 0x10 * index) % 256:02X}:00.0"


def sim_dcgm(index: int, load_pct: float, energy_mj: float, nvlink_kib: float) -> DcgmFields:
    """Every dcgm-only counter of one simulated GPU at one load: clocks, temperature and the
    profiling ratios follow it; energy and NVLink data are the running totals given."""
    frac = min(max(load_pct, 0.0), 100.0) / 100.0
    values = (
        (
            "DCGM_FI_DEV_SM_CLOCK",
            round(SIM_SM_CLOCK_IDLE_MHZ + (SIM_SM_CLOCK_MAX_MHZ - SIM_SM_CLOCK_IDLE_MHZ) * frac),
        ),
        ("DCGM_FI_DEV_MEM_CLOCK", SIM_MEM_CLOCK_MHZ),
        ("DCGM_FI_DEV_MEMORY_TEMP", round(32.0 + 40.0 * frac, 1)),
        ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", round(energy_mj)),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", 0.0),
        ("DCGM_FI_DEV_ENC_UTIL", 0.0),
        ("DCGM_FI_DEV_DEC_UTIL", 0.0),
        ("DCGM_FI_DEV_FB_RESERVED", SIM_FB_RESERVED_MIB),
        ("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", round(nvlink_kib)),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", 0.0),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 0.0),
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 0.0),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0.0),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", round(0.96 * frac, 4)),
        ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", round(0.85 * frac, 4)),
        ("DCGM_FI_PROF_DRAM_ACTIVE", round(0.45 * frac, 4)),
        ("DCGM_FI_PROF_PCIE_TX_BYTES", round(SIM_PCIE_BYTES_PER_S * frac)),
        ("DCGM_FI_PROF_PCIE_RX_BYTES", round(SIM_PCIE_BYTES_PER_S * 0.94 * frac)),
    )
    return DcgmFields(
        pci_bus_id=sim_pci_bus_id(index),
        driver_version=SIM_DRIVER_VERSION,
        values=tuple((name, float(v)) for name, v in values),
        xid=0,
    )


@dataclass
class SimCounters:
    """The running totals of simulated GPUs (energy, NVLink data), advanced by ``dt_s`` a tick."""

    energy_mj: dict[str, float] = field(default_factory=dict)
    nvlink_kib: dict[str, float] = field(default_factory=dict)

    def advance(self, readings: list[DeviceReading], dt_s: float) -> list[DeviceReading]:
        """The readings with their dcgm fields; totals of GPUs no longer read are dropped."""
        energy, nvlink = self.energy_mj, self.nvlink_kib
        self.energy_mj, self.nvlink_kib = {}, {}
        out = []
        for r in readings:
            load = r.util or 0.0
            e = energy.get(r.uuid, 0.0) + (r.power_w or 0.0) * 1000.0 * max(dt_s, 0.0)
            n = nvlink.get(r.uuid, 0.0) + SIM_NVLINK_KIB_PER_S * load / 100.0 * max(dt_s, 0.0)
            self.energy_mj[r.uuid], self.nvlink_kib[r.uuid] = e, n
            out.append(dataclasses.replace(r, dcgm=sim_dcgm(r.index, load, e, n)))
        return out


def _owner(o: FeedOwner) -> GpuOwner:
    return GpuOwner(
        namespace=o.namespace,
        pod=o.pod,
        container=o.container,
        pod_uid=o.pod_uid,
        workload=WorkloadRef(o.workload.kind, o.workload.name),
        sm_util=o.sm_util,
        fb_used_mib=o.fb_used_mib,
        ready=o.ready,
    )


def readings_from_kube_sim(payload: Any) -> list[DeviceReading]:
    """kube-sim's ``GET /sim/v1/nodes/{node}/gpus`` JSON (the :mod:`gpuscale.simfeed`
    contract) → readings with owners. Raises FeedError naming the first problem."""
    feed = NodeGpus.from_json(payload)
    return [
        DeviceReading(
            uuid=g.uuid,
            index=g.index,
            model=g.model,
            util=_clamp(g.util),
            mem_util=_clamp(g.mem_util),
            fb_used_mib=g.fb_used_mib,
            fb_free_mib=g.fb_free_mib,
            temp_c=g.temp_c,
            power_w=g.power_w,
            sm_active=_clamp(g.sm_active),
            owners=tuple(_owner(o) for o in g.owners),
        )
        for g in feed.gpus
    ]


def _clamp(v: float | None) -> float | None:
    return None if v is None else min(max(v, 0.0), 100.0)
