"""The collector's I/O shell: ticks, backends, attribution sources, NATS, /metrics."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuscale import codec, subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.logging import OncePerKey, get_logger
from gpuscale.natsio import NATS, connect, drain, flush, is_connected, user_expired
from gpuscale.runtime import ServiceContext, run
from gpuscale.steadyclock import SteadyClock
from gpuscale.wire import SampleBatch
from gpuscale_collector.backends.base import Backend, BackendUnavailable
from gpuscale_collector.core.attribution import Attribution, build_batch, pids_to_resolve
from gpuscale_collector.core.buffer import BoundedBuffer
from gpuscale_collector.core.cgroup import CgroupIdentity, parse_cgroup
from gpuscale_collector.core.devices import ContainerRef, owners_by_device
from gpuscale_collector.core.readings import DcgmFields, DeviceReading
from gpuscale_collector.core.schedule import next_tick, node_phase
from gpuscale_collector.prom import CollectorMetrics, DcgmCollector
from gpuscale_collector.settings import CollectorSettings

SERVICE = "collector"
# Re-read the kubelet's pod-resources this often (ticks): pods come and go in seconds, not ms.
POD_RESOURCES_EVERY_TICKS = 5
# While NATS is away, look for its return this often (s).
RECONNECT_POLL_S = 0.2
FLUSH_TIMEOUT_S = 2.0


def make_backend(settings: CollectorSettings, metrics: CollectorMetrics | None = None) -> Backend:
    if settings.backend == "sim":
        from gpuscale_collector.backends.sim import SimBackend  # lazy import: lazy per backend

        return SimBackend(settings.node_name, settings.sim_gpus, settings.sim_source, settings.kubeconfig)
    from gpuscale_collector.backends.nvml import NvmlBackend  # lazy import: lazy per backend

    on_error = None if metrics is None else (lambda call: metrics.nvml_errors.labels(call=call).inc())
    return NvmlBackend(on_error=on_error)


class Publisher:
    """Batches out in order; a bounded buffer while NATS is unreachable.

    A batch leaves the buffer only after a flush round trip confirms the
    server has it; a batch re-sent after a failed flush carries the same
    ``Nats-Msg-Id`` so a JetStream stream on the subject keeps one copy.
    """

    def __init__(self, node: str, capacity: int, metrics: CollectorMetrics, service: Any) -> None:
        self.subject = subjects.samples(node)
        self.node = node
        self.buffer: BoundedBuffer[tuple[str, bytes]] = BoundedBuffer(capacity)
        self.metrics = metrics
        self.service_metrics = service
        self.nc: NATS | None = None
        self._wake = asyncio.Event()
        self._boot = f"{time.time_ns():x}"
        self._dropping = False
        self._log = get_logger(component="publisher", subject=self.subject)

    def submit(self, batch: SampleBatch) -> None:
        msg_id = f"{self.node}.{self._boot}.{batch.seq}"
        dropped = self.buffer.append((msg_id, codec.encode(batch)))
        if dropped:
            self.metrics.buffer_dropped.inc(dropped)
            if not self._dropping:  # once per outage
                self._dropping = True
                self._log.warning("buffer_full_dropping_oldest", capacity=self.buffer.capacity)
        self.metrics.buffer_batches.set(len(self.buffer))
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            if len(self.buffer) and self.nc is not None and self.nc.is_connected:
                await self._flush()
            if len(self.buffer) and not (self.nc is not None and self.nc.is_connected):
                # Waiting for NATS: nats-py reconnects by itself; look again soon.
                await sleep_unless_stopped(stop, RECONNECT_POLL_S)
                continue
            self._wake.clear()
            if len(self.buffer):
                continue
            stopped = asyncio.ensure_future(stop.wait())
            woken = asyncio.ensure_future(self._wake.wait())
            await asyncio.wait({stopped, woken}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            woken.cancel()

    async def _flush(self) -> None:
        nc = self.nc
        if nc is None:
            return
        pending = self.buffer.items()
        try:
            for msg_id, payload in pending:
                await nc.publish(self.subject, payload, headers={"Nats-Msg-Id": msg_id})
            await flush(nc, FLUSH_TIMEOUT_S)  # confirms these batches, not only the PING
        except Exception as e:  # noqa: BLE001 - any NATS failure: keep the batches, retry on reconnect
            self._log.info("publish_deferred", batches=len(pending), error=type(e).__name__)
            await asyncio.sleep(RECONNECT_POLL_S)
            return
        # Only what was sent: new batches may have arrived; some may have been dropped meanwhile.
        sent = {msg_id for msg_id, _ in pending}
        done = 0
        while len(self.buffer) and (head := self.buffer.peek()) is not None and head[0] in sent:
            self.buffer.pop()
            done += 1
        self.service_metrics.messages_out.labels(kind="samples").inc(done)
        self.metrics.buffer_batches.set(len(self.buffer))
        if self._dropping and done:
            self._dropping = False
            self._log.info("buffer_flushed_after_outage", dropped_total=self.buffer.dropped)


def read_token(path: Path) -> str:
    """The NATS auth token, read anew at every (re)connect: the kubelet rotates projected tokens."""
    token = path.read_text(encoding="utf-8").strip()
    if not token:
        raise ValueError(f"the token file {path} is empty")
    return token


class CgroupResolver:
    """PID → pod identity through ``<proc>/<pid>/cgroup``, cached while the PID lives on the GPU."""

    def __init__(self, proc_root: Path) -> None:
        self.proc_root = proc_root
        self._cache: dict[int, CgroupIdentity | None] = {}

    def resolve(self, pids: set[int]) -> dict[int, CgroupIdentity]:
        self._cache = {pid: ident for pid, ident in self._cache.items() if pid in pids}
        for pid in pids - self._cache.keys():
            try:
                text = (self.proc_root / str(pid) / "cgroup").read_text(errors="replace")
            except OSError:
                continue  # gone, or no hostPID: try again next tick
            self._cache[pid] = parse_cgroup(text)
        return {pid: ident for pid, ident in self._cache.items() if ident is not None}


class Collector:
    def __init__(
        self, ctx: ServiceContext, backend: Backend | None = None, *, wall: Callable[[], float] = time.time
    ) -> None:
        """``wall``: the clock samples are stamped and ticks are placed on (a phase of
        the wall clock's seconds, the same on every node)."""
        self.ctx = ctx
        self.wall = wall
        self.settings: CollectorSettings = ctx.settings
        self.log = get_logger(service=SERVICE, node=self.settings.node_name)
        self.metrics = CollectorMetrics(ctx.metrics.registry)
        self.backend = backend or make_backend(self.settings, self.metrics)
        self.publisher = Publisher(
            self.settings.node_name, self.settings.buffer_batches, self.metrics, ctx.metrics
        )
        self.last_batch: SampleBatch | None = None
        # The /metrics-only dcgm fields of the last tick by device UUID (never on the wire).
        self.last_dcgm: dict[str, DcgmFields] = {}
        self.seq = 0
        self.backend_ready = False
        self.device_holders: dict[str, tuple[ContainerRef, ...]] = {}
        self.cgroups = CgroupResolver(self.settings.proc_root)
        self.node_pods: Any = None
        self.pod_resources: Any = None
        self.engines: Any = None  # EngineScraper, when engine metrics are scraped
        self._once = OncePerKey()
        self._pod_resources_ok: bool | None = None
        self._relogin: asyncio.Task[None] | None = None
        ctx.metrics.registry.register(
            DcgmCollector(
                lambda: self.last_batch,
                self.settings.node_name,
                self.backend.mig_info,
                lambda: self.last_dcgm,
            )
        )
        ctx.http.add_readiness("nats", lambda: is_connected(self.publisher.nc))
        ctx.http.add_readiness(
            "backend", lambda: (self.backend_ready, "ready" if self.backend_ready else "starting")
        )

    async def run(self) -> None:
        tasks = await self.start()
        try:
            await self._tick_loop()
        finally:
            await self.shutdown(tasks)

    async def start(self) -> list[asyncio.Task[None]]:
        """Connect NATS (in the background), start the backend and the attribution sources."""
        stop = self.ctx.stop
        tasks: list[asyncio.Task[None]] = [
            asyncio.create_task(self._connect_nats()),
            asyncio.create_task(self.publisher.run(stop)),
        ]
        try:
            await self.backend.start()
        except BaseException:
            await self.shutdown(tasks)
            raise
        self.backend_ready = True
        self.log.info("backend_started", backend=self.backend.name)
        kube_access = self.settings.kubeconfig is not None or bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
        if not self.backend.provides_owners:
            from gpuscale_collector.podresources.client import (
                PodResourcesClient,
            )  # lazy import: pulls in grpc

            self.pod_resources = PodResourcesClient(self.settings.pod_resources_socket)
            if not kube_access:
                self.log.warning(
                    "no_kubernetes_access",
                    detail="no --kubeconfig and not in a pod: workloads fall back to the pod itself",
                )
        # The pod watch: workloads (when the backend does not bring owners) and
        # each GPU pod's IP and metrics annotations (engine metrics).
        if kube_access and (not self.backend.provides_owners or self.settings.engine_metrics):
            from gpuscale_collector.kube_pods import NodePods  # lazy import: reads YAML kubeconfigs

            self.node_pods = NodePods(self.settings.node_name, self.settings.kubeconfig)
            tasks.append(asyncio.create_task(self.node_pods.run(stop)))
        if self.settings.engine_metrics and self.node_pods is not None:
            from gpuscale_collector.engine_scraper import EngineScraper  # lazy import: only when scraping

            self.engines = EngineScraper(
                node=self.settings.node_name,
                interval_s=self.settings.interval_s,
                timeout_s=self.settings.engine_timeout,
                concurrency=self.settings.engine_concurrency,
                registry=self.ctx.metrics.registry,
                limits=self.settings.engine_page_limits,
                parse_budget_s=self.settings.engine_parse_budget_s,
            )
            phase = node_phase(self.settings.node_name, self.settings.interval_s)
            tasks.append(asyncio.create_task(self.engines.run(stop, self._engine_targets, phase)))
        elif self.settings.engine_metrics:
            self.log.info(
                "engine_metrics_off",
                detail="no --kubeconfig and not in a pod: no pod IPs to scrape inference-server metrics from",
            )
        return tasks

    def _engine_targets(self) -> dict[tuple[str, str], Any]:
        """The GPU pods of the last batch, with what the pod watch knows of them."""
        batch, pods = self.last_batch, self.node_pods
        if batch is None or pods is None:
            return {}
        holders = {(o.namespace, o.pod) for g in batch.gpus for o in g.owners}
        return {
            (p.namespace, p.name): p for p in pods.pods_by_uid.values() if (p.namespace, p.name) in holders
        }

    async def shutdown(self, tasks: list[asyncio.Task[None]]) -> None:
        # Last chance to send what is buffered (bounded by the runtime's shutdown timeout).
        nc = self.publisher.nc
        if nc is not None and nc.is_connected and len(self.publisher.buffer):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.publisher._flush(), 1.0)
        if self._relogin is not None:
            tasks = [*tasks, self._relogin]
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await t
        await self.backend.close()
        if self.pod_resources is not None:
            await self.pod_resources.close()
        if self.node_pods is not None:
            await self.node_pods.close()
        await drain(self.publisher.nc)

    async def _connect_nats(self) -> None:
        s = self.settings
        token = None if s.nats_token_file is None else functools.partial(read_token, s.nats_token_file)
        try:
            self.publisher.nc = await connect(
                s.nats_url,
                self.ctx.metrics,
                name=f"gpuscale-collector-{s.node_name}",
                creds=str(s.nats_creds) if s.nats_creds else None,
                token=token,
                tls_ca=str(s.nats_tls_ca) if s.nats_tls_ca else None,
                reconnect_wait_s=0.5,
                stop=self.ctx.stop,
                on_closed=self._nats_closed,
            )
        except Exception:  # noqa: BLE001 - connect only gives up when we are stopping
            return

    def _nats_closed(self) -> None:
        nc = self.publisher.nc
        if nc is not None and user_expired(nc) and not self.ctx.stop.is_set():
            # A short-lived NATS user (gpuscale nats-auth) ended: log in again with the current
            # token; the buffer keeps what comes meanwhile.
            self._relogin = asyncio.create_task(self._connect_nats())
            return
        self.ctx.reopen()

    async def _tick_loop(self) -> None:
        interval = self.settings.interval_s
        phase = node_phase(self.settings.node_name, interval)
        loop = asyncio.get_running_loop()
        wall = self.wall
        steady = SteadyClock(wall, loop.time)  # to tell a step of the wall clock
        due = next_tick(wall(), interval, phase)
        apart = steady.step_s()  # how far the wall clock is from the steady one
        while not self.ctx.stop.is_set():
            delay = due - wall()
            if delay > 0:
                await sleep_unless_stopped(self.ctx.stop, delay)
                if self.ctx.stop.is_set():
                    return
            started = loop.time()
            try:
                await self.tick(wall())
            except Exception as e:
                if self._once.first("tick_failed", type(e).__name__):
                    self.log.error("tick_failed", error=f"{type(e).__name__}: {e}", exc_info=e)
            self.metrics.tick_seconds.observe(loop.time() - started)
            nxt = next_tick(wall(), interval, phase)
            # Slots of the grid passed without a tick (a tick or the event loop too slow);
            # not where the wall clock itself stepped (set forward an hour: no 3,600 skipped).
            before, apart = apart, steady.step_s()
            stepped = abs(apart - before) > interval / 2
            skipped = round((nxt - due) / interval) - 1
            if skipped > 0 and not stepped:
                self.metrics.ticks_skipped.inc(skipped)
            due = nxt

    async def tick(self, now: float) -> SampleBatch:
        readings = await self.backend.read()
        attribution = Attribution()
        if not self.backend.provides_owners:
            attribution = await self._attribution(readings)
        if self.engines is not None:
            engines = self.engines.current(asyncio.get_running_loop().time())
            if engines:
                attribution = dataclasses.replace(attribution, engines=engines)
        self.seq += 1
        batch = build_batch(
            self.settings.node_name, now, self.seq, self.settings.interval_s, readings, attribution
        )
        self.last_batch = batch
        self.last_dcgm = {r.uuid: r.dcgm for r in readings if r.dcgm is not None}
        self.metrics.ticks.inc()
        self.metrics.gpus.set(len(batch.gpus))
        self.publisher.submit(batch)
        return batch

    async def _attribution(self, readings: list[DeviceReading]) -> Attribution:
        if self.seq % POD_RESOURCES_EVERY_TICKS == 0:
            await self._refresh_pod_resources()
        pods = self.node_pods
        return Attribution(
            device_holders=self.device_holders,
            pid_identity=self.cgroups.resolve(pids_to_resolve(readings)),
            pods_by_uid=pods.pods_by_uid if pods is not None else {},
            workloads=pods.workloads if pods is not None else {},
        )

    async def _refresh_pod_resources(self) -> None:
        from gpuscale_collector.podresources.client import PodResourcesUnavailable  # lazy import: see run()

        try:
            assignments = await self.pod_resources.list()
        except PodResourcesUnavailable as e:
            self.metrics.pod_resources_up.set(0)
            self.device_holders = {}
            was_ok, self._pod_resources_ok = self._pod_resources_ok, False
            if was_ok is not False:  # once per outage, not every refresh
                self.log.warning(
                    "pod_resources_unavailable",
                    socket=str(self.settings.pod_resources_socket),
                    error=str(e),
                    detail="samples carry no owners until the kubelet socket answers",
                )
            return
        if self._pod_resources_ok is not True:
            self.log.info("pod_resources_available", socket=str(self.settings.pod_resources_socket))
        self._pod_resources_ok = True
        self.metrics.pod_resources_up.set(1)
        self.device_holders = owners_by_device(assignments)


