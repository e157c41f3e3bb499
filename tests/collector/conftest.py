"""Helpers for the collector's tests: a scripted NVML device table, a
collector running in-process with a real HTTP server, and a fake proc tree."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from gpuscale.http import ServiceHttp
from gpuscale.metrics import ServiceMetrics
from gpuscale.runtime import ServiceContext
from gpuscale.settings import build
from gpuscale_collector.app import Collector
from gpuscale_collector.backends import nvml_api
from gpuscale_collector.settings import CollectorSettings

from ..waiting import eventually

MIB = 1024 * 1024


def nvml_error(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


@dataclass
class FakeMig:
    uuid: str
    name: str
    gi: int
    ci: int
    used_mib: float = 1000.0
    free_mib: float = 9000.0
    sm_active: float = 40.0
    graphics: float = 55.0
    processes: list[tuple[int, int | None]] = field(default_factory=list)


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA H100 80GB HBM3"
    util: int = 50
    mem_util: int = 20
    used_mib: float = 1024.0
    free_mib: float = 80535.0
    temp_c: int = 41
    power_mw: int = 123_456
    unsupported: set[str] = field(default_factory=set)  # pynvml function names that say NOT_SUPPORTED
    lost: bool = False
    gpm: bool = False
    sm_active: float = 37.5
    graphics: float = 60.0
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, used bytes)
    proc_util: list[tuple[int, int, int]] = field(default_factory=list)  # (pid, ts µs, sm %)
    migs: list[FakeMig] = field(default_factory=list)
    # dcgm-exporter's other counters: defaults are what a real H200 under load returned
    # (bench/results/nvml-h200-2026-11-26), in NVML's own types and units.
    pci_bus_id: str = "00000000:00:06.0"
    sm_clock_mhz: int = 1410
    mem_clock_mhz: int = 3201
    memory_temp_c: int = 47
    energy_mj: int = 12_942_822
    pcie_replays: int = 0
    enc_util: int = 0
    dec_util: int = 0
    reserved_mib: float = 615.1  # v1's used = v2's used + this
    nvlink: bool = True  # an NVLink board; a lone PCIe card (the H200 read) says NOT_SUPPORTED
    nvlink_kib: tuple[int, int] = (1_000_000, 2_000_000)  # (data TX, data RX) KiB, all links
    virtualization_mode: int = 1  # NVML_GPU_VIRTUALIZATION_MODE_PASSTHROUGH
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # (corr, unc, pending, failure)
    tensor_active: float = 89.114  # GPM %
    dram_active: float = 16.119  # GPM %
    pcie_tx_mib_s: float = 1296.993  # GPM MiB/s
    pcie_rx_mib_s: float = 1219.704
    xids: list[int] = field(default_factory=list)  # critical XIDs pending on the event set


class FakeNvml:
    """pynvml's functions replaced by a table of GPUs; counts every call."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.gpus: list[FakeGpu] = []
        self.calls: Counter[tuple[str, str]] = Counter()  # (function, uuid)
        self.library_missing = False
        self._samples: dict[int, Any] = {}  # GPM sample address -> device taken
        self._event_sets: dict[int, list[FakeGpu]] = {}  # event set id -> GPUs registered
        self._next_addr = 0x1000
        for name in dir(self):
            if name.startswith("nvml"):
                monkeypatch.setattr(pynvml, name, getattr(self, name))
        monkeypatch.setattr(nvml_api, "_pynvml", pynvml)

    # --- helpers ---------------------------------------------------------------

    def _dev(self, fn: str, handle: Any, counted: str | None = None) -> Any:
        uuid = handle.uuid
        self.calls[(counted or fn, uuid)] += 1
        gpu = handle if isinstance(handle, FakeGpu) else self._parent_of(handle)
        if gpu.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn in gpu.unsupported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle

    def _parent_of(self, mig: FakeMig) -> FakeGpu:
        return next(g for g in self.gpus if mig in g.migs)

    def count(self, fn: str, uuid: str) -> int:
        return self.calls[(fn, uuid)]

    # --- the pynvml surface the adapter uses ----------------------------------

    def nvmlInit(self) -> None:
        if self.library_missing:
            raise nvml_error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "999.99"

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        gpu = self.gpus[index]
        self.calls[("nvmlDeviceGetHandleByIndex", gpu.uuid)] += 1
        if gpu.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return str(self._dev("nvmlDeviceGetUUID", h).uuid)

    def nvmlDeviceGetName(self, h: Any) -> str:
        return str(self._dev("nvmlDeviceGetName", h).name)

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        g = self._dev("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=g.util, memory=g.mem_util)

    def nvmlDeviceGetMemoryInfo(self, h: Any, version: int | None = None) -> Any:
        if not version:
            g = self._dev("nvmlDeviceGetMemoryInfo", h)
            reserved = getattr(g, "reserved_mib", 0.0)  # v1's used includes the driver's reserve
            return SimpleNamespace(used=int((g.used_mib + reserved) * MIB), free=int(g.free_mib * MIB))
        assert version == pynvml.nvmlMemory_v2
        g = self._dev("nvmlDeviceGetMemoryInfo_v2", h)
        return SimpleNamespace(
            version=version,
            used=int(g.used_mib * MIB),
            free=int(g.free_mib * MIB),
            reserved=int(getattr(g, "reserved_mib", 0.0) * MIB),
        )

    def nvmlDeviceGetTemperature(self, h: Any, _sensor: int) -> int:
        return int(self._dev("nvmlDeviceGetTemperature", h).temp_c)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return int(self._dev("nvmlDeviceGetPowerUsage", h).power_mw)

    def nvmlDeviceGetMigMode(self, h: Any) -> tuple[int, int]:
        g = self._dev("nvmlDeviceGetMigMode", h)
        on = 1 if g.migs else 0
        return on, on

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        return 7 if self._dev("nvmlDeviceGetMaxMigDeviceCount", h).migs else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, slot: int) -> FakeMig:
        g = self._dev("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if slot >= len(g.migs):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return g.migs[slot]  # type: ignore[no-any-return]  # the table is typed loosely

    def nvmlDeviceGetGpuInstanceId(self, h: Any) -> int:
        return int(self._dev("nvmlDeviceGetGpuInstanceId", h).gi)

    def nvmlDeviceGetComputeInstanceId(self, h: Any) -> int:
        return int(self._dev("nvmlDeviceGetComputeInstanceId", h).ci)

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        g = self._dev("nvmlDeviceGetComputeRunningProcesses", h)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in g.processes]

    def nvmlDeviceGetProcessUtilization(self, h: Any, since: int) -> list[Any]:
        g = self._dev("nvmlDeviceGetProcessUtilization", h)
        fresh = [s for s in getattr(g, "proc_util", []) if s[1] > since]
        if not fresh:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return [SimpleNamespace(pid=p, timeStamp=ts, smUtil=sm, memUtil=0) for p, ts, sm in fresh]

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        g = self._dev("nvmlDeviceGetPciInfo", h)
        return SimpleNamespace(busId=g.pci_bus_id.encode(), busIdLegacy=g.pci_bus_id[4:].encode())

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        g = self._dev("nvmlDeviceGetClockInfo", h, counted=f"nvmlDeviceGetClockInfo:{clock}")
        return int(g.sm_clock_mhz if clock == pynvml.NVML_CLOCK_SM else g.mem_clock_mhz)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        return int(self._dev("nvmlDeviceGetTotalEnergyConsumption", h).energy_mj)

    def nvmlDeviceGetPcieReplayCounter(self, h: Any) -> int:
        return int(self._dev("nvmlDeviceGetPcieReplayCounter", h).pcie_replays)

    def nvmlDeviceGetEncoderUtilization(self, h: Any) -> list[int]:
        return [int(self._dev("nvmlDeviceGetEncoderUtilization", h).enc_util), 100_000]  # [%, period µs]

    def nvmlDeviceGetDecoderUtilization(self, h: Any) -> list[int]:
        return [int(self._dev("nvmlDeviceGetDecoderUtilization", h).dec_util), 100_000]

    def nvmlDeviceGetVirtualizationMode(self, h: Any) -> int:
        return int(self._dev("nvmlDeviceGetVirtualizationMode", h).virtualization_mode)

    def nvmlDeviceGetGridLicensableFeatures(self, h: Any) -> Any:
        self._dev("nvmlDeviceGetGridLicensableFeatures", h)
        licensed = SimpleNamespace(featureCode=1, featureState=1, featureEnabled=1)
        return SimpleNamespace(
            isGridLicenseSupported=1, licensableFeaturesCount=1, gridLicensableFeatures=[licensed]
        )

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        return tuple(self._dev("nvmlDeviceGetRemappedRows", h).remapped_rows)  # type: ignore[return-value]  # the table is typed loosely

    def nvmlDeviceGetFieldValues(self, h: Any, field_ids: list[Any]) -> Any:
        g = self._dev("nvmlDeviceGetFieldValues", h)
        values = (pynvml.c_nvmlFieldValue_t * len(field_ids))()
        nvlink = {
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: g.nvlink_kib[0],
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: g.nvlink_kib[1],
        }
        names = {
            getattr(pynvml, n): n
            for n in (
                "NVML_FI_DEV_MEMORY_TEMP",
                *(f for f in dir(pynvml) if f.startswith("NVML_FI_DEV_NVLINK_THROUGHPUT")),
            )
        }
        for i, requested in enumerate(field_ids):
            field_id, scope = requested if isinstance(requested, tuple) else (requested, 0)
            v = values[i]
            v.fieldId, v.scopeId, v.nvmlReturn = field_id, scope, pynvml.NVML_SUCCESS
            if names.get(field_id) in g.unsupported:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif field_id == pynvml.NVML_FI_DEV_MEMORY_TEMP:
                v.valueType, v.value.uiVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT, g.memory_temp_c
            elif field_id in nvlink and g.nvlink and scope == 0xFFFFFFFF:
                v.valueType, v.value.ullVal = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, nvlink[field_id]
            elif field_id in nvlink:
                v.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED  # what the H200 (no NVLink) said
            else:
                v.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
        return values

    def nvmlEventSetCreate(self) -> Any:
        key = len(self._event_sets) + 1
        self._event_sets[key] = []
        return key

    def nvmlDeviceRegisterEvents(self, h: Any, mask: int, event_set: Any) -> None:
        g = self._dev("nvmlDeviceRegisterEvents", h)
        assert mask == pynvml.nvmlEventTypeXidCriticalError
        self._event_sets[event_set].append(g)

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        assert timeout_ms == 0, "the collector must never block on the event set"
        for g in self._event_sets[event_set]:
            self.calls[("nvmlEventSetWait", g.uuid)] += 1
            if g.xids:
                data = pynvml.c_nvmlEventData_t()
                data.eventType = pynvml.nvmlEventTypeXidCriticalError
                data.eventData = g.xids.pop(0)
                return data
        raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        self._event_sets.pop(event_set, None)

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        g = self._dev("nvmlGpmQueryDeviceSupport", h)
        return SimpleNamespace(isSupportedDevice=1 if g.gpm else 0)

    def nvmlGpmSampleAlloc(self) -> Any:
        self._next_addr += 0x1000
        return ctypes.cast(self._next_addr, pynvml.c_nvmlGpmSample_t)

    def nvmlGpmSampleFree(self, _sample: Any) -> None:
        pass

    def nvmlGpmSampleGet(self, h: Any, sample: Any) -> Any:
        g = self._dev("nvmlGpmSampleGet", h)
        self._samples[nvml_api.sample_address(sample) or 0] = g
        return sample

    def nvmlGpmMigSampleGet(self, h: Any, gi: int, sample: Any) -> Any:
        g = self._dev("nvmlGpmMigSampleGet", h)
        mig = next(m for m in g.migs if m.gi == gi)
        self._samples[nvml_api.sample_address(sample) or 0] = mig
        return sample

    def nvmlGpmMetricsGet(self, request: Any) -> Any:
        dev = self._samples[nvml_api.sample_address(request.sample2) or 0]
        for i in range(request.numMetrics):
            metric = request.metrics[i]
            metric.nvmlReturn = pynvml.NVML_SUCCESS
            name = next(
                (
                    n
                    for n, v in vars(pynvml).items()
                    if n.startswith("NVML_GPM_METRIC_") and v == metric.metricId
                ),
                "",
            )
            value = {
                "NVML_GPM_METRIC_SM_UTIL": dev.sm_active,
                "NVML_GPM_METRIC_GRAPHICS_UTIL": dev.graphics,
                "NVML_GPM_METRIC_ANY_TENSOR_UTIL": getattr(dev, "tensor_active", None),
                "NVML_GPM_METRIC_DRAM_BW_UTIL": getattr(dev, "dram_active", None),
                "NVML_GPM_METRIC_PCIE_TX_PER_SEC": getattr(dev, "pcie_tx_mib_s", None),
                "NVML_GPM_METRIC_PCIE_RX_PER_SEC": getattr(dev, "pcie_rx_mib_s", None),
            }.get(name)
            unsupported = name in getattr(dev, "unsupported", set())
            if value is None or unsupported:
                metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            else:
                metric.value = value
        return request


