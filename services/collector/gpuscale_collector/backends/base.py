"""What the collector needs from a source of GPU readings."""

from __future__ import annotations

from typing import Protocol

from gpuscale_collector.core.exposition import MigInfo
from gpuscale_collector.core.readings import DeviceReading


class BackendUnavailable(RuntimeError):
    """The backend cannot start here; the message names the fix."""


class Backend(Protocol):
    name: str
    # True when owners come with the readings (no pod-resources / API needed).
    provides_owners: bool

    async def start(self) -> None: ...

    async def read(self) -> list[DeviceReading]:
        """One reading per GPU (or MIG device) for this tick."""
        ...

    def mig_info(self) -> dict[str, MigInfo]: ...

    async def close(self) -> None: ...
