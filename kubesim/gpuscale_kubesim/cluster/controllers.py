"""The workload controllers: Deployments own ReplicaSets that own pods; StatefulSets
own ordinal pods; each workload's status follows its pods.

Every method takes the clock reading it needs; none reads a clock.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping

from gpuscale_kubesim.apiserver.errors import ApiError
from gpuscale_kubesim.apiserver.resources import ResourceDef, format_time
from gpuscale_kubesim.apiserver.store import Store, random_suffix

from .common import Now, Obj, PodState, controller_uid, drop_zero, hash_chars, invert, owner_ref
from .events import Recorder

DEPLOYMENT_CONTROLLER = "deployment-controller"


class WorkloadControllers:
    def __init__(
        self,
        store: Store,
        rds: Mapping[str, ResourceDef],
        recorder: Recorder,
        pods: Mapping[str, PodState],
        rng: random.Random,
    ) -> None:
        self.store = store
        self.rd_pod, self.rd_deploy = rds["pod"], rds["deployment"]
        self.rd_rs, self.rd_sts = rds["replicaset"], rds["statefulset"]
        self.recorder = recorder
        self.pods = pods  # the kubelets' view: which pods are ready
        self.rng = rng
        self._hashes: dict[str, tuple[int, str]] = {}  # owner uid -> (generation, template hash)

    def reconcile(self, now: Now) -> None:
        self.deployments(now)
        self.replicasets()
        self.statefulsets()

    # --- owners -----------------------------------------------------------------

    def _pods_by_controller(self) -> dict[str, list[Obj]]:
        out: dict[str, list[Obj]] = {}
        for pod in self.store.raw_items(self.rd_pod):
            uid = controller_uid(pod)
            if uid:
                out.setdefault(uid, []).append(pod)
        return out

    def template_hash(self, owner: Obj) -> str:
        """The pod-template-hash, cached per spec generation (hashing every pass is the hot spot)."""
        meta = owner["metadata"]
        generation = int(meta.get("generation", 1))
        cached = self._hashes.get(meta["uid"])
        if cached is not None and cached[0] == generation:
            return cached[1]
        value = hash_chars((owner.get("spec") or {}).get("template") or {})
        self._hashes[meta["uid"]] = (generation, value)
        return value

    # --- Deployments ------------------------------------------------------------

    def deployments(self, now: Now) -> None:
        sets_by_owner: dict[str, list[Obj]] = {}
        for rs in self.store.raw_items(self.rd_rs):
            uid = controller_uid(rs)
            if uid:
                sets_by_owner.setdefault(uid, []).append(rs)
        for deploy in self.store.raw_items(self.rd_deploy):
            meta, spec = deploy["metadata"], deploy.get("spec") or {}
            if meta.get("deletionTimestamp"):
                continue
            pod_hash = self.template_hash(deploy)
            rs_name = f"{meta['name']}-{pod_hash}"
            replicas = int(spec.get("replicas", 1) or 0)
            owned = sets_by_owner.get(meta["uid"], [])
            current = next((rs for rs in owned if rs["metadata"]["name"] == rs_name), None)
            if current is None:
                self._new_replicaset(deploy, rs_name, pod_hash, replicas, owned, now)
            elif (before := int(current["spec"].get("replicas", 0))) != replicas:
                way = "up" if replicas > before else "down"
                self.recorder.event(
                    deploy,
                    "ScalingReplicaSet",
                    f"Scaled {way} replica set {rs_name} from {before} to {replicas}",
                    DEPLOYMENT_CONTROLLER,
                    now.wall,
                )
                self._set_spec_replicas(self.rd_rs, current, replicas)
            for old in owned:
                if (
                    old["metadata"]["name"] != rs_name
                    and (before := int(old["spec"].get("replicas", 0))) != 0
                ):
                    self.recorder.event(
                        deploy,
                        "ScalingReplicaSet",
                        f"Scaled down replica set {old['metadata']['name']} from {before} to 0",
                        DEPLOYMENT_CONTROLLER,
                        now.wall,
                    )
                    self._set_spec_replicas(self.rd_rs, old, 0)

    def _new_replicaset(
        self, deploy: Obj, rs_name: str, pod_hash: str, replicas: int, owned: list[Obj], now: Now
    ) -> None:
        meta, spec = deploy["metadata"], deploy.get("spec") or {}
        template = copy.deepcopy(spec.get("template") or {})
        labels = dict(((template.get("metadata") or {}).get("labels")) or {})
        labels["pod-template-hash"] = pod_hash
        template.setdefault("metadata", {})["labels"] = labels
        selector = copy.deepcopy(spec.get("selector") or {"matchLabels": {}})
        selector.setdefault("matchLabels", {})["pod-template-hash"] = pod_hash
        revision = 1 + max(
            (
                int((rs["metadata"].get("annotations") or {}).get("deployment.kubernetes.io/revision", 0))
                for rs in owned
            ),
            default=0,
        )
        self.recorder.event(
            deploy,
            "ScalingReplicaSet",
            f"Scaled up replica set {rs_name} from 0 to {replicas}",
            DEPLOYMENT_CONTROLLER,
            now.wall,
        )
        self.recorder.create(
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

    def _set_spec_replicas(self, rd: ResourceDef, obj: Obj, replicas: int) -> None:
        new = copy.deepcopy(obj)
        new["spec"]["replicas"] = replicas
        annotations = new["metadata"].setdefault("annotations", {})
        if rd is self.rd_rs:
            annotations["deployment.kubernetes.io/desired-replicas"] = str(replicas)
        new["metadata"]["generation"] = int(obj["metadata"].get("generation", 1)) + 1
        self.store.put(rd, new)

    # --- ReplicaSets and StatefulSets --------------------------------------------

    def replicasets(self) -> None:
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
                invert(pod["metadata"].get("creationTimestamp", "")),
                invert(pod["metadata"]["resourceVersion"].rjust(20, "0")),
            )

        return sorted(pods, key=rank)

    def statefulsets(self) -> None:
        pods_by_owner = self._pods_by_controller()
        for sts in self.store.raw_items(self.rd_sts):
            meta, spec = sts["metadata"], sts.get("spec") or {}
            if meta.get("deletionTimestamp"):
                continue
            want = int(spec.get("replicas", 1) or 0)
            owned = {p["metadata"]["name"]: p for p in pods_by_owner.get(meta["uid"], [])}
            revision = f"{meta['name']}-{self.template_hash(sts)}"
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
        self.recorder.create(
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

    # --- workload status --------------------------------------------------------

    def statuses(self, now: Now) -> None:
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
            self._put_status(self.rd_rs, rs, drop_zero(rs_status, keep=("replicas",)))
        for deploy in self.store.raw_items(self.rd_deploy):
            self._deployment_status(deploy, sets_by_owner.get(deploy["metadata"]["uid"], []), rs_counts, now)
        for sts in self.store.raw_items(self.rd_sts):
            total, ready = counts(sts["metadata"]["uid"])
            revision = f"{sts['metadata']['name']}-{self.template_hash(sts)}"
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
                drop_zero(sts_status, keep=("replicas", "availableReplicas", "collisionCount")),
            )

    def _deployment_status(
        self, deploy: Obj, owned: list[Obj], rs_counts: dict[str, tuple[int, int]], now: Now
    ) -> None:
        want = int((deploy.get("spec") or {}).get("replicas", 1) or 0)
        pod_hash = self.template_hash(deploy)
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
        status = drop_zero(status, keep=("observedGeneration",))
        available = ready >= want
        name = deploy["metadata"]["name"]
        status["conditions"] = [
            _workload_condition(
                deploy,
                "Available",
                "True" if available else "False",
                "MinimumReplicasAvailable" if available else "MinimumReplicasUnavailable",
                "Deployment has minimum availability."
                if available
                else "Deployment does not have minimum availability.",
                now.wall,
            ),
            _workload_condition(
                deploy,
                "Progressing",
                "True",
                "NewReplicaSetAvailable" if available else "ReplicaSetUpdated",
                f'ReplicaSet "{name}-{pod_hash}" '
                + ("has successfully progressed." if available else "is progressing."),
                now.wall,
            ),
        ]
        self._put_status(self.rd_deploy, deploy, status)

    def _put_status(self, rd: ResourceDef, obj: Obj, status: Obj) -> None:
        if obj.get("status") == status:
            return
        new = copy.deepcopy(obj)
        new["status"] = status
        self.store.put(rd, new)


def _workload_condition(obj: Obj, type_: str, status: str, reason: str, message: str, wall: float) -> Obj:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_ and cond.get("status") == status and cond.get("reason") == reason:
            return dict(cond, message=message)
    stamp = format_time(wall)
    return {
        "type": type_,
        "status": status,
        "lastUpdateTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }
