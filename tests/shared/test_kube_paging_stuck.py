"""A list read in pages ends: a server (or a proxy before it) that answers a page with the
continue token it was sent would be asked for the same page forever, the items piling up, so
every paged list refuses it as a broken answer. A real HTTP server plays that server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from gpuscale.kube import ServerError, each_page, new_api_client
from gpuscale.kubewatch import ApiClientTransport, list_all
from gpuscale_collector.kubeapi import KubeApi, load_config

pytestmark = pytest.mark.integration

EVENTS = "/api/v1/namespaces/team-b/events"


@pytest.fixture
async def stuck_server(tmp_path: Path) -> AsyncIterator[tuple[Path, list[str]]]:
    asked: list[str] = []

    async def page(request: web.Request) -> web.Response:
        token = request.query.get("continue", "first")
        asked.append(token)
        item = {"metadata": {"name": f"e{len(asked)}", "namespace": "team-b"}}
        return web.json_response({"kind": "EventList", "items": [item], "metadata": {"continue": token}})

    app = web.Application()
    app.router.add_get(EVENTS, page)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    config = tmp_path / "kubeconfig"
    config.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "stuck", "cluster": {"server": f"http://127.0.0.1:{port}"}}],
                "users": [{"name": "stuck", "user": {}}],
                "contexts": [{"name": "stuck", "context": {"cluster": "stuck", "user": "stuck"}}],
                "current-context": "stuck",
            }
        )
    )
    try:
        yield config, asked
    finally:
        await runner.cleanup()


async def test_a_page_answered_with_the_token_sent_ends_the_paged_read(stuck_server: Any) -> None:
    config, asked = stuck_server
    api = await new_api_client(config)
    pages: list[dict[str, Any]] = []
    try:
        with pytest.raises(ServerError, match="continue token"):
            await asyncio.wait_for(each_page(api, EVENTS, pages.append, limit=20), 10)  # not forever
    finally:
        await api.close()
    assert asked == ["first", "first"]  # the first page, then the one that named it again
    assert len(pages) == 2


@pytest.mark.parametrize("kind", ["collector-aiohttp", "kubernetes-asyncio"])
async def test_a_list_answered_with_the_token_sent_is_a_broken_answer(stuck_server: Any, kind: str) -> None:
    config, asked = stuck_server
    if kind == "collector-aiohttp":
        transport: Any = KubeApi(load_config(config))
        close = transport.close
    else:
        client = await new_api_client(config)
        transport, close = ApiClientTransport(client), client.close
    try:
        with pytest.raises(ServerError, match="continue token"):
            await asyncio.wait_for(list_all(transport, EVENTS, page=20), 10)
    finally:
        await close()
    assert asked == ["first", "first"]
