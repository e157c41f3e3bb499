"""What the NVML probe compares and covers: nvidia-smi's fields, GPM metrics, dcgm-exporter's counters."""

from __future__ import annotations

MIB = 1024 * 1024
NODE = "nvml-probe"
SMI_FIELDS = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.free",
    "temperature.gpu",
    "power.draw",
)
COMPARED = (  # (reading attribute, nvidia-smi field)
    ("util", "utilization.gpu"),
    ("mem_util", "utilization.memory"),
    ("fb_used_mib", "memory.used"),
    ("fb_free_mib", "memory.free"),
    ("temp_c", "temperature.gpu"),
    ("power_w", "power.draw"),
)
# DCGM PROF field -> NVML GPM metric (GPM gives %, DCGM's ratios are 0..1; PCIe in MiB/s, DCGM B/s).
GPM_METRICS = (
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "NVML_GPM_METRIC_GRAPHICS_UTIL", "%"),
    ("DCGM_FI_PROF_SM_ACTIVE", "NVML_GPM_METRIC_SM_UTIL", "%"),
    ("DCGM_FI_PROF_SM_OCCUPANCY", "NVML_GPM_METRIC_SM_OCCUPANCY", "%"),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "NVML_GPM_METRIC_ANY_TENSOR_UTIL", "%"),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "NVML_GPM_METRIC_DRAM_BW_UTIL", "%"),
    ("DCGM_FI_PROF_PCIE_TX_BYTES", "NVML_GPM_METRIC_PCIE_TX_PER_SEC", "MiB/s"),
    ("DCGM_FI_PROF_PCIE_RX_BYTES", "NVML_GPM_METRIC_PCIE_RX_PER_SEC", "MiB/s"),
)
# dcgm-exporter's default counters (the uncommented lines of etc/default-counters.csv).
DEFAULT_COUNTERS = (
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_DRIVER_VERSION",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
)
