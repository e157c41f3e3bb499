"""The actuator's entry point: connect NATS and the API server, open the bucket, run the loop.

The loop itself (level-triggered convergence): :mod:`gpuscale_actuator.actuator`.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from gpuscale import subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.kube import new_api_client, ping
from gpuscale.leader import LeaderElector
from gpuscale.logging import get_logger
from gpuscale.natsio import NATS, connect, declare_kv, drain, is_connected, jetstream
from gpuscale.runtime import ServiceContext, run
from gpuscale_actuator.actuator import Actuator
from gpuscale_actuator.metrics import REJECT_REASONS, SERVICE, ActuatorMetrics
from gpuscale_actuator.policies import PolicyView
from gpuscale_actuator.settings import ActuatorSettings

PING_PERIOD_S: Final = 5.0

__all__ = ["REJECT_REASONS", "SERVICE", "Actuator", "ActuatorMetrics", "main", "serve"]


async def _watch_api(api: ApiClient, state: dict[str, Any], stop: asyncio.Event, log: Any) -> None:
    while not stop.is_set():
        ok, detail = await ping(api)
        if ok != state["ok"]:
            log.info("kube_api_reachable" if ok else "kube_api_unreachable", detail=detail)
        state["ok"], state["detail"] = ok, detail
        await sleep_unless_stopped(stop, PING_PERIOD_S)


async def _open_bucket(js: JetStreamContext, stop: asyncio.Event, log: Any) -> KeyValue | None:
    attempt = 0
    while not stop.is_set():
        try:
            return await declare_kv(js, subjects.DESIRED)
        except Exception as e:  # noqa: BLE001 - JetStream not ready yet: retry until it is
            attempt += 1
            if attempt == 1 or attempt % 10 == 0:
                log.warning("jetstream_setup_failed", attempt=attempt, error=f"{type(e).__name__}: {e}")
            await sleep_unless_stopped(stop, min(0.5 * attempt, 5.0))
    return None


async def serve(ctx: ServiceContext) -> None:
    settings: ActuatorSettings = ctx.settings
    identity = settings.holder_identity
    log = get_logger(service=SERVICE, identity=identity)
    metrics = ActuatorMetrics(ctx.metrics)
    api_state: dict[str, Any] = {"ok": False, "detail": "not checked yet"}
    nc: NATS | None = None
    ctx.http.add_readiness("nats", lambda: is_connected(nc))
    ctx.http.add_readiness("kubernetes", lambda: (bool(api_state["ok"]), str(api_state["detail"])))
    api = await new_api_client(settings.kubeconfig)
    tasks: list[asyncio.Task[Any]] = []
    try:
        tasks.append(asyncio.create_task(_watch_api(api, api_state, ctx.stop, log)))
        try:
            nc = await connect(
                list(settings.nats_url),
                ctx.metrics,
                name=f"gpuscale-actuator-{identity}",
                creds=str(settings.nats_creds) if settings.nats_creds else None,
                tls_ca=str(settings.nats_tls_ca) if settings.nats_tls_ca else None,
                stop=ctx.stop,
                on_closed=ctx.reopen,
            )
        except Exception:
            if ctx.stop.is_set():
                return
            raise
        desired = await _open_bucket(jetstream(nc), ctx.stop, log)
        if desired is None:
            return
        elector = LeaderElector(
            api,
            settings.lease_name,
            settings.lease_namespace,
            identity,
            lease_duration_s=settings.lease_duration,
            renew_deadline_s=settings.renew_deadline,
            retry_period_s=settings.retry_period,
            on_started_leading=lambda: metrics.leader.set(1),
            on_stopped_leading=lambda: metrics.leader.set(0),
        )
        policies = PolicyView(api, settings.policies)
        ctx.http.add_readiness(
            "gpuscalers",
            lambda: (policies.synced.is_set(), "listed" if policies.synced.is_set() else "not listed yet"),
        )
        actuator = Actuator(settings, ctx.metrics, metrics, nc, desired, api, elector, ctx.stop, policies)
        log.info("actuator_started", dry_run=settings.dry_run, lease=settings.lease_name)
        tasks.append(asyncio.create_task(policies.run(ctx.stop)))
        tasks.append(asyncio.create_task(elector.run(ctx.stop)))
        tasks.append(asyncio.create_task(actuator.resync_loop()))
        await actuator.watch()
        await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        ctx.stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await drain(nc)
        await api.close()


def main(settings: ActuatorSettings) -> int:
    return run(SERVICE, settings, serve)
