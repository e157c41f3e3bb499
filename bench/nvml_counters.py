"""Part 2 of the NVML probe: every NVML call behind dcgm-exporter's default counters, on one GPU."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from nvml_calls import Named, Nvml, Recorder, event_names, item, mib, mib_of, plain
from nvml_fields import GPM_METRICS


def probe_gpu(nv: Nvml, index: int, gpm_sleep_s: float) -> list[dict[str, Any]]:
    rec = Recorder(nv)
    got = rec.add(
        "(handle)",
        f"nvmlDeviceGetHandleByIndex({index})",
        "",
        lambda: nv("nvmlDeviceGetHandleByIndex", index),
    )
    if "error" in got:
        return _finish(rec.entries)
    rec.handle = got["raw"]
    got["value"] = "ok"
    call, field, derive = rec.call, rec.field, rec.derive
    collectors = "the collector's call"

    call("(label) modelName", "nvmlDeviceGetName")
    call("(label) UUID", "nvmlDeviceGetUUID")
    pci = call("(struct)", "nvmlDeviceGetPciInfo")
    derive(pci, "(label) pci_bus_id", "nvmlDeviceGetPciInfo.busId", "", lambda p: p.busId)
    call("(label) MIG mode", "nvmlDeviceGetMigMode", note="[current, pending]")
    call("(info) compute capability", "nvmlDeviceGetCudaComputeCapability")
    call("DCGM_FI_DRIVER_VERSION", "nvmlSystemGetDriverVersion", system=True)
    call("(info) NVML version", "nvmlSystemGetNVMLVersion", system=True)
    call("(info) CUDA driver version", "nvmlSystemGetCudaDriverVersion", system=True)

    call("DCGM_FI_DEV_SM_CLOCK", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM", unit="MHz")
    call("DCGM_FI_DEV_MEM_CLOCK", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM", unit="MHz")

    field("DCGM_FI_DEV_MEMORY_TEMP", "NVML_FI_DEV_MEMORY_TEMP", "C")
    note = f"{collectors}; deprecated in NVML 13"
    call("DCGM_FI_DEV_GPU_TEMP", "nvmlDeviceGetTemperature", "NVML_TEMPERATURE_GPU", unit="C", note=note)
    call("DCGM_FI_DEV_GPU_TEMP", "nvmlDeviceGetTemperatureV", "NVML_TEMPERATURE_GPU", unit="C")

    call("DCGM_FI_DEV_POWER_USAGE", "nvmlDeviceGetPowerUsage", unit="mW", note=f"{collectors}; W = mW / 1000")
    field("DCGM_FI_DEV_POWER_USAGE", "NVML_FI_DEV_POWER_INSTANT", "mW")
    call("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "nvmlDeviceGetTotalEnergyConsumption", unit="mJ")

    call("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "nvmlDeviceGetPcieReplayCounter", unit="count")
    field("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "NVML_FI_DEV_PCIE_REPLAY_COUNTER", "count")

    util = call("(struct)", "nvmlDeviceGetUtilizationRates")
    derive(
        util, "DCGM_FI_DEV_GPU_UTIL", "nvmlDeviceGetUtilizationRates.gpu", "%", lambda u: u.gpu, collectors
    )
    derive(
        util,
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "nvmlDeviceGetUtilizationRates.memory",
        "%",
        lambda u: u.memory,
        collectors,
    )
    for dcgm, fn in (
        ("DCGM_FI_DEV_ENC_UTIL", "nvmlDeviceGetEncoderUtilization"),
        ("DCGM_FI_DEV_DEC_UTIL", "nvmlDeviceGetDecoderUtilization"),
    ):
        entry = call("(struct)", fn)
        derive(entry, dcgm, f"{fn}[0]", "%", lambda v: v[0])
        derive(entry, f"{dcgm} (sampling period)", f"{fn}[1]", "us", lambda v: v[1])

    # XID errors: no getter; an event set registered for critical XIDs, waited on briefly.
    _probe_xid(rec, nv)

    m1 = call("(struct)", "nvmlDeviceGetMemoryInfo", unit="B")
    derive(
        m1,
        "DCGM_FI_DEV_FB_FREE",
        "nvmlDeviceGetMemoryInfo (v1).free",
        "MiB",
        lambda m: mib(m.free),
        collectors,
    )
    note = f"{collectors}; v1 used includes reserved"
    derive(m1, "DCGM_FI_DEV_FB_USED", "nvmlDeviceGetMemoryInfo (v1).used", "MiB", lambda m: mib(m.used), note)
    m2 = rec.add(
        "(struct)",
        "nvmlDeviceGetMemoryInfo_v2",
        "B",
        lambda: nv("nvmlDeviceGetMemoryInfo", rec.handle, version=nv.const("nvmlMemory_v2")),
    )
    for dcgm, part in (
        ("DCGM_FI_DEV_FB_FREE", "free"),
        ("DCGM_FI_DEV_FB_USED", "used"),
        ("DCGM_FI_DEV_FB_RESERVED", "reserved"),
    ):
        derive(m2, dcgm, f"nvmlDeviceGetMemoryInfo_v2.{part}", "MiB", partial(mib_of, part))

    nvlink = "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL"
    field(nvlink, "NVML_FI_DEV_NVLINK_LINK_COUNT", "links")
    for direction in ("DATA_TX", "DATA_RX", "RAW_TX", "RAW_RX"):
        field(nvlink, f"NVML_FI_DEV_NVLINK_THROUGHPUT_{direction}", "KiB")
    for counter_set in ("C0", "C1"):
        field(nvlink, f"NVML_FI_DEV_NVLINK_BANDWIDTH_{counter_set}_TOTAL", "counter")
    call(nvlink, "nvmlDeviceGetNvLinkState", 0, note="link 0")
    call(
        nvlink,
        "nvmlDeviceGetNvLinkUtilizationCounter",
        0,
        0,
        note="link 0, counter 0 -> [rx, tx]; deprecated in NVML 13",
    )

    mode = call("(struct)", "nvmlDeviceGetVirtualizationMode")
    derive(
        mode,
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
        "nvmlDeviceGetVirtualizationMode",
        "mode",
        lambda v: _named(nv, "NVML_GPU_VIRTUALIZATION_MODE_", v),
    )
    grid = call("(struct)", "nvmlDeviceGetGridLicensableFeatures")
    derive(grid, "DCGM_FI_DEV_VGPU_LICENSE_STATUS", "nvmlDeviceGetGridLicensableFeatures", "", _grid_features)

    rows = call("(struct)", "nvmlDeviceGetRemappedRows", note="(corr, unc, pending, failure)")
    for dcgm, i, unit in (
        ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", 0, "rows"),
        ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", 1, "rows"),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", 3, "bool"),
    ):
        derive(rows, dcgm, f"nvmlDeviceGetRemappedRows[{i}]", unit, partial(item, i))
    field("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "NVML_FI_DEV_REMAPPED_COR", "rows")
    field("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "NVML_FI_DEV_REMAPPED_UNC", "rows")
    field("DCGM_FI_DEV_ROW_REMAP_FAILURE", "NVML_FI_DEV_REMAPPED_FAILURE", "bool")

    _probe_gpm(rec, nv, gpm_sleep_s)
    for direction in ("TX", "RX"):
        note = "the pre-GPM way: a 20 ms window"
        call(
            f"DCGM_FI_PROF_PCIE_{direction}_BYTES",
            "nvmlDeviceGetPcieThroughput",
            f"NVML_PCIE_UTIL_{direction}_BYTES",
            unit="KB/s",
            note=note,
        )

    # what the collector also reads per tick
    procs = call("(struct)", "nvmlDeviceGetComputeRunningProcesses")
    derive(
        procs,
        "(collector) processes",
        "nvmlDeviceGetComputeRunningProcesses -> [(pid, MiB)]",
        "",
        lambda ps: [(p.pid, None if p.usedGpuMemory is None else mib(p.usedGpuMemory)) for p in ps],
    )
    since = int((time.time() - 5) * 1e6)
    samples = call("(struct)", "nvmlDeviceGetProcessUtilization", since, note="since 5 s ago")
    derive(
        samples,
        "(collector) process SM",
        "nvmlDeviceGetProcessUtilization -> [(pid, sm %)]",
        "",
        lambda ss: [(x.pid, x.smUtil) for x in ss],
    )
    return _finish(rec.entries)


def _finish(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    for entry in entries:
        entry.pop("raw", None)
    return entries


def _named(nv: Nvml, prefix: str, value: int) -> str:
    for key in sorted(dir(nv.m)):
        if key.startswith(prefix) and getattr(nv.m, key) == value:
            return f"{value} ({key})"
    return str(value)


def _grid_features(features: Any) -> dict[str, Any]:
    count = int(features.licensableFeaturesCount)
    items = features.gridLicensableFeatures
    return {
        "isGridLicenseSupported": int(features.isGridLicenseSupported),
        "licensableFeaturesCount": count,
        "features": [
            {
                "featureCode": int(items[i].featureCode),
                "featureState": int(items[i].featureState),
                "featureEnabled": int(items[i].featureEnabled),
                "productName": plain(items[i].productName),
            }
            for i in range(min(count, len(items)))
        ],
    }


def _probe_xid(rec: Recorder, nv: Nvml) -> None:
    h = rec.handle
    dcgm = "DCGM_FI_DEV_XID_ERRORS"
    rec.add(
        dcgm,
        "nvmlDeviceGetSupportedEventTypes",
        "event types",
        lambda: event_names(nv, nv("nvmlDeviceGetSupportedEventTypes", h)),
    )
    created = rec.add(dcgm, "nvmlEventSetCreate", "", lambda: nv("nvmlEventSetCreate"))
    if "error" in created:
        return
    event_set = created["raw"]
    registered = rec.add(
        dcgm,
        "nvmlDeviceRegisterEvents(nvmlEventTypeXidCriticalError)",
        "",
        lambda: nv("nvmlDeviceRegisterEvents", h, nv.const("nvmlEventTypeXidCriticalError"), event_set),
    )
    if "error" not in registered:
        rec.add(
            dcgm,
            "nvmlEventSetWait(100 ms)",
            "last XID",
            lambda: plain(nv("nvmlEventSetWait", event_set, 100)),
            note="NVML_ERROR_TIMEOUT means no XID pending: the set works",
        )
    rec.add(dcgm, "nvmlEventSetFree", "", lambda: nv("nvmlEventSetFree", event_set))


def _probe_gpm(rec: Recorder, nv: Nvml, sleep_s: float) -> None:
    h = rec.handle
    dcgm = "DCGM_FI_PROF_* (GPM)"
    support = rec.add(
        dcgm,
        "nvmlGpmQueryDeviceSupport",
        "",
        lambda: int(nv("nvmlGpmQueryDeviceSupport", h).isSupportedDevice),
    )
    rec.add(dcgm, "nvmlGpmQueryIfStreamingEnabled", "", lambda: nv("nvmlGpmQueryIfStreamingEnabled", h))
    samples: list[Any] = []
    try:
        for i in (1, 2):
            alloc = rec.add(dcgm, f"nvmlGpmSampleAlloc #{i}", "", lambda: nv("nvmlGpmSampleAlloc"))
            if "error" in alloc:
                break
            samples.append(alloc["raw"])
            alloc["value"] = "allocated"
        taken = []
        if len(samples) == 2:
            taken.append(rec.add(dcgm, "nvmlGpmSampleGet #1", "", lambda: _take(nv, h, samples[0])))
            time.sleep(sleep_s)
            taken.append(rec.add(dcgm, "nvmlGpmSampleGet #2", "", lambda: _take(nv, h, samples[1])))
        ready = len(taken) == 2 and not any("error" in t for t in taken)
        why = (
            next((t["error"] for t in taken if "error" in t), None)
            or support.get("error")
            or "no GPM samples"
        )
        metrics = rec.add(
            dcgm,
            f"nvmlGpmMetricsGet ({len(GPM_METRICS)} metrics, samples {sleep_s:g} s apart)",
            "",
            (lambda: _gpm_metrics(nv, samples)) if ready else _raise(why),
        )
        for field_name, metric, unit in GPM_METRICS:
            rec.derive(
                metrics,
                field_name,
                f"nvmlGpmMetricsGet({metric})",
                unit,
                partial(_metric_result, metric),
            )
        if "value" in metrics:
            metrics["value"] = "see the rows below"
    finally:
        for sample in samples:
            with contextlib.suppress(Exception):
                nv("nvmlGpmSampleFree", sample)


def _take(nv: Nvml, h: Any, sample: Any) -> str:
    nv("nvmlGpmSampleGet", h, sample)
    return "taken"


def _raise(name: str) -> Callable[[], Any]:
    def fail() -> Any:
        raise Named(name)

    return fail


def _gpm_metrics(nv: Nvml, samples: list[Any]) -> dict[str, Any]:
    request = nv.m.c_nvmlGpmMetricsGet_t()
    request.version = nv.const("NVML_GPM_METRICS_GET_VERSION")
    ids = []
    for _field, metric, _unit in GPM_METRICS:
        try:
            ids.append((metric, nv.const(metric)))
        except Named:
            continue
    request.numMetrics = len(ids)
    request.sample1 = samples[0]
    request.sample2 = samples[1]
    for i, (_metric, metric_id) in enumerate(ids):
        request.metrics[i].metricId = metric_id
    nv("nvmlGpmMetricsGet", request)
    out: dict[str, Any] = {}
    for i, (metric, _id) in enumerate(ids):
        result = request.metrics[i]
        ret = int(result.nvmlReturn)
        out[metric] = float(result.value) if ret == 0 else {"error": nv.return_name(ret)}
    return out


def _metric_result(metric: str, values: dict[str, Any]) -> Any:
    if metric not in values:
        raise Named(f"PYNVML_LACKS_{metric}")
    value = values[metric]
    if isinstance(value, dict):
        raise Named(value["error"])
    return round(value, 3)
