"""Run the decider in-process against a real nats-server and kube-sim."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gpuscale import codec, natsio, subjects
from gpuscale.natsio import NATS
from gpuscale.runtime import ServiceContext, run_async
from gpuscale.wire import Decision, MetricValues, PodMetrics, WorkloadMetrics
from gpuscale_decider.app import serve
from gpuscale_decider.decider import Decider
from gpuscale_decider.settings import DeciderSettings
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload
from ..k8s_objects import gpuscaler as shared_gpuscaler
from ..waiting import eventually, sample_value


def settings_for(nats_url: str, kubeconfig: str | Path, **overrides: Any) -> DeciderSettings:
    base = DeciderSettings(
        nats_url=(nats_url,),
        kubeconfig=Path(kubeconfig),
        http_port=0,
        identity="decider-test",
        leader_election=False,
        tick_interval=0.5,
        scale_cache=0.2,
        conflict_check_interval=0.5,
    )
    return replace(base, **overrides)


def gpuscaler(
    name: str = "bert",
    target: str = "bert",
    *,
    namespace: str = "default",
    max_replicas: int = 10,
    min_replicas: int = 1,
    behavior: dict[str, Any] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """The shared GPUScaler, with no scale-down stabilization unless a test asks."""
    return shared_gpuscaler(
        name,
        target,
        namespace=namespace,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        behavior=behavior if behavior is not None else {"scaleDown": {"stabilizationWindowSeconds": 0}},
        **spec,
    )


def write_policies(path: Path, *docs: Any) -> Path:
    path.write_text(yaml.safe_dump_all(list(docs)))
    return path


def metrics_message(
    name: str,
    util: float,
    fresh: int,
    *,
    ts: float | None = None,
    namespace: str = "default",
    pods: Sequence[str] | None = None,
) -> WorkloadMetrics:
    """What the aggregator would publish for ``fresh`` pods at ``util``: the
    first ``fresh`` of ``pods`` (real pod names, from :func:`running_pods`),
    or ``<name>-<i>`` for a decider that does not look at pods."""
    ts = time.time() if ts is None else ts
    names = list(pods) if pods is not None else [f"{name}-{i}" for i in range(fresh)]
    return WorkloadMetrics(
        namespace=namespace,
        kind="Deployment",
        name=name,
        ts=ts,
        window_s=30.0,
        pods=tuple(PodMetrics(pod, MetricValues(gpu_util=util), ts) for pod in names[:fresh]),
        averages=MetricValues(gpu_util=util),
        pods_fresh=fresh,
        pods_stale=0,
    )


async def running_pods(sim: KubeSim, name: str, count: int, namespace: str = "default") -> list[str]:
    """The names of the workload's pods once exactly ``count`` are Running and Ready."""

    def ready() -> list[str] | None:
        alive = [p for p in sim.pods(namespace, f"app={name}") if not p["metadata"].get("deletionTimestamp")]
        names = sorted(
            p["metadata"]["name"]
            for p in alive
            if any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in p["status"].get("conditions") or ()
            )
        )
        return names if len(alive) == len(names) == count else None

    return await eventually(ready, what=f"{count} ready pods of {name}")


async def publish_metrics(nc: NATS, m: WorkloadMetrics) -> None:
    key = subjects.WorkloadKey(m.namespace, m.kind, m.name)
    await nc.publish(subjects.metrics(key), codec.encode(m))
    await natsio.flush(nc)


@dataclass
class DecisionWatch:
    decisions: list[Decision] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def next(self, count: int = 1, timeout_s: float = 10.0) -> Decision:
        deadline = time.monotonic() + timeout_s
        while len(self.decisions) < count:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"expected {count} decisions, got {len(self.decisions)}")
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), left)
        return self.decisions[count - 1]


@asynccontextmanager
async def watch_decisions(nc: NATS) -> AsyncIterator[DecisionWatch]:
    watch = DecisionWatch()

    async def on_msg(msg: Any) -> None:
        watch.decisions.append(codec.decode(msg.data, Decision, time.time() + 3600))
        watch.changed.set()

    sub = await nc.subscribe(subjects.DECISIONS_ALL, cb=on_msg)
    try:
        yield watch
    finally:
        await sub.unsubscribe()


@dataclass
class RunningDecider:
    task: asyncio.Task[int]
    ctx: ServiceContext
    decider: Decider

    async def stop(self, timeout_s: float = 15.0) -> int:
        self.ctx.stop.set()
        return await asyncio.wait_for(self.task, timeout_s)

    def desired(self, name: str, namespace: str = "default") -> Any:
        """The desired count this decider last wrote for Deployment ``name``, if any."""
        w = self.decider.workloads[subjects.WorkloadKey(namespace, "Deployment", name)]
        return None if w.memory is None else w.memory.state.desired

    def metric(self, name: str, **labels: str) -> float:
        return sample_value(self.ctx.metrics.registry, name, **labels)


@asynccontextmanager
async def running_decider(settings: DeciderSettings) -> AsyncIterator[RunningDecider]:
    holder: dict[str, Any] = {}

    async def wrapped(ctx: ServiceContext) -> None:
        holder["ctx"] = ctx
        await serve(ctx, on_decider=lambda d: holder.setdefault("decider", d))

    task = asyncio.create_task(run_async("decider", settings, wrapped, http_port=0))

    def started() -> bool:
        if task.done():  # not worth waiting for: say why at once
            raise RuntimeError(f"the decider stopped at start: {task.result()}")
        return "decider" in holder

    await eventually(started, 20, "the decider to start")
    running = RunningDecider(task, holder["ctx"], holder["decider"])
    try:
        yield running
    finally:
        if not task.done():
            await running.stop()


def deployment(name: str, replicas: int, namespace: str = "default") -> dict[str, Any]:
    return gpu_workload(name, replicas, namespace=namespace, gpus=None)


async def store_predating_the_crd_rules(sim: KubeSim, obj: dict[str, Any], valid: dict[str, Any]) -> None:
    """Store ``obj`` though the CRD's rules refuse it: an object created before a CRD
    upgrade added them stays as it was (the API server checks writes, not what is
    stored). Created as ``valid`` first, then replaced as a controller writes, unchecked."""
    created = await sim.create(valid)  # with the schema's defaults, as a stored object is read
    stored = {**created, "spec": {**created["spec"], **obj["spec"]}}
    sim.store.put(sim.resource(obj["apiVersion"], obj["kind"]), stored)
