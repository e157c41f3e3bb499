"""Run the actuator in-process (or as a real process) and watch what it does."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from gpuscale import codec, subjects
from gpuscale.natsio import NATS, declare_kv, jetstream
from gpuscale.runtime import ServiceContext, run_async
from gpuscale.wire import Action, Decision
from gpuscale_actuator.app import serve
from gpuscale_actuator.settings import ActuatorSettings

from ..waiting import eventually, sample_value

_ids = itertools.count(1)

# Short leases so tests do not wait; ratios as the defaults.
FAST_LEASE = {"lease_duration": 2.0, "renew_deadline": 1.5, "retry_period": 0.2}

# A write that succeeded: at once, or after one 409 (kube-sim's controllers write the objects too).
WRITTEN = ("applied", "conflict_retried")


def settings_for(nats_url: str, kubeconfig: str, **overrides: Any) -> ActuatorSettings:
    base = ActuatorSettings(
        nats_url=(nats_url,),
        kubeconfig=Path(kubeconfig),
        http_port=0,
        identity="actuator-test",
        **FAST_LEASE,
    )
    return replace(base, **overrides)


def decision(
    name: str = "bert",
    *,
    from_: int = 2,
    to: int = 3,
    kind: str = "Deployment",
    age_s: float = 0.0,
    decision_id: str | None = None,
    api_version: str = "apps/v1",
    namespace: str = "default",
) -> Decision:
    return Decision(
        id=decision_id or f"dec-{next(_ids)}-{time.monotonic_ns()}",
        ts=time.time() - age_s,
        namespace=namespace,
        kind=kind,
        name=name,
        from_replicas=from_,
        to_replicas=to,
        reason=f"gpu_util 83.0 over target 70 (ratio 1.19): {from_} -> {to}",
        inputs={"gpuscaler": f"{namespace}/{name}", "averages": {"gpu_util": 83.0}},
        api_version=api_version,
    )


async def publish(nc: NATS, d: Decision) -> None:
    """Write ``d`` as its workload's desired count, as the decider does."""
    key = subjects.WorkloadKey(d.namespace, d.kind, d.name)
    await publish_raw(nc, subjects.desired_key(key), codec.encode(d))


async def publish_raw(nc: NATS, kv_key: str, payload: bytes) -> None:
    desired = await declare_kv(jetstream(nc), subjects.DESIRED)
    await desired.put(kv_key, payload)


@dataclass
class ActionWatch:
    """Every Action published, by decision id."""

    actions: list[Action] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def wait_for(self, decision_id: str, timeout_s: float = 15.0) -> Action:
        deadline = time.monotonic() + timeout_s
        while True:
            for a in self.actions:
                if a.decision_id == decision_id:
                    return a
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no action for {decision_id}; got {[a.outcome for a in self.actions]}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)

    def for_decision(self, decision_id: str) -> list[Action]:
        return [a for a in self.actions if a.decision_id == decision_id]


@asynccontextmanager
async def watch_actions(nc: NATS) -> AsyncIterator[ActionWatch]:
    watch = ActionWatch()

    async def on_msg(msg: Any) -> None:
        watch.actions.append(codec.decode(msg.data, Action, time.time()))
        watch.changed.set()

    sub = await nc.subscribe(subjects.ACTIONS_ALL, cb=on_msg)
    try:
        yield watch
    finally:
        await sub.unsubscribe()


@dataclass
class RunningActuator:
    task: asyncio.Task[int]
    ctx: ServiceContext | None = None

    async def stop(self, timeout_s: float = 10.0) -> int:
        if self.ctx is not None:
            self.ctx.stop.set()
        return await asyncio.wait_for(self.task, timeout_s)

    def metric(self, name: str, **labels: str) -> float:
        assert self.ctx is not None
        return sample_value(self.ctx.metrics.registry, name, **labels)


@asynccontextmanager
async def running_actuator(settings: ActuatorSettings) -> AsyncIterator[RunningActuator]:
    holder: dict[str, ServiceContext] = {}

    async def wrapped(ctx: ServiceContext) -> None:
        holder["ctx"] = ctx
        await serve(ctx)

    task = asyncio.create_task(run_async("actuator", settings, wrapped, http_port=0))

    def started() -> bool:
        if task.done():  # not worth waiting for: say why at once
            raise RuntimeError(f"the actuator stopped at start: {task.result()}")
        return "ctx" in holder

    await eventually(started, 20, "the actuator to start")
    running = RunningActuator(task, holder["ctx"])
    try:
        yield running
    finally:
        if not task.done():
            await running.stop()
