"""The small HTTP server every service starts: /healthz, /readyz, /metrics."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuscale.metrics import ServiceMetrics

# A check returns (ok, detail). /readyz is 200 only when every check is ok.
ReadinessCheck = Callable[[], tuple[bool, str]]


class ServiceHttp:
    def __init__(self, metrics: ServiceMetrics, host: str = "0.0.0.0", port: int = 0) -> None:  # noqa: S104 - probes and scrapes come from outside the pod
        self.metrics = metrics
        self.host = host
        self.port = port
        self.app = web.Application()
        self.app.router.add_get("/healthz", self._healthz)
        self.app.router.add_get("/readyz", self._readyz)
        self.app.router.add_get("/metrics", self._metrics)
        self._checks: dict[str, ReadinessCheck] = {}
        self._liveness: dict[str, ReadinessCheck] = {}
        self._runner: web.AppRunner | None = None

    def add_readiness(self, name: str, check: ReadinessCheck) -> None:
        self._checks[name] = check

    def add_liveness(self, name: str, check: ReadinessCheck) -> None:
        """/healthz is 503 while a liveness check fails: Kubernetes restarts the pod."""
        self._liveness[name] = check

    async def start(self) -> int:
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        # The bound port when 0 was asked for (aiohttp types _server as AbstractServer).
        sockets = getattr(site._server, "sockets", None)
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self.port

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _healthz(self, _request: web.Request) -> web.Response:
        results = {name: check() for name, check in self._liveness.items()}
        live = all(ok for ok, _ in results.values())
        body = {
            "status": "ok" if live else "failing",
            "service": self.metrics.service,
            "checks": {name: {"ok": ok, "detail": detail} for name, (ok, detail) in results.items()},
        }
        return web.json_response(body, status=200 if live else 503)

    async def _readyz(self, _request: web.Request) -> web.Response:
        results = {name: check() for name, check in self._checks.items()}
        ready = all(ok for ok, _ in results.values())
        body = {
            "ready": ready,
            "service": self.metrics.service,
            "checks": {name: {"ok": ok, "detail": detail} for name, (ok, detail) in results.items()},
        }
        return web.json_response(body, status=200 if ready else 503)

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self.metrics.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp
