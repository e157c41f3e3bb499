"""NATS plumbing on nats-py: resilient connect, JetStream set-up, drain.

The connection retries forever with backoff (nats-py's reconnect loop, also
for the very first connect), logs every disconnect and reconnect, and keeps
the service's ``nats_connected`` gauge and reconnect counter true. Services
publish through :func:`publish`, which counts ``messages_out``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence

from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from gpuscale.aio import sleep_unless_stopped
from gpuscale.logging import get_logger
from gpuscale.metrics import ServiceMetrics

__all__ = [
    "NATS",
    "connect",
    "drain",
    "ensure_kv",
    "ensure_stream",
    "is_connected",
]


def _tls_context(ca_file: str | None) -> ssl.SSLContext | None:
    if ca_file is None:
        return None
    return ssl.create_default_context(cafile=ca_file)


async def connect(
    servers: Sequence[str],
    metrics: ServiceMetrics,
    *,
    name: str,
    creds: str | None = None,
    tls_ca: str | None = None,
    reconnect_wait_s: float = 1.0,
    stop: asyncio.Event | None = None,
) -> NATS:
    """Connect, retrying forever (with backoff) until the server answers or
    ``stop`` is set. Disconnects after that are nats-py's to heal; we log them."""
    log = get_logger(component="nats", servers=list(servers))
    nc = NATS()
    state = {"was_connected": False}

    async def disconnected_cb() -> None:
        metrics.nats_connected.set(0)
        if state["was_connected"]:
            metrics.nats_disconnects.inc()
            log.warning("nats_disconnected")

    async def reconnected_cb() -> None:
        metrics.nats_connected.set(1)
        metrics.nats_reconnects.inc()
        log.info("nats_reconnected", server=str(nc.connected_url.netloc if nc.connected_url else ""))

    async def error_cb(e: Exception) -> None:
        log.warning("nats_error", error=f"{type(e).__name__}: {e}")

    async def closed_cb() -> None:
        metrics.nats_connected.set(0)
        log.info("nats_closed")

    attempt = 0
    while True:
        try:
            # One pass over the servers per call: with reconnects allowed,
            # nats-py's first connect retries forever inside connect() and
            # never sees ``stop`` (and a cancel can be lost in its wait_for,
            # hanging a shutdown). This loop retries instead, and reconnects
            # are switched on once connected.
            await nc.connect(
                servers=list(servers),
                name=name,
                allow_reconnect=False,
                reconnect_time_wait=reconnect_wait_s,  # type: ignore[arg-type]  # nats-py accepts float seconds; its hint says int
                connect_timeout=2,
                ping_interval=5,
                max_outstanding_pings=3,
                user_credentials=creds,
                tls=_tls_context(tls_ca),
                disconnected_cb=disconnected_cb,
                reconnected_cb=reconnected_cb,
                error_cb=error_cb,
                closed_cb=closed_cb,
                pending_size=64 * 1024 * 1024,
            )
            break
        except Exception as e:
            attempt += 1
            delay = min(reconnect_wait_s * (2 ** min(attempt, 5)), 10.0)
            if attempt == 1 or attempt % 10 == 0:
                log.warning(
                    "nats_connect_failed", attempt=attempt, retry_in_s=delay, error=f"{type(e).__name__}: {e}"
                )
            if stop is not None and stop.is_set():
                raise
            if stop is None:
                await asyncio.sleep(delay)
            else:
                await sleep_unless_stopped(stop, delay)
                if stop.is_set():
                    raise
            nc = NATS()
    nc.options["allow_reconnect"] = True
    nc.options["max_reconnect_attempts"] = -1  # forever: a service outlives any NATS outage
    state["was_connected"] = True
    metrics.nats_connected.set(1)
    log.info("nats_connected", server=str(nc.connected_url.netloc if nc.connected_url else ""))
    return nc


def is_connected(nc: NATS | None) -> tuple[bool, str]:
    """A readiness check."""
    if nc is None:
        return False, "not connected yet"
    if nc.is_connected:
        return True, "connected"
    if nc.is_reconnecting:
        return False, "reconnecting"
    return False, "disconnected"


async def drain(nc: NATS | None, timeout_s: float = 2.0) -> None:
    """Flush what we published and close; never raise on the way out."""
    if nc is None or nc.is_closed:
        return
    try:
        await asyncio.wait_for(nc.drain(), timeout_s)
    except Exception:  # noqa: BLE001 - shutting down: a failed drain still has to close
        with contextlib.suppress(Exception):
            await nc.close()


async def ensure_stream(
    js: JetStreamContext,
    name: str,
    subjects: Sequence[str],
    *,
    max_age_s: float | None = None,
    storage: str = "file",
    duplicate_window_s: float = 120.0,
    max_bytes: int = -1,
    retention: str = "limits",
) -> None:
    """Create the stream, or bring an existing one's config to ours."""
    config = StreamConfig(
        name=name,
        subjects=list(subjects),
        retention=RetentionPolicy(retention),
        storage=StorageType.MEMORY if storage == "memory" else StorageType.FILE,
        max_age=max_age_s,
        max_bytes=max_bytes,
        discard=DiscardPolicy.OLD,
        duplicate_window=duplicate_window_s,
    )
    try:
        await js.stream_info(name)
    except NotFoundError:
        await js.add_stream(config)
        return
    await js.update_stream(config)


async def ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    try:
        await js.add_consumer(stream, config)
    except Exception as e:
        if "consumer name already in use" in str(e) or "already exists" in str(e):
            return
        raise


async def ensure_kv(
    js: JetStreamContext, bucket: str, *, history: int = 1, ttl_s: float | None = None, storage: str = "file"
) -> KeyValue:
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        pass
    return await js.create_key_value(
        KeyValueConfig(
            bucket=bucket,
            history=history,
            ttl=ttl_s,
            storage=StorageType.MEMORY if storage == "memory" else StorageType.FILE,
        )
    )


def headers_msg_id(msg_id: str) -> dict[str, str]:
    """JetStream de-duplication header."""
    return {"Nats-Msg-Id": msg_id}


def jetstream(nc: NATS, timeout_s: float = 5.0) -> JetStreamContext:
    return nc.jetstream(timeout=timeout_s)
