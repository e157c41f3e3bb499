"""The GPU load model: each workload's load profile, shared among its ready pods'
GPUs, read out per node as the simulated-GPU feed (:mod:`gpuscale.simfeed`).

A workload's load L (GPU-percent: 90 = one GPU's worth at 90 %) comes from
``set_load`` or the annotation ``sim.gpuscale.io/load``. Each ready pod's
GPU shows ``min(100, L / ready GPUs)`` plus noise; a pod still loading its
model shows its memory filling and no utilization.

A pod that plays an inference server (``sim.gpuscale.io/engine: vllm``,
:mod:`.inference`) turns the same load into requests that queue: its GPUs
show its busy fraction, and its ``/metrics`` its queue and KV cache.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Mapping
from dataclasses import dataclass

from gpuscale.simfeed import FeedGpu, FeedOwner, FeedWorkload, NodeGpus
from gpuscale_kubesim.apiserver.errors import ApiError
from gpuscale_kubesim.apiserver.resources import ResourceDef
from gpuscale_kubesim.apiserver.store import Store

from . import load as loadmod
from .common import LOAD_ANNOTATION, Now, Obj, Owner, PodState
from .inference import Endpoint, EngineConfig, InferenceWorkloads, endpoint_of, render_vllm


@dataclass
class WorkloadLoad:
    profile: loadmod.Profile
    since: float  # monotonic time the profile started
    since_wall: float  # the wall time it started: what readers in other processes compare


class LoadModel:
    def __init__(
        self,
        store: Store,
        rds: Mapping[str, ResourceDef],
        pods: Mapping[str, PodState],
        *,
        speed: float,
        startup_delay_s: float,
        rng: random.Random,
    ) -> None:
        self.store = store
        self.rd_pod, self.rd_node = rds["pod"], rds["node"]
        self.rd_deploy, self.rd_rs, self.rd_sts = rds["deployment"], rds["replicaset"], rds["statefulset"]
        self.pods = pods  # the kubelets' view
        self.speed = speed
        self.startup_delay_s = startup_delay_s
        self.rng = rng
        self.loads: dict[tuple[str, str], WorkloadLoad] = {}
        self.inference = InferenceWorkloads(EngineConfig())

    def set_load(self, namespace: str, name: str, profile: loadmod.Profile, now: Now) -> None:
        self.loads[(namespace, name)] = WorkloadLoad(profile, now.mono, now.wall)

    def load_of(self, namespace: str, name: str, now: Now) -> float:
        entry = self.loads.get((namespace, name)) or self._load_from_annotation(namespace, name, now)
        if entry is None:
            return 0.0
        return entry.profile.at((now.mono - entry.since) * self.speed)

    def load_since(self, namespace: str, name: str, now: Now) -> float | None:
        """The wall time the workload's current load level began (None: no load, or
        one that moves continuously): a reader that polls places the step exactly."""
        entry = self.loads.get((namespace, name)) or self._load_from_annotation(namespace, name, now)
        if entry is None:
            return None
        start = entry.profile.level_start((now.mono - entry.since) * self.speed)
        return None if start is None else entry.since_wall + start / self.speed

    def _sim_load(self, workload: tuple[str, str], sim_t: float, now: Now) -> float:
        """The workload's load at simulated time ``sim_t`` (``mono × speed``)."""
        entry = self.loads.get(workload) or self._load_from_annotation(workload[0], workload[1], now)
        if entry is None:
            return 0.0
        return entry.profile.at(sim_t - entry.since * self.speed)

    # --- inference servers ---------------------------------------------------------------

    def advance_engines(self, now: Now) -> dict[str, Obj]:
        """Bring every serving engine pod's queue to ``now``; the pods by uid."""
        pods = {p["metadata"]["uid"]: p for p in self.store.raw_items(self.rd_pod)}
        serving: dict[tuple[str, str], dict[str, tuple[int, Endpoint]]] = {}
        for uid, state in self.pods.items():
            pod = pods.get(uid)
            if pod is None or not state.serving:
                continue
            endpoint = endpoint_of(pod)
            if endpoint is None:
                continue
            key = (pod["metadata"]["namespace"], self.owner_of(pod).name)
            serving.setdefault(key, {})[uid] = (len(state.gpus), endpoint)
        for key in self.inference.accounts:  # a served workload left with no pod: its arrivals are counted
            serving.setdefault(key, {})
        self.inference.advance(now.mono * self.speed, serving, lambda w, t: self._sim_load(w, t, now))
        return pods

    def engine_metrics(self, uid: str, now: Now) -> str | None:
        """A serving engine pod's ``/metrics`` text at ``now``; None when it serves none."""
        self.advance_engines(now)
        pod = self.inference.pods.get(uid)
        return None if pod is None else render_vllm(pod, self.inference.config)

    def engine_totals(self, namespace: str, name: str, pods: Mapping[str, Obj]) -> tuple[float, float] | None:
        """(waiting, running) over the workload's serving engine pods, or None: it has none."""
        found = [
            p
            for uid, p in self.inference.pods.items()
            if uid in pods
            and pods[uid]["metadata"]["namespace"] == namespace
            and self.owner_of(pods[uid]).name == name
        ]
        if not found:
            return None
        return sum(p.waiting for p in found), sum(p.running for p in found)

    def _load_from_annotation(self, namespace: str, name: str, now: Now) -> WorkloadLoad | None:
        for rd in (self.rd_deploy, self.rd_sts):
            try:
                obj = self.store.get(rd, namespace, name)
            except ApiError:
                continue
            text = (obj["metadata"].get("annotations") or {}).get(LOAD_ANNOTATION)
            if text:
                try:
                    profile = loadmod.parse_profile(text)
                except ValueError:
                    return None
                entry = WorkloadLoad(profile, now.mono, now.wall)
                self.loads[(namespace, name)] = entry
                return entry
        return None

    def owner_of(self, pod: Obj) -> Owner:
        """Pod -> ReplicaSet -> Deployment, or StatefulSet, or the pod itself."""
        refs = pod["metadata"].get("ownerReferences") or []
        ref = next((r for r in refs if r.get("controller")), None)
        if ref is None:
            return Owner("Pod", pod["metadata"]["name"])
        if ref.get("kind") == "ReplicaSet":
            try:
                rs = self.store.get(self.rd_rs, pod["metadata"]["namespace"], ref["name"])
            except ApiError:
                return Owner("ReplicaSet", ref["name"])
            rs_ref = next(
                (r for r in rs["metadata"].get("ownerReferences") or [] if r.get("controller")), None
            )
            if rs_ref is not None and rs_ref.get("kind") == "Deployment":
                return Owner("Deployment", rs_ref["name"])
            return Owner("ReplicaSet", ref["name"])
        return Owner(str(ref.get("kind")), str(ref.get("name")))

    def workloads(self, now: Now) -> list[Obj]:
        pods = self.advance_engines(now)
        out = []
        for rd in (self.rd_deploy, self.rd_sts):
            for obj in self.store.raw_items(rd):
                meta = obj["metadata"]
                engine = self.engine_totals(meta["namespace"], meta["name"], pods)
                out.append(
                    {
                        "namespace": meta["namespace"],
                        "kind": rd.kind,
                        "name": meta["name"],
                        "load": round(self.load_of(meta["namespace"], meta["name"], now), 2),
                        "load_since": self.load_since(meta["namespace"], meta["name"], now),
                        "replicas": int((obj.get("spec") or {}).get("replicas", 0) or 0),
                        "current_replicas": int((obj.get("status") or {}).get("replicas", 0) or 0),
                        "ready_replicas": int((obj.get("status") or {}).get("readyReplicas", 0) or 0),
                    }
                )
                if engine is not None:  # an inference server: its queue, summed over pods
                    out[-1]["requests_waiting"] = round(engine[0], 2)
                    out[-1]["requests_running"] = round(engine[1], 2)
                account = self.inference.accounts.get((meta["namespace"], meta["name"]))
                if account is not None:  # what its requests paid in queues, since it first served
                    out[-1]["requests_paid"] = account.to_json()
        return out

    def node_gpus(self, node_name: str, capacity: int, now: Now) -> NodeGpus:
        """What a collector on ``node_name`` would read from NVML at ``now``."""
        node = self.store.get(self.rd_node, None, node_name)
        model = (
            (node["metadata"].get("labels") or {})
            .get("nvidia.com/gpu.product", loadmod.H100_MODEL)
            .replace("-", " ")
        )
        pods = self.advance_engines(now)
        owners = {uid: self.owner_of(p) for uid, p in pods.items() if uid in self.pods}
        # Ready GPUs per workload: the load is shared among them.
        ready_gpus: dict[tuple[str, str], int] = {}
        for uid, state in self.pods.items():
            if uid in owners and state.serving:
                key = (pods[uid]["metadata"]["namespace"], owners[uid].name)
                ready_gpus[key] = ready_gpus.get(key, 0) + len(state.gpus)
        by_index: dict[int, tuple[Obj, PodState]] = {}
        for uid, state in self.pods.items():
            if state.node == node_name and uid in pods:
                for index in state.gpus:
                    by_index[index] = (pods[uid], state)
        gpus = []
        for index in range(capacity):
            holder = by_index.get(index)
            feed_owners: tuple[FeedOwner, ...] = ()
            util, loaded = 0.0, 0.0
            if holder is not None:
                pod, state = holder
                owner = owners[pod["metadata"]["uid"]]
                ns = pod["metadata"]["namespace"]
                engine = self.inference.pods.get(pod["metadata"]["uid"])
                if state.serving and engine is not None:
                    util = 100.0 * engine.busy(self.inference.config)
                    loaded = 1.0
                elif state.serving:
                    util = loadmod.util_per_gpu(
                        self.load_of(ns, owner.name, now), ready_gpus.get((ns, owner.name), 0)
                    )
                    loaded = 1.0
                elif state.terminating_since is None:
                    loaded = (
                        (now.mono - state.scheduled_at) / self.startup_delay_s
                        if self.startup_delay_s > 0
                        else 1.0
                    )
                containers = (pod.get("spec") or {}).get("containers") or [{}]
                feed_owners = (
                    FeedOwner(
                        namespace=ns,
                        pod=pod["metadata"]["name"],
                        container=str(containers[0].get("name", "")),
                        pod_uid=pod["metadata"]["uid"],
                        workload=FeedWorkload(owner.kind, owner.name),
                        ready=state.serving,
                    ),
                )
            noise = self.rng.gauss(0.0, loadmod.NOISE_SD) if util > 0 else 0.0
            r = loadmod.reading(util, loaded, noise)
            gpus.append(
                FeedGpu(
                    index=index,
                    uuid=f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node_name}.gpu{index}.kube-sim')}",
                    model=model,
                    util=r.util,
                    mem_util=r.mem_util,
                    fb_used_mib=r.fb_used_mib,
                    fb_free_mib=r.fb_free_mib,
                    temp_c=r.temp_c,
                    power_w=r.power_w,
                    sm_active=r.sm_active,
                    owners=feed_owners,
                )
            )
        return NodeGpus(node_name, now.wall, tuple(gpus))
