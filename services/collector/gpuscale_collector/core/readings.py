"""What a backend reads from one GPU at one tick, before attribution. Plain values."""

from __future__ import annotations

from dataclasses import dataclass

from gpuscale.wire import HEALTH_OK, GpuOwner


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """One compute process on a GPU (host PID, as NVML reports it)."""

    pid: int
    fb_used_mib: float | None  # None where the driver does not say (e.g. some MIG/MPS set-ups)
    sm_util: float | None  # % over the last interval; None when NVML had no new sample for it


@dataclass(frozen=True, slots=True)
class DcgmFields:
    """dcgm-exporter's counters beyond the wire sample: served on /metrics only.

    ``values`` holds (DCGM field name, value in dcgm-exporter's unit) for what
    the GPU gave this tick; a field it cannot give is absent, never 0.
    """

    pci_bus_id: str = ""
    driver_version: str = ""
    values: tuple[tuple[str, float], ...] = ()
    xid: int | None = None  # the last XID seen since start (0: none); None: no XID events here


@dataclass(frozen=True, slots=True)
class DeviceReading:
    uuid: str
    index: int
    model: str
    util: float | None = None
    mem_util: float | None = None
    fb_used_mib: float | None = None
    fb_free_mib: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    sm_active: float | None = None
    mig_parent: str | None = None  # parent GPU UUID for a MIG device
    mig_gi: int | None = None  # GPU instance id of a MIG device
    mig_ci: int | None = None  # compute instance id of a MIG device
    health: str = HEALTH_OK
    # None: the backend could not list processes for this GPU (unknown, not "none").
    processes: tuple[ProcessReading, ...] | None = None
    # Owners the backend already knows (the simulated backend); None: attribute here.
    owners: tuple[GpuOwner, ...] | None = None
    # /metrics-only counters (clocks, energy, GPM ratios...); None: the backend has none.
    dcgm: DcgmFields | None = None

    def device_ids(self) -> tuple[str, ...]:
        """Every id the kubelet may use for this device in pod-resources."""
        ids = [self.uuid]
        if self.mig_parent is not None and self.mig_gi is not None and self.mig_ci is not None:
            # The old MIG naming of the device plugin (mig-strategy single/mixed, driver < 470).
            ids.append(f"MIG-{self.mig_parent}/{self.mig_gi}/{self.mig_ci}")
        return tuple(ids)
