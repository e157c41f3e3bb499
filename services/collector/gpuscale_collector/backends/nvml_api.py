"""The one module that calls pynvml: a thin adapter with NVML's errors sorted.

pynvml is imported on first use, so the simulated backend never loads it."""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

MIB: Final = 1024 * 1024


class NvmlError(Exception):
    """An NVML call failed; ``name`` is NVML's error name (``GpuIsLost``, ``Unknown``)."""

    def __init__(self, name: str, detail: str = "") -> None:
        super().__init__(f"{name}: {detail}" if detail else name)
        self.name = name


class NvmlNotSupported(NvmlError):
    """This GPU (or driver) does not offer the call: skip it for good."""


class NvmlGpuLost(NvmlError):
    """The GPU fell off the bus or stopped answering."""


class NvmlNotFound(NvmlError):
    """Nothing there (no MIG device in a slot, no new process samples)."""


class NvmlLibraryMissing(NvmlError):
    """libnvidia-ml is not loadable or the driver is not loaded."""


_pynvml: ModuleType | None = None


def nvml() -> ModuleType:
    global _pynvml  # one lazily imported module for the process
    if _pynvml is None:
        try:
            import pynvml  # lazy import: lazy: only the nvml backend pays for it
        except ImportError as e:
            raise NvmlLibraryMissing("LibraryNotFound", "the nvidia-ml-py package is not installed") from e
        _pynvml = pynvml
    return _pynvml


def _classify(e: Exception) -> NvmlError:
    m = nvml()
    code = getattr(e, "value", None)
    name = type(e).__name__.removeprefix("NVMLError_") if type(e).__name__ != "NVMLError" else str(e)
    detail = str(e)
    if code in (m.NVML_ERROR_NOT_SUPPORTED, m.NVML_ERROR_FUNCTION_NOT_FOUND, m.NVML_ERROR_NO_PERMISSION):
        return NvmlNotSupported(name, detail)
    if code in (m.NVML_ERROR_GPU_IS_LOST,):
        return NvmlGpuLost(name, detail)
    if code in (m.NVML_ERROR_NOT_FOUND,):
        return NvmlNotFound(name, detail)
    if code in (m.NVML_ERROR_LIBRARY_NOT_FOUND, m.NVML_ERROR_DRIVER_NOT_LOADED):
        return NvmlLibraryMissing(name, detail)
    return NvmlError(name or "Unknown", detail)


def _call(fn_name: str, *args: Any) -> Any:
    m = nvml()
    try:
        return getattr(m, fn_name)(*args)
    except m.NVMLError as e:
        raise _classify(e) from None


def init() -> None:
    _call("nvmlInit")


def shutdown() -> None:
    _call("nvmlShutdown")


def driver_version() -> str:
    v = _call("nvmlSystemGetDriverVersion")
    return v.decode() if isinstance(v, bytes) else str(v)


def device_count() -> int:
    return int(_call("nvmlDeviceGetCount"))


def handle_by_index(index: int) -> Any:
    return _call("nvmlDeviceGetHandleByIndex", index)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def uuid(handle: Any) -> str:
    return _text(_call("nvmlDeviceGetUUID", handle))


def name(handle: Any) -> str:
    return _text(_call("nvmlDeviceGetName", handle))


def utilization(handle: Any) -> tuple[float, float]:
    """(gpu %, memory %) over the driver's last sample period."""
    u = _call("nvmlDeviceGetUtilizationRates", handle)
    return float(u.gpu), float(u.memory)


def memory_mib(handle: Any) -> tuple[float, float]:
    """(used MiB, free MiB) of the framebuffer; v1's used includes the driver's reserve."""
    info = _call("nvmlDeviceGetMemoryInfo", handle)
    return info.used / MIB, info.free / MIB


def memory_v2_mib(handle: Any) -> tuple[float, float, float]:
    """(used, free, reserved) MiB: v2's used excludes the reserve, as DCGM and nvidia-smi do."""
    m = nvml()
    version = getattr(m, "nvmlMemory_v2", None)
    if version is None:
        raise NvmlNotSupported("FunctionNotFound", "this pynvml has no nvmlMemory_v2")
    info = _call("nvmlDeviceGetMemoryInfo", handle, version)
    return info.used / MIB, info.free / MIB, info.reserved / MIB


def pci_bus_id(handle: Any) -> str:
    """The PCI address as dcgm-exporter labels it (``00000000:00:06.0``)."""
    return _text(_call("nvmlDeviceGetPciInfo", handle).busId)


