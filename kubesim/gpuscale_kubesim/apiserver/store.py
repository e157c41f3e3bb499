"""The object store: what etcd plus the API server's registry do for kube-sim.

One global resourceVersion counter (as etcd's revision), optimistic
concurrency (a stale resourceVersion gets 409), generation on spec changes,
status and scale subresources, graceful pod deletion, owner-reference
garbage collection, CRDs that register their kinds, and a bounded event
history that watches replay from (older than the history: 410 Gone).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import json
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuscale.labels import selector_string
from gpuscale_kubesim.apiserver import checks, convert, patch
from gpuscale_kubesim.apiserver.checks import WriteOptions
from gpuscale_kubesim.apiserver.errors import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    gone,
    invalid,
    not_found,
)
from gpuscale_kubesim.apiserver.resources import Registry, ResourceDef, format_time, from_crd
from gpuscale_kubesim.apiserver.selectors import Predicate

Obj = dict[str, Any]
Key = tuple[str, str]  # (namespace or "", name)

DEFAULT_HISTORY = 1000
_NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"  # what Kubernetes uses for generated suffixes


def random_suffix(n: int = 5, rng: random.Random | None = None) -> str:
    pick = rng or random
    return "".join(pick.choice(_NAME_CHARS) for _ in range(n))


@dataclass(frozen=True)
class Change:
    """One write, as the history and the watchers see it."""

    type: str  # ADDED | MODIFIED | DELETED
    store_key: str
    rv: int
    obj: Obj  # after (or, for DELETED, the last state)
    old: Obj | None = None  # before, for MODIFIED


@dataclass(eq=False)
class Watcher:
    """One open watch: the changes of one kind, filtered, queued for the HTTP stream."""

    rd: ResourceDef
    namespace: str | None
    predicate: Predicate
    queue: asyncio.Queue[Obj | None] = field(default_factory=asyncio.Queue)
    closed: bool = False
    max_backlog: int = 10_000

    def offer(self, change: Change) -> None:
        if self.closed or change.store_key != self.rd.store_key:
            return
        ns = change.obj.get("metadata", {}).get("namespace", "")
        if self.namespace is not None and ns != self.namespace:
            return
        now_matches = self.predicate(change.obj)
        if change.type == "MODIFIED":
            was_matching = change.old is not None and self.predicate(change.old)
            if now_matches and not was_matching:
                kind = "ADDED"
            elif was_matching and not now_matches:
                kind = "DELETED"
            elif now_matches:
                kind = "MODIFIED"
            else:
                return
        elif not now_matches:
            return
        else:
            kind = change.type
        obj = convert.from_storage(self.rd.api_version, self.rd.kind, change.obj)
        self.push({"type": kind, "object": obj})

    def push(self, event: Obj) -> None:
        if self.closed:
            return
        if self.queue.qsize() >= self.max_backlog:
            self.close()  # a consumer that can't keep up is cut off, as the real server does
            return
        self.queue.put_nowait(event)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.queue.put_nowait(None)


def _check_meta(rd: ResourceDef, obj: Obj) -> None:
    """The metadata shapes everything downstream relies on (selectors, owners)."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        raise invalid(rd.kind, rd.group, "", "metadata", "must be an object")
    name = str(meta.get("name", ""))
    for field_name in ("labels", "annotations"):
        value = meta.get(field_name)
        if value is None:
            continue
        if not isinstance(value, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        ):
            raise invalid(
                rd.kind, rd.group, name, f"metadata.{field_name}", "must be a map of strings to strings"
            )
    refs = meta.get("ownerReferences")
    if refs is not None and (not isinstance(refs, list) or not all(isinstance(r, dict) for r in refs)):
        raise invalid(rd.kind, rd.group, name, "metadata.ownerReferences", "must be a list of objects")
    for key in ("spec", "status"):
        if (
            key in obj
            and obj[key] is not None
            and not isinstance(obj[key], dict)
            and rd.store_key != "events"
        ):
            raise invalid(rd.kind, rd.group, name, key, "must be an object")


