"""The /metrics series of one batch, in dcgm-exporter's names and labels (its dashboards read them)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gpuscale.wire import HEALTH_OK, GpuOwner, GpuSample, SampleBatch
from gpuscale_collector.core.readings import DcgmFields


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str
    kind: str = "gauge"  # the Prometheus TYPE dcgm-exporter writes: gauge or counter


# dcgm-exporter's names, types and HELP texts (etc/default-counters.csv).
GPU_UTIL: Final = Family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
MEM_COPY_UTIL: Final = Family("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).")
FB_USED: Final = Family("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
FB_FREE: Final = Family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
GPU_TEMP: Final = Family("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
POWER_USAGE: Final = Family("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")
# Not a default counter; dcgm's HELP says %, but DCGM's value (and ours) is a ratio.
SM_ACTIVE: Final = Family(
    "DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (ratio 0-1)."
)
SM_CLOCK: Final = Family("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).")
MEM_CLOCK: Final = Family("DCGM_FI_DEV_MEM_CLOCK", "Memory clock frequency (in MHz).")
MEMORY_TEMP: Final = Family("DCGM_FI_DEV_MEMORY_TEMP", "Memory temperature (in C).")
TOTAL_ENERGY: Final = Family(
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "Total energy consumption since boot (in mJ).", "counter"
)
PCIE_REPLAY: Final = Family("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "Total number of PCIe retries.", "counter")
ENC_UTIL: Final = Family("DCGM_FI_DEV_ENC_UTIL", "Encoder utilization (in %).")
DEC_UTIL: Final = Family("DCGM_FI_DEV_DEC_UTIL", "Decoder utilization (in %).")
XID_ERRORS: Final = Family("DCGM_FI_DEV_XID_ERRORS", "Value of the last XID error encountered.")
FB_RESERVED: Final = Family("DCGM_FI_DEV_FB_RESERVED", "Framebuffer memory reserved (in MiB).")
NVLINK_BANDWIDTH_TOTAL: Final = Family(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "Total number of NVLink bandwidth counters for all lanes.",
    "counter",
)
VGPU_LICENSE_STATUS: Final = Family("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "vGPU License status")
UNCORRECTABLE_REMAPPED_ROWS: Final = Family(
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for uncorrectable errors", "counter"
)
CORRECTABLE_REMAPPED_ROWS: Final = Family(
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "Number of remapped rows for correctable errors", "counter"
)
ROW_REMAP_FAILURE: Final = Family("DCGM_FI_DEV_ROW_REMAP_FAILURE", "Whether remapping of rows has failed")
GR_ENGINE_ACTIVE: Final = Family(
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "Ratio of time the graphics engine is active."
)
PIPE_TENSOR_ACTIVE: Final = Family(
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active."
)
DRAM_ACTIVE: Final = Family(
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "Ratio of cycles the device memory interface is active sending or receiving data.",
)
PCIE_TX_BYTES: Final = Family(
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads"
    " - in bytes per second.",
)
PCIE_RX_BYTES: Final = Family(
    "DCGM_FI_PROF_PCIE_RX_BYTES",
    "The rate of data received over the PCIe bus - including both protocol headers and data payloads"
    " - in bytes per second.",
)
PROCESS_SM_UTIL: Final = Family(
    "gpuscale_process_sm_util", "SM utilization of one pod's processes on a shared GPU (in %)."
)
PROCESS_FB_USED: Final = Family(
    "gpuscale_process_fb_used_mib", "Framebuffer memory used by one pod's processes (in MiB)."
)
GPU_HEALTH: Final = Family("gpuscale_gpu_healthy", "1 when NVML reads the GPU, 0 when it is lost or failing.")

# The /metrics-only families a backend reports by DCGM field name (DcgmFields.values).
DCGM_ONLY: Final = {
    f.name: f
    for f in (
        SM_CLOCK,
        MEM_CLOCK,
        MEMORY_TEMP,
        TOTAL_ENERGY,
        PCIE_REPLAY,
        ENC_UTIL,
        DEC_UTIL,
        FB_RESERVED,
        NVLINK_BANDWIDTH_TOTAL,
        VGPU_LICENSE_STATUS,
        UNCORRECTABLE_REMAPPED_ROWS,
        CORRECTABLE_REMAPPED_ROWS,
        ROW_REMAP_FAILURE,
        GR_ENGINE_ACTIVE,
        PIPE_TENSOR_ACTIVE,
        DRAM_ACTIVE,
        PCIE_TX_BYTES,
        PCIE_RX_BYTES,
    )
}

FAMILIES: Final = (
    GPU_UTIL,
    MEM_COPY_UTIL,
    FB_USED,
    FB_FREE,
    GPU_TEMP,
    POWER_USAGE,
    SM_ACTIVE,
    *DCGM_ONLY.values(),
    XID_ERRORS,
    PROCESS_SM_UTIL,
    PROCESS_FB_USED,
    GPU_HEALTH,
)

# What an XID means, from NVIDIA's XID catalogue; a fixed table keeps err_msg's values bounded.
XID_MESSAGES: Final = {
    0: "No Error",
    13: "Graphics Engine Exception",
    31: "GPU memory page fault",
    32: "Invalid or corrupted push buffer stream",
    43: "GPU stopped processing",
    45: "Preemptive cleanup, due to previous errors",
    48: "Double Bit ECC Error",
    61: "Internal micro-controller breakpoint/warning",
    62: "Internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    68: "NVDEC0 Exception",
    69: "Graphics Engine class error",
    74: "NVLINK Error",
    79: "GPU has fallen off the bus",
    92: "High single-bit ECC error rate",
    94: "Contained ECC error",
    95: "Uncontained ECC error",
    109: "Context Switch Timeout Error",
    119: "GSP RPC Timeout",
    120: "GSP Error",
    154: "GPU Recovery Action Changed",
}
UNKNOWN_XID: Final = "Unknown XID"

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MigInfo:
    parent_index: int
    gpu_instance_id: int
    profile: str


def _device_labels(
    gpu: GpuSample, hostname: str, mig: Mapping[str, MigInfo], fields: DcgmFields | None
) -> list[tuple[str, str]]:
    """dcgm-exporter's labels in its order: gpu, UUID, pci_bus_id, device, modelName,
    (GPU_I_PROFILE, GPU_I_ID,) Hostname, DCGM_FI_DRIVER_VERSION."""
    bus = fields.pci_bus_id if fields is not None else ""
    driver = fields.driver_version if fields is not None else ""
    info = mig.get(gpu.uuid) if gpu.mig is not None else None
    if info is not None and gpu.mig is not None:
        return [
            ("gpu", str(info.parent_index)),
            ("UUID", gpu.mig),
            ("pci_bus_id", bus),
            ("device", f"nvidia{info.parent_index}"),
            ("modelName", gpu.model),
            ("GPU_I_PROFILE", info.profile),
            ("GPU_I_ID", str(info.gpu_instance_id)),
            ("Hostname", hostname),
            ("DCGM_FI_DRIVER_VERSION", driver),
        ]
    return [
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("pci_bus_id", bus),
        ("device", f"nvidia{gpu.index}"),
        ("modelName", gpu.model),
        ("Hostname", hostname),
        ("DCGM_FI_DRIVER_VERSION", driver),
    ]


def xid_labels(xid: int) -> tuple[tuple[str, str], ...]:
    return (("err_code", str(xid)), ("err_msg", XID_MESSAGES.get(xid, UNKNOWN_XID)))


def _pod_labels(owner: GpuOwner | None) -> list[tuple[str, str]]:
    if owner is None:
        return [("container", ""), ("namespace", ""), ("pod", "")]
    return [("container", owner.container), ("namespace", owner.namespace), ("pod", owner.pod)]


def render(
    batch: SampleBatch | None,
    hostname: str,
    mig: Mapping[str, MigInfo] | None = None,
    dcgm: Mapping[str, DcgmFields] | None = None,
) -> dict[Family, list[tuple[Labels, float]]]:
    """Family → (labels, value) rows. Only what the last batch holds: series of
    pods that went away disappear with it. ``dcgm``: the /metrics-only fields of
    the same tick by device UUID."""
    out: dict[Family, list[tuple[Labels, float]]] = {f: [] for f in FAMILIES}
    if batch is None:
        return out
    mig = mig or {}
    dcgm = dcgm or {}
    for gpu in batch.gpus:
        fields = dcgm.get(gpu.uuid)
        device = _device_labels(gpu, hostname, mig, fields)
        healthy = gpu.health == HEALTH_OK
        out[GPU_HEALTH].append((tuple(device), 1.0 if healthy else 0.0))
        if not healthy:
            continue
        owners: tuple[GpuOwner | None, ...] = gpu.owners or (None,)
        values: list[tuple[Family, float | None]] = [
            (GPU_UTIL, gpu.util),
            (MEM_COPY_UTIL, gpu.mem_util),
            (FB_USED, gpu.fb_used_mib),
            (FB_FREE, gpu.fb_free_mib),
            (GPU_TEMP, gpu.temp_c),
            (POWER_USAGE, gpu.power_w),
            # DCGM's SM_ACTIVE is a ratio 0..1; NVML GPM and the wire speak %.
            (SM_ACTIVE, None if gpu.sm_active is None else gpu.sm_active / 100.0),
        ]
        if fields is not None:
            values.extend((DCGM_ONLY[name], value) for name, value in fields.values if name in DCGM_ONLY)
        for owner in owners:
            labels = tuple(device + _pod_labels(owner))
            for family, value in values:
                if value is not None:
                    out[family].append((labels, float(value)))
            if fields is not None and fields.xid is not None:
                out[XID_ERRORS].append((labels + xid_labels(fields.xid), float(fields.xid)))
            if owner is not None:
                if owner.sm_util is not None:
                    out[PROCESS_SM_UTIL].append((labels, owner.sm_util))
                if owner.fb_used_mib is not None:
                    out[PROCESS_FB_USED].append((labels, owner.fb_used_mib))
    return out
