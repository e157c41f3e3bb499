"""List + watch, as client-go's reflector: how every service keeps its view of Kubernetes current.

Events are read as raw JSON lines: client model objects for every pod cost more than the rest."""

from __future__ import annotations

import asyncio
import inspect
import json
import random
import time
from collections.abc import AsyncGenerator, AsyncIterable, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import aiohttp

from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube.client import REQUEST_TIMEOUT_S, next_continue, request_json
from gpuscale.kube.errors import Gone, ServerError, Unreachable, error_from_response
from gpuscale.kube.retry import backoff_delay
from gpuscale.logging import get_logger

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

WATCH_TIMEOUT_S: Final = 300
LIST_PAGE: Final = 500
MAX_EVENT_BYTES: Final = 16 * 2**20  # one watch event (one object): far above any object etcd keeps
# A watch that ends sooner with no event in it failed (client-go's "very short watch"): a server or
# proxy that ends every watch at once would otherwise be asked again at once, as fast as it answers.
MIN_WATCH_S: Final = 1.0
SHORT_WATCH: Final = "ShortWatch"

Obj = Mapping[str, Any]


class WatchTransport(Protocol):
    """What the reflector reads through: a GET of JSON, and a watch as a stream of events."""

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Any: ...

    def watch(
        self, path: str, params: Mapping[str, str], read_timeout_s: float
    ) -> AsyncGenerator[Obj, None]: ...


