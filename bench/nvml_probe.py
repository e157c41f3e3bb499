"""Record what a real GPU gives the collector, and every NVML call behind dcgm-exporter.

Two parts, on a GPU node (no NATS, no Kubernetes):

1. The collector's production NVML backend (``gpuscale_collector.backends.nvml``),
   used as the collector uses it: ``start``, ``read`` once per interval on its
   worker thread, the batch built by the attribution core, checked against the
   wire contract the aggregator applies, and rendered to the collector's
   ``/metrics`` text. ``nvidia-smi``'s figures for the same second sit beside
   each reading when it is there.
2. Every NVML call behind dcgm-exporter's default counters
   (etc/default-counters.csv: clocks, temperatures, power, energy, PCIe
   replays, utilisations, XID events, framebuffer incl. reserved, NVLink,
   vGPU licence, row remapping, driver version, and the PROF_* ratios through
   GPM), each with its value and unit or the exact NVML error name
   (``NVML_ERROR_NOT_SUPPORTED``), taken idle and again under load.

``--load-seconds N`` runs a torch matmul and PCIe copy loop on GPU 0 in a
subprocess, so that utilisation, tensor, DRAM and PCIe figures move; skipped
where torch or CUDA is absent. Every NVML call is wrapped: an error is a
result, never a crash. Without a GPU (or without pynvml) the script records
why and exits 0. Needs only the standard library and pynvml (nvidia-ml-py);
part 1 also needs msgspec, structlog and prometheus-client, and is skipped
(recorded) where they do not import.

    python bench/nvml_probe.py --out "$OUT/nvml" --load-seconds 40
    python bench/nvml_probe.py --seconds 30 --json probe.json   # the older form

Writes ``nvml_probe.json``, ``nvml_probe.md``, ``summary.md`` (one row per
default counter), ``collector_metrics_<phase>.txt``, ``backend_log.jsonl`` and
``load.log`` into ``--out``. Exit code 0, NVML or not; 130 when interrupted
(what was read by then is written).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import importlib.util
import json
import platform
import shutil
import socket
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from functools import partial
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT / "shared", ROOT / "services" / "collector"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))

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

LOAD_CODE = """
import os, sys, time
parent = os.getppid()
try:
    import torch
except Exception as e:
    print(f"no-load torch not importable: {e}", flush=True)
    sys.exit(0)
if not torch.cuda.is_available():
    print("no-load torch sees no CUDA device", flush=True)
    sys.exit(0)
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
host = torch.empty(32 * 1024 * 1024, dtype=torch.uint8).pin_memory()
dev = torch.empty_like(host, device="cuda")
c = a @ b
torch.cuda.synchronize()
print(f"ready {torch.cuda.get_device_name(0)} torch {torch.__version__}", flush=True)
end = time.time() + seconds
rounds = 0
while time.time() < end and os.getppid() == parent:  # ends with the probe, even a killed one
    for _ in range(16):
        c = a @ b  # tensor pipes and DRAM
    dev.copy_(host, non_blocking=True)  # PCIe RX to the GPU
    host.copy_(dev, non_blocking=True)  # PCIe TX from it
    torch.cuda.synchronize()
    rounds += 1
