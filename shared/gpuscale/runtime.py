"""Running a service: logging, signals, the HTTP server, graceful shutdown.

A service is ``async def serve(ctx: ServiceContext) -> None``: it sets up,
marks what readiness needs, and returns once ``ctx.stop`` is set and its own
resources are closed. Shutdown goes through that one event (SIGTERM/SIGINT
set it) and must finish within :data:`SHUTDOWN_TIMEOUT_S`.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Final

from gpuscale.http import ServiceHttp
from gpuscale.logging import configure, get_logger
from gpuscale.metrics import ServiceMetrics

SHUTDOWN_TIMEOUT_S: Final = 5.0
_LAG_PERIOD_S: Final = 0.5


@dataclass
class ServiceContext:
    service: str
    settings: Any
    metrics: ServiceMetrics
    http: ServiceHttp
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    log: Any = None


Serve = Callable[[ServiceContext], Coroutine[Any, Any, None]]


async def _watch_loop_lag(metrics: ServiceMetrics, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(_LAG_PERIOD_S)
        metrics.loop_lag.observe(max(0.0, loop.time() - start - _LAG_PERIOD_S))


async def run_async(service: str, settings: Any, serve: Serve, *, http_port: int | None = None) -> int:
    """Run ``serve`` until a signal or until it returns. Returns an exit code."""
    log = get_logger(service=service)
    metrics = ServiceMetrics(service)
    port = http_port if http_port is not None else getattr(settings, "http_port", 0)
    http = ServiceHttp(metrics, port=port)
    ctx = ServiceContext(service, settings, metrics, http, log=log)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, _on_signal, ctx, sig)
    try:
        bound = await http.start()
    except OSError as e:
        log.error("http_port_unavailable", port=port, error=str(e))
        return 1
    log.info("service_starting", http_port=bound)
    lag = asyncio.create_task(_watch_loop_lag(metrics, ctx.stop))
    serve_task = asyncio.create_task(serve(ctx))
    stop_wait = asyncio.create_task(ctx.stop.wait())
    code = 0
    try:
        done, _ = await asyncio.wait({serve_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if serve_task in done:
            exc = serve_task.exception()
            if exc is not None:
                log.error("service_failed", error=f"{type(exc).__name__}: {exc}", exc_info=exc)
                code = 1
        else:
            started = time.monotonic()
            try:
                await asyncio.wait_for(serve_task, SHUTDOWN_TIMEOUT_S)
            except TimeoutError:
                log.warning("shutdown_timeout", after_s=SHUTDOWN_TIMEOUT_S)
            except Exception as e:  # noqa: BLE001 - the service is going away; report, don't trace
                log.error("shutdown_error", error=f"{type(e).__name__}: {e}")
            log.info("service_stopped", shutdown_s=round(time.monotonic() - started, 3))
    finally:
        ctx.stop.set()
        stop_wait.cancel()
        lag.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lag
        await http.stop()
    return code


def _on_signal(ctx: ServiceContext, sig: signal.Signals) -> None:
    if not ctx.stop.is_set():
        ctx.log.info("shutdown_requested", signal=sig.name)
    ctx.stop.set()


def run(service: str, settings: Any, serve: Serve) -> int:
    """Blocking entry point for the CLI."""
    configure(service, getattr(settings, "log_level", "info"))
    try:
        return asyncio.run(run_async(service, settings, serve))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        print(f"{service}: interrupted", file=sys.stderr)
        return 130
