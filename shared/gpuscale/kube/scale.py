"""Read and change the replicas of ANY resource that serves a ``/scale`` subresource
(Deployments, StatefulSets, ReplicaSets, custom resources), by raw REST path, so no
generated model stands between us and the JSON."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from gpuscale.kube.client import request_json
from gpuscale.kube.errors import BadRequest, NotFound
from gpuscale.names import target_problems
from gpuscale.wire import ScaleTargetRef

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient


@dataclass(frozen=True, slots=True)
class ScaleState:
    """A target's autoscaling/v1 Scale: desired and observed replicas."""

    replicas: int
    resource_version: str
    selector: str
    status_replicas: int
    uid: str = field(default="", compare=False)  # the object's, for an Event's regarding


# Plurals of the kinds everyone scales; others come from discovery.
_KNOWN_PLURALS: Final[dict[tuple[str, str], str]] = {
    ("apps", "Deployment"): "deployments",
    ("apps", "StatefulSet"): "statefulsets",
    ("apps", "ReplicaSet"): "replicasets",
    ("", "ReplicationController"): "replicationcontrollers",
}

# The built-in kinds, whose Scale is ``spec.replicas`` of the object and carries the
# object's own metadata (its uid included); any other kind's uid is read off the object.
REPLICAS_IN_SPEC: Final[frozenset[tuple[str, str]]] = frozenset(_KNOWN_PLURALS)


def _api_prefix(group: str, version: str) -> str:
    return f"/api/{version}" if not group else f"/apis/{group}/{version}"


def _scale_from_dict(doc: Mapping[str, Any]) -> ScaleState:
    spec = doc.get("spec") or {}
    status = doc.get("status") or {}
    meta = doc.get("metadata") or {}
    return ScaleState(
        replicas=int(spec.get("replicas") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        selector=str(status.get("selector") or ""),
        status_replicas=int(status.get("replicas") or 0),
        uid=str(meta.get("uid") or ""),
    )


class ScaleClient:
    """Read and patch the replicas of anything with a ``/scale`` subresource."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self._plurals: dict[tuple[str, str, str], str] = {}

    async def plural(self, ref: ScaleTargetRef) -> str:
        known = _KNOWN_PLURALS.get((ref.group, ref.kind))
        if known is not None:
            return known
        key = (ref.group, ref.version, ref.kind)
        cached = self._plurals.get(key)
        if cached is not None:
            return cached
        doc = await request_json(self.api, "GET", _api_prefix(ref.group, ref.version))
        for resource in doc.get("resources") or []:
            name = str(resource.get("name") or "")
            if resource.get("kind") == ref.kind and "/" not in name:
                self._plurals[key] = name
                return name
        raise NotFound(404, f"the API server serves no kind {ref.kind} in {ref.api_version}")

    async def object_path(self, ref: ScaleTargetRef) -> str:
        problems = target_problems(ref.namespace, ref.api_version, ref.kind, ref.name)
        if problems:  # never let a name become another path, a query or a fragment
            raise BadRequest(400, f"not a Kubernetes object: {'; '.join(problems)}", reason="Invalid")
        plural = await self.plural(ref)
        return f"{_api_prefix(ref.group, ref.version)}/namespaces/{ref.namespace}/{plural}/{ref.name}"

    async def get(self, ref: ScaleTargetRef) -> ScaleState:
        doc = await request_json(self.api, "GET", await self.object_path(ref) + "/scale")
        return _scale_from_dict(doc)

    async def uid(self, ref: ScaleTargetRef) -> str:
        """The target's uid, from its /scale where it has one: the object itself may be MiBs."""
        if (ref.group, ref.kind) in REPLICAS_IN_SPEC:
            return (await self.get(ref)).uid
        return str(((await self.get_object(ref)).get("metadata") or {}).get("uid") or "")

    async def get_object(self, ref: ScaleTargetRef) -> dict[str, Any]:
        """The target object itself (metadata, spec, status) as JSON."""
        return await request_json(self.api, "GET", await self.object_path(ref))

    async def patch_replicas(self, ref: ScaleTargetRef, replicas: int, resource_version: str) -> ScaleState:
        """Set ``spec.replicas`` through ``/scale`` if the target is still at
        ``resource_version`` (else :class:`Conflict`)."""
        meta: dict[str, Any] = {"resourceVersion": resource_version} if resource_version else {}
        doc = await request_json(
            self.api,
            "PATCH",
            await self.object_path(ref) + "/scale",
            {"metadata": meta, "spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )
        return _scale_from_dict(doc)
