"""The pods behind the targets' selectors: one watch of the cluster's pods.

As HPA's pod lister: one shared list+watch, answered by selector from memory,
so an evaluation costs no API request. Only the fields the replica
calculation needs are kept (labels, phase, Ready, deletion), indexed by
label so a selector finds its few pods among thousands directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
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
from gpuscale.labels import LabelSelector, SelectorError, parse_selector
from gpuscale.logging import get_logger
from gpuscale_decider.core.replicas import PodView

POD_WATCH_TIMEOUT_S: Final = 300
POD_LIST_PAGE: Final = 500


@dataclass(frozen=True, slots=True)
class _Pod:
    labels: Mapping[str, str]
    view: PodView


def pod_of(obj: Mapping[str, Any]) -> tuple[str, str, _Pod] | None:
    """(namespace, name, what the decider keeps) of a Pod object; None if unusable."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    raw_labels = meta.get("labels")
    labels: Mapping[str, Any] = raw_labels if isinstance(raw_labels, Mapping) else {}
    raw_status = obj.get("status")
    status: Mapping[str, Any] = raw_status if isinstance(raw_status, Mapping) else {}
    ready = any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    raw_phase = status.get("phase")
    phase = raw_phase if isinstance(raw_phase, str) else "Pending"
    deleting = meta.get("deletionTimestamp") is not None
    clean = {str(k): str(v) for k, v in labels.items()}
    return namespace, name, _Pod(clean, PodView(name, phase, ready, deleting))


class PodIndex:
    """Pods by namespace, with a (label, value) -> names index per namespace."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, _Pod]] = {}
        self._by_label: dict[str, dict[tuple[str, str], set[str]]] = {}
        self._selectors: dict[str, LabelSelector | None] = {}
        self.log = get_logger(component="pod_watch")

    def __len__(self) -> int:
        return sum(len(p) for p in self._pods.values())

    def put(self, namespace: str, name: str, pod: _Pod | None) -> None:
        pods = self._pods.setdefault(namespace, {})
        index = self._by_label.setdefault(namespace, {})
        old = pods.pop(name, None)
        if old is not None:
            for label in old.labels.items():
                names = index.get(label)
                if names is not None:
                    names.discard(name)
                    if not names:
                        del index[label]
        if pod is not None:
            pods[name] = pod
            for label in pod.labels.items():
                index.setdefault(label, set()).add(name)

    def select(self, namespace: str, selector: str) -> tuple[PodView, ...] | None:
        parsed = self._selector(selector)
        if parsed is None:
            return None
        pods = self._pods.get(namespace)
        if not pods:
            return ()
        index = self._by_label[namespace]
        candidates: set[str] | None = None
        rest = []
        for r in parsed.requirements:
            if r.op not in ("=", "in"):
                rest.append(r)
                continue
            names: set[str] = set()
            for value in r.values:
                names |= index.get((r.key, value), set())
            candidates = names if candidates is None else candidates & names
        if candidates is None:  # no equality to look up: every pod of the namespace is a candidate
            return tuple(p.view for p in pods.values() if parsed.matches(p.labels))
        chosen = (pods[n] for n in sorted(candidates))
        return tuple(p.view for p in chosen if all(r.holds(p.labels) for r in rest))

    def _selector(self, text: str) -> LabelSelector | None:
        if text not in self._selectors:
            if len(self._selectors) > 10_000:  # bounded: selectors come from the targets, few and stable
                self._selectors.clear()
            try:
                self._selectors[text] = parse_selector(text)
            except SelectorError as e:
                self._selectors[text] = None
                self.log.warning("target_selector_unparsable", selector=text[:200], error=str(e))
        return self._selectors[text]


class PodCache:
    """The index kept current by one list+watch of ``/api/v1/pods``. Events are
    read as raw JSON lines: building client model objects for every pod of a
    large cluster costs more than the rest of the decider together."""

    def __init__(self, api: ApiClient | None) -> None:
        self.api = api
        self.synced = asyncio.Event()
        self.index = PodIndex()
        self.log = get_logger(component="pod_watch")

    def select(self, namespace: str, selector: str) -> tuple[PodView, ...] | None:
        return self.index.select(namespace, selector) if self.synced.is_set() else None

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) for a Pod object."""
        found = pod_of(obj)
        if found is not None:
            self.index.put(found[0], found[1], None if kind == "DELETED" else found[2])

    async def run(self, stop: asyncio.Event) -> None:
        attempt = 0
        while not stop.is_set():
            try:
                rv = await self._relist()
                attempt = 0
                while not stop.is_set():
                    rv = await self._watch(rv, stop)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # noqa: BLE001 - API down, 410 Gone, a bad line: relist after a backoff
                attempt += 1
                if attempt == 1 or attempt % 10 == 0:
                    self.log.warning("pod_watch_failed", attempt=attempt, error=f"{type(e).__name__}: {e}")
                await sleep_unless_stopped(stop, max(0.2, backoff_delay(attempt, 0.5, 10.0, random.random())))  # noqa: S311 - jitter

    async def _relist(self) -> str:
        if self.api is None:
            raise Unreachable("no API client")
        index = PodIndex()
        query = {"limit": str(POD_LIST_PAGE)}
        while True:
            doc = await request_json(self.api, "GET", "/api/v1/pods", query=query)
            for obj in doc.get("items") or ():
                found = pod_of(obj) if isinstance(obj, Mapping) else None
                if found is not None:
                    index.put(*found)
            meta = doc.get("metadata") or {}
            token = meta.get("continue")
            if not token:
                break
            query = {"limit": str(POD_LIST_PAGE), "continue": str(token)}
        self.index = index
        self.synced.set()
        rv = str(meta.get("resourceVersion") or "")
        self.log.info("pods_listed", pods=len(index), resource_version=rv)
        return rv

    async def _watch(self, rv: str, stop: asyncio.Event) -> str:
        """Apply events until the server ends the watch; the resourceVersion to go on from."""
        if self.api is None:
            raise Unreachable("no API client")
        query = {
            "watch": "true",
            "resourceVersion": rv,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(POD_WATCH_TIMEOUT_S),
        }
        stopper = asyncio.create_task(stop.wait())
        try:
            async for event in _watch_lines(self.api, "/api/v1/pods", query, stopper):
                kind, obj = event.get("type"), event.get("object")
                if not isinstance(obj, Mapping):
                    continue
                if kind == "ERROR":
                    raise KubeError(int(obj.get("code") or 0), str(obj.get("message") or "watch error"))
                rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                if kind != "BOOKMARK":
                    self.apply(str(kind), obj)
        finally:
            stopper.cancel()
        return rv


async def _watch_lines(
    api: ApiClient, path: str, query: Mapping[str, str], stopper: asyncio.Task[Any]
) -> AsyncIterator[dict[str, Any]]:
    """The events of one watch request, as decoded JSON lines, until the server
    closes it or ``stopper`` finishes. Lines are split here: a pod can be
    larger than aiohttp's line limit."""
    try:
        response = await api.call_api(
            path,
            "GET",
            query_params=list(query.items()),
            header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
            _preload_content=False,
            # a silent dead connection is noticed after the server's own timeout has passed
            _request_timeout=aiohttp.ClientTimeout(
                sock_connect=REQUEST_TIMEOUT_S, sock_read=POD_WATCH_TIMEOUT_S + 30, total=None
            ),
        )
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise Unreachable(f"GET {path}: {type(e).__name__}: {e}") from None
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
        response.release()
