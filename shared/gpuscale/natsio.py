"""NATS plumbing on nats-py: resilient connect, why a connect failed, drain."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import ssl
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import unquote, urlsplit, urlunsplit

from nats import errors as nats_errors
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext

from gpuscale.aio import sleep_unless_stopped
from gpuscale.jetstreams import (
    NotSetUp,
    apply_kv,
    apply_stream,
    declare_kv,
    declare_stream,
    ensure_kv,
    ensure_stream,
    stream_config,
)
from gpuscale.logging import get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.subjects import SubjectError, escape_token

__all__ = [
    "NATS",
    "ConnectProblem",
    "NatsUnreachable",
    "NotSetUp",
    "apply_kv",
    "apply_stream",
    "classify_connect_error",
    "connect",
    "connect_once",
    "declare_kv",
    "declare_stream",
    "drain",
    "ensure_kv",
    "ensure_stream",
    "headers_msg_id",
    "inbox_prefix",
    "is_connected",
    "jetstream",
    "login_user",
    "redact",
    "stream_config",
    "user_expired",
    "waiting_reason",
]


# Connections we are closing on purpose (drain): their close is no loss.
_closing: weakref.WeakSet[NATS] = weakref.WeakSet()

# Replies (JetStream API answers, acks, pull and push deliveries) land under
# _INBOX.<role>: deploy/'s permissions let each role subscribe to its own only.
INBOX_ROOT: Final = "_INBOX"


def login_user(servers: Sequence[str]) -> str | None:
    """The NATS user the URLs log in as (the first one named), or None (token, creds, no auth)."""
    for server in servers:
        try:
            username = urlsplit(server).username
        except ValueError:
            continue
        if username:
            return unquote(username)
    return None


def inbox_prefix(role: str) -> str:
    """The reply subjects' prefix of a login as ``role``: ``_INBOX.<role>`` (one escaped token)."""
    try:
        return f"{INBOX_ROOT}.{escape_token(role)}"
    except SubjectError:  # an empty role: still a prefix of its own, never the bare _INBOX
        return f"{INBOX_ROOT}.anonymous"


def redact(url: str) -> str:
    """A server URL fit for a log line: the password replaced, the user kept."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable url>"
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


# How often a service still waiting for NATS says so (and why).
WAITING_LOG_EVERY_S: Final = 30.0


@dataclass(frozen=True)
class ConnectProblem:
    """Why a connect failed, in words a user can act on (never a secret)."""

    cause: str  # refused, unknown_host, auth, not_nats, timeout, tls, other
    detail: str
    remedy: str

    def line(self, servers: Sequence[str]) -> str:
        """One line: where, what, what to do."""
        where = ",".join(redact(s) for s in servers)
        return f"cannot connect to NATS at {where}: {self.detail}; {self.remedy}"


def _chain(e: BaseException | None) -> list[BaseException]:
    seen: list[BaseException] = []
    while e is not None and e not in seen:
        seen.append(e)
        e = e.__cause__ or e.__context__
    return seen


def classify_connect_error(
    error: BaseException | None, last_error: BaseException | None = None
) -> ConnectProblem:
    """Purely computational: the cause of a failed connect from what nats-py raised
    (often only NoServersError or a timeout) and the client's ``last_error`` (the
    real reason, where it kept one)."""
    candidates = [
        c for c in [*_chain(last_error), *_chain(error)] if not isinstance(c, nats_errors.NoServersError)
    ]
    for e in candidates:
        text = str(e).lower()
        if isinstance(e, nats_errors.AuthorizationError) or "authorization violation" in text:
            return ConnectProblem(
                "auth",
                "the server refused the credentials (authorization violation)",
                "check the user and password in --nats-url (or the token/creds file) against the server's",
            )
        if isinstance(e, ConnectionRefusedError):
            return ConnectProblem(
                "refused",
                "connection refused (nothing listens on that port)",
                "start nats-server there, or pass the right host:port with --nats-url",
            )
        if isinstance(e, socket.gaierror):
            return ConnectProblem(
                "unknown_host",
                "unknown host (the name does not resolve)",
                "check the host name in --nats-url",
            )
        if isinstance(e, ssl.SSLError):
            return ConnectProblem(
                "tls", f"TLS failed ({_short(e)})", "check the server's certificate and --nats-tls-ca"
            )
        if "expecting info" in text or "expected info" in text or "unknown protocol" in text:
            return ConnectProblem(
                "not_nats",
                "the port answered, but not as a NATS server does",
                "point --nats-url at the NATS client port (usually 4222), not an HTTP or monitoring port",
            )
    for e in candidates:
        if isinstance(e, TimeoutError | asyncio.TimeoutError | nats_errors.TimeoutError):
            return ConnectProblem(
                "timeout",
                "no answer in time (the port is silent or filtered)",
                "check that the host and port in --nats-url are reachable from here (firewall, network policy)",
            )
    for e in candidates:
        if isinstance(e, OSError):
            return ConnectProblem("other", _short(e), "check the host and port in --nats-url")
    first = candidates[0] if candidates else None
    detail = _short(first) if first is not None else "no answer"
    return ConnectProblem("other", detail, "check --nats-url and that nats-server is running")


def _short(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


# The last reason this process could not connect, for readiness to show until it does.
_waiting_for: dict[str, str] = {}


def waiting_reason(service: str) -> str | None:
    """Why ``service``'s connect loop has not connected yet (one line, no secret), or None."""
    return _waiting_for.get(service)


