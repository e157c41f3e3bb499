"""One list + watch (gpuscale.kubewatch) over either transport: kubernetes-asyncio's client,
as the decider and the actuator use it, and the collector's own aiohttp client, which keeps
kubernetes-asyncio out of the collector. Against kube-sim, a real API server for both."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from typing import Any

import pytest
from structlog.testing import capture_logs

from gpuscale import kubewatch
from gpuscale.kube import ServerError, new_api_client
from gpuscale.kubewatch import ApiClientTransport, Reflector, WatchTransport, list_all
from gpuscale_collector.kubeapi import KubeApi, load_config

from ..waiting import eventually

pytestmark = pytest.mark.integration

NODE = "gpu-node-1"
PODS = "/api/v1/pods"
ON_NODE = {"fieldSelector": f"spec.nodeName={NODE}"}


def bare_pod(name: str, node: str = NODE, note: str = "") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "annotations": {"note": note} if note else {}},
        "spec": {"nodeName": node, "containers": [{"name": "server", "image": "example/model:1"}]},
    }


class Recording:
    """A transport that remembers what the reflector asked of it."""

    def __init__(self, inner: WatchTransport) -> None:
        self.inner = inner
        self.lists: list[dict[str, str]] = []
        self.watches: list[dict[str, str]] = []

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        self.lists.append(dict(params or {}))
        return await self.inner.get(path, params)

    def watch(
        self, path: str, params: Mapping[str, str], read_timeout_s: float
    ) -> AsyncGenerator[Mapping[str, Any], None]:
        self.watches.append(dict(params))
        return self.inner.watch(path, params, read_timeout_s)


@contextlib.asynccontextmanager
async def transport(kind: str, kube_sim: Any) -> AsyncIterator[WatchTransport]:
    if kind == "collector-aiohttp":
        api = KubeApi(load_config(kube_sim.kubeconfig_path))
        try:
            yield api
        finally:
            await api.close()
    else:
        client = await new_api_client(kube_sim.kubeconfig_path)
        try:
            yield ApiClientTransport(client)
        finally:
            await client.close()


TRANSPORTS = pytest.mark.parametrize("kind", ["collector-aiohttp", "kubernetes-asyncio"])


@TRANSPORTS
async def test_a_list_is_read_page_by_page_with_the_field_selector(kind: str, kube_sim: Any) -> None:
    for name in ("a", "b", "c"):
        await kube_sim.create(bare_pod(name))
    await kube_sim.create(bare_pod("elsewhere", node="gpu-node-2"))
    async with transport(kind, kube_sim) as inner:
        recording = Recording(inner)
        items, rv = await list_all(recording, PODS, ON_NODE, page=2)
    assert sorted(i["metadata"]["name"] for i in items) == ["a", "b", "c"]
    assert rv
    assert [("continue" in q, q["limit"], q["fieldSelector"]) for q in recording.lists] == [
        (False, "2", ON_NODE["fieldSelector"]),
        (True, "2", ON_NODE["fieldSelector"]),
    ]


@TRANSPORTS
async def test_a_watch_the_server_ends_goes_on_from_its_last_version_without_a_relist(
    kind: str, kube_sim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubewatch, "WATCH_TIMEOUT_S", 1)  # the server ends each watch after a second
    seen: list[tuple[str, str, str]] = []

    def listed(items: Sequence[Mapping[str, Any]]) -> None:
        seen.extend(("LISTED", i["metadata"]["name"], i["metadata"]["resourceVersion"]) for i in items)

    async def event(kind: str, obj: Mapping[str, Any]) -> None:  # a coroutine, as the collector's
        seen.append((kind, obj["metadata"]["name"], obj["metadata"]["resourceVersion"]))

    await kube_sim.create(bare_pod("early"))
    stop = asyncio.Event()
    with capture_logs() as logs:
        async with transport(kind, kube_sim) as inner:
            recording = Recording(inner)
            reflector = Reflector(
                recording, PODS, params=ON_NODE, on_list=listed, on_event=event, what="pods"
            )
            task = asyncio.create_task(reflector.run(stop))
            try:
                await asyncio.wait_for(reflector.synced.wait(), 15)
                await kube_sim.create(bare_pod("elsewhere", node="gpu-node-2"))
                await kube_sim.create(bare_pod("later"))
                added = await eventually(
                    lambda: [s for s in seen if s[:2] == ("ADDED", "later")], what="the watch saw the pod"
                )
                watches = len(recording.watches)
                await eventually(lambda: len(recording.watches) > watches, what="the next watch")
            finally:
                stop.set()
                await asyncio.wait_for(task, 15)
    assert {s[1] for s in seen} == {"early", "later"}  # the other node's pod is neither listed nor watched
    assert len(recording.lists) == 1  # no relist when the server ends a watch
    assert int(recording.watches[-1]["resourceVersion"]) >= int(added[0][2])
    assert all(w["fieldSelector"] == ON_NODE["fieldSelector"] for w in recording.watches)
    assert [e for e in logs if e["log_level"] in ("warning", "error")] == []  # a stop is quiet


@TRANSPORTS
async def test_a_watch_event_over_the_line_bound_is_refused(
    kind: str, kube_sim: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubewatch, "MAX_EVENT_BYTES", 4096)
    async with transport(kind, kube_sim) as api:
        _, rv = await list_all(api, PODS, ON_NODE)
        await kube_sim.create(bare_pod("small"))
        await kube_sim.create(bare_pod("large", note="x" * 8192))
        names: list[str] = []

        async def read() -> None:
            async for event in api.watch(PODS, {**ON_NODE, "resourceVersion": rv}, 10):
                names.append(event["object"]["metadata"]["name"])

        with pytest.raises(ServerError) as refused:
            await read()
    assert refused.value.reason == "EventTooLarge"
    assert names == ["small"]


def test_the_collector_watches_pods_through_the_shared_loop_without_kubernetes_asyncio() -> None:
    """kubernetes-asyncio costs about 38 MB a process; the collector's budget is 60 MB."""
    probe = (
        "import sys\n"
        "import gpuscale_collector.app\n"
        "from gpuscale_collector.kube_pods import NodePods\n"
        "NodePods('gpu-node-1', None)\n"
        "print('gpuscale.kubewatch' in sys.modules, 'kubernetes_asyncio' in sys.modules)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.split() == ["True", "False"]