@pytest.fixture
def fake_nvml(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    return FakeNvml(monkeypatch)


def collector_settings(**options: Any) -> CollectorSettings:
    """Settings as the CLI builds them, from option names, ignoring the environment."""
    # NATS on a port nothing listens on unless a test gives its server: never someone else's 4222.
    values = {
        "node_name": "node-a",
        "backend": "sim",
        "interval_s": "0.1",
        "http_port": "0",
        "nats_url": "nats://127.0.0.1:1",
    }
    values.update({k: str(v) for k, v in options.items()})
    return build(CollectorSettings, values, environ={})


@dataclass
class RunningCollector:
    collector: Collector
    ctx: ServiceContext
    task: asyncio.Task[None]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ctx.http.port}"


@contextlib.asynccontextmanager
async def running_collector(
    settings: CollectorSettings, backend: Any = None, wall: Callable[[], float] = time.time
) -> AsyncIterator[RunningCollector]:
    """The collector's serve() in this process with a real HTTP server, as the runtime runs it."""
    metrics = ServiceMetrics("collector")
    http = ServiceHttp(metrics, host="127.0.0.1", port=0)
    await http.start()
    ctx = ServiceContext("collector", settings, metrics, http)
    collector = Collector(ctx, backend=backend, wall=wall)
    task = asyncio.create_task(collector.run())
    try:
        yield RunningCollector(collector, ctx, task)
    finally:
        ctx.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 5.0)
        await http.stop()