def _server_of(nc: NATS) -> str:
    url = nc.connected_url
    return f"{url.hostname}:{url.port}" if url is not None else ""


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
    token: Callable[[], str] | None = None,
    tls_ca: str | None = None,
    reconnect_wait_s: float = 1.0,
    stop: asyncio.Event | None = None,
    on_closed: Callable[[], None] | None = None,
) -> NATS:
    """Connect, retrying forever until the server answers or ``stop`` is set.

    ``on_closed`` is called when the server closes the connection (nats-py does not reconnect
    then); ``token`` is called at every (re)connect, so a rotated token is read anew. Replies
    come under the inbox of the URL's NATS user (which deploy/'s permissions are keyed on),
    so no other role can read them. Credentials never reach the logs."""
    inbox = inbox_prefix(login_user(servers) or metrics.service)
    log = get_logger(component="nats", servers=[redact(s) for s in servers], inbox=inbox)
    nc = NATS()
    state = {"was_connected": False}
    errors_seen: set[str] = set()  # logged once each until the next (re)connect
    connect_errors: list[BaseException] = []  # the last real reason a first connect failed

    async def disconnected_cb() -> None:
        metrics.nats_connected.set(0)
        if state["was_connected"] and nc not in _closing:  # a drain on the way out is no loss
            metrics.nats_disconnects.inc()
            log.warning("nats_disconnected")

    async def reconnected_cb() -> None:
        metrics.nats_connected.set(1)
        metrics.nats_reconnects.inc()
        errors_seen.clear()
        log.info("nats_reconnected", server=_server_of(nc))

    async def error_cb(e: Exception) -> None:
        kind = type(e).__name__
        metrics.nats_errors.labels(error=kind).inc()
        if not state["was_connected"]:  # the connect loop says why, with the cause and a remedy
            if not isinstance(e, nats_errors.NoServersError):
                connect_errors[:] = [e]
            return
        if kind not in errors_seen:  # an outage repeats the same error twice a second
            errors_seen.add(kind)
            log.warning(
                "nats_error",
                error=f"{kind}: {e}",
                note="logged once until reconnected; see gpuscale_nats_errors_total",
            )

    async def closed_cb() -> None:
        metrics.nats_connected.set(0)
        if nc in _closing or not state["was_connected"]:
            log.info("nats_closed")
            return
        if user_expired(nc):
            log.info("nats_user_expired", detail="the server ended this login's lifetime; logging in again")
            if on_closed is not None:
                on_closed()
            return
        metrics.nats_connection_lost.inc()
        log.error(
            "nats_connection_lost",
            last_error=f"{type(nc.last_error).__name__}: {nc.last_error}" if nc.last_error else "",
        )
        if on_closed is not None:
            on_closed()

    attempt = 0
    first_failure: float | None = None
    last_said = 0.0
    try:
        while True:
            try:
                # One pass per call: nats-py's own first-connect retries never see ``stop``;
                # reconnects are switched on once connected.
                await nc.connect(
                    servers=list(servers),
                    name=name,
                    allow_reconnect=False,
                    max_reconnect_attempts=1,  # nats-py's default (60) keeps one call busy for a minute
                    reconnect_time_wait=reconnect_wait_s,  # type: ignore[arg-type]  # nats-py accepts float seconds; its hint says int
                    connect_timeout=2,
                    ping_interval=5,
                    max_outstanding_pings=3,
                    user_credentials=creds,
                    token=token,
                    tls=_tls_context(tls_ca),
                    disconnected_cb=disconnected_cb,
                    reconnected_cb=reconnected_cb,
                    error_cb=error_cb,
                    closed_cb=closed_cb,
                    pending_size=64 * 1024 * 1024,
                    inbox_prefix=inbox,
                )
                break
            except Exception as e:
                attempt += 1
                # A refused connect is cheap: retry within 2 s, as nats-py's own loop did, so a
                # service started before NATS is on it within moments of NATS coming up.
                delay = min(reconnect_wait_s * attempt, 2.0)
                problem = classify_connect_error(e, connect_errors[0] if connect_errors else nc.last_error)
                _waiting_for[metrics.service] = problem.line(servers)
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                if attempt == 1 or now - last_said >= WAITING_LOG_EVERY_S:
                    last_said = now
                    log.warning(
                        "nats_connect_failed" if attempt == 1 else "nats_still_waiting",
                        attempt=attempt,
                        waiting_s=round(now - first_failure),
                        retry_in_s=delay,
                        cause=problem.cause,
                        error=problem.detail,
                        remedy=problem.remedy,
                    )
                if stop is not None and stop.is_set():
                    raise
                if stop is None:
                    await asyncio.sleep(delay)
                elif await sleep_unless_stopped(stop, delay):
                    raise
                nc = NATS()
    finally:
        _waiting_for.pop(metrics.service, None)  # connected, stopped or cancelled: no longer waiting
    nc.options["allow_reconnect"] = True
    nc.options["max_reconnect_attempts"] = -1  # forever: a service outlives any NATS outage
    state["was_connected"] = True
    metrics.nats_connected.set(1)
    log.info("nats_connected", server=_server_of(nc))
    return nc


