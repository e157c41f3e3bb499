"""List + watch, as client-go's reflector: one way every gpuscale service
keeps a view of Kubernetes objects current.

:class:`Reflector` lists a collection (paged with ``limit``/``continue``),
hands the items over, then watches from the list's resourceVersion with
bookmarks; the server ending a watch starts the next from where it was; an
error (410 Gone, the API server away, a bad line) relists after a backoff
with jitter. Events are read as raw JSON lines: building client model
objects for every pod of a large cluster costs more than the rest of a
service together, and a line can be larger than aiohttp's line limit.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import Any, Final

import aiohttp
from kubernetes_asyncio.client import ApiClient

from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube import (
    REQUEST_TIMEOUT_S,
    KubeError,
    Unreachable,
    backoff_delay,
    error_from_response,
    request_json,
)
from gpuscale.logging import get_logger

WATCH_TIMEOUT_S: Final = 300
LIST_PAGE: Final = 500

Obj = Mapping[str, Any]


async def list_all(api: ApiClient, path: str, page: int = LIST_PAGE) -> tuple[list[Obj], str]:
    """Every item of a collection and the list's resourceVersion, page by page."""
    items: list[Obj] = []
    query = {"limit": str(page)}
    while True:
        doc = await request_json(api, "GET", path, query=query)
        items.extend(obj for obj in doc.get("items") or () if isinstance(obj, Mapping))
        meta = doc.get("metadata") or {}
        token = meta.get("continue")
        if not token:
            return items, str(meta.get("resourceVersion") or "")
        query = {"limit": str(page), "continue": str(token)}


async def watch_events(
    api: ApiClient, path: str, resource_version: str, stop: asyncio.Event, timeout_s: int = WATCH_TIMEOUT_S
) -> AsyncIterator[Obj]:
    """The events of one watch request, until the server ends it or ``stop`` is set."""
    query = {
        "watch": "true",
        "resourceVersion": resource_version,
        "allowWatchBookmarks": "true",
        "timeoutSeconds": str(timeout_s),
    }
    try:
        response = await api.call_api(
            path,
            "GET",
            query_params=list(query.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            # a silent dead connection is noticed once the server's own timeout has passed
            _request_timeout=aiohttp.ClientTimeout(
                sock_connect=REQUEST_TIMEOUT_S, sock_read=timeout_s + 30, total=None
            ),
        )
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise Unreachable(f"GET {path}: {type(e).__name__}: {e}") from None
    stopper = asyncio.create_task(stop.wait())
    try:
        status = int(response.status)
        if not 200 <= status <= 299:
            body = (await response.read()).decode("utf-8", errors="replace")
            raise error_from_response(status, body, {str(k): str(v) for k, v in response.headers.items()})
        buffer = b""
        chunks = response.content.iter_any().__aiter__()
        while True:
            nxt = asyncio.ensure_future(chunks.__anext__())
            done, _ = await asyncio.wait({nxt, stopper}, return_when=asyncio.FIRST_COMPLETED)
            if nxt not in done:
                nxt.cancel()
                with contextlib.suppress(BaseException):
                    await nxt
                return
            try:
                chunk = nxt.result()
            except StopAsyncIteration:
                return
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if line.strip():
                    event = json.loads(line)
                    if isinstance(event, dict):
                        yield event
    finally:
        stopper.cancel()
        response.release()


class Reflector:
    """Keeps a view current: ``on_list(items)`` after every (re)list, then
    ``on_event(type, object)`` for each ADDED, MODIFIED or DELETED."""

    def __init__(
        self,
        api: ApiClient,
        path: str,
        *,
        on_list: Callable[[Sequence[Obj]], None],
        on_event: Callable[[str, Obj], None],
        what: str,
    ) -> None:
        self.api = api
        self.path = path
        self.on_list = on_list
        self.on_event = on_event
        self.synced = asyncio.Event()
        self.log = get_logger(component="watch", what=what)

    async def run(self, stop: asyncio.Event) -> None:
        attempt = 0
        while not stop.is_set():
            try:
                items, rv = await list_all(self.api, self.path)
                self.on_list(items)
                self.synced.set()
                self.log.info("listed", items=len(items), resource_version=rv)
                attempt = 0
                while not stop.is_set():
                    rv = await self._watch(rv, stop)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - API away, 410 Gone, a bad answer: relist after a backoff
                attempt += 1
                if attempt == 1 or attempt % 10 == 0:
                    self.log.warning("watch_failed", attempt=attempt, error=f"{type(e).__name__}: {e}"[:300])
                delay = max(0.2, backoff_delay(attempt, 0.5, 10.0, random.random()))  # noqa: S311 - jitter
                await sleep_unless_stopped(stop, delay)

    async def _watch(self, rv: str, stop: asyncio.Event) -> str:
        """Apply events until the server ends the watch; the resourceVersion to go on from."""
        async for event in watch_events(self.api, self.path, rv, stop):
            kind, obj = event.get("type"), event.get("object")
            if not isinstance(obj, Mapping):
                continue
            if kind == "ERROR":  # 410 Gone and friends: relist
                raise KubeError(int(obj.get("code") or 0), str(obj.get("message") or "watch error"))
            rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
            if kind in ("ADDED", "MODIFIED", "DELETED"):
                self.on_event(str(kind), obj)
        return rv
