"""Run the aggregator service in-process against a real nats-server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from gpuscale import codec, natsio, subjects
from gpuscale.http import ServiceHttp
from gpuscale.logging import get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS
from gpuscale.runtime import ServiceContext
from gpuscale.steadyclock import SteadyClock
from gpuscale.wire import WorkloadMetrics
from gpuscale_aggregator.app import AggregatorService
from gpuscale_aggregator.settings import AggregatorSettings

from ..waiting import sample_value


@asynccontextmanager
async def running_aggregator(
    url: str, *, clock: SteadyClock | None = None, **overrides: Any
) -> AsyncIterator[AggregatorService]:
    options: dict[str, Any] = {
        "nats_url": (url,),
        "http_port": 0,
        "window_s": 30.0,
        "publish_interval_s": 0.2,
        "samples_storage": "file",
    }
    options.update(overrides)
    settings = AggregatorSettings(**options)
    metrics = ServiceMetrics("aggregator")
    http = ServiceHttp(metrics, host="127.0.0.1", port=0)
    await http.start()
    ctx = ServiceContext("aggregator", settings, metrics, http, log=get_logger(service="aggregator"))
    service = AggregatorService(ctx, clock=clock)
    task = asyncio.create_task(service.serve())
    try:
        yield service
    finally:
        ctx.stop.set()
        await asyncio.wait_for(task, 10)
        await http.stop()


def counter(service: AggregatorService, name: str, **labels: str) -> float:
    return sample_value(service.ctx.metrics.registry, name, **labels)


class MetricsInbox:
    """Every metrics message published, decoded and validated."""

    def __init__(self) -> None:
        self.messages: list[WorkloadMetrics] = []

    async def start(self, nc: NATS) -> MetricsInbox:
        async def on_message(msg: Any) -> None:
            self.messages.append(codec.decode(msg.data, WorkloadMetrics, time.time()))

        await nc.subscribe(subjects.METRICS_ALL, cb=on_message)
        await natsio.flush(nc)
        return self

    def latest(self, name: str) -> WorkloadMetrics | None:
        found = [m for m in self.messages if m.name == name]
        return found[-1] if found else None


async def publish_batch(nc: NATS, b: dict[str, Any], subject_node: str | None = None) -> None:
    await nc.publish(subjects.samples(subject_node or b["node"]), codec.encode_raw(b))