async def read_events(chunks: AsyncIterable[bytes]) -> AsyncGenerator[dict[str, Any], None]:
    """The events of a watch stream, one JSON object a line; an ERROR event raises
    its status as a :class:`KubeError` (:class:`Gone`: list again)."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        # A list: a read with no newline leaves ``lines`` empty, and max() of one int raised.
        if max([len(pending), *map(len, lines)]) > MAX_EVENT_BYTES:
            raise ServerError(500, f"a watch event over {MAX_EVENT_BYTES} bytes", reason="EventTooLarge")
        for line in lines:
            if not line.strip():
                continue
            event = json.loads(line)
            if not isinstance(event, dict):
                continue
            if event.get("type") == "ERROR":
                status = event.get("object")
                status = status if isinstance(status, Mapping) else {}
                raise error_from_response(int(status.get("code") or 500), json.dumps(status), {})
            yield event


class ApiClientTransport:
    """GET and watch through kubernetes-asyncio's client (its credentials, its TLS)."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> dict[str, Any]:
        return await request_json(self.api, "GET", path, query=params)

    async def watch(
        self, path: str, params: Mapping[str, str], read_timeout_s: float
    ) -> AsyncGenerator[Obj, None]:
        try:
            response = await self.api.call_api(
                path,
                "GET",
                query_params=[("watch", "true"), *params.items()],
                header_params={"Accept": "application/json"},
                auth_settings=["BearerToken"],
                _preload_content=False,
                # a silent dead connection is noticed once the server's own timeout has passed
                _request_timeout=aiohttp.ClientTimeout(
                    sock_connect=REQUEST_TIMEOUT_S, sock_read=read_timeout_s, total=None
                ),
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as e:
            raise Unreachable(f"GET {path}: {type(e).__name__}: {e}") from None
        try:
            status = int(response.status)
            if not 200 <= status <= 299:
                body = (await response.read()).decode("utf-8", errors="replace")
                raise error_from_response(status, body, {str(k): str(v) for k, v in response.headers.items()})
            async for event in read_events(response.content.iter_any()):
                yield event
        finally:
            response.release()


async def list_all(
    transport: WatchTransport, path: str, params: Mapping[str, str] | None = None, page: int = LIST_PAGE
) -> tuple[list[Obj], str]:
    """Every item of a collection and the list's resourceVersion, page by page."""
    items: list[Obj] = []
    query = {**(params or {}), "limit": str(page)}
    while True:
        doc = await transport.get(path, query)
        if not isinstance(doc, Mapping):
            raise ServerError(200, f"GET {path}: the answer is not an object")
        items.extend(obj for obj in doc.get("items") or () if isinstance(obj, Mapping))
        meta = doc.get("metadata") or {}
        token = meta.get("continue")
        if not token:
            return items, str(meta.get("resourceVersion") or "")
        query = {**(params or {}), "limit": str(page), "continue": next_continue(path, token, query)}


async def _done(result: Awaitable[None] | None) -> None:
    if inspect.isawaitable(result):
        await result


class Reflector:
    """Keeps a view current: ``on_list(items)`` after every (re)list, then
    ``on_event(type, object)`` for each ADDED, MODIFIED or DELETED. Either may be
    a coroutine function (the collector reads a ReplicaSet for a new pod)."""

    def __init__(
        self,
        transport: WatchTransport,
        path: str,
        *,
        on_list: Callable[[Sequence[Obj]], Awaitable[None] | None],
        on_event: Callable[[str, Obj], Awaitable[None] | None],
        what: str,
        params: Mapping[str, str] | None = None,
    ) -> None:
        self.transport = transport
        self.path = path
        self.params = dict(params or {})  # e.g. a fieldSelector, on the list and on the watch
        self.on_list = on_list
        self.on_event = on_event
        self.synced = asyncio.Event()
        self.log = get_logger(component="watch", what=what)
        self._events = 0  # in the current watch (a bookmark too)

    async def run(self, stop: asyncio.Event) -> None:
        # Failures in a row, until a watch works (an event came, or it ended after MIN_WATCH_S; one
        # that raised worked only if an event came: a refusal may take seconds): a list that works
        # is not enough, or a watch failing after every list (410 Gone each time, ended at once,
        # 429 from an overloaded server) would relist at the backoff's first step forever.
        failures = 0
        while not stop.is_set():
            watching_since: float | None = None
            try:
                rv = await self._list()
                while not stop.is_set():
                    watching_since, self._events = time.monotonic(), 0
                    rv = await self._watch(rv, stop)
                    if not self._worked(watching_since) and not stop.is_set():
                        raise ServerError(200, "the watch ended at once with no event", reason=SHORT_WATCH)
                    failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - API away, 410 Gone, a bad answer: relist after a backoff
                if watching_since is not None and self._events:
                    failures = 0  # it broke after working (an event came): a first failure
                failures += 1
                error = f"{type(e).__name__}: {e}"[:300]
                if isinstance(e, Gone) and failures == 1:
                    self.log.info("watch_expired_relisting", error=error)  # the server compacted: routine
                elif getattr(e, "reason", "") == SHORT_WATCH and failures == 1:
                    self.log.info("watch_ended_at_once_relisting", error=error)  # a server restarting
                elif failures == 1 or failures % 10 == 0:
                    self.log.warning("watch_failed", attempt=failures, error=error)
                delay = max(0.2, backoff_delay(failures, 0.5, 10.0, random.random()))  # noqa: S311 - jitter
                await sleep_unless_stopped(stop, delay)

    def _worked(self, watching_since: float) -> bool:
        return self._events > 0 or time.monotonic() - watching_since >= MIN_WATCH_S

    async def _list(self) -> str:
        """List and hand the items to ``on_list``; the resourceVersion to watch from."""
        # A method of its own: the whole listed objects are let go here, not held through the watch.
        items, rv = await list_all(self.transport, self.path, self.params)
        await _done(self.on_list(items))
        self.synced.set()
        self.log.info("listed", items=len(items), resource_version=rv)
        return rv

    async def _watch(self, rv: str, stop: asyncio.Event) -> str:
        """Apply events until the server ends the watch or ``stop`` is set; the
        resourceVersion to go on from."""
        params = {
            **self.params,
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_S),
        }
        events = self.transport.watch(self.path, params, WATCH_TIMEOUT_S + 30)
        stopper = asyncio.ensure_future(stop.wait())
        nxt: asyncio.Future[Obj] | None = None
        try:
            while True:
                nxt = asyncio.ensure_future(events.__anext__())
                done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if nxt not in done:
                    return rv
                try:
                    event = nxt.result()
                except StopAsyncIteration:
                    return rv
                self._events += 1
                kind, obj = event.get("type"), event.get("object")
                if not isinstance(obj, Mapping):
                    continue
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)  # bookmarks too
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    await _done(self.on_event(str(kind), obj))
        finally:
            stopper.cancel()
            if nxt is not None and not nxt.done():
                # The stream is "running" until its cancelled read has ended: closed
                # before, it raises instead of hanging up the response.
                nxt.cancel()
                await asyncio.wait({nxt})
                if not nxt.cancelled():
                    nxt.exception()  # retrieved: the stop wins over what the read ended with
            await events.aclose()
