"""The /metrics series of one batch, in dcgm-exporter's names and labels.

NVIDIA's Grafana dashboard for dcgm-exporter queries these names with the
labels ``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname`` and, with
pod mapping on, ``container``, ``namespace``, ``pod`` (empty strings when a
GPU is not attributed, as dcgm-exporter writes them). A GPU shared by
several pods gets one series per pod, as dcgm-exporter does. MIG devices are
labelled with their parent GPU plus ``GPU_I_ID`` / ``GPU_I_PROFILE``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from gpuscale.wire import HEALTH_OK, GpuOwner, GpuSample, SampleBatch


@dataclass(frozen=True, slots=True)
class Family:
    name: str
    help: str


# dcgm-exporter's HELP texts (etc/default-counters.csv).
GPU_UTIL: Final = Family("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).")
MEM_COPY_UTIL: Final = Family("DCGM_FI_DEV_MEM_COPY_UTIL", "Memory utilization (in %).")
FB_USED: Final = Family("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).")
FB_FREE: Final = Family("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).")
GPU_TEMP: Final = Family("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).")
POWER_USAGE: Final = Family("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).")
SM_ACTIVE: Final = Family(
    "DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (in %)."
)
PROCESS_SM_UTIL: Final = Family(
    "gpuscale_process_sm_util", "SM utilization of one pod's processes on a shared GPU (in %)."
)
PROCESS_FB_USED: Final = Family(
    "gpuscale_process_fb_used_mib", "Framebuffer memory used by one pod's processes (in MiB)."
)
GPU_HEALTH: Final = Family("gpuscale_gpu_healthy", "1 when NVML reads the GPU, 0 when it is lost or failing.")

FAMILIES: Final = (
    GPU_UTIL,
    MEM_COPY_UTIL,
    FB_USED,
    FB_FREE,
    GPU_TEMP,
    POWER_USAGE,
    SM_ACTIVE,
    PROCESS_SM_UTIL,
    PROCESS_FB_USED,
    GPU_HEALTH,
)

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class MigInfo:
    parent_index: int
    gpu_instance_id: int
    profile: str


def _device_labels(gpu: GpuSample, hostname: str, mig: Mapping[str, MigInfo]) -> list[tuple[str, str]]:
    info = mig.get(gpu.uuid) if gpu.mig is not None else None
    if info is not None and gpu.mig is not None:
        return [
            ("gpu", str(info.parent_index)),
            ("UUID", gpu.mig),
            ("device", f"nvidia{info.parent_index}"),
            ("modelName", gpu.model),
            ("Hostname", hostname),
            ("GPU_I_PROFILE", info.profile),
            ("GPU_I_ID", str(info.gpu_instance_id)),
        ]
    return [
        ("gpu", str(gpu.index)),
        ("UUID", gpu.uuid),
        ("device", f"nvidia{gpu.index}"),
        ("modelName", gpu.model),
        ("Hostname", hostname),
    ]


def _pod_labels(owner: GpuOwner | None) -> list[tuple[str, str]]:
    if owner is None:
        return [("container", ""), ("namespace", ""), ("pod", "")]
    return [("container", owner.container), ("namespace", owner.namespace), ("pod", owner.pod)]


def render(
    batch: SampleBatch | None, hostname: str, mig: Mapping[str, MigInfo] | None = None
) -> dict[Family, list[tuple[Labels, float]]]:
    """Family → (labels, value) rows. Only what the last batch holds: series of
    pods that went away disappear with it."""
    out: dict[Family, list[tuple[Labels, float]]] = {f: [] for f in FAMILIES}
    if batch is None:
        return out
    mig = mig or {}
    for gpu in batch.gpus:
        device = _device_labels(gpu, hostname, mig)
        healthy = gpu.health == HEALTH_OK
        out[GPU_HEALTH].append((tuple(device), 1.0 if healthy else 0.0))
        if not healthy:
            continue
        owners: tuple[GpuOwner | None, ...] = gpu.owners or (None,)
        values = (
            (GPU_UTIL, gpu.util),
            (MEM_COPY_UTIL, gpu.mem_util),
            (FB_USED, gpu.fb_used_mib),
            (FB_FREE, gpu.fb_free_mib),
            (GPU_TEMP, gpu.temp_c),
            (POWER_USAGE, gpu.power_w),
            # DCGM's SM_ACTIVE is a ratio 0..1; NVML GPM and the wire speak %.
            (SM_ACTIVE, None if gpu.sm_active is None else gpu.sm_active / 100.0),
        )
        for owner in owners:
            labels = tuple(device + _pod_labels(owner))
            for family, value in values:
                if value is not None:
                    out[family].append((labels, float(value)))
            if owner is not None:
                if owner.sm_util is not None:
                    out[PROCESS_SM_UTIL].append((labels, owner.sm_util))
                if owner.fb_used_mib is not None:
                    out[PROCESS_FB_USED].append((labels, owner.fb_used_mib))
    return out
