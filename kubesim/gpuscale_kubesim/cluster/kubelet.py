"""The kubelets: a scheduled pod loads its model for ``startup_delay_s`` (Pending,
ContainerCreating), then runs Ready; a deleted pod is Terminating for
``termination_delay_s``, then gone. The kubelets write pod status.

A pod that plays an inference server turns Ready at the end of its start-up only
once its server listens (:attr:`Kubelets.listening`), as a readiness probe passes
only then: told Ready sooner, a scraper that reads it at once is refused. (Pods of
a scenario's cluster "running before", or with no start-up at all, are Ready at
once: their servers follow within the pod servers' next sync.)"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Callable

from gpuscale_kubesim.apiserver.errors import ApiError
from gpuscale_kubesim.apiserver.resources import ResourceDef, format_time
from gpuscale_kubesim.apiserver.store import Store

from .common import CountingNetwork, Now, Obj, PodNetwork, PodState, existing_transition
from .inference import endpoint_of
from .scheduler import Scheduler


class Kubelets:
    def __init__(
        self,
        store: Store,
        rd_pod: ResourceDef,
        scheduler: Scheduler,
        startup_delay_s: float,
        termination_delay_s: float,
        network: PodNetwork | None = None,
    ) -> None:
        self.store = store
        self.rd_pod = rd_pod
        self.scheduler = scheduler
        self.startup_delay_s = startup_delay_s
        self.termination_delay_s = termination_delay_s
        self.pods: dict[str, PodState] = {}  # by pod uid
        # While set, scheduled pods are ready at once: the scenario's cluster was running before.
        self.warm = False
        self.network: PodNetwork = network or CountingNetwork()
        # Whether a started pod's server listens (uid): kube-sim's pod servers answer;
        # without them nothing listens anywhere, and no pod waits.
        self.listening: Callable[[str], bool] = lambda _uid: True

    def sync(self, now: Now) -> None:
        pods = list(self.store.raw_items(self.rd_pod))
        live_uids = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self.pods if u not in live_uids]:
            del self.pods[uid]  # gone: its GPUs are free again
            self.network.release(uid)
        capacity = self.scheduler.node_capacity()
        used: dict[str, set[int]] = {n: set() for n in capacity}
        for state in self.pods.values():
            used.setdefault(state.node, set()).update(state.gpus)
        pending = sorted(
            (p for p in pods if p["metadata"]["uid"] not in self.pods),
            key=lambda p: int(p["metadata"]["resourceVersion"]),
        )
        for pod in pending:
            if not pod["metadata"].get("deletionTimestamp"):
                self._admit(pod, now, capacity, used)
        for pod in pods:
            self._step(pod, now)

    def _admit(self, pod: Obj, now: Now, capacity: dict[str, int], used: dict[str, set[int]]) -> None:
        if (pod.get("spec") or {}).get("schedulingGates"):
            self.scheduler.gated(pod, now)  # left out until a controller removes its gates
            return
        placement = self.scheduler.place(pod, capacity, used)
        if placement is None:
            self.scheduler.unschedulable(pod, len(capacity), now)
            return
        state = PodState(placement.node, placement.gpus, now.mono)
        self.pods[pod["metadata"]["uid"]] = state
        self.write_status(pod, state, now, bind=True)
        self.scheduler.bound(pod, placement, now)
        if self.startup_delay_s <= 0 or self.warm:
            state.ready = True
            meta = pod["metadata"]
            self.write_status(self.store.get(self.rd_pod, meta["namespace"], meta["name"]), state, now)

    def _step(self, pod: Obj, now: Now) -> None:
        meta = pod["metadata"]
        state = self.pods.get(meta["uid"])
        if meta.get("deletionTimestamp"):
            if state is None:
                self.store.finish_termination(self.rd_pod, pod)
            elif state.terminating_since is None:
                state.terminating_since = now.mono
                state.ready = False
                self.write_status(pod, state, now)
            elif now.mono >= state.terminating_since + self.termination_delay_s:
                self.store.finish_termination(self.rd_pod, pod)
                self.pods.pop(meta["uid"], None)
                self.network.release(meta["uid"])
            return
        if state is not None and not state.ready and now.mono >= state.scheduled_at + self.startup_delay_s:
            state.started = True
            if endpoint_of(pod) is None or self.listening(meta["uid"]):
                state.ready = True
                self.write_status(pod, state, now)

    def next_due(self) -> float | None:
        """The monotonic time of the next start-up or termination to finish."""
        due: list[float] = []
        for state in self.pods.values():
            if state.terminating_since is not None:
                due.append(state.terminating_since + self.termination_delay_s)
            elif not state.ready and not state.started:  # a started one waits for its server's word
                due.append(state.scheduled_at + self.startup_delay_s)
        return min(due) if due else None

    def write_status(self, pod: Obj, state: PodState, now: Now, bind: bool = False) -> None:
        new = copy.deepcopy(pod)
        if bind:
            new.setdefault("spec", {})["nodeName"] = state.node
        wall = format_time(now.wall)
        status = new.setdefault("status", {})
        ready = "True" if state.ready else "False"
        if "podIP" not in status:
            status["podIP"] = self.network.address(new)
            status["podIPs"] = [{"ip": status["podIP"]}]
            status["hostIP"] = f"192.168.0.{sum(map(ord, state.node)) % 250 + 2}"
            status["startTime"] = wall
        was_running = status.get("phase") == "Running"
        status["phase"] = (
            "Running" if state.ready or (state.terminating_since is not None and was_running) else "Pending"
        )
        status["conditions"] = [
            _condition(pod, "PodScheduled", "True", wall),
            _condition(pod, "Initialized", "True", wall),
            _condition(pod, "ContainersReady", ready, wall),
            _condition(pod, "Ready", ready, wall),
        ]
        status["containerStatuses"] = [
            _container_status(new, container, state, wall)
            for container in (new.get("spec") or {}).get("containers") or []
        ]
        try:
            self.store.put(self.rd_pod, new)
        except ApiError:
            return


def _container_status(pod: Obj, container: Obj, state: PodState, wall: str) -> Obj:
    name = container.get("name", "")
    entry: Obj = {
        "name": name,
        "image": container.get("image", ""),
        "imageID": "",
        "restartCount": 0,
        "ready": state.ready,
        "started": state.ready,
        "containerID": f"containerd://{uuid.uuid5(uuid.NAMESPACE_OID, pod['metadata']['uid'] + name).hex}",
    }
    if state.ready:
        entry["state"] = {"running": {"startedAt": wall}}
    elif state.terminating_since is not None:
        entry["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
    else:
        entry["state"] = {"waiting": {"reason": "ContainerCreating"}}
    return entry


def _condition(pod: Obj, type_: str, status: str, wall: str) -> Obj:
    return {
        "type": type_,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": existing_transition(pod, type_, status) or wall,
    }
