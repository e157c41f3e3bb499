"""A minimal service on the shared runtime, run as a real process by the tests."""

from __future__ import annotations

import sys
from dataclasses import dataclass

from gpuscale.natsio import NATS, connect, drain, is_connected
from gpuscale.runtime import ServiceContext, run


@dataclass(frozen=True)
class SampleSettings:
    nats_url: tuple[str, ...]
    http_port: int
    log_level: str = "info"


async def serve(ctx: ServiceContext) -> None:
    nc: NATS | None = None
    ctx.http.add_readiness("nats", lambda: is_connected(nc))
    nc = await connect(ctx.settings.nats_url, ctx.metrics, name="sample", reconnect_wait_s=0.1, stop=ctx.stop)
    ctx.metrics.messages_in.labels(kind="samples").inc()
    await ctx.stop.wait()
    await drain(nc)


if __name__ == "__main__":
    sys.exit(run("sample", SampleSettings((sys.argv[1],), int(sys.argv[2])), serve))
