"""The small HTTP server every service starts: /healthz, /readyz, /metrics.

Any pod on the network can reach it (no NetworkPolicy holds 9400–9403), so what one
connection may make it hold is bounded: a request's line and headers (a probe or a scrape
sends a few hundred bytes), how long a connection may wait before its request is whole,
and how many connections are open at once (past it the oldest is closed, so a new probe
always gets in). Bad requests are counted and logged once a minute, without a traceback."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gpuscale.logging import LogThrottle, get_logger
from gpuscale.metrics import ServiceMetrics

# What one client may cost: kube-probe and Prometheus send 4–8 headers, each well under 1 KiB.
MAX_CONNECTIONS: Final = 64
MAX_REQUEST_LINE: Final = 2048
MAX_HEADER_FIELD: Final = 4096  # a header's name and value together
MAX_HEADERS: Final = 32
# A connection is closed when it has waited this long for a whole request (idle or not).
IDLE_TIMEOUT_S: Final = 15.0

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
        self._log = get_logger(component="http")
        self._throttle = LogThrottle()

    def add_readiness(self, name: str, check: ReadinessCheck) -> None:
        self._checks[name] = check

    def add_liveness(self, name: str, check: ReadinessCheck) -> None:
        """/healthz is 503 while a liveness check fails: Kubernetes restarts the pod."""
        self._liveness[name] = check

    async def start(self) -> int:
        self._runner = web.AppRunner(
            self.app,
            access_log=None,
            handle_signals=False,
            logger=_RequestErrorLog(self),
            keepalive_timeout=IDLE_TIMEOUT_S,
            max_line_size=MAX_REQUEST_LINE,
            max_field_size=MAX_HEADER_FIELD,
            max_headers=MAX_HEADERS,
        )
        await self._runner.setup()
        server = self._runner.server
        if server is not None:
            server.connection_made = self._bounded(server.connection_made, server)  # type: ignore[method-assign,assignment]
            server.connection_lost = _unhandled_errors_freed(server.connection_lost)  # type: ignore[method-assign,assignment]
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        # The bound port when 0 was asked for (aiohttp types _server as AbstractServer).
        sockets = getattr(site._server, "sockets", None)
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        return self.port

    def _bounded(self, made: Callable[[Any, Any], None], server: Any) -> Callable[[Any, Any], None]:
        """aiohttp's ``Server.connection_made``, closing the oldest connections past the bound."""

        def connection_made(handler: Any, transport: Any) -> None:
            made(handler, transport)
            # Oldest first; one closed already stays listed until its task ends: not again.
            open_now = [h for h in server.connections if h.transport is not None]
            for oldest in open_now[: max(0, len(open_now) - MAX_CONNECTIONS)]:
                oldest.force_close()
                self.refused("too_many_connections", f"more than {MAX_CONNECTIONS} open: closed the oldest")

        return connection_made

    def refused(self, reason: str, detail: str, exc_info: BaseException | None = None) -> None:
        """Count a refused request or connection; a line a minute per reason."""
        self.metrics.http_refused.labels(reason=reason).inc()
        held = self._throttle.allow("http_refused", reason)
        if held is not None:
            self._log.warning(
                "http_refused", reason=reason, detail=detail[:200], suppressed=held, exc_info=exc_info
            )

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


class _RequestErrorLog:
    """aiohttp's request-error logger: counted, one line a minute, no traceback (a client
    that sends a malformed or oversized request costs a counter, not 700 bytes of log)."""

    def __init__(self, http: ServiceHttp) -> None:
        self._http = http

    def debug(self, msg: str, *args: Any, exc_info: Any = None, **_kw: Any) -> None:
        if isinstance(exc_info, BaseException) and type(exc_info).__name__ in _BAD_REQUEST:
            self.exception(msg, *args, exc_info=exc_info)  # aiohttp's quiet case of the same

    def exception(self, msg: str, *args: Any, exc_info: Any = None, **_kw: Any) -> None:
        what = type(exc_info).__name__ if isinstance(exc_info, BaseException) else "error"
        detail = f"{what}: {exc_info}" if exc_info is not None else msg % args
        if what in _BAD_REQUEST:  # the client's request: no traceback
            # Its traceback holds the parser's frame: the chunk read (up to 256 KiB) and the
            # message list holding this exception, a cycle only a full GC frees. Let it go now.
            _drop_tracebacks(exc_info)
            self._http.refused("bad_request", detail)
        else:  # ours: keep the traceback, once a minute
            self._http.refused(
                "handler_error", detail, exc_info if isinstance(exc_info, BaseException) else None
            )

    warning = error = exception


# aiohttp.http_exceptions raised by its parser: the request itself, not our handler.
_BAD_REQUEST: Final = frozenset(
    {
        "BadHttpMessage",
        "BadHttpMethod",
        "BadStatusLine",
        "LineTooLong",
        "InvalidHeader",
        "InvalidURLError",
        "TransferEncodingError",
        "ContentLengthError",
        "HttpProcessingError",
    }
)


def _drop_tracebacks(exc: BaseException | None) -> None:
    """Cut a parser error's tracebacks (and its causes'): they hold the frame that read the
    request, its chunk (up to 256 KiB) and the list holding the error itself, a cycle that
    only a full collection frees, and a full collection may be thousands of requests away."""
    seen: set[int] = set()
    chain = [exc]
    while chain:
        e = chain.pop()
        if e is None or id(e) in seen:  # a chain may loop
            continue
        seen.add(id(e))
        e.__traceback__ = None
        chain += (e.__cause__, e.__context__)


def _unhandled_errors_freed(lost: Callable[[Any, Any], None]) -> Callable[[Any, Any], None]:
    """aiohttp's ``Server.connection_lost``: a client that hangs up before its bad request is
    answered leaves the parser's error queued; free it as :func:`_drop_tracebacks` does."""

    def connection_lost(handler: Any, exc: Any) -> None:
        for msg, _payload in getattr(handler, "_messages", ()):
            _drop_tracebacks(getattr(msg, "exc", None))
        lost(handler, exc)

    return connection_lost
