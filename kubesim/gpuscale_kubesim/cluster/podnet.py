"""The simulated pod network: pod IPs a process on this machine can reach, and
the inference-server pods' ``/metrics`` listening on them.

On Linux all of 127.0.0.0/8 is the loopback interface, so each simulated pod
gets its own loopback address and a collector scrapes
``http://<podIP>:<annotated port><annotated path>`` exactly as it would in a
cluster. Each kube-sim takes a /16 of its own (127.X.0.0, X drawn at random)
and, for a pod that serves metrics, binds the pod's port on the address when
it hands the address out: an address that is taken (another kube-sim on the
machine) is skipped, so two simulators never answer for each other's pods.
The socket starts listening when the pod turns Ready (a model server answers
only once its model is loaded: before, a scrape is refused) and closes when
it stops serving.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
from typing import Any, Final

from aiohttp import web

from gpuscale.aio import sleep_unless_stopped
from gpuscale.logging import OncePerKey, get_logger

from .inference import endpoint_of
from .player import ClusterPlayer

Obj = dict[str, Any]
_TRIES: Final = 64
SYNC_EVERY_S: Final = 0.2
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"


class LoopbackNetwork:
    """Hands out 127.X.B.C addresses; keeps each metrics-serving pod's bound socket."""

    def __init__(self, rng: random.Random | None = None) -> None:
        self.prefix = (rng or random.Random()).randrange(16, 250)  # noqa: S311 - an address block, not a secret
        self._next = 0
        self.sockets: dict[str, socket.socket] = {}  # by pod uid: bound, not yet listening or serving
        self._released: list[socket.socket] = []
        self._log = get_logger(component="kube-sim-podnet")

    def _candidate(self) -> str:
        self._next += 1
        n = self._next % (254 * 254)
        return f"127.{self.prefix}.{n // 254}.{n % 254 + 1}"

    def address(self, pod: Obj) -> str:
        endpoint = endpoint_of(pod)
        ip = self._candidate()
        if endpoint is None:
            return ip
        for _ in range(_TRIES):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            try:
                sock.bind((ip, endpoint.port))
            except OSError:
                sock.close()
                ip = self._candidate()
                continue
            sock.setblocking(False)
            self.sockets[pod["metadata"]["uid"]] = sock
            return ip
        self._log.warning("pod_address_unavailable", pod=pod["metadata"].get("name"), port=endpoint.port)
        return ip

    def release(self, uid: str) -> None:
        sock = self.sockets.pop(uid, None)
        if sock is not None:
            self._released.append(sock)

    def close_released(self) -> None:
        while self._released:
            self._released.pop().close()

    def close(self) -> None:
        for uid in list(self.sockets):
            self.release(uid)
        self.close_released()


class PodServers:
    """Serves each Ready inference-server pod's ``/metrics`` on its own address."""

    def __init__(self, cluster: ClusterPlayer, network: LoopbackNetwork) -> None:
        self.cluster = cluster
        self.network = network
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=0.5)
        self._sites: dict[str, web.SockSite] = {}
        self._by_address: dict[tuple[str, int], tuple[str, str]] = {}  # (ip, port) -> (uid, path)
        self._once = OncePerKey()
        self._log = get_logger(component="kube-sim-pod-servers")
        # A fault for tests and demos: every pod's /metrics answers this much later.
        self.stall_s = 0.0

    async def start(self) -> None:
        await self._runner.setup()

    async def run(self, stop: asyncio.Event) -> None:
        while not stop.is_set():
            try:
                await self.sync()
            except Exception as e:  # noqa: BLE001 - one pod's socket must not stop the others
                if self._once.first("sync", type(e).__name__):
                    self._log.error("pod_servers_sync_failed", error=f"{type(e).__name__}: {e}")
            await sleep_unless_stopped(stop, SYNC_EVERY_S)

    async def sync(self) -> None:
        wanted = self.cluster.serving_endpoints()
        for uid in [u for u in self._sites if u not in wanted]:
            site = self._sites.pop(uid)
            self._by_address = {a: v for a, v in self._by_address.items() if v[0] != uid}
            await site.stop()
            self.network.release(uid)
        started = False
        for uid, (ip, endpoint) in wanted.items():
            if uid in self._sites:
                continue
            sock = self.network.sockets.get(uid)
            if sock is None:
                continue  # no address could be bound for it: it serves nothing
            site = web.SockSite(self._runner, sock)
            await site.start()
            self._sites[uid] = site
            self._by_address[(ip, endpoint.port)] = (uid, endpoint.path)
            started = True
        self.network.close_released()
        if started:
            self.cluster.poke()  # their pods may turn Ready now

    def listening(self, uid: str) -> bool:
        """Whether the pod's server listens (or never will: no address could be bound)."""
        return uid in self._sites or uid not in self.network.sockets

    async def _handle(self, request: web.Request) -> web.Response:
        local = request.transport.get_extra_info("sockname") if request.transport is not None else None
        entry = self._by_address.get((str(local[0]), int(local[1]))) if local else None
        if entry is None or request.path != entry[1]:
            return web.Response(status=404, text="404 page not found\n")
        if request.method not in ("GET", "HEAD"):
            return web.Response(status=405, text="method not allowed\n")
        if self.stall_s > 0:
            await asyncio.sleep(self.stall_s)
        text = self.cluster.engine_metrics(entry[0])
        if text is None:
            return web.Response(status=503, text="engine not ready\n")
        return web.Response(body=text.encode(), headers={"Content-Type": CONTENT_TYPE})

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            await self._runner.cleanup()
        self._sites.clear()
        self.network.close()
