"""Playing the cluster: the controllers, the scheduler and the kubelets.

Deployments own ReplicaSets that own pods; StatefulSets own ordinal pods.
Pods go to nodes with free GPUs, load their model for ``startup_delay_s``,
then run Ready; deleted pods leave after ``termination_delay_s``. Workload
status follows. A reconcile pass runs after every write and at the next
due time; it writes only what changed, so it settles.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuscale.logging import get_logger
from gpuscale_kubesim import load as loadmod
from gpuscale_kubesim.errors import ApiError
from gpuscale_kubesim.resources import ResourceDef, format_time
from gpuscale_kubesim.store import Change, Store, random_suffix

Obj = dict[str, Any]
GPU_RESOURCE = "nvidia.com/gpu"
LOAD_ANNOTATION = "sim.gpuscale.io/load"  # a workload's load profile, e.g. "step" or "constant:120"


def _hash_chars(data: Any, n: int = 10) -> str:
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).digest()
    alphabet = "bcdfghjklmnpqrstvwxz2456789"
    return "".join(alphabet[b % len(alphabet)] for b in digest[:n])


def gpus_requested(pod: Obj) -> int:
    total = 0
    for container in (pod.get("spec") or {}).get("containers") or []:
        resources = container.get("resources") or {}
        value = (resources.get("limits") or {}).get(GPU_RESOURCE) or (resources.get("requests") or {}).get(
            GPU_RESOURCE
        )
        try:
            total += int(value) if value is not None else 0
        except (TypeError, ValueError):
            continue
    return total or 1


def controller_uid(obj: Obj) -> str | None:
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def owner_ref(owner: Obj) -> Obj:
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": owner["metadata"]["name"],
        "uid": owner["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


@dataclass
class PodState:
    """What the kubelet knows about one pod."""

    node: str
    gpus: list[int]
    scheduled_at: float
    ready: bool = False
    terminating_since: float | None = None


@dataclass
class WorkloadLoad:
    profile: loadmod.Profile
    since: float  # monotonic time the profile started


@dataclass
class Owner:
    kind: str  # Deployment | StatefulSet | Pod
    name: str


@dataclass
class ClusterPlayer:
    store: Store
    startup_delay_s: float = 20.0
    termination_delay_s: float = 2.0
    speed: float = 1.0
    rng: random.Random = field(default_factory=random.Random)
    monotonic: Callable[[], float] = time.monotonic
    pods: dict[str, PodState] = field(default_factory=dict)  # by pod uid
    # While set, scheduled pods are ready at once: the scenario's cluster was
    # running before the simulation began (see settle()).
    warm: bool = False
    loads: dict[tuple[str, str], WorkloadLoad] = field(default_factory=dict)

    def __post_init__(self) -> None:
        reg = self.store.registry
        self.rd_pod = _must(reg.get("", "v1", "pods"))
        self.rd_node = _must(reg.get("", "v1", "nodes"))
        self.rd_deploy = _must(reg.get("apps", "v1", "deployments"))
        self.rd_rs = _must(reg.get("apps", "v1", "replicasets"))
        self.rd_sts = _must(reg.get("apps", "v1", "statefulsets"))
        self.rd_event = _must(reg.get("", "v1", "events"))
        self._dirty = asyncio.Event()
        self._ip_counter = 0
        self._hashes: dict[str, tuple[int, str]] = {}  # owner uid -> (generation, template hash)
        self.log = get_logger(component="kube-sim-cluster")
        self.store.listeners.append(self._on_change)

    def _on_change(self, _change: Change) -> None:
        self._dirty.set()

    async def run(self, stop: asyncio.Event) -> None:
        self._dirty.set()
        while not stop.is_set():
            due = None
            try:
                due = self.reconcile(self.monotonic())
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

    # --- reconcile --------------------------------------------------------------

    def settle(self, now: float, passes: int = 5) -> None:
        """Bring the scenario's workloads up with ready pods before time starts."""
        self.warm = True
        try:
            for _ in range(passes):
                self.reconcile(now)
        finally:
            self.warm = False

    def reconcile(self, now: float) -> float | None:
        """One pass over everything; returns when the next timed change is due."""
        for _ in range(5):  # a few rounds so that one pass settles a chain of owners
            before = self.store.rv
            self._deployments()
            self._replicasets()
            self._statefulsets()
            self._kubelets(now)
            self._statuses()
            if self.store.rv == before:
                break
        return self._next_due()

    def _pods_by_controller(self) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = {}
        for pod in self.store.raw_items(self.rd_pod):
            uid = controller_uid(pod)
            if uid:
                out.setdefault(uid, []).append(pod)
        return out

    def _deployments(self) -> None:
        sets_by_owner: dict[str, list[Obj]] = {}
        for rs in self.store.raw_items(self.rd_rs):
            uid = controller_uid(rs)
            if uid:
                sets_by_owner.setdefault(uid, []).append(rs)
        for deploy in self.store.raw_items(self.rd_deploy):
            meta, spec = deploy["metadata"], deploy.get("spec") or {}
            if meta.get("deletionTimestamp"):
                continue
            pod_hash = self._template_hash(deploy)
            rs_name = f"{meta['name']}-{pod_hash}"
            replicas = int(spec.get("replicas", 1) or 0)
            owned = sets_by_owner.get(meta["uid"], [])
            current = next((rs for rs in owned if rs["metadata"]["name"] == rs_name), None)
            if current is None:
                template = copy.deepcopy(spec.get("template") or {})
                labels = dict(((template.get("metadata") or {}).get("labels")) or {})
                labels["pod-template-hash"] = pod_hash
                template.setdefault("metadata", {})["labels"] = labels
                selector = copy.deepcopy(spec.get("selector") or {"matchLabels": {}})
                selector.setdefault("matchLabels", {})["pod-template-hash"] = pod_hash
                revision = 1 + max(
                    (
                        int(
                            (rs["metadata"].get("annotations") or {}).get(
                                "deployment.kubernetes.io/revision", 0
                            )
                        )
                        for rs in owned
                    ),
                    default=0,
                )
                self._event(
                    deploy,
                    "ScalingReplicaSet",
                    f"Scaled up replica set {rs_name} from 0 to {replicas}",
                    "deployment-controller",
                )
                self._create(
                    self.rd_rs,
                    {
                        "metadata": {
                            "name": rs_name,
                            "namespace": meta["namespace"],
                            "labels": labels,
                            "annotations": {
                                "deployment.kubernetes.io/desired-replicas": str(replicas),
                                "deployment.kubernetes.io/revision": str(revision),
                            },
                            "ownerReferences": [owner_ref(deploy)],
                        },
                        "spec": {"replicas": replicas, "selector": selector, "template": template},
                    },
                )
            elif (before := int(current["spec"].get("replicas", 0))) != replicas:
                way = "up" if replicas > before else "down"
                self._event(
                    deploy,
                    "ScalingReplicaSet",
                    f"Scaled {way} replica set {rs_name} from {before} to {replicas}",
                    "deployment-controller",
                )
                self._set_spec_replicas(self.rd_rs, current, replicas)
            for old in owned:
                if (
                    old["metadata"]["name"] != rs_name
                    and (before := int(old["spec"].get("replicas", 0))) != 0
                ):
                    self._event(
                        deploy,
                        "ScalingReplicaSet",
                        f"Scaled down replica set {old['metadata']['name']} from {before} to 0",
                        "deployment-controller",
                    )
                    self._set_spec_replicas(self.rd_rs, old, 0)

    def _template_hash(self, owner: Obj) -> str:
        """The pod-template-hash, cached per spec generation (hashing every pass is the hot spot)."""
        meta = owner["metadata"]
        key = (meta["uid"], int(meta.get("generation", 1)))
        cached = self._hashes.get(meta["uid"])
        if cached is not None and cached[0] == key[1]:
            return cached[1]
        value = _hash_chars((owner.get("spec") or {}).get("template") or {})
        self._hashes[meta["uid"]] = (key[1], value)
        return value

    def _set_spec_replicas(self, rd: ResourceDef, obj: Obj, replicas: int) -> None:
        new = copy.deepcopy(obj)
        new["spec"]["replicas"] = replicas
        annotations = new["metadata"].setdefault("annotations", {})
        if rd is self.rd_rs:
            annotations["deployment.kubernetes.io/desired-replicas"] = str(replicas)
        new["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1
        self.store.put(rd, new)

    def _event(self, about: Obj, reason: str, message: str, component: str, type_: str = "Normal") -> None:
        """A core v1 Event, as the controller or scheduler named by ``component`` records it."""
        meta = about["metadata"]
        stamp = format_time(time.time())
        self._create(
            self.rd_event,
            {
                "metadata": {
                    "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                    "namespace": meta.get("namespace") or "default",
                },
                "involvedObject": {
                    "apiVersion": about.get("apiVersion"),
                    "kind": about.get("kind"),
                    "name": meta["name"],
                    "namespace": meta.get("namespace"),
                    "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"),
                },
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": component},
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "reportingComponent": component,
                "reportingInstance": "",
            },
        )

    def _create(self, rd: ResourceDef, obj: Obj) -> Obj | None:
        try:
            return self.store.create(rd, obj["metadata"].get("namespace"), obj)
        except ApiError as e:
            self.log.warning("create_failed", kind=rd.kind, name=obj["metadata"].get("name"), error=e.message)
            return None

    def _replicasets(self) -> None:
        pods_by_owner = self._pods_by_controller()
        for rs in self.store.raw_items(self.rd_rs):
            meta, spec = rs["metadata"], rs.get("spec") or {}
            if meta.get("deletionTimestamp"):
                continue
            want = int(spec.get("replicas", 0) or 0)
            alive = [
                p for p in pods_by_owner.get(meta["uid"], []) if not p["metadata"].get("deletionTimestamp")
            ]
            for _ in range(want - len(alive)):
                self._create_pod(rs, f"{meta['name']}-{random_suffix(rng=self.rng)}", {})
            if len(alive) > want:
                for pod in self._deletion_order(alive)[: len(alive) - want]:
                    self._delete_pod(pod)

    def _deletion_order(self, pods: list[Obj]) -> list[Obj]:
        """Which pods a scale-down removes first: not yet ready, then the newest."""

        def rank(pod: Obj) -> tuple[int, str, str]:
            state = self.pods.get(pod["metadata"]["uid"])
            ready = 1 if state is not None and state.ready else 0
            return (
                ready,
                _invert(pod["metadata"].get("creationTimestamp", "")),
                _invert(pod["metadata"]["resourceVersion"].rjust(20, "0")),
            )

        return sorted(pods, key=rank)

    def _statefulsets(self) -> None:
        pods_by_owner = self._pods_by_controller()
        for sts in self.store.raw_items(self.rd_sts):
            meta, spec = sts["metadata"], sts.get("spec") or {}
            if meta.get("deletionTimestamp"):
                continue
            want = int(spec.get("replicas", 1) or 0)
            owned = {p["metadata"]["name"]: p for p in pods_by_owner.get(meta["uid"], [])}
            revision = f"{meta['name']}-{self._template_hash(sts)}"
            for ordinal in range(want):
                name = f"{meta['name']}-{ordinal}"
                if name not in owned:
                    extra = {
                        "statefulset.kubernetes.io/pod-name": name,
                        "apps.kubernetes.io/pod-index": str(ordinal),
                        "controller-revision-hash": revision,
                    }
                    self._create_pod(
                        sts, name, extra, hostname=name, subdomain=spec.get("serviceName") or None
                    )
            for name, pod in owned.items():
                ordinal = name.rsplit("-", 1)[-1]
                if (
                    ordinal.isdigit()
                    and int(ordinal) >= want
                    and not pod["metadata"].get("deletionTimestamp")
                ):
                    self._delete_pod(pod)

    def _create_pod(
        self,
        owner: Obj,
        name: str,
        extra_labels: dict[str, str],
        hostname: str | None = None,
        subdomain: str | None = None,
    ) -> None:
        template = copy.deepcopy((owner.get("spec") or {}).get("template") or {})
        labels = dict(((template.get("metadata") or {}).get("labels")) or {})
        labels.update(extra_labels)
        pod_spec = template.get("spec") or {}
        if hostname:
            pod_spec["hostname"] = hostname
        if subdomain:
            pod_spec["subdomain"] = subdomain
        self._create(
            self.rd_pod,
            {
                "metadata": {
                    "name": name,
                    "namespace": owner["metadata"]["namespace"],
                    "labels": labels,
                    "annotations": dict(((template.get("metadata") or {}).get("annotations")) or {}),
                    "ownerReferences": [owner_ref(owner)],
                },
                "spec": pod_spec,
            },
        )

    def _delete_pod(self, pod: Obj) -> None:
        try:
            self.store.delete(self.rd_pod, pod["metadata"]["namespace"], pod["metadata"]["name"])
        except ApiError:
            return

    # --- scheduler and kubelets -------------------------------------------------

    def _node_capacity(self) -> dict[str, int]:
        out = {}
        for node in self.store.raw_items(self.rd_node):
            status = node.get("status") or {}
            raw = (status.get("allocatable") or status.get("capacity") or {}).get(GPU_RESOURCE, 0)
            try:
                out[node["metadata"]["name"]] = int(raw)
            except (TypeError, ValueError):
                out[node["metadata"]["name"]] = 0
        return out

    def _kubelets(self, now: float) -> None:
        pods = list(self.store.raw_items(self.rd_pod))
        live_uids = {p["metadata"]["uid"] for p in pods}
        for uid in [u for u in self.pods if u not in live_uids]:
            del self.pods[uid]  # gone: its GPUs are free again
        capacity = self._node_capacity()
        used: dict[str, set[int]] = {n: set() for n in capacity}
        for state in self.pods.values():
            used.setdefault(state.node, set()).update(state.gpus)
        pending = sorted(
            (p for p in pods if p["metadata"]["uid"] not in self.pods),
            key=lambda p: int(p["metadata"]["resourceVersion"]),
        )
        for pod in pending:
            if pod["metadata"].get("deletionTimestamp"):
                continue
            self._schedule(pod, now, capacity, used)
        for pod in pods:
            pod_state = self.pods.get(pod["metadata"]["uid"])
            meta = pod["metadata"]
            if meta.get("deletionTimestamp"):
                if pod_state is None:
                    self.store.finish_termination(self.rd_pod, pod)
                    continue
                if pod_state.terminating_since is None:
                    pod_state.terminating_since = now
                    pod_state.ready = False
                    self._write_pod_status(pod, pod_state, now)
                elif now >= pod_state.terminating_since + self.termination_delay_s:
                    self.store.finish_termination(self.rd_pod, pod)
                    self.pods.pop(meta["uid"], None)
                continue
            if (
                pod_state is not None
                and not pod_state.ready
                and now >= pod_state.scheduled_at + self.startup_delay_s
            ):
                pod_state.ready = True
                self._write_pod_status(pod, pod_state, now)

    def _schedule(self, pod: Obj, now: float, capacity: dict[str, int], used: dict[str, set[int]]) -> None:
        need = gpus_requested(pod)
        wanted_node = (pod.get("spec") or {}).get("nodeName")
        candidates = (
            [wanted_node]
            if wanted_node
            else sorted(capacity, key=lambda n: (-(capacity[n] - len(used[n])), n))
        )
        for node in candidates:
            if node not in capacity and not wanted_node:
                continue
            free = [i for i in range(capacity.get(node, 0)) if i not in used.setdefault(node, set())]
            if len(free) < need and not wanted_node:
                continue
            gpus = free[:need]
            used[node].update(gpus)
            state = PodState(node, gpus, now)
            self.pods[pod["metadata"]["uid"]] = state
            self._write_pod_status(pod, state, now, bind=True)
            meta = pod["metadata"]
            self._event(
                pod,
                "Scheduled",
                f"Successfully assigned {meta['namespace']}/{meta['name']} to {node}",
                "default-scheduler",
            )
            if self.startup_delay_s <= 0 or self.warm:
                state.ready = True
                self._write_pod_status(
                    self.store.get(self.rd_pod, pod["metadata"]["namespace"], pod["metadata"]["name"]),
                    state,
                    now,
                )
            return
        nodes = len(capacity)
        if _existing_transition(pod, "PodScheduled", "False") is None:
            self._event(
                pod,
                "FailedScheduling",
                f"0/{nodes} nodes are available: {nodes} Insufficient {GPU_RESOURCE}.",
                "default-scheduler",
                "Warning",
            )
        new = copy.deepcopy(pod)
        new["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": f"0/{nodes} nodes are available: {nodes} Insufficient {GPU_RESOURCE}.",
                "lastProbeTime": None,
                "lastTransitionTime": _existing_transition(pod, "PodScheduled", "False")
                or format_time(time.time()),
            }
        ]
        new["status"]["phase"] = "Pending"
        self.store.put(self.rd_pod, new)

    def _write_pod_status(self, pod: Obj, state: PodState, now: float, bind: bool = False) -> None:
        new = copy.deepcopy(pod)
        if bind:
            new.setdefault("spec", {})["nodeName"] = state.node
        wall = format_time(time.time())
        status = new.setdefault("status", {})
        ready = "True" if state.ready else "False"
        if "podIP" not in status:
            self._ip_counter += 1
            status["podIP"] = f"10.244.{self._ip_counter // 250}.{self._ip_counter % 250 + 2}"
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
        statuses = []
        for container in (new.get("spec") or {}).get("containers") or []:
            entry: Obj = {
                "name": container.get("name", ""),
                "image": container.get("image", ""),
                "imageID": "",
                "restartCount": 0,
                "ready": state.ready,
                "started": state.ready,
                "containerID": f"containerd://{uuid.uuid5(uuid.NAMESPACE_OID, new['metadata']['uid'] + container.get('name', '')).hex}",
            }
            if state.ready:
                entry["state"] = {"running": {"startedAt": wall}}
            elif state.terminating_since is not None:
                entry["state"] = {"terminated": {"exitCode": 0, "reason": "Completed"}}
            else:
                entry["state"] = {"waiting": {"reason": "ContainerCreating"}}
            statuses.append(entry)
        status["containerStatuses"] = statuses
        try:
            self.store.put(self.rd_pod, new)
        except ApiError:
            return

    # --- workload status --------------------------------------------------------

    def _statuses(self) -> None:
        pods_by_owner = self._pods_by_controller()

        def counts(owner_uid: str) -> tuple[int, int]:
            alive = [
                p for p in pods_by_owner.get(owner_uid, []) if not p["metadata"].get("deletionTimestamp")
            ]
            ready = sum(
                1 for p in alive if (s := self.pods.get(p["metadata"]["uid"])) is not None and s.ready
            )
            return len(alive), ready

        rs_counts: dict[str, tuple[int, int]] = {}
        sets_by_owner: dict[str, list[Obj]] = {}
        for rs in self.store.raw_items(self.rd_rs):
            total, ready = counts(rs["metadata"]["uid"])
            rs_counts[rs["metadata"]["uid"]] = (total, ready)
            uid = controller_uid(rs)
            if uid:
                sets_by_owner.setdefault(uid, []).append(rs)
            rs_status = {
                "replicas": total,
                "fullyLabeledReplicas": total,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "observedGeneration": rs["metadata"].get("generation", 1),
            }
            self._put_status(self.rd_rs, rs, _drop_zero(rs_status, keep=("replicas",)))
        for deploy in self.store.raw_items(self.rd_deploy):
            owned = sets_by_owner.get(deploy["metadata"]["uid"], [])
            want = int((deploy.get("spec") or {}).get("replicas", 1) or 0)
            pod_hash = self._template_hash(deploy)
            total = sum(rs_counts.get(rs["metadata"]["uid"], (0, 0))[0] for rs in owned)
            ready = sum(rs_counts.get(rs["metadata"]["uid"], (0, 0))[1] for rs in owned)
            updated = sum(
                rs_counts.get(rs["metadata"]["uid"], (0, 0))[0]
                for rs in owned
                if rs["metadata"]["name"].endswith(f"-{pod_hash}")
            )
            status: Obj = {
                "observedGeneration": deploy["metadata"].get("generation", 1),
                "replicas": total,
                "updatedReplicas": updated,
                "readyReplicas": ready,
                "availableReplicas": ready,
                "unavailableReplicas": max(0, want - ready),
            }
            status = _drop_zero(status, keep=("observedGeneration",))
            available = ready >= want
            status["conditions"] = [
                _workload_condition(
                    deploy,
                    "Available",
                    "True" if available else "False",
                    "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                    "Deployment has minimum availability."
                    if available
                    else "Deployment does not have minimum availability.",
                ),
                _workload_condition(
                    deploy,
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable" if available else "ReplicaSetUpdated",
                    f'ReplicaSet "{deploy["metadata"]["name"]}-{pod_hash}" '
                    + ("has successfully progressed." if available else "is progressing."),
                ),
            ]
            self._put_status(self.rd_deploy, deploy, status)
        for sts in self.store.raw_items(self.rd_sts):
            total, ready = counts(sts["metadata"]["uid"])
            revision = f"{sts['metadata']['name']}-{self._template_hash(sts)}"
            sts_status = {
                "observedGeneration": sts["metadata"].get("generation", 1),
                "replicas": total,
                "readyReplicas": ready,
                "currentReplicas": total,
                "updatedReplicas": total,
                "availableReplicas": ready,
                "currentRevision": revision,
                "updateRevision": revision,
                "collisionCount": 0,
            }
            self._put_status(
                self.rd_sts,
                sts,
                _drop_zero(sts_status, keep=("replicas", "availableReplicas", "collisionCount")),
            )

    def _put_status(self, rd: ResourceDef, obj: Obj, status: Obj) -> None:
        if obj.get("status") == status:
            return
        new = copy.deepcopy(obj)
        new["status"] = status
        self.store.put(rd, new)

    def _next_due(self) -> float | None:
        due: list[float] = []
        for state in self.pods.values():
            if state.terminating_since is not None:
                due.append(state.terminating_since + self.termination_delay_s)
            elif not state.ready:
                due.append(state.scheduled_at + self.startup_delay_s)
        return min(due) if due else None

    # --- load and GPUs ----------------------------------------------------------

    def set_load(self, namespace: str, name: str, profile: loadmod.Profile) -> None:
        self.loads[(namespace, name)] = WorkloadLoad(profile, self.monotonic())

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

    def load_of(self, namespace: str, name: str) -> float:
        entry = self.loads.get((namespace, name))
        if entry is None:
            entry = self._load_from_annotation(namespace, name)
            if entry is None:
                return 0.0
        return entry.profile.at((self.monotonic() - entry.since) * self.speed)

    def _load_from_annotation(self, namespace: str, name: str) -> WorkloadLoad | None:
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
                entry = WorkloadLoad(profile, self.monotonic())
                self.loads[(namespace, name)] = entry
                return entry
        return None

    def workloads(self) -> list[Obj]:
        out = []
        for rd in (self.rd_deploy, self.rd_sts):
            for obj in self.store.raw_items(rd):
                meta = obj["metadata"]
                out.append(
                    {
                        "namespace": meta["namespace"],
                        "kind": rd.kind,
                        "name": meta["name"],
                        "load": round(self.load_of(meta["namespace"], meta["name"]), 2),
                        "replicas": int((obj.get("spec") or {}).get("replicas", 0) or 0),
                        "current_replicas": int((obj.get("status") or {}).get("replicas", 0) or 0),
                        "ready_replicas": int((obj.get("status") or {}).get("readyReplicas", 0) or 0),
                    }
                )
        return out

    def node_gpus(self, node_name: str) -> Obj:
        """What a collector on ``node_name`` would read from NVML right now."""
        node = self.store.get(self.rd_node, None, node_name)
        capacity = self._node_capacity().get(node_name, 0)
        model = (
            (node["metadata"].get("labels") or {})
            .get("nvidia.com/gpu.product", loadmod.H100_MODEL)
            .replace("-", " ")
        )
        now = self.monotonic()
        pods = {p["metadata"]["uid"]: p for p in self.store.raw_items(self.rd_pod)}
        # Ready GPUs per workload: the load is shared among them.
        owners: dict[str, Owner] = {uid: self.owner_of(p) for uid, p in pods.items() if uid in self.pods}
        ready_gpus: dict[tuple[str, str], int] = {}
        for uid, state in self.pods.items():
            if uid in owners and state.ready and state.terminating_since is None:
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
            owners_out: list[Obj] = []
            util, loaded = 0.0, 0.0
            if holder is not None:
                pod, state = holder
                owner = owners[pod["metadata"]["uid"]]
                ns = pod["metadata"]["namespace"]
                if state.ready and state.terminating_since is None:
                    util = loadmod.util_per_gpu(
                        self.load_of(ns, owner.name), ready_gpus.get((ns, owner.name), 0)
                    )
                    loaded = 1.0
                elif state.terminating_since is None:
                    loaded = (
                        (now - state.scheduled_at) / self.startup_delay_s if self.startup_delay_s > 0 else 1.0
                    )
                containers = (pod.get("spec") or {}).get("containers") or [{}]
                owners_out.append(
                    {
                        "namespace": ns,
                        "pod": pod["metadata"]["name"],
                        "container": containers[0].get("name", ""),
                        "pod_uid": pod["metadata"]["uid"],
                        "workload": {"kind": owner.kind, "name": owner.name},
                        "ready": state.ready and state.terminating_since is None,
                    }
                )
            noise = self.rng.gauss(0.0, loadmod.NOISE_SD) if util > 0 else 0.0
            r = loadmod.reading(util, loaded, noise)
            gpus.append(
                {
                    "index": index,
                    "uuid": f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{node_name}.gpu{index}.kube-sim')}",
                    "model": model,
                    "util": r.util,
                    "mem_util": r.mem_util,
                    "fb_used_mib": r.fb_used_mib,
                    "fb_free_mib": r.fb_free_mib,
                    "temp_c": r.temp_c,
                    "power_w": r.power_w,
                    "sm_active": r.sm_active,
                    "owners": owners_out,
                }
            )
        return {"node": node_name, "ts": time.time(), "gpus": gpus}


def _must(rd: ResourceDef | None) -> ResourceDef:
    if rd is None:
        raise RuntimeError("a built-in kind is missing from the registry")
    return rd


def _invert(text: str) -> str:
    """A sort key that orders strings descending (newest first)."""
    return "".join(chr(0x10FFFF - ord(c)) for c in text)


def _existing_transition(obj: Obj, type_: str, status: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == status:
            return str(cond.get("lastTransitionTime"))
    return None


def _condition(pod: Obj, type_: str, status: str, wall: str) -> Obj:
    return {
        "type": type_,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": _existing_transition(pod, type_, status) or wall,
    }


def _workload_condition(obj: Obj, type_: str, status: str, reason: str, message: str) -> Obj:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == status and cond.get("reason") == reason:
            return dict(cond, message=message)
    wall = format_time(time.time())
    return {
        "type": type_,
        "status": status,
        "lastUpdateTime": wall,
        "lastTransitionTime": wall,
        "reason": reason,
        "message": message,
    }


def _drop_zero(status: Obj, keep: tuple[str, ...] = ()) -> Obj:
    """Kubernetes omits zero counters from workload status (omitempty)."""
    return {k: v for k, v in status.items() if v not in (0, "") or k in keep}
