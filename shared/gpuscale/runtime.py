"""Running a service: logging, signals, the HTTP server, graceful shutdown.

``ctx.reopen()`` starts ``serve`` over with a fresh context, as a restarted pod would, while
the HTTP server stays up."""

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
# Starting over after a lost connection: backoff, and how long before /healthz gives up.
_REOPEN_FIRST_S: Final = 0.5
_REOPEN_MAX_S: Final = 30.0
_NOT_LIVE_AFTER_S: Final = 60.0


@dataclass
class ServiceContext:
    service: str
    settings: Any
    metrics: ServiceMetrics
    http: ServiceHttp
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    log: Any = None
    reopened: bool = False  # set by reopen(): start over rather than exit

    def reopen(self) -> None:
        """A resource is lost for good: stop this run and start ``serve`` over."""
        if not self.stop.is_set():
            self.reopened = True
            self.stop.set()


Serve = Callable[[ServiceContext], Coroutine[Any, Any, None]]


async def _watch_loop_lag(metrics: ServiceMetrics, stop: asyncio.Event) -> None:
    loop = asyncio.get_running_loop()
    while not stop.is_set():
        start = loop.time()
        await asyncio.sleep(_LAG_PERIOD_S)
        metrics.loop_lag.observe(max(0.0, loop.time() - start - _LAG_PERIOD_S))


@dataclass
class _Process:
    """What outlives one run of ``serve``: the signal, the HTTP server."""

    shutdown: asyncio.Event = field(default_factory=asyncio.Event)
    current: ServiceContext | None = None
    run_started: float = 0.0  # monotonic start of the current run
    reopening_since: float | None = None  # first start-over of a series that has not settled

    def live(self) -> tuple[bool, str]:
        """Not live when starting over has gone on for a minute and no run
        has lasted: the process is better restarted by Kubernetes."""
        now = time.monotonic()
        since = self.reopening_since
        settled = now - self.run_started > _REOPEN_MAX_S
        if since is not None and not settled and now - since > _NOT_LIVE_AFTER_S:
            return False, f"starting over after lost connections for {now - since:.0f} s"
        return True, "running"


async def run_async(service: str, settings: Any, serve: Serve, *, http_port: int | None = None) -> int:
    """Run ``serve`` until a signal or until it returns. Returns an exit code."""
    log = get_logger(service=service)
    port = http_port if http_port is not None else getattr(settings, "http_port", 0)
    http = ServiceHttp(ServiceMetrics(service), port=port)
    process = _Process()
    http.add_liveness("service", process.live)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, _on_signal, process, sig, log)
    try:
        bound = await http.start()
    except OSError as e:
        log.error("http_port_unavailable", port=port, error=str(e))
        return 1
    log.info("service_starting", http_port=bound)
    delay = _REOPEN_FIRST_S
    try:
        while True:
            metrics = ServiceMetrics(service)  # a fresh start, as a restarted pod would have
            http.metrics = metrics
            ctx = ServiceContext(service, settings, metrics, http, log=log)
            process.current = ctx
            process.run_started = time.monotonic()
            code = await _one_run(ctx, serve, log)
            if not ctx.reopened or process.shutdown.is_set():
                return code
            if time.monotonic() - process.run_started > _REOPEN_MAX_S:  # it had settled: a new series
                process.reopening_since, delay = None, _REOPEN_FIRST_S
            else:
                delay = min(delay * 2, _REOPEN_MAX_S)
            if process.reopening_since is None:
                process.reopening_since = time.monotonic()
            log.warning("service_starting_over", reason="a connection was lost for good", in_s=delay)
            if await _wait(process.shutdown, delay):
                return code
    finally:
        await http.stop()


async def _one_run(ctx: ServiceContext, serve: Serve, log: Any) -> int:
    lag = asyncio.create_task(_watch_loop_lag(ctx.metrics, ctx.stop))
    serve_task = asyncio.create_task(serve(ctx))
    stop_wait = asyncio.create_task(ctx.stop.wait())
    code = 0
    try:
        done, _ = await asyncio.wait({serve_task, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
        if serve_task in done:
            exc = serve_task.exception()
            if exc is not None and hasattr(exc, "remedy"):  # a known start-up fault: one line, no traceback
                log.error(
                    "service_cannot_start",
                    error=str(getattr(exc, "cause", exc)),
                    remedy=str(getattr(exc, "remedy", "")),
                )
                code = 1
            elif exc is not None:
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
            if not ctx.reopened:
                log.info("service_stopped", shutdown_s=round(time.monotonic() - started, 3))
    finally:
        ctx.stop.set()
        stop_wait.cancel()
        lag.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await lag
    return code


async def _wait(event: asyncio.Event, timeout_s: float) -> bool:
    """Wait up to ``timeout_s`` for ``event``; whether it was set."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), timeout_s)
    return event.is_set()


def _on_signal(process: _Process, sig: signal.Signals, log: Any) -> None:
    if not process.shutdown.is_set():
        log.info("shutdown_requested", signal=sig.name)
    process.shutdown.set()
    if process.current is not None:
        process.current.stop.set()


def run(service: str, settings: Any, serve: Serve) -> int:
    """Blocking entry point for the CLI."""
    configure(service, getattr(settings, "log_level", "info"))
    try:
        return asyncio.run(run_async(service, settings, serve))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        print(f"{service}: interrupted", file=sys.stderr)
        return 130