print(f"done rounds={rounds}", flush=True)
"""


# --- small helpers -------------------------------------------------------------------


class Named(Exception):
    """A failure already named: PYNVML_LACKS_<name>, or an NVML_ERROR_* from a field or metric."""


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def plain(v: Any, depth: int = 0) -> Any:
    """A JSON-able copy of what pynvml returns (ctypes structures, bytes, arrays)."""
    if depth > 6:
        return repr(v)
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace").rstrip("\x00")
    if isinstance(v, ctypes.Structure | ctypes.Union):
        return {name: plain(getattr(v, name), depth + 1) for name, *_ in v._fields_}
    if isinstance(v, ctypes.Array):
        return [plain(x, depth + 1) for x in list(v)[:64]]
    if isinstance(v, ctypes._Pointer | ctypes.c_void_p):
        return f"ptr:{ctypes.cast(v, ctypes.c_void_p).value}"
    if isinstance(v, ctypes._SimpleCData):
        return plain(v.value, depth + 1)
    if isinstance(v, list | tuple):
        return [plain(x, depth + 1) for x in v[:256]]
    if isinstance(v, dict):
        return {str(k): plain(x, depth + 1) for k, x in v.items()}
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return plain(dataclasses.asdict(v), depth + 1)
    return repr(v)


class Nvml:
    """pynvml with every failure turned into a name: NVML_ERROR_*, PYNVML_LACKS_*, or the exception."""

    def __init__(self, module: ModuleType) -> None:
        self.m = module
        self._names: dict[int, str] = {}
        for key in sorted(dir(module)):
            if key.startswith("NVML_ERROR_") or key == "NVML_SUCCESS":
                value = getattr(module, key)
                if isinstance(value, int):
                    self._names.setdefault(value, key)

    def const(self, name: str) -> Any:
        if not hasattr(self.m, name):
            raise Named(f"PYNVML_LACKS_{name}")
        return getattr(self.m, name)

    def __call__(self, fn_name: str, *args: Any, **kwargs: Any) -> Any:
        fn = getattr(self.m, fn_name, None)
        if fn is None:
            raise Named(f"PYNVML_LACKS_{fn_name}")
        return fn(*args, **kwargs)

    def error_name(self, e: BaseException) -> str:
        if isinstance(e, Named):
            return str(e)
        if isinstance(e, self.m.NVMLError):
            code = getattr(e, "value", None)
            return self._names.get(code, f"NVML_ERROR_CODE_{code}") if isinstance(code, int) else str(e)
        return f"{type(e).__name__}: {e}"

    def return_name(self, code: int) -> str:
        return self._names.get(int(code), f"NVML_ERROR_CODE_{code}")


class Recorder:
    """One GPU's probe entries: each NVML call timed, its value or error name kept."""

    def __init__(self, nv: Nvml) -> None:
        self.nv = nv
        self.handle: Any = None
        self.entries: list[dict[str, Any]] = []

    def add(self, dcgm: str, call: str, unit: str, fn: Callable[[], Any], note: str = "") -> dict[str, Any]:
        entry: dict[str, Any] = {"dcgm": dcgm, "call": call, "unit": unit}
        t0 = time.perf_counter()
        try:
            raw = fn()
            entry["raw"] = raw
            entry["value"] = plain(raw)
        except Exception as e:  # noqa: BLE001 - a failing call is a result, not a crash
            entry["error"] = self.nv.error_name(e)
        entry["us"] = round((time.perf_counter() - t0) * 1e6, 1)
        if note:
            entry["note"] = note
        self.entries.append(entry)
        return entry

    def call(
        self, dcgm: str, fn_name: str, *args: Any, unit: str = "", note: str = "", system: bool = False
    ) -> dict[str, Any]:
        """fn_name(handle, *args): an argument named NVML_* / nvml* is pynvml's constant of that name."""
        nv = self.nv

        def run() -> Any:
            values = [nv.const(a) if isinstance(a, str) and a.lower().startswith("nvml") else a for a in args]
            return nv(fn_name, *values) if system else nv(fn_name, self.handle, *values)

        label = f"{fn_name}({', '.join(str(a) for a in args)})" if args else fn_name
        return self.add(dcgm, label, unit, run, note)

    def derive(
        self,
        source: dict[str, Any],
        dcgm: str,
        call: str,
        unit: str,
        fn: Callable[[Any], Any],
        note: str = "",
    ) -> None:
        """A row read from an earlier call's result (one NVML call, several counters)."""
        entry: dict[str, Any] = {"dcgm": dcgm, "call": call, "unit": unit, "us": source.get("us")}
        if "error" in source:
            entry["error"] = source["error"]
        else:
            try:
                entry["value"] = plain(fn(source["raw"]))
            except Exception as e:  # noqa: BLE001 - a failing call is a result, not a crash
                entry["error"] = self.nv.error_name(e)
        if note:
            entry["note"] = note
        self.entries.append(entry)

    def field(self, dcgm: str, field_name: str, unit: str, note: str = "") -> None:
        """One NVML field value by itself: its own nvmlReturn and latency."""
        nv = self.nv

        def read() -> Any:
            field_id = nv.const(field_name)
            value = nv("nvmlDeviceGetFieldValues", self.handle, [field_id])[0]
            if value.nvmlReturn != 0:
                raise Named(nv.return_name(value.nvmlReturn))
            return _field_value(value)

        self.add(dcgm, f"nvmlDeviceGetFieldValues({field_name})", unit, read, note)