def _meta(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


def _spec_part(obj: Obj) -> Obj:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


class Store:
    def __init__(
        self,
        registry: Registry | None = None,
        *,
        clock: Callable[[], float] = time.time,
        history: int = DEFAULT_HISTORY,
        pod_grace_s: float = 2.0,
        rng: random.Random | None = None,
    ) -> None:
        self.registry = registry or Registry.with_builtins()
        self.clock = clock
        self.rv = 0
        self.pod_grace_s = pod_grace_s
        self.rng = rng or random.Random()  # noqa: S311 - generated names, not secrets
        self._data: dict[str, dict[Key, Obj]] = {}
        self._history: deque[Change] = deque(maxlen=history)
        self._compacted_rv = 0  # watches from before this are 410 Gone
        self.watchers: set[Watcher] = set()
        self.listeners: list[Callable[[Change], None]] = []
        self._dry = False
        self._cluster_ips = 9  # the first Services get 10.96.0.11, ...

    # --- plumbing ---------------------------------------------------------------

    def _objects(self, rd: ResourceDef) -> dict[Key, Obj]:
        return self._data.setdefault(rd.store_key, {})

    def _key(self, rd: ResourceDef, namespace: str | None, name: str) -> Key:
        return ((namespace or "") if rd.namespaced else "", name)

    def _next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def _emit(self, change: Change) -> None:
        if len(self._history) == self._history.maxlen:
            self._compacted_rv = self._history[0].rv
        self._history.append(change)
        for watcher in list(self.watchers):
            watcher.offer(change)
        for listener in list(self.listeners):
            listener(change)

    def _out(self, rd: ResourceDef, obj: Obj) -> Obj:
        return convert.from_storage(rd.api_version, rd.kind, obj)

    def _find(self, rd: ResourceDef, namespace: str | None, name: str) -> Obj:
        obj = self._objects(rd).get(self._key(rd, namespace, name))
        if obj is None:
            raise not_found(rd.group_resource, name)
        return obj

    @contextlib.contextmanager
    def dry_run(self) -> Iterator[None]:
        """Writes inside are checked and answered but not stored (``?dryRun=All``)."""
        self._dry = True
        try:
            yield
        finally:
            self._dry = False

    def _write(self, rd: ResourceDef, new: Obj, old: Obj | None) -> Obj:
        if self._dry:
            return new
        meta = _meta(new)
        meta["resourceVersion"] = self._next_rv()
        key = (meta.get("namespace", ""), meta["name"])
        self._objects(rd)[key] = new
        self._emit(
            Change("ADDED" if old is None else "MODIFIED", rd.store_key, self.rv, copy.deepcopy(new), old)
        )
        return new

    def _check_rv(self, rd: ResourceDef, current: Obj, given: Any) -> None:
        if given not in (None, "") and str(given) != current["metadata"]["resourceVersion"]:
            raise conflict(rd.group_resource, current["metadata"]["name"])

    # --- reads ------------------------------------------------------------------

    def get(self, rd: ResourceDef, namespace: str | None, name: str) -> Obj:
        return self._out(rd, self._find(rd, namespace, name))

    def list(
        self,
        rd: ResourceDef,
        namespace: str | None = None,
        predicate: Predicate | None = None,
    ) -> tuple[list[Obj], str]:
        items = []
        for (ns, _name), obj in sorted(self._objects(rd).items()):
            if rd.namespaced and namespace is not None and ns != namespace:
                continue
            if predicate is not None and not predicate(obj):
                continue
            items.append(self._out(rd, obj))
        return items, str(self.rv)

    def list_page(
        self,
        rd: ResourceDef,
        namespace: str | None,
        predicate: Predicate | None,
        limit: int | None,
        continue_token: str | None,
    ) -> Page:
        """One chunk of a list (``limit``/``continue``), as etcd3's store pages.

        The token carries the first chunk's resourceVersion and the last key
        served; a token older than the compacted history is 410 Expired.
        """
        start = ""
        list_rv = self.rv
        if continue_token:
            list_rv, start = _decode_continue(continue_token)
            if list_rv < self._compacted_rv:
                raise ApiError(
                    410,
                    "The provided continue parameter is too old to display a consistent list result. "
                    "You can start a new list without the continue parameter, or use the continue token "
                    "in this response to retrieve the remainder of the results. Continuing with the "
                    "provided token results in an inconsistent list - objects that were created, modified, "
                    "or deleted between the time the first chunk was returned and now may show up in the list.",
                    "Expired",
                )
        matched: list[tuple[str, Obj]] = []
        for (ns, name), obj in sorted(self._objects(rd).items()):
            key = f"{ns}/{name}"
            if start and key <= start:
                continue
            if rd.namespaced and namespace is not None and ns != namespace:
                continue
            if predicate is not None and not predicate(obj):
                continue
            matched.append((key, obj))
        page = matched if not limit or limit <= 0 else matched[:limit]
        rest = len(matched) - len(page)
        token = _encode_continue(list_rv, page[-1][0]) if rest > 0 else ""
        return Page([self._out(rd, o) for _, o in page], str(list_rv), token, rest if rest > 0 else None)

    def raw_items(self, rd: ResourceDef) -> Iterable[Obj]:
        """The stored objects themselves (read-only use by the cluster player)."""
        return list(self._objects(rd).values())

    def check_list_rv(self, resource_version: str | None, match: str | None) -> None:
        if match == "Exact" and resource_version and _as_int(resource_version) < self._compacted_rv:
            raise gone(f"too old resource version: {resource_version} ({self._compacted_rv})")

    # --- watch ------------------------------------------------------------------

    def watch(
        self,
        rd: ResourceDef,
        namespace: str | None,
        predicate: Predicate,
        resource_version: str | None,
    ) -> Watcher:
        """A registered watcher, with the replayed or synthetic initial events queued."""
        watcher = Watcher(rd, namespace, predicate)
        if resource_version in (None, "", "0"):
            items, _ = self.list(rd, namespace, predicate)
            for item in items:
                watcher.push({"type": "ADDED", "object": item})
        else:
            since = _as_int(resource_version)
            if since < self._compacted_rv:
                watcher.push(
                    {
                        "type": "ERROR",
                        "object": gone(
                            f"too old resource version: {resource_version} ({self._compacted_rv})"
                        ).status(),
                    }
                )
                watcher.close()
                return watcher
            for change in self._history:
                if change.rv > since:
                    watcher.offer(change)
        self.watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self.watchers.discard(watcher)
        watcher.close()

    def close_watchers(self) -> None:
        for watcher in list(self.watchers):
            self.unwatch(watcher)

    def bookmark(self, rd: ResourceDef) -> Obj:
        return {
            "type": "BOOKMARK",
            "object": {
                "kind": rd.kind,
                "apiVersion": rd.api_version,
                "metadata": {"resourceVersion": str(self.rv)},
            },
        }

    # --- writes -----------------------------------------------------------------

    def create(
        self, rd: ResourceDef, namespace: str | None, body: Obj, opts: WriteOptions | None = None
    ) -> Obj:
        opts = opts or WriteOptions()
        if not isinstance(body, dict):
            raise bad_request("the body of a create must be a JSON object")
        given = copy.deepcopy(body)
        checks.decode(rd, given, opts)
        obj = convert.to_storage(rd.api_version, rd.kind, given)
        obj["apiVersion"], obj["kind"] = rd.api_version, rd.kind
        if rd.store_key == "events":
            obj["apiVersion"] = "v1"
        meta = _meta(obj)
        _check_meta(rd, obj)
        if rd.namespaced:
            given_ns = meta.get("namespace")
            if namespace and given_ns and given_ns != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            meta["namespace"] = namespace or given_ns or "default"
            self._require_namespace(str(meta["namespace"]))
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = str(meta["generateName"]) + random_suffix(rng=self.rng)
        name = str(meta.get("name") or "")
        if name:
            key = self._key(rd, meta.get("namespace"), name)
            if key in self._objects(rd):
                raise already_exists(rd.group_resource, name)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = format_time(self.clock())
        meta["generation"] = 1
        for transient in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "managedFields",
        ):
            meta.pop(transient, None)
        _apply_defaults(rd, obj, self)
        checks.default(rd, obj)
        checks.validate(rd, obj, None, events_api=rd.api_version == "events.k8s.io/v1")
        if rd.group == "apiextensions.k8s.io" and rd.kind == "CustomResourceDefinition" and not self._dry:
            self._register_crd(obj)
        self._write(rd, obj, None)
        return self._out(rd, obj)

    def _require_namespace(self, namespace: str) -> None:
        """The NamespaceLifecycle admission plugin: no object in a namespace that does not exist."""
        rd_ns = self.registry.get("", "v1", "namespaces")
        if rd_ns is None:
            return
        ns = self._objects(rd_ns).get(("", namespace))
        if ns is None:
            raise not_found("namespaces", namespace)
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(
                403,
                f"unable to create new content in namespace {namespace} because it is being terminated",
                "Forbidden",
                {"name": namespace, "kind": "namespaces"},
            )

    def replace(
        self,
        rd: ResourceDef,
        namespace: str | None,
        name: str,
        body: Obj,
        subresource: str = "",
        opts: WriteOptions | None = None,
    ) -> Obj:
        opts = opts or WriteOptions()
        if not isinstance(body, dict):
            raise bad_request("the body of an update must be a JSON object")
        current = self._find(rd, namespace, name)
        given = copy.deepcopy(body)
        checks.decode(rd, given, opts)
        meta_in = given.get("metadata") or {}
        body_name = meta_in.get("name")
        if body_name and body_name != name:
            raise bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        checks.require_resource_version(rd, name, meta_in.get("resourceVersion"))
        self._check_rv(rd, current, meta_in.get("resourceVersion"))
        incoming = convert.to_storage(rd.api_version, rd.kind, given)
        return self._out(rd, self._update(rd, current, incoming, subresource))

    def patch(
        self,
        rd: ResourceDef,
        namespace: str | None,
        name: str,
        body: Any,
        content_type: str,
        subresource: str = "",
        opts: WriteOptions | None = None,
    ) -> Obj:
        opts = opts or WriteOptions()
        current = self._find(rd, namespace, name)
        if subresource == "scale":
            return self.patch_scale(rd, namespace, name, body, content_type)
        if rd.custom and patch.media_type(content_type) == patch.STRATEGIC_MERGE_PATCH:
            raise patch.unsupported_patch(custom=True)
        view = self._out(rd, current)
        patched = patch.apply_patch(view, body, content_type)
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not a JSON object")
        meta = patched.get("metadata") or {}
        if meta.get("name", name) != name:
            raise bad_request("a patch cannot change metadata.name")
        # A patch that sets a resourceVersion (merge or JSON patch) makes it a precondition: stale means 409.
        patched_rv = meta.get("resourceVersion") if isinstance(meta, dict) else None
        self._check_rv(rd, current, patched_rv)
        checks.decode(rd, patched, opts)
        incoming = convert.to_storage(rd.api_version, rd.kind, patched)
        incoming.setdefault("metadata", {})["resourceVersion"] = current["metadata"]["resourceVersion"]
        return self._out(rd, self._update(rd, current, incoming, subresource))

    def _update(self, rd: ResourceDef, current: Obj, incoming: Obj, subresource: str) -> Obj:
        _check_meta(rd, {**incoming, "metadata": incoming.get("metadata") or {}})
        new = copy.deepcopy(current)
        if subresource == "status":
            if "status" in incoming:
                new["status"] = incoming["status"]
            else:
                new.pop("status", None)
        else:
            for key, value in incoming.items():
                if key in ("metadata", "apiVersion", "kind"):
                    continue
                if key == "status" and "status" in rd.subresources:
                    continue  # the status subresource owns it
                new[key] = value
            for key in list(new):
                if key not in incoming and key not in ("metadata", "apiVersion", "kind"):
                    if key == "status" and "status" in rd.subresources:
                        continue
                    del new[key]
            meta_in = incoming.get("metadata") or {}
            meta = new["metadata"]
            for mutable in ("labels", "annotations", "ownerReferences", "finalizers"):
                if mutable in meta_in:
                    meta[mutable] = meta_in[mutable]
                else:
                    meta.pop(mutable, None)
        _apply_defaults(rd, new, self)
        checks.default(rd, new)
        if _spec_part(new) != _spec_part(current):
            new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        if new == current:
            return current  # a no-op write changes nothing, not even the resourceVersion
        checks.validate(rd, new, current, events_api=rd.api_version == "events.k8s.io/v1")
        if rd.group == "apiextensions.k8s.io" and rd.kind == "CustomResourceDefinition" and not self._dry:
            self.registry.remove_group_plural(
                str((current.get("spec") or {}).get("group", "")),
                str(((current.get("spec") or {}).get("names") or {}).get("plural", "")),
            )
            self._register_crd(new)
        self._write(rd, new, current)
        finalized = new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers")
        if finalized and not (rd.group == "" and rd.plural == "pods"):
            self._remove(rd, new)
        return new

    def put(self, rd: ResourceDef, obj: Obj) -> Obj:
        """Write a stored object as a controller does (no precondition), if it changed."""
        meta = obj["metadata"]
        key = self._key(rd, meta.get("namespace"), meta["name"])
        current = self._objects(rd).get(key)
        if current is None:
            raise not_found(rd.group_resource, meta["name"])
        if obj == current:
            return current
        new = copy.deepcopy(obj)
        self._write(rd, new, current)
        return new

    def delete(
        self,
        rd: ResourceDef,
        namespace: str | None,
        name: str,
        *,
        grace_period_s: float | None = None,
        propagation: str = "Background",
        precondition_rv: str | None = None,
        precondition_uid: str | None = None,
    ) -> tuple[Obj, bool]:
        """Delete; returns (the object, whether it is gone now rather than terminating)."""
        current = self._find(rd, namespace, name)
        self._check_rv(rd, current, precondition_rv)
        if precondition_uid and precondition_uid != current["metadata"].get("uid"):
            raise conflict(rd.group_resource, name)
        meta = current["metadata"]
        graceful = rd.group == "" and rd.plural == "pods"
        grace = self.pod_grace_s if grace_period_s is None else grace_period_s
        if meta.get("deletionTimestamp"):
            return self._out(rd, current), False
        if (graceful and grace > 0) or meta.get("finalizers"):
            new = copy.deepcopy(current)
            new["metadata"]["deletionTimestamp"] = format_time(self.clock() + (grace if graceful else 0))
            new["metadata"]["deletionGracePeriodSeconds"] = int(grace) if graceful else 0
            self._write(rd, new, current)
            if propagation != "Orphan":
                self._collect_dependents(meta.get("uid", ""))
            return self._out(rd, new), False
        self._remove(rd, current)
        if propagation != "Orphan":
            self._collect_dependents(meta.get("uid", ""))
        return self._out(rd, current), True

    def finish_termination(self, rd: ResourceDef, obj: Obj) -> None:
        """The kubelet confirmed a terminating pod is gone."""
        key = self._key(rd, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        current = self._objects(rd).get(key)
        if current is not None:
            self._remove(rd, current)

    def _remove(self, rd: ResourceDef, current: Obj) -> None:
        if self._dry:
            return
        meta = current["metadata"]
        key = self._key(rd, meta.get("namespace"), meta["name"])
        if self._objects(rd).pop(key, None) is None:
            return
        gone_obj = copy.deepcopy(current)
        gone_obj["metadata"]["resourceVersion"] = self._next_rv()
        self._emit(Change("DELETED", rd.store_key, self.rv, gone_obj))
        if rd.group == "apiextensions.k8s.io" and rd.kind == "CustomResourceDefinition":
            self._unregister_crd(current)

    def _collect_dependents(self, owner_uid: str) -> None:
        if not owner_uid or self._dry:
            return
        for store_key, objects in list(self._data.items()):
            rd = self._rd_for_store(store_key)
            if rd is None:
                continue
            for obj in list(objects.values()):
                refs = obj.get("metadata", {}).get("ownerReferences") or []
                if any(ref.get("uid") == owner_uid for ref in refs):
                    meta = obj["metadata"]
                    try:
                        self.delete(rd, meta.get("namespace"), meta["name"])
                    except ApiError:
                        continue

    def _rd_for_store(self, store_key: str) -> ResourceDef | None:
        return next((d for d in self.registry.defs.values() if d.store_key == store_key), None)

    # --- scale subresource ------------------------------------------------------

    def get_scale(self, rd: ResourceDef, namespace: str | None, name: str) -> Obj:
        return self._scale_of(self._find(rd, namespace, name))

    def _scale_of(self, obj: Obj) -> Obj:
        meta = obj["metadata"]
        return {
            "kind": "Scale",
            "apiVersion": "autoscaling/v1",
            "metadata": {
                "name": meta["name"],
                "namespace": meta.get("namespace", ""),
                "uid": meta.get("uid"),
                "resourceVersion": meta["resourceVersion"],
                "creationTimestamp": meta.get("creationTimestamp"),
            },
            "spec": {"replicas": int((obj.get("spec") or {}).get("replicas", 0) or 0)},
            "status": {
                "replicas": int((obj.get("status") or {}).get("replicas", 0) or 0),
                "selector": selector_string((obj.get("spec") or {}).get("selector")),
            },
        }

    def replace_scale(self, rd: ResourceDef, namespace: str | None, name: str, body: Obj) -> Obj:
        if not isinstance(body, dict):
            raise bad_request("the body of an update must be a JSON object")
        current = self._find(rd, namespace, name)
        self._check_rv(rd, current, (body.get("metadata") or {}).get("resourceVersion"))
        return self._set_replicas(rd, current, (body.get("spec") or {}).get("replicas"))

    def patch_scale(
        self, rd: ResourceDef, namespace: str | None, name: str, body: Any, content_type: str
    ) -> Obj:
        current = self._find(rd, namespace, name)
        scale = self._scale_of(current)
        patched = patch.apply_patch(scale, body, content_type)
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not a JSON object")
        given = ((body.get("metadata") or {}).get("resourceVersion")) if isinstance(body, dict) else None
        if given is None and isinstance(patched.get("metadata"), dict):
            # A JSON patch can carry the precondition too (op test / replace on resourceVersion).
            rv = patched["metadata"].get("resourceVersion")
            given = rv if rv != scale["metadata"]["resourceVersion"] else None
        self._check_rv(rd, current, given)
        return self._set_replicas(rd, current, (patched.get("spec") or {}).get("replicas"))

    def _set_replicas(self, rd: ResourceDef, current: Obj, replicas: Any) -> Obj:
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise invalid(
                "Scale",
                "autoscaling",
                current["metadata"]["name"],
                "spec.replicas",
                f"{replicas!r}: must be greater than or equal to 0",
            )
        new = copy.deepcopy(current)
        new.setdefault("spec", {})["replicas"] = replicas
        if new != current:
            new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
            self._write(rd, new, current)
        return self._scale_of(new)

    def allocate_cluster_ip(self) -> str:
        """The next free address of the service CIDR (10.96.0.0/16; .1 is the kubernetes Service)."""
        self._cluster_ips += 1
        n = self._cluster_ips + 1
        return f"10.96.{n // 256}.{n % 256}"

    # --- CRDs -------------------------------------------------------------------

    def _register_crd(self, crd: Obj) -> None:
        try:
            defs = from_crd(crd)
        except ValueError as e:
            raise invalid("CustomResourceDefinition", "apiextensions.k8s.io", "", "spec", str(e)) from None
        for d in defs:
            self.registry.add(d)
        crd["status"] = {
            "acceptedNames": copy.deepcopy((crd.get("spec") or {}).get("names") or {}),
            "storedVersions": [d.version for d in defs][:1],
            "conditions": [
                {
                    "type": t,
                    "status": "True",
                    "reason": r,
                    "message": m,
                    "lastTransitionTime": format_time(self.clock()),
                }
                for t, r, m in (
                    ("NamesAccepted", "NoConflicts", "no conflicts found"),
                    ("Established", "InitialNamesAccepted", "the initial names have been accepted"),
                )
            ],
        }

    def _unregister_crd(self, crd: Obj) -> None:
        spec = crd.get("spec") or {}
        group, plural = spec.get("group", ""), (spec.get("names") or {}).get("plural", "")
        self._data.pop(f"{group}/{plural}", None)
        self.registry.remove_group_plural(group, plural)


@dataclass(frozen=True)
class Page:
    items: list[Obj]
    resource_version: str
    continue_token: str  # "" on the last chunk
    remaining: int | None


def _encode_continue(rv: int, start: str) -> str:
    doc = {"v": "meta.k8s.io/v1", "rv": rv, "start": start + "\u0000"}
    return base64.urlsafe_b64encode(json.dumps(doc, separators=(",", ":")).encode()).decode().rstrip("=")


def _decode_continue(token: str) -> tuple[int, str]:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        doc = json.loads(raw)
        if not isinstance(doc, dict) or doc.get("v") != "meta.k8s.io/v1":
            raise ValueError("unknown token version")
        rv, start = int(doc["rv"]), str(doc["start"])
    except (ValueError, KeyError, TypeError) as e:
        raise bad_request(f"continue key is not valid: {e}") from None
    if rv <= 0:
        raise bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        )
    return rv, start.rstrip("\u0000")


