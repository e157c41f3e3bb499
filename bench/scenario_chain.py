"""The usual chain (dcgm-exporter → Prometheus → adapter/KEDA → HPA), emulated in virtual time."""

from __future__ import annotations

import random
import statistics
from dataclasses import dataclass
from typing import Any

from scenario_setup import (
    MAX_REPLICAS,
    NAMESPACE,
    STARTUP_DELAY_S,
    UTIL_TARGET,
    Series,
    deployment,
    gpuscaler,
)

from gpuscale.policy import parse_gpuscaler
from gpuscale_decider.core.reconcile import Config, Memory, Observation, Target, reconcile
from gpuscale_decider.core.replicas import PodView
from gpuscale_kubesim.apiserver.store import Store
from gpuscale_kubesim.cluster import ClusterPlayer
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster import scenarios as sim_scenarios
from gpuscale_kubesim.cluster.inference import WaitAccount


class VirtualClock:
    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


@dataclass(frozen=True)
class ChainPhases:
    """Where each period of the chain falls relative to the trace's start (s)."""

    exporter: float
    prometheus: float
    adapter: float
    hpa: float

    @classmethod
    def draw(cls, rng: random.Random) -> ChainPhases:
        return cls(rng.uniform(0, 30), rng.uniform(0, 30), rng.uniform(0, 30), rng.uniform(0, 15))


def _due(t: float, phase: float, period: float, dt: float) -> bool:
    """Whether a tick of ``period`` (offset ``phase``) falls in ``(t - dt, t]``."""
    k = (t - phase) // period
    return t - dt < phase + k * period <= t


def emulate_chain(
    profile: loadmod.Profile,
    duration_s: float,
    phases: ChainPhases,
    seed: int,
    scale_down_window_s: int | None = None,
    measure_from: float = 0.0,
) -> tuple[Series, WaitAccount]:
    """(t, load, requested) per second on a virtual cluster, and what its requests paid
    in the engines' queues from ``measure_from`` on."""
    start = 10_000.0
    clock = VirtualClock(start)
    store = Store(clock=lambda: 1_800_000_000.0 + clock.t, rng=random.Random(seed))
    for obj in sim_scenarios.base_objects(nodes=1, gpus_per_node=MAX_REPLICAS + 2):
        rd = store.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rd is not None
        store.create(rd, (obj.get("metadata") or {}).get("namespace"), obj)
    player = ClusterPlayer(
        store,
        startup_delay_s=STARTUP_DELAY_S,
        termination_delay_s=2.0,
        rng=random.Random(seed),
        monotonic=clock,
        wall=lambda: 1_800_000_000.0 + clock.t,
    )
    name = "chain"
    rd_deploy = store.registry.get("apps", "v1", "deployments")
    rd_pod = store.registry.get("", "v1", "pods")
    assert rd_deploy is not None
    assert rd_pod is not None
    store.create(rd_deploy, NAMESPACE, deployment(name))
    player.settle(player.now())
    player.set_load(NAMESPACE, name, profile)
    # The 1-minute query window is the freshness bound on this side.
    scaler = parse_gpuscaler(
        gpuscaler(name, "gpu_util", UTIL_TARGET, window="60s", scale_down_window_s=scale_down_window_s)
    )
    memory = Memory()
    config = Config()
    exporter: dict[str, float] = {}  # the exporter's last collection, per pod
    tsdb: list[tuple[float, dict[str, float]]] = []  # Prometheus' scrapes
    adapter: dict[str, float] = {}
    adapter_at: float | None = None
    out: Series = []
    accounts = player.load_model.inference.accounts
    before: WaitAccount | None = None
    dt = 0.5
    steps = int(duration_s / dt)
    for i in range(steps + 1):
        t = i * dt
        clock.t = start + t
        now = player.now()
        player.reconcile(now)
        if before is None and t >= measure_from:
            before = accounts.get((NAMESPACE, name), WaitAccount()).copy()
        pods = [p for p in store.raw_items(rd_pod) if p["metadata"]["name"].startswith(f"{name}-")]
        if _due(t, phases.exporter, 30.0, dt):
            uids = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods}
            exporter = {}
            for node in player.scheduler.node_capacity():
                for g in player.node_gpus(node).gpus:
                    for o in g.owners:
                        if o.pod_uid in uids:
                            exporter[o.pod] = g.util  # dcgm-exporter labels every pod's GPU, Ready or not
        if _due(t, phases.prometheus, 30.0, dt) and exporter:
            tsdb.append((t, dict(exporter)))
        if _due(t, phases.adapter, 30.0, dt):
            window = [values for ts, values in tsdb if t - 60.0 < ts <= t]
            names = {pod for values in window for pod in values}
            adapter = {
                pod: statistics.fmean(values[pod] for values in window if pod in values)
                for pod in sorted(names)
            }
            adapter_at = start + t
        if _due(t, phases.hpa, 15.0, dt) and adapter_at is not None:
            views = tuple(_pod_view(p) for p in pods)
            deploy = store.get(rd_deploy, NAMESPACE, name)
            current = int(deploy["spec"]["replicas"])
            observation = Observation(
                received_at=adapter_at,
                sent_at=adapter_at,
                window_s=60.0,
                values={"gpu_util": adapter},
                averages={"gpu_util": statistics.fmean(adapter.values())} if adapter else {},
                pods_fresh=len(adapter),
                pods_stale=0,
            )
            step = reconcile(
                memory, scaler, Target(current, f"app={name}"), views, observation, start + t, config
            )
            memory = step.memory
            if step.decision is not None:
                deploy["spec"]["replicas"] = step.decision.to_replicas
                store.put(rd_deploy, deploy)
                player.reconcile(player.now())
        if i % int(1 / dt) == 0:
            replicas = int(store.get(rd_deploy, NAMESPACE, name)["spec"]["replicas"])
            out.append((t, profile.at(t), replicas))
    account = accounts.get((NAMESPACE, name), WaitAccount())
    return out, account.since(before) if before is not None else WaitAccount()


def _pod_view(pod: dict[str, Any]) -> PodView:
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    # HPA counts a not-Ready pod's value for Pods metrics: its phase decides (Pending is unready).
    return PodView(
        pod["metadata"]["name"],
        str(status.get("phase", "Pending")),
        ready,
        bool(pod["metadata"].get("deletionTimestamp")),
    )