def _field_value(value: Any) -> Any:
    member = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}
    return getattr(value.value, member.get(int(value.valueType), "ullVal"))


def _mib(v: Any) -> float:
    return round(float(v) / MIB, 1)


def _mib_of(part: str, struct: Any) -> float:
    return _mib(getattr(struct, part))


def _item(i: int, seq: Any) -> Any:
    return seq[i]


def _event_names(nv: Nvml, mask: int) -> list[str]:
    names = []
    for key in sorted(dir(nv.m)):
        if key.startswith("nvmlEventType") and key not in ("nvmlEventTypeAll", "nvmlEventTypeNone"):
            bit = getattr(nv.m, key)
            if isinstance(bit, int) and bit and mask & bit == bit:
                names.append(key)
    return names


# --- part 2: every call behind dcgm-exporter's default counters -------------------------------


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
        lambda m: _mib(m.free),
        collectors,
    )
    note = f"{collectors}; v1 used includes reserved"
    derive(
        m1, "DCGM_FI_DEV_FB_USED", "nvmlDeviceGetMemoryInfo (v1).used", "MiB", lambda m: _mib(m.used), note
    )
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
        derive(m2, dcgm, f"nvmlDeviceGetMemoryInfo_v2.{part}", "MiB", partial(_mib_of, part))

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
        derive(rows, dcgm, f"nvmlDeviceGetRemappedRows[{i}]", unit, partial(_item, i))
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
        lambda ps: [(p.pid, None if p.usedGpuMemory is None else _mib(p.usedGpuMemory)) for p in ps],
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
        lambda: _event_names(nv, nv("nvmlDeviceGetSupportedEventTypes", h)),
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


# --- nvidia-smi and the load -----------------------------------------------------------------


def smi_gpus() -> dict[str, dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    rows: dict[str, dict[str, str]] = {}
    for line in out.stdout.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(SMI_FIELDS):
            row = dict(zip(SMI_FIELDS, values, strict=True))
            rows[row["uuid"]] = row
    return rows


def as_float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "[N/A]", "N/A") else None
    except ValueError:
        return None


