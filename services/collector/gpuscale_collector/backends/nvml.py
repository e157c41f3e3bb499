"""The NVML backend: every GPU on the node through pynvml (nvidia-ml-py).

NVML calls block for milliseconds, so they run on one worker thread, never on the loop."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from gpuscale.logging import get_logger
from gpuscale.wire import HEALTH_OK
from gpuscale_collector.backends import nvml_api as api
from gpuscale_collector.backends.base import BackendUnavailable
from gpuscale_collector.backends.nvml_devices import (
    FIELDS,
    GPM_TO_DCGM,
    MIG_RESCAN_TICKS,
    NVLINK_FIELDS,
    UTIL_UNSUPPORTED,
    Gpm,
    Gpu,
    Mig,
    mig_health,
    pct,
)

# Re-exported: the tests count calls in these units.
from gpuscale_collector.backends.nvml_devices import SLOW_EVERY_TICKS as SLOW_EVERY_TICKS
from gpuscale_collector.backends.nvml_devices import XID_EVENTS_PER_TICK as XID_EVENTS_PER_TICK
from gpuscale_collector.core.exposition import MigInfo
from gpuscale_collector.core.readings import DcgmFields, DeviceReading, ProcessReading

T = TypeVar("T")

LIBRARY_MISSING_HELP = (
    "NVML is not available ({error}): run the collector on a GPU node with the NVIDIA driver "
    "(libnvidia-ml.so.1) mounted into the container, or use --backend sim for simulated GPUs"
)


def init_or_explain() -> None:
    """nvmlInit, or BackendUnavailable with the fix in words."""
    try:
        api.init()
    except api.NvmlLibraryMissing as e:
        raise BackendUnavailable(LIBRARY_MISSING_HELP.format(error=e)) from None
    except api.NvmlError as e:
        raise BackendUnavailable(f"NVML failed to initialise: {e}") from None


class NvmlBackend:
    name = "nvml"
    provides_owners = False

    def __init__(self, on_error: Callable[[str], None] | None = None) -> None:
        self._on_error = on_error or (lambda _call: None)
        self._executor: ThreadPoolExecutor | None = None
        self._gpus: list[Gpu] = []
        self._log = get_logger(component="nvml")
        self._logged: set[tuple[str, ...]] = set()
        self._mig_info: dict[str, MigInfo] = {}
        self._driver = ""
        self._field_ids: dict[str, int] = {}
        self._gpm_ids: dict[str, int] = {}

    # --- lifecycle -----------------------------------------------------------

    async def start(self) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nvml")
        await self._in_thread(self.start_sync)

    def start_sync(self) -> None:
        init_or_explain()
        try:
            count = api.device_count()
        except api.NvmlError as e:
            raise BackendUnavailable(f"NVML cannot count GPUs: {e}") from None
        now_us = api.now_us()
        self._driver = self._driver_version()
        self._field_ids = api.field_ids(FIELDS)
        self._gpm_ids = api.gpm_metric_ids()
        for index in range(count):
            gpu = Gpu(index=index, handle=None, uuid=f"GPU-unknown-{index}", model="")
            try:
                gpu.handle = api.handle_by_index(index)
                gpu.uuid = api.uuid(gpu.handle)
                gpu.model = api.name(gpu.handle)
            except api.NvmlError as e:
                gpu.lost = e.name
                self._once("nvml_gpu_unreadable_at_start", index=index, error=str(e))
            gpu.process_since_us = now_us
            self._gpus.append(gpu)
        self._log.info("nvml_started", gpus=count, driver=self._driver)

    def _driver_version(self) -> str:
        try:
            return api.driver_version()
        except api.NvmlError:
            return "unknown"

    async def close(self) -> None:
        if self._executor is None:
            return
        with contextlib.suppress(api.NvmlError):
            await self._in_thread(self._close_sync)
        self._executor.shutdown(wait=False)
        self._executor = None

    def _close_sync(self) -> None:
        for gpu in self._gpus:
            self._free_xid_events(gpu)
            for gpm in [gpu.gpm, *(m.gpm for m in gpu.migs)]:
                for s in gpm.samples if gpm else ():
                    with contextlib.suppress(api.NvmlError):
                        api.gpm_free(s)
        api.shutdown()

    async def read(self) -> list[DeviceReading]:
        return await self._in_thread(self.read_sync)

    def mig_info(self) -> dict[str, MigInfo]:
        return dict(self._mig_info)

    async def _in_thread(self, fn: Callable[[], T]) -> T:
        if self._executor is None:
            raise RuntimeError("backend not started")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    # --- one tick --------------------------------------------------------------

    def read_sync(self) -> list[DeviceReading]:
        out: list[DeviceReading] = []
        for gpu in self._gpus:
            if gpu.lost is not None and not self._try_recover(gpu):
                out.append(self._unhealthy(gpu))
                continue
            try:
                out.extend(self._read_gpu(gpu))
            except api.NvmlGpuLost as e:
                self._mark_lost(gpu, e)
                out.append(self._unhealthy(gpu))
        return out

    def _unhealthy(self, gpu: Gpu) -> DeviceReading:
        return DeviceReading(uuid=gpu.uuid, index=gpu.index, model=gpu.model, health=gpu.lost or "Unknown")

    def _free_xid_events(self, gpu: Gpu) -> None:
        if gpu.xid_set is not None:
            with contextlib.suppress(api.NvmlError):
                api.free_events(gpu.xid_set)
            gpu.xid_set = None

    def _mark_lost(self, gpu: Gpu, e: api.NvmlError) -> None:
        gpu.lost = e.name
        self._free_xid_events(gpu)
        gpu.slow = {}
        gpu.gpm = None
        gpu.gpm_checked = False
        gpu.migs = []
        self._on_error("gpu_lost")
        self._log.error("gpu_lost", gpu=gpu.index, uuid=gpu.uuid, error=str(e))

    def _try_recover(self, gpu: Gpu) -> bool:
        """One call per tick to see whether a lost GPU answers again."""
        try:
            handle = api.handle_by_index(gpu.index)
            found = api.uuid(handle)
        except api.NvmlError:
            return False
        if gpu.uuid.startswith("GPU-unknown-"):
            with contextlib.suppress(api.NvmlError):
                gpu.model = api.name(handle)
        elif found != gpu.uuid:
            self._log.warning("gpu_replaced", gpu=gpu.index, old_uuid=gpu.uuid, uuid=found)
        gpu.handle, gpu.uuid, gpu.lost = handle, found, None
        gpu.unsupported.clear()
        gpu.pci_bus_id = ""
        gpu.ticks_since_slow = SLOW_EVERY_TICKS
        gpu.process_since_us = api.now_us()
        gpu.ticks_since_mig_scan = MIG_RESCAN_TICKS
        self._log.info("gpu_recovered", gpu=gpu.index, uuid=gpu.uuid)
        return True

    def _optional(self, owner: Gpu | Mig, call: str, fn: Callable[[], T]) -> T | None:
        """Run one NVML call; None when unsupported (then never again) or failing."""
        if call in owner.unsupported:
            return None
        try:
            return fn()
        except api.NvmlGpuLost:
            raise
        except api.NvmlNotSupported as e:
            owner.unsupported.add(call)
            self._on_error(call)
            self._log.info("nvml_call_unsupported", uuid=owner.uuid, call=call, error=e.name)
            return None
        except api.NvmlError as e:
            self._on_error(call)
            self._once("nvml_call_failed", uuid=owner.uuid, call=call, error=e.name)
            return None

    def _once(self, event: str, **kw: Any) -> None:
        key = (event, *(str(v) for v in kw.values()))
        if key not in self._logged:
            self._logged.add(key)
            self._log.warning(event, **kw)

    def _read_gpu(self, gpu: Gpu) -> list[DeviceReading]:
        h = gpu.handle
        gpu.ticks_since_mig_scan += 1
        if gpu.ticks_since_mig_scan >= MIG_RESCAN_TICKS:
            gpu.ticks_since_mig_scan = 0
            self._scan_mig(gpu)
        temp = self._optional(gpu, "temperature", lambda: api.temperature_c(h))
        power = self._optional(gpu, "power", lambda: api.power_w(h))
        device = self._device_fields(gpu)
        if gpu.mig_on:
            # A MIG-enabled parent reports no utilization; its MIG devices are the samples.
            return [self._read_mig(gpu, m, temp, power, device) for m in gpu.migs]
        util = self._optional(gpu, "utilization", lambda: api.utilization(h))
        mem = self._memory(gpu, h)
        gpm = self._gpm_values(gpu, lambda s: api.gpm_sample(h, s))
        processes = self._processes(gpu, h)
        health = HEALTH_OK if util is not None else UTIL_UNSUPPORTED
        return [
            DeviceReading(
                uuid=gpu.uuid,
                index=gpu.index,
                model=gpu.model,
                util=None if util is None else util[0],
                mem_util=None if util is None else util[1],
                fb_used_mib=None if mem is None else round(mem[0], 1),
                fb_free_mib=None if mem is None else round(mem[1], 1),
                temp_c=temp,
                power_w=None if power is None else round(power, 3),
                sm_active=pct(gpm.get("NVML_GPM_METRIC_SM_UTIL")),
                health=health,
                processes=processes,
                dcgm=self._dcgm(gpu, device, mem, gpm),
            )
        ]

    def _memory(self, owner: Gpu | Mig, handle: Any) -> tuple[float, float, float | None] | None:
        """(used, free, reserved) MiB: v2 where the driver has it (used without the reserve,
        as DCGM counts it), else v1 (used includes it) with no reserved figure."""
        v2 = self._optional(owner, "memory_v2", lambda: api.memory_v2_mib(handle))
        if v2 is not None:
            return v2
        if "memory_v2" not in owner.unsupported:
            return None  # v2 failed this tick: no figure rather than v1's different one
        v1 = self._optional(owner, "memory", lambda: api.memory_mib(handle))
        return None if v1 is None else (v1[0], v1[1], None)

    def _device_fields(self, gpu: Gpu) -> list[tuple[str, float]]:
        """The whole board's dcgm-only values this tick (a MIG device shows its parent's)."""
        h = gpu.handle
        if not gpu.pci_bus_id:
            gpu.pci_bus_id = self._optional(gpu, "pci_info", lambda: api.pci_bus_id(h)) or ""
        values: list[tuple[str, float]] = []

        def add(name: str, value: float | None) -> None:
            if value is not None:
                values.append((name, value))

        add("DCGM_FI_DEV_SM_CLOCK", self._optional(gpu, "clock_sm", lambda: api.clock_mhz(h, "SM")))
        add("DCGM_FI_DEV_MEM_CLOCK", self._optional(gpu, "clock_mem", lambda: api.clock_mhz(h, "MEM")))
        add("DCGM_FI_DEV_ENC_UTIL", self._optional(gpu, "encoder_utilization", lambda: api.encoder_util(h)))
        add("DCGM_FI_DEV_DEC_UTIL", self._optional(gpu, "decoder_utilization", lambda: api.decoder_util(h)))
        fields = self._fields(gpu)
        add("DCGM_FI_DEV_MEMORY_TEMP", fields.get("NVML_FI_DEV_MEMORY_TEMP"))
        if fields.keys() >= NVLINK_FIELDS:
            add("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", sum(fields[n] for n in NVLINK_FIELDS))
        values.extend(self._slow_fields(gpu).items())
        self._poll_xid(gpu)
        return values

    def _fields(self, gpu: Gpu) -> dict[str, float]:
        """NVML field values, one call; a field NVML refuses is not asked again."""
        ids = {n: i for n, i in self._field_ids.items() if f"field:{n}" not in gpu.unsupported}
        if not ids:
            return {}
        got = self._optional(
            gpu, "field_values", lambda: api.field_values(gpu.handle, ids, all_links=NVLINK_FIELDS)
        )
        out: dict[str, float] = {}
        for name, value in (got or {}).items():
            if isinstance(value, api.NvmlError):
                self._failed(gpu, f"field:{name}", value)
            else:
                out[name] = value
        return out

    def _slow_fields(self, gpu: Gpu) -> dict[str, float]:
        gpu.ticks_since_slow += 1
        if gpu.ticks_since_slow < SLOW_EVERY_TICKS:
            return gpu.slow
        gpu.ticks_since_slow = 0
        h = gpu.handle
        energy = self._optional(gpu, "total_energy", lambda: api.total_energy_mj(h))
        replays = self._optional(gpu, "pcie_replay_counter", lambda: api.pcie_replays(h))
        rows = self._optional(gpu, "remapped_rows", lambda: api.remapped_rows(h))
        licensed = self._optional(gpu, "vgpu_license", lambda: api.vgpu_licensed(h))
        read = (
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", energy),
            ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", replays),
            ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", None if rows is None else rows[0]),
            ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", None if rows is None else rows[1]),
            ("DCGM_FI_DEV_ROW_REMAP_FAILURE", None if rows is None else rows[2]),
            ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", licensed),
        )
        gpu.slow = {name: value for name, value in read if value is not None}
        return gpu.slow

    def _poll_xid(self, gpu: Gpu) -> None:
        """Take the XIDs pending on the GPU's event set (0 ms waits); keep the last."""
        if gpu.xid_set is None:
            gpu.xid_set = self._optional(gpu, "xid_events", lambda: api.xid_events(gpu.handle))
            if gpu.xid_set is None:
                return
            gpu.xid = gpu.xid or 0
        event_set = gpu.xid_set
        for _ in range(XID_EVENTS_PER_TICK):
            xid = self._optional(gpu, "xid_wait", lambda: api.next_xid(event_set))
            if xid is None:
                return
            if xid != gpu.xid:
                self._log.warning("gpu_xid", gpu=gpu.index, uuid=gpu.uuid, xid=xid)
            gpu.xid = xid

    def _dcgm(
        self,
        gpu: Gpu,
        device: list[tuple[str, float]],
        mem: tuple[float, float, float | None] | None,
        gpm: dict[str, float],
    ) -> DcgmFields:
        values = list(device)
        if mem is not None and mem[2] is not None:
            values.append(("DCGM_FI_DEV_FB_RESERVED", round(mem[2], 1)))
        for metric, value in gpm.items():
            target = GPM_TO_DCGM.get(metric)
            if target is not None:
                values.append((target[0], round(max(value, 0.0) * target[1], 6)))
        return DcgmFields(
            pci_bus_id=gpu.pci_bus_id, driver_version=self._driver, values=tuple(values), xid=gpu.xid
        )

    def _scan_mig(self, gpu: Gpu) -> None:
        enabled = self._optional(gpu, "mig_mode", lambda: api.mig_enabled(gpu.handle))
        if not enabled:
            gpu.mig_on, gpu.migs = False, []
            return
        found: list[Mig] = []
        known = {m.uuid: m for m in gpu.migs}
        for mh in self._optional(gpu, "mig_devices", lambda: api.mig_devices(gpu.handle)) or []:
            try:
                mig_uuid = api.uuid(mh)
                if mig_uuid in known:
                    found.append(known[mig_uuid])
                    continue
                gi, ci = api.mig_ids(mh)
                mig = Mig(mh, mig_uuid, api.name(mh), gi, ci, process_since_us=api.now_us())
            except api.NvmlGpuLost:
                raise
            except api.NvmlError as e:
                self._once("mig_device_unreadable", uuid=gpu.uuid, error=str(e))
                continue
            found.append(mig)
            profile = mig.model.rsplit(" ", 1)[-1] if " MIG " in mig.model else ""
            self._mig_info[mig.uuid] = MigInfo(gpu.index, gi, profile)
        gpu.mig_on, gpu.migs = True, found

    def _read_mig(
        self,
        gpu: Gpu,
        mig: Mig,
        temp: float | None,
        power: float | None,
        device: list[tuple[str, float]],
    ) -> DeviceReading:
        mem = self._memory(mig, mig.handle)
        # MIG devices have no NVML utilization; GPM per GPU instance gives both figures.
        gpm = (
            self._gpm_values(mig, lambda s: api.gpm_mig_sample(gpu.handle, mig.gpu_instance_id, s))
            if self._gpm_parent_ok(gpu)
            else {}
        )
        sm_active = pct(gpm.get("NVML_GPM_METRIC_SM_UTIL"))
        graphics = pct(gpm.get("NVML_GPM_METRIC_GRAPHICS_UTIL"))
        processes = self._processes(mig, mig.handle)
        return DeviceReading(
            uuid=mig.uuid,
            index=gpu.index,
            model=mig.model,
            util=graphics,
            mem_util=None,
            fb_used_mib=None if mem is None else round(mem[0], 1),
            fb_free_mib=None if mem is None else round(mem[1], 1),
            temp_c=temp,
            power_w=power,
            sm_active=sm_active,
            mig_parent=gpu.uuid,
            mig_gi=mig.gpu_instance_id,
            mig_ci=mig.compute_instance_id,
            health=mig_health(graphics, gpm_ok=self._gpm_parent_ok(gpu) and "gpm" not in mig.unsupported),
            processes=processes,
            dcgm=self._dcgm(gpu, device, mem, gpm),
        )

    def _gpm_parent_ok(self, gpu: Gpu) -> bool:
        if not gpu.gpm_checked:
            gpu.gpm_checked = True
            supported = self._optional(gpu, "gpm_support", lambda: api.gpm_supported(gpu.handle))
            if not supported:
                gpu.unsupported.add("gpm")
        return "gpm" not in gpu.unsupported

    def _gpm_values(self, owner: Gpu | Mig, take: Callable[[Any], None]) -> dict[str, float]:
        """GPM metrics over the last interval (NVML's units) from two samples, by metric
        name; empty until two samples exist. A metric NVML refuses is not asked again."""
        if isinstance(owner, Gpu) and not self._gpm_parent_ok(owner):
            return {}
        if "gpm" in owner.unsupported:
            return {}
        if owner.gpm is None:
            allocated = self._optional(owner, "gpm", lambda: [api.gpm_alloc(), api.gpm_alloc()])
            if allocated is None:
                return {}
            owner.gpm = Gpm(allocated)
        gpm = owner.gpm
        current = gpm.samples[gpm.current]
        if self._optional(owner, "gpm_sample", lambda: _done(take, current)) is None:
            gpm.have_previous = False  # the next metric needs two fresh samples
            return {}
        result: dict[str, float] = {}
        ids = {n: i for n, i in self._gpm_ids.items() if f"gpm:{n}" not in owner.unsupported}
        if gpm.have_previous and ids:
            previous = gpm.samples[1 - gpm.current]
            values = self._optional(owner, "gpm_metrics", lambda: api.gpm_metrics(previous, current, ids))
            for name, value in (values or {}).items():
                if isinstance(value, api.NvmlError):
                    self._failed(owner, f"gpm:{name}", value)
                else:
                    result[name] = value
        gpm.have_previous = True
        gpm.current = 1 - gpm.current
        return result

    def _failed(self, owner: Gpu | Mig, call: str, e: api.NvmlError) -> None:
        """One part of a batched call failed: counted, and not asked again if unsupported."""
        self._on_error(call)
        if isinstance(e, api.NvmlNotSupported):
            owner.unsupported.add(call)
            self._log.info("nvml_call_unsupported", uuid=owner.uuid, call=call, error=e.name)
        else:
            self._once("nvml_call_failed", uuid=owner.uuid, call=call, error=e.name)

    def _processes(self, owner: Gpu | Mig, handle: Any) -> tuple[ProcessReading, ...] | None:
        procs = self._optional(owner, "processes", lambda: api.compute_processes(handle))
        since = owner.process_since_us
        samples = self._optional(owner, "process_utilization", lambda: api.process_utilization(handle, since))
        sm_by_pid: dict[int, list[float]] = {}
        for s in samples or ():
            sm_by_pid.setdefault(s.pid, []).append(s.sm_util)
            owner.process_since_us = max(owner.process_since_us, s.timestamp_us)
        if procs is None:
            return None
        return tuple(
            ProcessReading(
                pid=p.pid,
                fb_used_mib=None if p.used_mib is None else round(p.used_mib, 1),
                sm_util=pct(sum(sm_by_pid[p.pid]) / len(sm_by_pid[p.pid])) if p.pid in sm_by_pid else None,
            )
            for p in procs
        )


def _done(take: Callable[[Any], None], sample: Any) -> bool:
    take(sample)
    return True
