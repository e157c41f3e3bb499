"""Simulated GPUs for the demo, docker-compose and tests: a constant, steps, or kube-sim's feed."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from gpuscale.logging import OncePerKey, get_logger
from gpuscale.simfeed import node_gpus_path
from gpuscale_collector.backends.base import BackendUnavailable
from gpuscale_collector.core.exposition import MigInfo
from gpuscale_collector.core.readings import DeviceReading
from gpuscale_collector.core.sim import (
    KUBE_SIM,
    FeedError,
    SimCounters,
    StepLoad,
    parse_load_source,
    readings_from_kube_sim,
    sim_readings,
)


def server_from_kubeconfig(path: Path) -> str:
    """The API server URL of the kubeconfig's current context."""
    import yaml  # lazy import: only the kube-sim source reads kubeconfigs

    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise BackendUnavailable(f"cannot read kubeconfig {path}: {e}") from None
    try:
        contexts = {c["name"]: c["context"] for c in doc.get("contexts") or []}
        clusters = {c["name"]: c["cluster"] for c in doc.get("clusters") or []}
        current = doc.get("current-context") or next(iter(contexts))
        server = str(clusters[contexts[current]["cluster"]]["server"])
    except (KeyError, TypeError, AttributeError, StopIteration):
        raise BackendUnavailable(f"kubeconfig {path} names no server for its current context") from None
    return server.rstrip("/")


class SimBackend:
    name = "sim"
    provides_owners = True

    def __init__(
        self,
        node: str,
        gpus: int,
        source: str,
        kubeconfig: Path | None = None,
    ) -> None:
        self.node = node
        self.gpus = gpus
        self._load: StepLoad | str = parse_load_source(source)
        self._kubeconfig = kubeconfig
        self._started_at = 0.0
        self._session: Any = None
        self._url = ""
        self._log = get_logger(component="sim", node=node)
        self._once = OncePerKey()
        self._counters = SimCounters()
        self._last_read: float | None = None

    async def start(self) -> None:
        self._started_at = time.monotonic()
        if self._load != KUBE_SIM:
            return
        if self._kubeconfig is None:
            raise BackendUnavailable("--sim-source kube-sim needs --kubeconfig (the kube-sim server to read)")
        import aiohttp  # lazy import: only the kube-sim source needs an HTTP client

        self._url = server_from_kubeconfig(self._kubeconfig) + node_gpus_path(self.node)
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0))
        self._log.info("sim_source_kube_sim", url=self._url)

    async def read(self) -> list[DeviceReading]:
        now = time.monotonic()
        if isinstance(self._load, StepLoad):
            readings = sim_readings(self.node, self.gpus, self._load.at(now - self._started_at))
        else:
            readings = await self._read_kube_sim()
        dt = 0.0 if self._last_read is None else now - self._last_read
        self._last_read = now
        return self._counters.advance(readings, dt)

    async def _read_kube_sim(self) -> list[DeviceReading]:
        import aiohttp  # lazy import: already loaded by start()

        try:
            async with self._session.get(self._url) as resp:
                if resp.status == 404:
                    # kube-sim does not know this node (yet): no GPUs to report.
                    if self._once.first("not_found"):
                        self._log.warning("sim_node_unknown", url=self._url)
                    return []
                resp.raise_for_status()
                payload = await resp.json()
            readings = readings_from_kube_sim(payload)
        except FeedError as e:
            if self._once.first("feed", str(e)):
                self._log.warning("sim_source_bad_payload", url=self._url, error=str(e))
            return []
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            reason = type(e).__name__
            if self._once.first("error", reason):
                self._log.warning("sim_source_failed", url=self._url, error=f"{reason}: {e}")
            # A silent source publishes nothing rather than stale values.
            return []
        return readings

    def mig_info(self) -> dict[str, MigInfo]:
        return {}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