class Load:
    """A torch matmul + PCIe copy loop on GPU 0 in a subprocess, if torch and CUDA are there."""

    def __init__(self, seconds: float, log_path: Path) -> None:
        self.seconds = seconds
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self.ready = threading.Event()
        self.finished = threading.Event()
        self.lines: list[str] = []
        self.status = "not requested"

    def start(self, ready_within_s: float) -> None:
        """Start once and wait until the loop runs (or gives up); later calls do nothing."""
        if self.seconds <= 0 or self.status != "not requested":
            return
        if importlib.util.find_spec("torch") is None:
            self.status = "skipped: torch is not importable"
            return
        try:
            log = self.log_path.open("w")
            self.proc = subprocess.Popen(
                [sys.executable, "-c", LOAD_CODE, str(self.seconds)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        except OSError as e:
            self.status = f"not started: {e}"
            return
        threading.Thread(target=self._read, daemon=True).start()
        started = time.monotonic()
        while not self.ready.is_set() and not self.finished.is_set():
            if time.monotonic() - started > ready_within_s:
                break
            self.ready.wait(0.2)
        took = time.monotonic() - started
        if self.ready.is_set():
            self.status = f"running (ready after {took:.1f} s): {self.lines[0]}"
        else:
            self.status = (
                f"not ready after {took:.1f} s: {' | '.join(self.lines) or 'no output (see load.log)'}"
            )

    def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("ready"):
                self.ready.set()
        self.finished.set()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.status += f"; exit {self.proc.returncode}; output: {' | '.join(self.lines[-3:])}"


# --- part 1: the collector's backend -----------------------------------------------------


def import_collector() -> dict[str, Any]:
    """The collector's modules, or ImportError (part 2 goes on without them)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuscale import codec
    from gpuscale import logging as gs_logging
    from gpuscale.wire import SampleBatch, WireError
    from gpuscale_collector.backends.base import BackendUnavailable
    from gpuscale_collector.backends.nvml import NvmlBackend
    from gpuscale_collector.core.attribution import Attribution, build_batch
    from gpuscale_collector.core.cgroup import parse_cgroup
    from gpuscale_collector.prom import CollectorMetrics, DcgmCollector

    return {
        "CollectorRegistry": CollectorRegistry,
        "generate_latest": generate_latest,
        "codec": codec,
        "gs_logging": gs_logging,
        "SampleBatch": SampleBatch,
        "WireError": WireError,
        "BackendUnavailable": BackendUnavailable,
        "NvmlBackend": NvmlBackend,
        "Attribution": Attribution,
        "build_batch": build_batch,
        "parse_cgroup": parse_cgroup,
        "CollectorMetrics": CollectorMetrics,
        "DcgmCollector": DcgmCollector,
    }


async def backend_phase(
    args: argparse.Namespace, report: dict[str, Any], load: Load, save: Callable[[], None]
) -> None:
    section: dict[str, Any] = report.setdefault("backend", {})
    try:
        mods = import_collector()
    except Exception as e:  # noqa: BLE001 - any import failure: part 2 goes on
        section["import_error"] = f"{type(e).__name__}: {e}"
        return
    log_file = (args.out / "backend_log.jsonl").open("w")
    mods["gs_logging"].configure("collector", stream=log_file)
    registry = mods["CollectorRegistry"]()
    metrics = mods["CollectorMetrics"](registry)
    backend = mods["NvmlBackend"](on_error=lambda call: metrics.nvml_errors.labels(call=call).inc())
    last: dict[str, Any] = {"batch": None}
    registry.register(mods["DcgmCollector"](lambda: last["batch"], socket.gethostname(), backend.mig_info))
    reader = mods["codec"].Reader(mods["SampleBatch"])
    ticks: list[dict[str, Any]] = section.setdefault("ticks", [])
    t0 = time.perf_counter()
    try:
        await backend.start()
    except mods["BackendUnavailable"] as e:
        section["unavailable"] = str(e)
        await backend.close()
        log_file.close()
        return
    section["start_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    seq = 0
    try:
        for phase, count in (("idle", args.idle_ticks), ("load", args.seconds)):
            if phase == "load":
                await asyncio.to_thread(load.start, args.load_ready_s)
                report["load"] = {"status": load.status, "pid": load.pid}
                save()
            next_at = time.monotonic()
            for i in range(count):
                next_at += args.interval
                started, cpu_started = time.perf_counter(), time.process_time()
                readings = await backend.read()
                read_ms = (time.perf_counter() - started) * 1000
                cpu_ms = (time.process_time() - cpu_started) * 1000  # all threads: the NVML worker's too
                seq += 1
                batch = mods["build_batch"](
                    NODE, time.time(), seq, args.interval, readings, mods["Attribution"]()
                )
                last["batch"] = batch
                metrics.ticks.inc()
                metrics.gpus.set(len(batch.gpus))
                metrics.tick_seconds.observe(read_ms / 1000)
                tick = {
                    "phase": phase,
                    "tick": i,
                    "read_ms": round(read_ms, 3),
                    "cpu_ms": round(cpu_ms, 3),
                    "readings": [plain(r) for r in readings],
                    "wire": _wire_check(mods, reader, batch),
                    "smi": smi_gpus(),
                }
                ticks.append(tick)
                _print_tick(tick)
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if count:
                text = mods["generate_latest"](registry).decode()
                (args.out / f"collector_metrics_{phase}.txt").write_text(text)
                section[f"metrics_{phase}_lines"] = len(text.splitlines())
                section[f"metrics_{phase}"] = [
                    line
                    for line in text.splitlines()
                    if line.startswith(
                        ("DCGM_", "gpuscale_gpu_", "gpuscale_process_", "gpuscale_collector_nvml")
                    )
                ][:200]
            save()
    finally:
        section["gpus"] = _backend_state(backend)
        section["processes"] = _process_view(mods, ticks, load.pid)
        await backend.close()
        log_file.close()
    with contextlib.suppress(OSError, ValueError):
        section["log_events"] = [
            json.loads(line) for line in (args.out / "backend_log.jsonl").read_text().splitlines()[:200]
        ]


def _wire_check(mods: dict[str, Any], reader: Any, batch: Any) -> dict[str, Any]:
    """What the aggregator's decoder makes of this batch: the wire contract on real readings."""
    try:
        data = mods["codec"].encode(batch)
        _message, rejected = reader.read(data, time.time())
    except mods["WireError"] as e:
        return {"error": f"{e.code}: {e}"}
    except Exception as e:  # noqa: BLE001 - a batch the decoder chokes on is a finding
        return {"error": f"{type(e).__name__}: {e}"}
    return {"bytes": len(data), "rejected": [plain(r) for r in rejected]}


def _backend_state(backend: Any) -> list[dict[str, Any]]:
    """The backend's own view of each GPU after the run (private fields: this is a probe)."""
    out = []
    for gpu in getattr(backend, "_gpus", []):
        out.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "model": gpu.model,
                "unsupported_calls": sorted(gpu.unsupported),
                "gpm_allocated": gpu.gpm is not None,
                "mig_on": gpu.mig_on,
                "mig_devices": [m.uuid for m in gpu.migs],
                "lost": gpu.lost,
            }
        )
    return out