class NatsUnreachable(Exception):
    """A command-line connect failed: ``str()`` is one line, cause and remedy, no secret."""

    def __init__(self, problem: ConnectProblem, servers: Sequence[str]) -> None:
        super().__init__(problem.line(servers))
        self.problem = problem


async def connect_once(
    servers: Sequence[str],
    *,
    name: str,
    timeout_s: float = 5.0,
    creds: str | os.PathLike[str] | None = None,
    tls_ca: str | os.PathLike[str] | None = None,
) -> NATS:
    """For a command run by a person: one try at each server, then
    :class:`NatsUnreachable` saying why, rather than retrying forever."""
    nc = NATS()
    seen: list[BaseException] = []

    async def error_cb(e: Exception) -> None:
        if not isinstance(e, nats_errors.NoServersError):
            seen[:] = [e]

    try:
        await asyncio.wait_for(
            nc.connect(
                servers=list(servers),
                name=name,
                allow_reconnect=False,
                max_reconnect_attempts=1,
                reconnect_time_wait=0.2,  # type: ignore[arg-type]  # nats-py accepts float seconds; its hint says int
                connect_timeout=max(1, round(timeout_s / 2)),
                user_credentials=os.fspath(creds) if creds else None,
                tls=_tls_context(os.fspath(tls_ca) if tls_ca else None),
                error_cb=error_cb,
                inbox_prefix=inbox_prefix(login_user(servers) or name),
            ),
            timeout_s,
        )
    except Exception as e:  # noqa: BLE001 - every failure is explained the same way
        with contextlib.suppress(Exception):
            await nc.close()
        problem = classify_connect_error(e, seen[0] if seen else nc.last_error)
        if problem.cause == "timeout" and await _answers_http(servers):
            problem = ConnectProblem(
                "not_nats",
                "the port answers HTTP, not as a NATS server does",
                "point --nats-url at the NATS client port (usually 4222), not an HTTP or monitoring port",
            )
        raise NatsUnreachable(problem, servers) from None
    return nc


