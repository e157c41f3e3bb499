"""The demo's web page: live charts of load, GPU utilization against target and replicas."""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from gpuscale_cli.demo.observer import DemoState


def create_app(state: DemoState) -> web.Application:
    page = resources.files("gpuscale_cli.demo").joinpath("static/index.html").read_text()

    async def index(_request: web.Request) -> web.Response:
        return web.Response(text=page, content_type="text/html")

    async def api_state(_request: web.Request) -> web.Response:
        return web.json_response(state.as_json())

    app = web.Application()
    app.router.add_get("/", index)
    app.router.add_get("/api/state", api_state)
    return app


async def start(state: DemoState, host: str, port: int) -> tuple[web.AppRunner, int]:
    runner = web.AppRunner(create_app(state), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    sockets = getattr(site._server, "sockets", None)
    bound = int(sockets[0].getsockname()[1]) if sockets else port
    return runner, bound