def _process_view(mods: dict[str, Any], ticks: list[dict[str, Any]], load_pid: int | None) -> dict[str, Any]:
    """NVML reports host PIDs: can this process see them, and what pod would the collector find?"""
    pids = sorted({p["pid"] for t in ticks for r in t["readings"] for p in (r.get("processes") or [])})
    seen: dict[str, Any] = {}
    for pid in pids[:32]:
        path = Path("/proc") / str(pid) / "cgroup"
        try:
            text = path.read_text(errors="replace")
        except OSError as e:
            seen[str(pid)] = {"proc": f"unreadable: {type(e).__name__}"}
            continue
        ident = mods["parse_cgroup"](text)
        seen[str(pid)] = {"cgroup": text.strip().splitlines()[:3], "identity": plain(ident)}
    return {"load_pid_here": load_pid, "nvml_pids": pids, "in_this_pid_namespace": seen}


def _print_tick(tick: dict[str, Any]) -> None:
    for r in tick["readings"]:
        s = tick["smi"].get(r.get("mig_parent") or r["uuid"], {})
        procs = r.get("processes")
        print(
            f"  [{tick['phase']} {tick['tick']}] gpu {r['index']} read {tick['read_ms']:.1f} ms:"
            f" util {r['util']} mem {r['mem_util']} fb {r['fb_used_mib']}/{r['fb_free_mib']} MiB"
            f" {r['temp_c']} C {r['power_w']} W sm_active {r['sm_active']} health {r['health']}"
            f" procs {len(procs) if procs is not None else '?'}"
            + (f" | smi util {s.get('utilization.gpu')} power {s.get('power.draw')}" if s else "")
        )


