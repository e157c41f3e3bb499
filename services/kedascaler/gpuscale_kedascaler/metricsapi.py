"""The external metrics API over HTTPS, for an APIService: to the API server's front proxy only.

Stale data is a 503 Status, which the HPA reports as FailedGetExternalMetric and does not scale on.

The port is open to any pod (the API server's address matches no NetworkPolicy selector), and
asyncio gives each accepted connection its TLS state and a 256 KiB read buffer before the client
has sent a byte, for up to 60 s: 1,000 silent connections held +300 MiB (the pod's limit is
256 Mi). So the handshake is ours: at most MAX_HANDSHAKES at once (past it the oldest is closed,
so the API server's next one gets in), each closed after HANDSHAKE_TIMEOUT_S; refusals counted
(``gpuscale_kedascaler_requests_total{method="handshake"}``) and logged once a minute.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, Protocol

from aiohttp import web

from . import tls
from .core import external_api
from .core.latest import LatestMetrics, Unavailable
from .detail import cut
from .metrics import KedaScalerMetrics
from .settings import KedaScalerSettings

# The external metrics API takes GETs: no body.
MAX_HTTP_BODY: Final = 16 * 1024
# TLS handshakes under way at once (each ~300 KiB until done: 128 hold ~40 MiB), and how long one
# may take: the API server's, from inside the cluster, takes milliseconds. Under a flood of ~10,000
# new connections a second, 64 let 37% of the API server's handshakes be closed as the oldest, 128
# 31%, 256 6% (77 MiB): the bound trades the pod's memory against a flood it must outlast.
MAX_HANDSHAKES: Final = 128
HANDSHAKE_TIMEOUT_S: Final = 10.0


class ApiService(Protocol):
    """What the API asks of the service: its settings, its store and its counts."""

    settings: KedaScalerSettings
    store: LatestMetrics
    m: KedaScalerMetrics
    log: Any

    def refused(self, api: str, method: str, outcome: str, who: str, detail: str) -> None: ...

    def unavailable(self, api: str, method: str, query: Any, e: Unavailable) -> None: ...


class ExternalMetricsApi:
    """The aiohttp app and its TLS: answers from the service's latest fresh metrics."""

    def __init__(self, service: ApiService) -> None:
        self.service = service
        self.settings = service.settings
        self.port = 0
        self.tls_cert_file: Path | None = None  # the serving certificate
        self._own_tls_dir: Path | None = None  # made here for a self-signed key: removed at stop

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_HTTP_BODY, middlewares=[self._allowed_names])
        base = external_api.BASE_PATH
        routes: list[tuple[str, Callable[[web.Request], Any]]] = [
            ("/apis", lambda _r: external_api.api_group_list()),
            (f"/apis/{external_api.GROUP}", lambda _r: external_api.api_group()),
            (base, lambda _r: external_api.resource_list()),
            (f"{base}/namespaces/{{namespace}}/{{metric}}", self._external_value),
            ("/healthz", lambda _r: {"status": "ok"}),
        ]
        for path, handler in routes:
            app.router.add_route("*", path, self._json_handler(handler))
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    @web.middleware
    async def _allowed_names(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """requestheader-allowed-names: the handshake proved the CA; this, which of its certificates."""
        allowed = self.settings.requestheader_allowed_names
        if allowed and self.settings.client_ca_file is not None:
            name = tls.peer_common_name(
                request.transport.get_extra_info("peercert") if request.transport else None
            )
            if name not in allowed:
                self.service.refused(
                    "external_metrics", "any", "forbidden", str(name), "client certificate name not allowed"
                )
                message = f"client certificate {cut(name, 80)!r} is not one of --requestheader-allowed-names"
                return web.json_response(external_api.status(403, "Forbidden", message), status=403)
        response: web.StreamResponse = await handler(request)
        return response

    def _json_handler(self, handler: Callable[[web.Request], Any]) -> Callable[[web.Request], Any]:
        async def respond(request: web.Request) -> web.Response:
            if request.method not in ("GET", "HEAD"):
                return web.json_response(
                    external_api.status(405, "MethodNotAllowed", f"{request.method} is not supported"),
                    status=405,
                )
            try:
                body = handler(request)
            except external_api.ApiError as e:
                return web.json_response(e.body, status=e.code)
            return web.json_response(body)

        return respond

    async def _not_found(self, request: web.Request) -> web.Response:
        message = f"the server could not find the requested resource {cut(request.path, 200)!r}"
        return web.json_response(external_api.status(404, "NotFound", message), status=404)

    def _external_value(self, request: web.Request) -> Any:
        method = "get_value"
        try:
            query = external_api.parse_request(
                request.match_info["namespace"],
                request.match_info["metric"],
                request.query.get("labelSelector"),
            )
        except external_api.ApiError as e:
            self.service.m.requests.labels(
                api="external_metrics", method=method, outcome="not_found" if e.code == 404 else "invalid"
            ).inc()
            raise
        try:
            reading = self.service.store.read(query, time.time())
        except Unavailable as e:
            self.service.unavailable("external_metrics", method, query.workload, e)
            raise external_api.unavailable(e) from None
        self.service.m.requests.labels(api="external_metrics", method=method, outcome="ok").inc()
        return external_api.value_list(reading)

    async def start(self) -> web.AppRunner:
        settings = self.settings
        if settings.tls_cert_file is not None and settings.tls_private_key_file is not None:
            cert, key = settings.tls_cert_file, settings.tls_private_key_file
        else:
            directory = self._own_tls_dir = Path(tempfile.mkdtemp(prefix="gpuscale-keda-scaler-tls-"))
            cert, key = tls.write_self_signed(directory, "gpuscale-keda-scaler", tls.default_dns_names())
            self.service.log.info("self_signed_certificate", cert=str(cert))
        self.tls_cert_file = cert
        context = tls.server_context(cert, key, None if settings.api_any_client else settings.client_ca_file)
        runner = web.AppRunner(
            self.app(), access_log=None, handle_signals=False, max_line_size=8190, max_headers=64
        )
        await runner.setup()
        site = _HandshakingSite(self, runner, "0.0.0.0", settings.api_port, ssl_context=context)  # noqa: S104 - the API server's aggregator calls from outside the pod
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        self.port = int(sockets[0].getsockname()[1]) if sockets else settings.api_port
        return runner

    def remove_own_tls_dir(self) -> None:
        # A private key the service wrote for itself must not outlive it (nor pile up in /tmp).
        if self._own_tls_dir is not None:
            shutil.rmtree(self._own_tls_dir, ignore_errors=True)
            self._own_tls_dir = None


class _Accepted(asyncio.Protocol):
    """One connection to the HTTPS port while its TLS handshake is under way. What arrives with
    the handshake's last bytes is kept here until aiohttp's handler takes the connection."""

    def __init__(self, site: _HandshakingSite) -> None:
        self.site = site
        self.transport: asyncio.Transport | None = None
        self.early: list[bytes] = []
        self.eof = False
        self.lost = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.pause_reading()  # start_tls reads it, through its own protocol
        self.transport = transport
        self.site.accepted(self)

    def data_received(self, data: bytes) -> None:
        self.early.append(data)

    def eof_received(self) -> None:
        self.eof = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True


class _HandshakingSite(web.TCPSite):
    """aiohttp's TCPSite with the TLS handshake bounded: at most MAX_HANDSHAKES under way (past
    it the oldest is closed: the API server's takes milliseconds, so the oldest is a client's that
    stalls), each at most HANDSHAKE_TIMEOUT_S; a finished one goes to aiohttp's handler."""

    __slots__ = ("_api", "_handshaking")

    def __init__(self, api: ExternalMetricsApi, runner: web.AppRunner, host: str, port: int, *,
                 ssl_context: ssl.SSLContext) -> None:  # fmt: skip
        super().__init__(runner, host, port, ssl_context=ssl_context)
        self._api = api
        self._handshaking: dict[_Accepted, asyncio.Task[None]] = {}  # oldest first

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site; the listening socket is made here
        self._server = await asyncio.get_running_loop().create_server(
            lambda: _Accepted(self),
            self._host,
            self._port,
            backlog=self._backlog,
            reuse_address=self._reuse_address,
            reuse_port=self._reuse_port,
        )

    async def stop(self) -> None:
        await super().stop()
        for conn in list(self._handshaking):
            if conn.transport is not None:
                conn.transport.abort()

    def accepted(self, conn: _Accepted) -> None:
        self._handshaking[conn] = asyncio.get_running_loop().create_task(self._handshake(conn))
        while len(self._handshaking) > MAX_HANDSHAKES:
            oldest = next(iter(self._handshaking))
            del self._handshaking[oldest]  # its task ends when the transport does
            self._refused(
                oldest, "too_many_handshakes", f"more than {MAX_HANDSHAKES} under way: closed the oldest"
            )
            if oldest.transport is not None:
                oldest.transport.abort()

    def _refused(self, conn: _Accepted, outcome: str, detail: str) -> None:
        peer = conn.transport.get_extra_info("peername") if conn.transport is not None else None
        self._api.service.refused("external_metrics", "handshake", outcome, str(peer), detail)

    async def _handshake(self, conn: _Accepted) -> None:
        transport = conn.transport
        context = self._ssl_context
        assert transport is not None
        assert context is not None
        try:
            if transport.is_closing():
                return
            tls = await asyncio.get_running_loop().start_tls(
                transport, conn, context, server_side=True, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S
            )
        except ConnectionAbortedError as e:  # asyncio's handshake timeout
            self._refused(conn, "handshake_timeout", str(e))
            return
        except ssl.SSLError as e:  # no certificate, or one of another CA, or not TLS at all
            self._refused(conn, "handshake_failed", f"{type(e).__name__}: {e}")
            return
        except OSError:  # the client went away
            return
        finally:
            self._handshaking.pop(conn, None)
        server = self._runner.server
        if tls is None or tls.is_closing() or server is None:  # closed while the handshake ended
            transport.abort()
            return
        handler = server()
        tls.set_protocol(handler)
        handler.connection_made(tls)
        for data in conn.early:
            handler.data_received(data)
        conn.early.clear()
        if conn.eof:
            handler.eof_received()
        if conn.lost:
            handler.connection_lost(None)
