"""``gpuscale decider``: the NATS and Kubernetes I/O around
:class:`gpuscale_decider.decider.Decider` (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpuscale import subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.codec import encode
from gpuscale.kube import new_api_client
from gpuscale.leader import LeaderElector
from gpuscale.logging import LogThrottle
from gpuscale.natsio import (
    NATS,
    connect,
    declare_kv,
    declare_stream,
    drain,
    flush,
    headers_msg_id,
    is_connected,
    jetstream,
)
from gpuscale.policyfile import WatchedPolicyFile
from gpuscale.runtime import ServiceContext, run
from gpuscale.wire import Decision, WindowRequest
from gpuscale_decider.core.reconcile import Config
from gpuscale_decider.decider import Decider
from gpuscale_decider.kubeio import ConflictFinder, EventWriter, GPUScalerWatcher, StatusWriter
from gpuscale_decider.pods import PodCache
from gpuscale_decider.settings import DeciderSettings
from gpuscale_decider.sources import KubeScaleSource, KvStateStore, Retirement

SERVICE = "decider"


def main(settings: DeciderSettings) -> int:
    return run(SERVICE, settings, serve)


def _listed(synced: asyncio.Event) -> tuple[bool, str]:
    return synced.is_set(), "listed" if synced.is_set() else "not listed yet"


async def _retry(ctx: ServiceContext, what: str, fn: Any) -> Any:
    """Set-up steps that need NATS: retry until they work or we are stopped."""
    attempt = 0
    while True:
        try:
            return await fn()
        except Exception as e:
            attempt += 1
            if ctx.stop.is_set():
                raise
            if attempt == 1 or attempt % 10 == 0:
                ctx.log.warning(
                    "setup_step_failed", step=what, attempt=attempt, error=f"{type(e).__name__}: {e}"
                )
            await sleep_unless_stopped(ctx.stop, min(0.5 * attempt, 5.0))
            if ctx.stop.is_set():
                raise


class _PolicyFile:
    """``--policies`` into the registry, counted and logged once per problem."""

    def __init__(self, path: Path, decider: Decider) -> None:
        self.file = WatchedPolicyFile(path)
        self.decider = decider
        self.reported: str | None = None

    def reload_if_changed(self) -> None:
        loaded = self.file.reload_if_changed()
        if self.file.failed is not None and self.file.failed != self.reported:
            self.reported = self.file.failed
            self.decider.m.invalid_policies.labels(field="file").inc()
            self.decider.log.error("policy_file_unreadable", path=str(self.file.path), error=self.file.failed)
        if loaded is None:
            return
        self.reported = None
        valid, invalid = loaded
        self.decider.registry.set_policies(valid, invalid)
        self.decider.log.info(
            "policies_loaded", path=str(self.file.path), valid=len(valid), invalid=len(invalid)
        )


async def serve(ctx: ServiceContext, on_decider: Callable[[Decider], None] | None = None) -> None:
    """Run until ``ctx.stop``. ``on_decider`` (tests) sees the Decider once built."""
    s: DeciderSettings = ctx.settings
    log = ctx.log
    nc: NATS | None = None
    ctx.http.add_readiness("nats", lambda: is_connected(nc))
    # Without a cluster config nothing can work: say so before creating any stream.
    api = await new_api_client(s.kubeconfig)
    try:
        nc = await connect(
            s.nats_url,
            ctx.metrics,
            name="gpuscale-decider",
            creds=str(s.nats_creds) if s.nats_creds else None,
            tls_ca=str(s.nats_tls_ca) if s.nats_tls_ca else None,
            stop=ctx.stop,
            on_closed=ctx.reopen,
        )
    except BaseException:
        await api.close()
        raise
    js = jetstream(nc)
    await _retry(ctx, "decisions_stream", lambda: declare_stream(js, subjects.DECISIONS))
    await _retry(ctx, "advice_stream", lambda: declare_stream(js, subjects.ADVICE))
    kv = await _retry(ctx, "state_bucket", lambda: declare_kv(js, subjects.decider_state(s.state_bucket)))
    desired = await _retry(ctx, "desired_bucket", lambda: declare_kv(js, subjects.DESIRED))

    elector: LeaderElector | None = None
    if s.leader_election:
        elector = LeaderElector(
            api,
            s.lease_name,
            s.lease_namespace,
            s.holder_identity,
            lease_duration_s=s.lease_duration,
            renew_deadline_s=s.renew_deadline,
            retry_period_s=s.retry_period,
        )

    def is_leader() -> bool:
        return elector is None or elector.is_leader

    # With --policies there is no GPUScaler object to write a status or Event on.
    in_cluster = s.policies is None
    writer = StatusWriter(api, is_leader) if in_cluster else None
    event_writer = EventWriter(api, identity=s.holder_identity, is_leader=is_leader) if in_cluster else None

    async def publish(decision: Decision) -> None:
        """The desired count is state (what the actuator converges to); the decisions stream its record."""
        key = subjects.WorkloadKey(decision.namespace, decision.kind, decision.name)
        data = encode(decision)
        await desired.put(subjects.desired_key(key), data)
        try:
            await js.publish(subjects.decisions(key), data, timeout=5.0, headers=headers_msg_id(decision.id))
        except Exception as e:  # noqa: BLE001 - the count is written; a lost record must not undo it
            if records_failing.allow("decision_record", type(e).__name__) is not None:
                log.warning("decision_record_failed", target=str(key), error=f"{type(e).__name__}: {e}")

    async def publish_advice(advice: Decision) -> None:
        key = subjects.WorkloadKey(advice.namespace, advice.kind, advice.name)
        await nc.publish(subjects.advice(key), encode(advice))  # the GPUSCALE_ADVICE stream keeps it

    async def publish_window(request: WindowRequest) -> None:
        key = subjects.WorkloadKey(request.namespace, request.kind, request.name)
        await nc.publish(subjects.windows(key), encode(request))

    records_failing = LogThrottle()
    pods = PodCache(api)
    decider = Decider(
        ctx.metrics,
        KubeScaleSource(api, s.scale_cache),
        pods,
        KvStateStore(kv),
        publish,
        status=writer,
        events=event_writer,
        publish_advice=publish_advice,
        publish_window=publish_window,
        retirement=Retirement(js, subjects.DESIRED.bucket, s.state_bucket),
        is_leader=is_leader,
        config=Config(convergence_grace_s=s.actuation_timeout, max_metrics_age_s=s.max_metrics_age),
    )
    ctx.http.add_readiness("pods", lambda: _listed(pods.synced))
    if elector is not None:

        def started_leading() -> None:
            decider.on_leadership_change()
            decider.registry.resubmit()

        elector.on_started_leading = started_leading
        elector.on_stopped_leading = decider.on_leadership_change
        ctx.http.add_readiness(
            "leader",
            lambda: (True, "leader" if is_leader() else f"standby (leader: {elector.holder or '?'})"),
        )

    policy_file: _PolicyFile | None = None
    watcher: GPUScalerWatcher | None = None
    if s.policies is not None:
        policy_file = _PolicyFile(s.policies, decider)
        policy_file.reload_if_changed()
    else:
        watcher = GPUScalerWatcher(api, decider.registry)
        ctx.http.add_readiness("policies", lambda: _listed(watcher.synced))
    if event_writer is not None:
        event_writer.count = lambda result: decider.m.events.labels(result=result).inc()
    conflicts = ConflictFinder(api, decider.registry.set_conflicts, s.conflict_check_interval)
    runners = (watcher, writer, event_writer, elector, conflicts, pods)
    tasks = [asyncio.create_task(r.run(ctx.stop)) for r in runners if r is not None]

    async def ticker() -> None:
        while not ctx.stop.is_set():
            await sleep_unless_stopped(ctx.stop, s.tick_interval)
            if ctx.stop.is_set():
                break
            try:
                if policy_file is not None:
                    policy_file.reload_if_changed()
                await decider.tick(s.tick_interval)
            except Exception as e:  # noqa: BLE001 - one bad tick must not end the loop
                log.warning("tick_failed", error=f"{type(e).__name__}: {e}")

    tasks.append(asyncio.create_task(ticker()))
    actions_sub = await nc.subscribe(subjects.ACTIONS_ALL, cb=decider.on_action)
    sub = await nc.subscribe(subjects.METRICS_ALL, cb=decider.on_message, pending_msgs_limit=200_000)
    with contextlib.suppress(Exception):
        # The server knows the subscriptions before we say we are running (a busy node: 10 s).
        await flush(nc, 10.0)
    if on_decider is not None:
        on_decider(decider)
    log.info(
        "decider_started",
        identity=s.holder_identity,
        policies=str(s.policies) if s.policies else "GPUScaler objects",
        leader_election=s.leader_election,
    )
    try:
        await ctx.stop.wait()
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
        with contextlib.suppress(Exception):
            await actions_sub.unsubscribe()
        # Publish and save before NATS goes, then stop the loops (the elector releases its lease).
        with contextlib.suppress(Exception):
            await decider.idle(2.0)
        with contextlib.suppress(Exception):
            # A busy node's KV puts take seconds; 10 s is well inside a pod's 30 s grace.
            await asyncio.wait_for(decider.flush(), 10.0)
        for task in tasks:
            if task.done():
                continue
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(task), 2.0)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        await drain(nc)
        await api.close()
        log.info("decider_stopped")