def clock_mhz(handle: Any, which: str) -> float:
    """``which``: ``SM`` or ``MEM``; the current clock in MHz."""
    return float(_call("nvmlDeviceGetClockInfo", handle, getattr(nvml(), f"NVML_CLOCK_{which}")))


def total_energy_mj(handle: Any) -> float:
    return float(_call("nvmlDeviceGetTotalEnergyConsumption", handle))


def pcie_replays(handle: Any) -> float:
    return float(_call("nvmlDeviceGetPcieReplayCounter", handle))


def encoder_util(handle: Any) -> float:
    return float(_call("nvmlDeviceGetEncoderUtilization", handle)[0])


def decoder_util(handle: Any) -> float:
    return float(_call("nvmlDeviceGetDecoderUtilization", handle)[0])


def remapped_rows(handle: Any) -> tuple[float, float, float]:
    """(correctable, uncorrectable, failed 0/1) rows of the row remapper."""
    correctable, uncorrectable, _pending, failure = _call("nvmlDeviceGetRemappedRows", handle)
    return float(correctable), float(uncorrectable), float(failure)


def vgpu_licensed(handle: Any) -> float:
    """DCGM's vGPU license status: 1 when a vGPU guest holds a license, else 0."""
    m = nvml()
    mode = _call("nvmlDeviceGetVirtualizationMode", handle)
    if mode != getattr(m, "NVML_GPU_VIRTUALIZATION_MODE_VGPU", 2):
        return 0.0  # bare metal, passthrough or host: no vGPU license to hold
    features = _call("nvmlDeviceGetGridLicensableFeatures", handle)
    items = features.gridLicensableFeatures
    count = min(int(features.licensableFeaturesCount), len(items))
    return 1.0 if any(int(items[i].featureState) == 1 for i in range(count)) else 0.0


def field_ids(names: tuple[str, ...]) -> dict[str, int]:
    """pynvml's constants by name; a name this pynvml lacks is left out."""
    m = nvml()
    return {n: int(getattr(m, n)) for n in names if isinstance(getattr(m, n, None), int)}


# NVML's scope for "all NVLink links summed" in a field request.
ALL_LINKS: Final = 0xFFFFFFFF


def field_values(
    handle: Any, ids: dict[str, int], *, all_links: frozenset[str] = frozenset()
) -> dict[str, float | NvmlError]:
    """One nvmlDeviceGetFieldValues for several fields: each its value or its own error.
    A field named in ``all_links`` is asked summed over every NVLink link."""
    m = nvml()
    names = list(ids)
    request = [(ids[n], ALL_LINKS) if n in all_links else ids[n] for n in names]
    got = _call("nvmlDeviceGetFieldValues", handle, request)
    out: dict[str, float | NvmlError] = {}
    for name, value in zip(names, got, strict=True):
        ret = int(value.nvmlReturn)
        out[name] = _field_value(value) if ret == m.NVML_SUCCESS else _classify(m.NVMLError(ret))
    return out


def _field_value(value: Any) -> float:
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return float(getattr(value.value, member.get(int(value.valueType), "ullVal")))


def xid_events(handle: Any) -> Any:
    """An event set that collects this GPU's critical XIDs, to poll with :func:`next_xid`."""
    event_set = _call("nvmlEventSetCreate")
    try:
        _call("nvmlDeviceRegisterEvents", handle, nvml().nvmlEventTypeXidCriticalError, event_set)
    except NvmlError:
        _call("nvmlEventSetFree", event_set)
        raise
    return event_set


def next_xid(event_set: Any) -> int | None:
    """The next pending XID, or None when none is waiting (a 0 ms wait: never blocks)."""
    m = nvml()
    try:
        data = m.nvmlEventSetWait(event_set, 0)
    except m.NVMLError as e:
        if getattr(e, "value", None) == m.NVML_ERROR_TIMEOUT:
            return None
        raise _classify(e) from None
    return int(data.eventData)


def free_events(event_set: Any) -> None:
    _call("nvmlEventSetFree", event_set)


def temperature_c(handle: Any) -> float:
    return float(_call("nvmlDeviceGetTemperature", handle, nvml().NVML_TEMPERATURE_GPU))


def power_w(handle: Any) -> float:
    return float(_call("nvmlDeviceGetPowerUsage", handle)) / 1000.0


def mig_enabled(handle: Any) -> bool:
    current, _pending = _call("nvmlDeviceGetMigMode", handle)
    return bool(current == nvml().NVML_DEVICE_MIG_ENABLE)