async def serve(ctx: ServiceContext) -> None:
    await Collector(ctx).run()


def check_backend(settings: CollectorSettings) -> str | None:
    """A fatal start-up problem in words (the CLI exits 2 with it), or None."""
    if settings.backend == "sim":
        if settings.sim_source.strip() != "kube-sim":
            return None
        if settings.kubeconfig is None:
            return "--sim-source kube-sim needs --kubeconfig (or KUBECONFIG): the kube-sim server to read"
        from gpuscale_collector.backends.sim import server_from_kubeconfig  # lazy import: reads YAML

        try:
            server_from_kubeconfig(settings.kubeconfig)
        except BackendUnavailable as e:
            return str(e)
        return None
    from gpuscale_collector.backends import nvml_api  # lazy import: pynvml only for nvml
    from gpuscale_collector.backends.nvml import init_or_explain  # lazy import: pynvml only for nvml

    try:
        init_or_explain()
    except BackendUnavailable as e:
        return str(e)
    with contextlib.suppress(nvml_api.NvmlError):
        nvml_api.shutdown()
    return None


def main(settings: CollectorSettings) -> int:
    problem = check_backend(settings)
    if problem is not None:
        print(f"gpuscale collector: {problem}", file=sys.stderr)
        return 2
    return run(SERVICE, settings, serve)