async def _answers_http(servers: Sequence[str], timeout_s: float = 2.0) -> bool:
    """Whether the first server's port is an HTTP server (NATS speaks first; HTTP waits to be asked)."""
    try:
        parts = urlsplit(servers[0])
        host, port = parts.hostname or "127.0.0.1", parts.port or 4222
    except (ValueError, IndexError):
        return False
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout_s)
        writer.write(b"HEAD / HTTP/1.0\r\n\r\n")
        first = await asyncio.wait_for(reader.read(5), timeout_s)
        return first.startswith(b"HTTP/")
    except (OSError, TimeoutError):
        return False
    finally:
        if writer is not None:
            writer.close()


def user_expired(nc: NATS) -> bool:
    """Whether the server closed ``nc`` because its user's JWT expired (an auth callout's
    short-lived user): a fresh login with current credentials is the cure, not a restart."""
    return "authentication expired" in str(nc.last_error or "").lower()


def is_connected(nc: NATS | None) -> tuple[bool, str]:
    """A readiness check."""
    if nc is None:
        waiting = next(iter(_waiting_for.values()), None)
        return False, f"not connected yet: {waiting}" if waiting else "not connected yet"
    if nc.is_connected:
        return True, "connected"
    if nc.is_reconnecting:
        return False, "reconnecting"
    return False, "disconnected"


async def flush(nc: NATS, timeout_s: float = 10.0) -> None:
    """A round trip after everything published or subscribed before it: the server has it.

    nats-py writes its flush PING straight to the socket, ahead of commands its flusher has not
    written yet, so its PONG alone can come back for a publish the server never saw (lost when
    the connection then closes) or a subscription it does not know yet. Raises as nats-py's
    ``flush`` does (``FlushTimeoutError`` after ``timeout_s``, 10 s as nats-py's)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    before = nc.pending_data_size
    await asyncio.sleep(0)  # the flusher's turn
    # The buffer only grows until the flusher writes it all: a smaller one has been written
    # (other tasks may keep publishing, so it need not reach 0).
    while before and nc.is_connected and nc.pending_data_size >= before:
        if loop.time() >= deadline:
            raise nats_errors.FlushTimeoutError
        before = nc.pending_data_size
        await asyncio.sleep(0.001)
    try:
        await nc.flush(timeout=max(deadline - loop.time(), 0.001))  # type: ignore[arg-type]  # nats-py takes float seconds; its hint says int
    except BaseException:  # timed out, or the caller's deadline cancelled it
        _stand_in_for_given_up_pings(nc)
        raise


def _stand_in_for_given_up_pings(nc: NATS) -> None:
    """nats-py leaves a given-up flush's cancelled PING future in the list its PONGs resolve in
    order, and its read loop stops for good on the late PONG's ``set_result`` (nats-py 2.16): a
    pending stand-in takes that PONG, and the others stay matched to their own."""
    pongs = getattr(nc, "_pongs", None)
    if isinstance(pongs, list):
        loop = asyncio.get_running_loop()
        pongs[:] = [loop.create_future() if f.cancelled() else f for f in pongs]


async def drain(nc: NATS | None, timeout_s: float = 2.0) -> None:
    """Flush what we published and close; never raise on the way out."""
    if nc is None or nc.is_closed:
        return
    _closing.add(nc)
    try:
        await asyncio.wait_for(nc.drain(), timeout_s)
    except Exception:  # noqa: BLE001 - shutting down: a failed drain still has to close
        with contextlib.suppress(Exception):
            await nc.close()


def headers_msg_id(msg_id: str) -> dict[str, str]:
    """JetStream de-duplication header."""
    return {"Nats-Msg-Id": msg_id}


def jetstream(nc: NATS, timeout_s: float = 5.0) -> JetStreamContext:
    return nc.jetstream(timeout=timeout_s)