def mig_devices(handle: Any) -> list[Any]:
    """Handles of the MIG devices that exist on a MIG-enabled GPU."""
    out = []
    for slot in range(int(_call("nvmlDeviceGetMaxMigDeviceCount", handle))):
        try:
            out.append(_call("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot))
        except NvmlNotFound:
            continue
    return out


def mig_ids(mig_handle: Any) -> tuple[int, int]:
    """(GPU instance id, compute instance id) of a MIG device."""
    return (
        int(_call("nvmlDeviceGetGpuInstanceId", mig_handle)),
        int(_call("nvmlDeviceGetComputeInstanceId", mig_handle)),
    )


@dataclass(frozen=True, slots=True)
class Process:
    pid: int
    used_mib: float | None


def compute_processes(handle: Any) -> list[Process]:
    out = []
    for p in _call("nvmlDeviceGetComputeRunningProcesses", handle):
        used = getattr(p, "usedGpuMemory", None)
        out.append(Process(int(p.pid), None if used is None else used / MIB))
    return out


@dataclass(frozen=True, slots=True)
class ProcessUtil:
    pid: int
    timestamp_us: int
    sm_util: float


def process_utilization(handle: Any, since_us: int) -> list[ProcessUtil]:
    """Per-process samples newer than ``since_us`` (NVML's CPU timestamps, µs)."""
    m = nvml()
    try:
        samples = m.nvmlDeviceGetProcessUtilization(handle, since_us)
    except m.NVMLError as e:
        # No sample since the timestamp is NOT_FOUND; pynvml also raises for a
        # SUCCESS with zero samples (it expects INSUFFICIENT_SIZE). Both mean "none".
        if getattr(e, "value", None) in (m.NVML_SUCCESS, m.NVML_ERROR_NOT_FOUND):
            return []
        raise _classify(e) from None
    return [ProcessUtil(int(s.pid), int(s.timeStamp), float(s.smUtil)) for s in samples]


def gpm_supported(handle: Any) -> bool:
    try:
        support = _call("nvmlGpmQueryDeviceSupport", handle)
    except NvmlNotSupported:
        return False
    return bool(support.isSupportedDevice)


def gpm_alloc() -> Any:
    return _call("nvmlGpmSampleAlloc")


def gpm_free(sample: Any) -> None:
    _call("nvmlGpmSampleFree", sample)


def gpm_sample(handle: Any, sample: Any) -> None:
    _call("nvmlGpmSampleGet", handle, sample)


def gpm_mig_sample(parent_handle: Any, gpu_instance_id: int, sample: Any) -> None:
    _call("nvmlGpmMigSampleGet", parent_handle, gpu_instance_id, sample)


def gpm_metrics(earlier: Any, later: Any, metric_ids: dict[str, int]) -> dict[str, float | NvmlError]:
    """GPM metrics between two samples by name: each its value or its own error."""
    m = nvml()
    names = list(metric_ids)
    request = m.c_nvmlGpmMetricsGet_t()
    request.version = m.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = len(names)
    request.sample1 = earlier
    request.sample2 = later
    for i, name in enumerate(names):
        request.metrics[i].metricId = metric_ids[name]
    _call("nvmlGpmMetricsGet", request)
    out: dict[str, float | NvmlError] = {}
    for i, name in enumerate(names):
        metric = request.metrics[i]
        ret = int(metric.nvmlReturn)
        out[name] = float(metric.value) if ret == m.NVML_SUCCESS else _classify(m.NVMLError(ret))
    return out


# The GPM metrics read each tick, in this order: DCGM's SM_ACTIVE, GR_ENGINE_ACTIVE,
# PIPE_TENSOR_ACTIVE, DRAM_ACTIVE (all %), PCIE_TX/RX_BYTES (MiB/s).
GPM_METRICS: Final = (
    "NVML_GPM_METRIC_SM_UTIL",
    "NVML_GPM_METRIC_GRAPHICS_UTIL",
    "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "NVML_GPM_METRIC_DRAM_BW_UTIL",
    "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
    "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
)


def gpm_metric_ids() -> dict[str, int]:
    """GPM_METRICS' ids by name; a metric this pynvml lacks is left out."""
    return field_ids(GPM_METRICS)


def now_us() -> int:
    """A timestamp on NVML's process-sample clock (CPU time of day, µs)."""
    return int(time.time() * 1_000_000)


def sample_address(sample: Any) -> int | None:
    """An allocated GPM sample's address (tests tell samples apart by it)."""
    return ctypes.cast(sample, ctypes.c_void_p).value