def diffs_vs_smi(ticks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for attr, smi_field in COMPARED:
        values = []
        for t in ticks:
            for r in t["readings"]:
                s = t["smi"].get(r["uuid"])
                mine, theirs = r.get(attr), as_float((s or {}).get(smi_field))
                if s and r.get("mig_parent") is None and mine is not None and theirs is not None:
                    values.append(abs(mine - theirs))
        out[attr] = {
            "mean_abs_diff": round(sum(values) / len(values), 3) if values else None,
            "n": len(values),
        }
    return out


# --- the run ---------------------------------------------------------------------------------


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "when": now_iso(),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "nvidia_smi": shutil.which("nvidia-smi"),
    }
    for dist in ("nvidia-ml-py", "msgspec", "structlog", "prometheus-client", "torch"):
        try:
            env[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            env[dist] = None
    # The first on the path is the one imported; a machine may hold others (its own, ours in .whl).
    env["nvidia-ml-py_all"] = sorted(
        f"{d.version} at {d.locate_file('')}"
        for d in metadata.distributions()
        if (d.metadata["Name"] or "").lower() == "nvidia-ml-py"
    )
    return env


def raw_snapshot(label: str, args: argparse.Namespace, report: dict[str, Any]) -> bool:
    """Part 2 once: init, every GPU, shutdown. False when NVML is not there."""
    snap: dict[str, Any] = {"label": label, "when": now_iso()}
    report.setdefault("snapshots", []).append(snap)
    try:
        import pynvml  # the probe records its absence instead of failing
    except ImportError as e:
        snap["init"] = f"pynvml not importable: {e}"
        return False
    report["environment"]["pynvml_file"] = getattr(pynvml, "__file__", None)
    nv = Nvml(pynvml)
    try:
        nv("nvmlInit")
    except Exception as e:  # noqa: BLE001 - no NVML here is a finding: record it, exit 0
        snap["init"] = nv.error_name(e)
        return False
    snap["init"] = "ok"
    try:
        count = nv("nvmlDeviceGetCount")
        snap["device_count"] = count
        snap["gpus"] = [probe_gpu(nv, i, args.gpm_sleep) for i in range(min(count, args.max_gpus))]
    except Exception as e:  # noqa: BLE001 - record it; the shutdown still runs
        snap["error"] = nv.error_name(e)
        snap["traceback"] = traceback.format_exc()
    finally:
        with contextlib.suppress(Exception):
            nv("nvmlShutdown")
    return True


async def session(args: argparse.Namespace, report: dict[str, Any], save: Callable[[], None]) -> None:
    load = Load(args.load_seconds, args.out / "load.log")
    report["load"] = {"status": load.status}
    try:
        nvml_ok = raw_snapshot("idle", args, report)
        if not nvml_ok:
            print(f"NVML not available: {report['snapshots'][0]['init']}")
        save()
        try:
            # Without NVML too: it records the collector's own start-up message.
            await backend_phase(args, report, load, save)
        except Exception as e:  # noqa: BLE001 - record and go on to part 2
            report.setdefault("backend", {})["error"] = f"{type(e).__name__}: {e}"
            report["backend"]["traceback"] = traceback.format_exc()
        if not nvml_ok:
            return
        await asyncio.to_thread(load.start, args.load_ready_s)  # if the backend phase did not
        running = load.proc is not None and load.proc.poll() is None
        report["load"]["running_at_second_snapshot"] = running
        raw_snapshot("load" if load.ready.is_set() and running else "again", args, report)
    finally:
        load.stop()
        report["load"] = {**report.get("load", {}), "status": load.status, "pid": load.pid}
        ticks = report.get("backend", {}).get("ticks", [])
        if ticks:
            report["backend"]["diff_vs_nvidia_smi"] = diffs_vs_smi(ticks)
            for key in ("read_ms", "cpu_ms"):
                values = sorted(t[key] for t in ticks)
                report["backend"][key] = {"median": values[len(values) // 2], "max": values[-1]}


def _key(entry: dict[str, Any]) -> tuple[str, str]:
    return entry["dcgm"], entry["call"]


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# NVML probe, {env['when']} on {env['host']}",
        "",
        f"python {env['python']}, nvidia-ml-py {env['nvidia-ml-py']}, torch {env['torch']}; load: {report['load']['status']}",
        "",
    ]
    snaps = report.get("snapshots", [])
    if not snaps or snaps[0].get("init") != "ok":
        lines.append(f"**NVML not available**: {snaps[0].get('init') if snaps else 'not tried'}")
    for gi in range(len(snaps[0].get("gpus", [])) if snaps else 0):
        columns = [{_key(e): e for e in s["gpus"][gi]} for s in snaps if gi < len(s.get("gpus", []))]
        labels = [s["label"] for s in snaps if gi < len(s.get("gpus", []))]
        lines += [
            f"## GPU {gi}: every call behind dcgm-exporter's default counters",
            "",
            "| DCGM field | NVML call | " + " | ".join(labels) + " | unit | µs |",
            "|---|---|" + "---|" * len(labels) + "---|---:|",
        ]
        for key, entry in columns[0].items():
            if entry["dcgm"] == "(struct)":
                continue
            cells = " | ".join(_cell(c.get(key, {})) for c in columns)
            note = f" ({entry['note']})" if entry.get("note") else ""
            lines.append(
                f"| {entry['dcgm']} | `{entry['call']}`{note} | {cells} | {entry['unit']} | {entry.get('us', '')} |"
            )
        lines.append("")
    if snaps and snaps[0].get("init") == "ok":
        covered = {e["dcgm"] for s in snaps for g in s.get("gpus", []) for e in g}
        missing = [c for c in DEFAULT_COUNTERS if c not in covered]
        lines += [f"Default counters without a row: {missing or 'none'}", ""]
    lines += _backend_markdown(report.get("backend", {}))
    return "\n".join(lines) + "\n"


def summary(report: dict[str, Any]) -> str:
    """One row per default counter (GPU 0): the first call that answered, idle -> load, or every error."""
    snaps = [s for s in report.get("snapshots", []) if s.get("gpus")]
    env = report["environment"]
    head = [
        f"NVML probe on {env['host']} ({env['when']}): nvidia-ml-py {env['nvidia-ml-py']}; load: {report['load']['status']}"
    ]
    if not snaps:
        init = report.get("snapshots", [{}])[0].get("init", "not tried")
        backend = report.get("backend", {})
        why = backend.get("unavailable") or backend.get("import_error") or backend.get("error") or ""
        return "\n".join([*head, f"NVML not available: {init}", f"collector backend: {why}"]) + "\n"
    rows = ["| DCGM field | NVML call | " + " | ".join(s["label"] for s in snaps) + " |"]
    rows.append("|---|---|" + "---|" * len(snaps))
    for counter in DEFAULT_COUNTERS:
        entries = [e for e in snaps[0]["gpus"][0] if e["dcgm"] == counter]
        if counter == "DCGM_FI_DEV_XID_ERRORS":  # a sequence of calls: each step's outcome
            steps = [_key(e) for e in entries if e["call"] != "nvmlDeviceGetSupportedEventTypes"]
            cells = []
            for s in snaps:
                found = {_key(e): e for e in s["gpus"][0]}
                cells.append(
                    ", ".join(f"{k[1].split('(')[0]}: {found.get(k, {}).get('error', 'ok')}" for k in steps)
                )
            rows.append(f"| {counter} | event set, critical XIDs | " + " | ".join(cells) + " |")
            continue
        working = next((e for e in entries if "error" not in e), None)
        if working is None:
            if not entries:
                rows.append(f"| {counter} | no row |" + " |" * len(snaps))
                continue
            first = entries[0]
            more = f" (and {len(entries) - 1} more, all failed)" if len(entries) > 1 else ""
            cells = [_cell(next((e for e in s["gpus"][0] if _key(e) == _key(first)), {})) for s in snaps]
            rows.append(f"| {counter} | `{first['call']}`{more} | " + " | ".join(cells) + " |")
            continue
        cells = []
        for s in snaps:
            match: dict[str, Any] = next((e for e in s["gpus"][0] if _key(e) == _key(working)), {})
            cells.append(
                _cell(match) + (f" {working['unit']}" if "value" in match and working["unit"] else "")
            )
        rows.append(f"| {counter} | `{working['call']}` | " + " | ".join(cells) + " |")
    backend = report.get("backend", {})
    ticks = backend.get("ticks", [])
    tail = []
    if ticks:
        last = ticks[-1]["readings"][0] if ticks[-1]["readings"] else {}
        tail.append(
            f"collector backend: {len(ticks)} ticks, read ms {backend.get('read_ms')}, CPU ms {backend.get('cpu_ms')},"
            f" last {last.get('util')} % util,"
            f" sm_active {last.get('sm_active')}, health {last.get('health')}, wire {ticks[-1]['wire']};"
            f" unsupported {[g['unsupported_calls'] for g in backend.get('gpus', [])]}"
        )
    else:
        tail.append(
            f"collector backend: {backend.get('unavailable') or backend.get('import_error') or backend.get('error')}"
        )
    return "\n".join([*head, *rows, *tail]) + "\n"


def _cell(entry: dict[str, Any]) -> str:
    if "error" in entry:
        return f"**{entry['error']}**"
    text = json.dumps(entry.get("value"), separators=(",", ":"))
    text = text if len(text) <= 160 else text[:157] + "..."
    return text.replace("|", "\\|")


def _backend_markdown(section: dict[str, Any]) -> list[str]:
    lines = ["## The collector's NVML backend (production code path)", ""]
    for key in ("import_error", "unavailable", "error"):
        if key in section:
            lines.append(f"**{key}**: {section[key]}")
    ticks = section.get("ticks", [])
    if ticks:
        lines += [
            "| phase | tick | gpu | read ms | util | mem% | fb used | fb free | temp | power W | sm_active | health | procs | wire | smi util | smi power |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|",
        ]
        for t in ticks:
            wire = t["wire"].get("error") or (f"{t['wire']['bytes']} B, rejected {t['wire']['rejected']}")
            for r in t["readings"]:
                s = t["smi"].get(r["uuid"], {})
                procs = r.get("processes")
                lines.append(
                    f"| {t['phase']} | {t['tick']} | {r['index']} | {t['read_ms']} | {r['util']} | {r['mem_util']}"
                    f" | {r['fb_used_mib']} | {r['fb_free_mib']} | {r['temp_c']} | {r['power_w']} | {r['sm_active']}"
                    f" | {r['health']} | {len(procs) if procs is not None else '?'} | {wire}"
                    f" | {s.get('utilization.gpu', '')} | {s.get('power.draw', '')} |"
                )
        lines.append("")
    for key in ("start_ms", "read_ms", "cpu_ms", "diff_vs_nvidia_smi", "gpus", "processes", "metrics_load"):
        if key in section:
            lines.append(f"- {key}: `{json.dumps(section[key])}`")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("nvml-probe-out"), help="folder for the results")
    parser.add_argument("--seconds", type=int, default=5, help="backend ticks under load (one per interval)")
    parser.add_argument("--idle-ticks", type=int, default=2, help="backend ticks before the load starts")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument(
        "--load-seconds", "--load", type=float, default=0.0, help="seconds of torch load on GPU 0 (0: none)"
    )
    parser.add_argument(
        "--load-ready-s", type=float, default=90.0, help="how long to wait for the load to start"
    )
    parser.add_argument("--gpm-sleep", type=float, default=1.0, help="seconds between the two GPM samples")
    parser.add_argument("--max-gpus", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON report here")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"environment": environment(), "argv": sys.argv[1:]}

    def save() -> None:
        text = json.dumps(report, indent=1, default=repr)
        (args.out / "nvml_probe.json").write_text(text)
        if args.json is not None:
            args.json.write_text(text)

    started = time.monotonic()
    rc = 0
    try:
        asyncio.run(session(args, report, save))
    except KeyboardInterrupt:  # timeout -s INT: keep what was read
        report["fatal"] = "interrupted"
        rc = 130
    except Exception as e:  # noqa: BLE001 - the record is the product: keep it whatever happened
        report["fatal"] = f"{type(e).__name__}: {e}"
        report["traceback"] = traceback.format_exc()
    finally:
        report["seconds"] = round(time.monotonic() - started, 1)
        save()
        for name, render in (("nvml_probe.md", markdown), ("summary.md", summary)):
            try:
                (args.out / name).write_text(render(report))
            except Exception as e:  # noqa: BLE001 - the JSON is written; a report that fails says why
                (args.out / name).write_text(
                    f"{name} failed: {type(e).__name__}: {e}\n{traceback.format_exc()}"
                )
    print(f"wrote {args.out / 'nvml_probe.json'} and {args.out / 'nvml_probe.md'} in {report['seconds']} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