def _as_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise bad_request(f"invalid resource version {text!r}") from None


def _apply_defaults(rd: ResourceDef, obj: Obj, store: Store | None = None) -> None:
    """The built-in defaults the cluster player and clients rely on (SetDefaults_*)."""
    if rd.group == "apps" and rd.kind in ("Deployment", "StatefulSet", "ReplicaSet"):
        spec = obj.setdefault("spec", {})
        if spec.get("replicas") is None:
            spec["replicas"] = 1
        if rd.kind == "Deployment":
            spec.setdefault(
                "strategy",
                {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}},
            )
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
        if rd.kind == "StatefulSet":
            spec.setdefault("podManagementPolicy", "OrderedReady")
            spec.setdefault("serviceName", "")
        obj.setdefault("status", {})
    elif rd.group == "" and rd.kind == "Pod":
        spec = obj.setdefault("spec", {})
        spec.setdefault("containers", [])
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        status = obj.setdefault("status", {})
        status.setdefault("phase", "Pending")
        status.setdefault("qosClass", "BestEffort")
    elif rd.group == "" and rd.kind == "Namespace":
        obj.setdefault("spec", {"finalizers": ["kubernetes"]})
        obj.setdefault("status", {"phase": "Active"})
    elif rd.group == "" and rd.kind == "Secret":
        obj.setdefault("type", "Opaque")
    elif rd.group == "" and rd.kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec.get("type") != "ExternalName" and not spec.get("clusterIP") and store is not None:
            spec["clusterIP"] = store.allocate_cluster_ip()
        if spec.get("clusterIP"):
            spec.setdefault("clusterIPs", [spec["clusterIP"]])
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                port.setdefault("targetPort", port.get("port"))
