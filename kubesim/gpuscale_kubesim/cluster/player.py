"""The cluster player: runs the controllers, the scheduler and the kubelets after every
write and at the next due time, and reads the GPU load model out per node.

A reconcile pass takes one clock reading (:class:`Now`) and hands it to every
role; it writes only what changed, so it settles.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from gpuscale.logging import get_logger
from gpuscale.simfeed import NodeGpus
from gpuscale_kubesim.apiserver.store import Change, Store

from . import load as loadmod
from .common import Now, Obj, PodNetwork, must
from .controllers import WorkloadControllers
from .events import Recorder
from .inference import Endpoint, endpoint_of
from .kubelet import Kubelets
from .loadmodel import LoadModel
from .scheduler import Scheduler


@dataclass
class ClusterPlayer:
    store: Store
    startup_delay_s: float = 20.0
    termination_delay_s: float = 2.0
    speed: float = 1.0
    rng: random.Random = field(default_factory=random.Random)
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    network: PodNetwork | None = None  # pod IPs (default: 10.244.x.y, nothing listening)

    def __post_init__(self) -> None:
        reg = self.store.registry
        rds = {
            "pod": must(reg.get("", "v1", "pods")),
            "node": must(reg.get("", "v1", "nodes")),
            "event": must(reg.get("", "v1", "events")),
            "deployment": must(reg.get("apps", "v1", "deployments")),
            "replicaset": must(reg.get("apps", "v1", "replicasets")),
            "statefulset": must(reg.get("apps", "v1", "statefulsets")),
        }
        self.recorder = Recorder(self.store, rds["event"])
        self.scheduler = Scheduler(self.store, rds["pod"], rds["node"], self.recorder)
        self.kubelets = Kubelets(
            self.store,
            rds["pod"],
            self.scheduler,
            self.startup_delay_s,
            self.termination_delay_s,
            self.network,
        )
        self.controllers = WorkloadControllers(self.store, rds, self.recorder, self.kubelets.pods, self.rng)
        self.load_model = LoadModel(
            self.store,
            rds,
            self.kubelets.pods,
            speed=self.speed,
            startup_delay_s=self.startup_delay_s,
            rng=self.rng,
        )
        self._dirty = asyncio.Event()
        self.log = get_logger(component="kube-sim-cluster")
        self.store.listeners.append(self._on_change)

    def now(self) -> Now:
        return Now(self.monotonic(), self.wall())

    def _on_change(self, _change: Change) -> None:
        self._dirty.set()

    def poke(self) -> None:
        """Reconcile now (a pod's server started listening: it may turn Ready)."""
        self._dirty.set()

    async def run(self, stop: asyncio.Event) -> None:
        self._dirty.set()
        while not stop.is_set():
            due = None
            try:
                due = self.reconcile(self.now())
            except Exception as e:  # a bad object must not stop the cluster
                self.log.error("reconcile_failed", error=f"{type(e).__name__}: {e}", exc_info=e)
            wait = 1.0 if due is None else max(0.0, due - self.monotonic())
            self._dirty.clear()
            waiter = asyncio.create_task(self._dirty.wait())
            stopper = asyncio.create_task(stop.wait())
            try:
                await asyncio.wait(
                    {waiter, stopper}, timeout=min(wait, 1.0) + 0.001, return_when=asyncio.FIRST_COMPLETED
                )
            finally:
                waiter.cancel()
                stopper.cancel()

    def settle(self, now: Now, passes: int = 5) -> None:
        """Bring the scenario's workloads up with ready pods before time starts."""
        self.kubelets.warm = True
        try:
            for _ in range(passes):
                self.reconcile(now)
        finally:
            self.kubelets.warm = False

    def reconcile(self, now: Now) -> float | None:
        """One pass over everything; returns the monotonic time the next timed change is due."""
        for _ in range(5):  # a few rounds so that one pass settles a chain of owners
            before = self.store.rv
            self.controllers.reconcile(now)
            self.kubelets.sync(now)
            self.controllers.statuses(now)
            if self.store.rv == before:
                break
        self.load_model.advance_engines(now)  # queues fill and drain whether or not anyone reads them
        return self.kubelets.next_due()

    # --- the load model, at the time of asking ---------------------------------------

    def set_load(self, namespace: str, name: str, profile: loadmod.Profile) -> None:
        self.load_model.set_load(namespace, name, profile, self.now())

    def load_of(self, namespace: str, name: str) -> float:
        return self.load_model.load_of(namespace, name, self.now())

    def workloads(self) -> list[Obj]:
        return self.load_model.workloads(self.now())

    def serving_endpoints(self) -> dict[str, tuple[str, Endpoint]]:
        """uid → (pod IP, endpoint) of every pod that serves inference metrics now
        (ready, not terminating, an engine annotation, an IP)."""
        out: dict[str, tuple[str, Endpoint]] = {}
        for pod in self.store.raw_items(self.load_model.rd_pod):
            uid = pod["metadata"]["uid"]
            state = self.kubelets.pods.get(uid)
            ip = (pod.get("status") or {}).get("podIP")
            if state is None or not state.serving or not ip:
                continue
            endpoint = endpoint_of(pod)
            if endpoint is not None:
                out[uid] = (str(ip), endpoint)
        return out

    def engine_metrics(self, uid: str) -> str | None:
        """A serving inference-server pod's ``/metrics`` now (None: it serves none)."""
        return self.load_model.engine_metrics(uid, self.now())

    def node_gpus(self, node_name: str) -> NodeGpus:
        capacity = self.scheduler.node_capacity().get(node_name, 0)
        return self.load_model.node_gpus(node_name, capacity, self.now())