@contextlib.asynccontextmanager
async def started_collector(settings: CollectorSettings, backend: Any = None) -> AsyncIterator[Collector]:
    """A started collector whose ticks the test drives itself (``await c.tick(now)``)."""
    metrics = ServiceMetrics("collector")
    ctx = ServiceContext("collector", settings, metrics, ServiceHttp(metrics, port=0))
    collector = Collector(ctx, backend=backend)
    tasks = await collector.start()
    try:
        yield collector
    finally:
        ctx.stop.set()
        await collector.shutdown(tasks)


class ProcTree:
    """A fake /proc: ``<root>/<pid>/cgroup`` files."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def add(self, pid: int, cgroup_text: str) -> None:
        d = self.root / str(pid)
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup").write_text(cgroup_text)


@pytest.fixture
def proc_tree(tmp_path: Path) -> Iterator[ProcTree]:
    root = tmp_path / "proc"
    root.mkdir()
    return ProcTree(root)


@dataclass(frozen=True)
class Kit:
    """The helpers above, for test modules (importlib mode: they cannot import conftest)."""

    settings: Callable[..., CollectorSettings] = collector_settings
    running: Callable[..., Any] = running_collector
    started: Callable[..., Any] = started_collector
    wait_for: Callable[..., Any] = eventually
    Gpu: type[FakeGpu] = FakeGpu
    Mig: type[FakeMig] = FakeMig


@pytest.fixture
def kit() -> Kit:
    return Kit()
