"""A keda-scaler in the test's event loop, fed by a real nats-server, and what the tests send it."""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import grpc
import msgpack  # the wire contract's bytes, written independently of gpuscale.codec

from gpuscale import natsio
from gpuscale import settings as settings_mod
from gpuscale.natsio import NATS
from gpuscale.runtime import ServiceContext, run_async
from gpuscale.subjects import WorkloadKey, metrics
from gpuscale_kedascaler.app import KedaScalerService, serve
from gpuscale_kedascaler.settings import KedaScalerSettings

from ..waiting import eventually
from .certs import grpc_channel, shared_pki

BERT = WorkloadKey("default", "Deployment", "bert")


def settings_for(nats_url: str, **options: Any) -> KedaScalerSettings:
    """As deployed: the gRPC port with mutual TLS (the session's test PKI), unless told plaintext."""
    tls = {} if options.get("grpc_plaintext") else shared_pki().grpc_options()
    given = {"nats_url": nats_url, "http_port": "0", "grpc_port": "0", "api_port": "0", **tls, **options}
    return settings_mod.build(KedaScalerSettings, given, {})


def keda_channel(scaler: RunningScaler) -> grpc.aio.Channel:
    """A channel as KEDA opens one, holding KEDA's client certificate."""
    return grpc_channel(scaler.service.grpc_port, shared_pki().keda)


def metrics_payload(
    key: WorkloadKey = BERT,
    averages: dict[str, float] | None = None,
    *,
    pods_fresh: int = 2,
    pods_stale: int = 0,
    ts: float | None = None,
    window_s: float = 30.0,
) -> dict[str, Any]:
    """A v1 ``gpuscale.v1.metrics`` payload as docs/ARCHITECTURE.md#wire-contract spells it."""
    ts = time.time() if ts is None else ts
    values = {"gpu_util": 83.5} if averages is None else averages
    return {
        "v": 1,
        "namespace": key.namespace,
        "kind": key.kind,
        "name": key.name,
        "ts": ts,
        "window_s": window_s,
        "pods": [{"pod": f"{key.name}-{i}", "values": values, "last_seen": ts} for i in range(pods_fresh)],
        "averages": values,
        "pods_fresh": pods_fresh,
        "pods_stale": pods_stale,
    }


def subject_of(payload: Any) -> str:
    """The metrics subject of a payload's own workload (BERT's when it names none)."""
    if isinstance(payload, dict) and all(
        isinstance(payload.get(k), str) for k in ("namespace", "kind", "name")
    ):
        return metrics(WorkloadKey(payload["namespace"], payload["kind"], payload["name"]))
    return metrics(BERT)


async def publish(nc: NATS, payload: Any, subject: str | None = None) -> None:
    data = payload if isinstance(payload, bytes) else msgpack.packb(payload, use_bin_type=True)
    await nc.publish(subject or subject_of(payload), data)
    await natsio.flush(nc)


@dataclass
class RunningScaler:
    task: asyncio.Task[int]
    ctx: ServiceContext
    service: KedaScalerService

    def counter(self, name: str, **labels: str) -> float:
        value = self.ctx.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value

    async def fed(self, nc: NATS, payload: Any, subject: str | None = None) -> None:
        """Publish and wait until the scaler has handled the message (kept, rejected or
        ignored). Until the scaler has received any message it is sent again each second:
        on a busy machine the server may not yet know the scaler's new subscription when
        the first copy goes out (once one arrived, a copy would be counted twice)."""
        before = self.counter("gpuscale_messages_in_total", kind="metrics")
        sent_at = -math.inf

        async def handled() -> bool:
            nonlocal sent_at
            received = self.counter("gpuscale_messages_in_total", kind="metrics")
            if received > before:
                return True
            if time.monotonic() - sent_at >= 1.0 and (received == 0 or sent_at == -math.inf):
                await publish(nc, payload, subject)
                sent_at = time.monotonic()
            return False

        await eventually(handled, 30, "the keda-scaler to receive the message")

    async def stop(self, timeout_s: float = 15.0) -> int:
        self.ctx.stop.set()
        return await asyncio.wait_for(self.task, timeout_s)


@asynccontextmanager
async def running_scaler(settings: KedaScalerSettings) -> AsyncIterator[RunningScaler]:
    holder: dict[str, Any] = {}

    async def wrapped(ctx: ServiceContext) -> None:
        holder["ctx"] = ctx
        await serve(ctx, on_service=lambda s: holder.setdefault("service", s))

    task = asyncio.create_task(run_async("keda-scaler", settings, wrapped, http_port=0))

    def started() -> bool:
        if task.done():
            raise RuntimeError(f"the keda-scaler stopped at start: {task.result()}")
        service = holder.get("service")
        return service is not None and service.serving and service.subscription is not None

    await eventually(started, 20, "the keda-scaler to serve and connect")
    running = RunningScaler(task, holder["ctx"], holder["service"])
    try:
        yield running
    finally:
        if not task.done():
            await running.stop()
