"""The HTTP face of kube-sim: real Kubernetes REST paths over the store.

Discovery, CRUD, list/watch, status and scale subresources, Table output for
kubectl, bearer tokens (401) with a small RBAC table (403), and injected
faults. Everything the store refuses comes back as a ``Status`` body.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import yaml
from aiohttp import web

from gpuscale.logging import get_logger
from gpuscale_kubesim.apiserver import authn, openapi, openapi_proto, tables
from gpuscale_kubesim.apiserver.checks import WriteOptions
from gpuscale_kubesim.apiserver.errors import ApiError, bad_request, status_body
from gpuscale_kubesim.apiserver.faults import Faults
from gpuscale_kubesim.apiserver.patch import PATCH_TYPES, unsupported_patch
from gpuscale_kubesim.apiserver.resources import ResourceDef
from gpuscale_kubesim.apiserver.selectors import field_selector, label_selector
from gpuscale_kubesim.apiserver.store import Store

Obj = dict[str, Any]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

K8S_VERSION = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-gpuscale-kubesim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.23.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}
# Paths anyone may read: probes, the version, and the simulator's own endpoints.
PUBLIC_PREFIXES = ("/version", "/healthz", "/readyz", "/livez", "/sim/")


@dataclass(frozen=True)
class Grant:
    """What a bearer token may do: a user name and RBAC-style rules (None: everything)."""

    user: str
    rules: tuple[Obj, ...] | None = None

    @classmethod
    def parse(cls, token: str, value: Any) -> Grant:
        if isinstance(value, Grant):
            return value
        if value is None:
            return cls(f"kube-sim:token:{token[:6]}")
        if isinstance(value, dict) and "rules" in value:
            rules = value.get("rules")
            return cls(
                str(value.get("user") or f"kube-sim:token:{token[:6]}"),
                None if rules is None else tuple(rules),
            )
        if isinstance(value, list | tuple):
            return cls(f"kube-sim:token:{token[:6]}", tuple(value))
        raise ValueError("a token maps to None, a list of rules, or {'user': ..., 'rules': [...]}")

    def allows(self, verb: str, group: str, resource: str, namespace: str | None, name: str | None) -> bool:
        if self.rules is None:
            return True
        for rule in self.rules:
            if not _in(verb, rule.get("verbs")):
                continue
            if not _in(group, rule.get("apiGroups", [""])):
                continue
            if not _in(resource, rule.get("resources")):
                continue
            names = rule.get("resourceNames")
            if names and (name is None or name not in names):
                continue
            namespaces = rule.get("namespaces")
            if namespaces and (namespace is None or namespace not in namespaces):
                continue
            return True
        return False


def _in(value: str, allowed: Any) -> bool:
    return isinstance(allowed, list | tuple) and ("*" in allowed or value in allowed)


@dataclass
class Target:
    """A parsed resource URL."""

    rd: ResourceDef
    namespace: str | None  # None: every namespace (or a cluster-scoped kind)
    name: str | None
    subresource: str


def _json(body: Any, status: int = 200, warnings: list[str] | None = None) -> web.Response:
    response = web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(), status=status, content_type="application/json"
    )
    for text in warnings or ():
        # RFC 7234 warn-code 299 ("Miscellaneous persistent warning"), as the API server sends it.
        escaped = text.replace("\\", "\\\\").replace('"', '\\"')
        response.headers.add("Warning", f'299 - "{escaped}"')
    return response


BODY_TYPES = ("application/json", "application/yaml")
PROTOBUF = "application/vnd.kubernetes.protobuf"


def error_response(err: ApiError) -> web.Response:
    response = _json(err.status(), err.code)
    if err.code == 429:
        response.headers["Retry-After"] = "1"
    return response


class ApiServer:
    def __init__(
        self,
        store: Store,
        faults: Faults,
        *,
        tokens: dict[str, Any] | None = None,
        bookmark_interval_s: float = 10.0,
        clock: Callable[[], float] = time.time,
        token_node_info: bool = True,
    ) -> None:
        self.store = store
        # ServiceAccount tokens (TokenRequest, TokenReview): a signing key of this server's own.
        self.token_signer = authn.TokenSigner(os.urandom(32))
        # ServiceAccountTokenPodNodeInfo (on by default since Kubernetes 1.30): pod-bound tokens name the node.
        self.token_node_info = token_node_info
        self.faults = faults
        self.grants = {t: Grant.parse(t, v) for t, v in tokens.items()} if tokens is not None else None
        self.bookmark_interval_s = bookmark_interval_s
        self.clock = clock
        self.log = get_logger(component="kube-sim-api")
        self.stopping = asyncio.Event()
        self.requests = 0
        self._openapi_cache: dict[tuple[str, str, str], Obj] = {}
        self._openapi_generation = -1
        self._openapi_proto: dict[int, bytes] = {}

    def build_app(self, extra_routes: Callable[[web.Application], None] | None = None) -> web.Application:
        app = web.Application(
            middlewares=[self._faults_middleware, self._auth_middleware], client_max_size=16 << 20
        )
        app.router.add_get("/version", self._version)
        app.router.add_get("/healthz", self._ok)
        app.router.add_get("/readyz", self._ok)
        app.router.add_get("/livez", self._ok)
        if extra_routes is not None:
            extra_routes(app)
        app.router.add_route("*", "/{tail:.*}", self._dispatch)
        return app

    # --- middlewares ------------------------------------------------------------

    @web.middleware
    async def _faults_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        self.requests += 1
        if request.path.startswith("/sim/"):
            return await handler(request)
        fault = self.faults.take(request.method, request.path)
        if fault is not None:
            self.log.debug("fault_injected", method=request.method, path=request.path, status=fault.status)
            if fault.delay_s > 0:
                await asyncio.sleep(fault.delay_s)
            if fault.status is not None:
                return error_response(ApiError(fault.status, f"injected fault: HTTP {fault.status}"))
        return await handler(request)

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.grants is None or request.path.startswith(PUBLIC_PREFIXES):
            return await handler(request)
        if self._grant(request) is None:
            return error_response(ApiError(401, "Unauthorized", "Unauthorized"))
        return await handler(request)

    def _grant(self, request: web.Request) -> Grant | None:
        if self.grants is None:
            return None
        header = request.headers.get("Authorization", "")
        token = header[7:].strip() if header.lower().startswith("bearer ") else ""
        return self.grants.get(token)

    # --- small endpoints --------------------------------------------------------

    async def _version(self, _request: web.Request) -> web.Response:
        return _json(K8S_VERSION)

    async def _ok(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")

    # --- routing ----------------------------------------------------------------

    async def _dispatch(self, request: web.Request) -> web.StreamResponse:
        try:
            return await self._route(request)
        except ApiError as e:
            return error_response(e)
        except json.JSONDecodeError as e:
            return error_response(bad_request(f"the request body is not valid JSON: {e}"))
        except (TypeError, ValueError, AttributeError, KeyError) as e:
            # A body of the wrong shape that slipped past validation: the client's fault, not a crash.
            self.log.warning(
                "request_rejected", method=request.method, path=request.path, error=f"{type(e).__name__}: {e}"
            )
            return error_response(bad_request(f"the request could not be processed: {type(e).__name__}: {e}"))

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if parts[:2] == ["openapi", "v3"] and request.method == "GET":
            return self._openapi_v3(parts[2:])
        if parts == ["openapi", "v2"] and request.method == "GET":
            return self._openapi_v2(request)
        _check_accept(request)
        if not parts or parts[0] not in ("api", "apis"):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if parts[0] == "api":
            if len(parts) == 1:
                return self._api_versions(request)
            if parts[1] != "v1":
                raise ApiError(404, "the server could not find the requested resource", "NotFound")
            group, version, rest = "", "v1", parts[2:]
        else:
            if len(parts) == 1:
                return self._api_groups()
            if len(parts) == 2:
                return self._api_group(parts[1])
            group, version, rest = parts[1], parts[2], parts[3:]
        if not rest:
            if request.method != "GET":
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return self._resource_list(group, version)
        target = self._target(group, version, rest)
        self._authorize(request, target)
        if request.query.get("dryRun") and request.method in ("POST", "PUT", "PATCH", "DELETE"):
            body = await request.read()  # read first: nothing may wait while writes are dry
            with self.store.dry_run():
                return await self._serve(request, target, body)
        return await self._serve(request, target, await request.read())

    def _target(self, group: str, version: str, rest: list[str]) -> Target:
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and not (group == "" and rest[2] in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if len(rest) > 3:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        plural = rest[0]
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else ""
        rd = self.store.registry.get(group, version, plural)
        if rd is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if sub and sub not in rd.subresources:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if rd.namespaced and name is not None and namespace is None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if not rd.namespaced and namespace is not None:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return Target(rd, namespace, name, sub)

    def _authorize(self, request: web.Request, target: Target) -> None:
        grant = self._grant(request)
        if grant is None:
            return
        verb = self._verb(request, target)
        resource = target.rd.plural + (f"/{target.subresource}" if target.subresource else "")
        if grant.allows(verb, target.rd.group, resource, target.namespace, target.name):
            return
        who = f'{target.rd.group_resource} "{target.name}"' if target.name else target.rd.group_resource
        where = f'in the namespace "{target.namespace}"' if target.namespace else "at the cluster scope"
        message = (
            f'{who} is forbidden: User "{grant.user}" cannot {verb} resource "{resource}" '
            f'in API group "{target.rd.group}" {where}'
        )
        details: Obj = {"kind": target.rd.plural}
        if target.name:
            details["name"] = target.name
        if target.rd.group:
            details["group"] = target.rd.group
        raise ApiError(403, message, "Forbidden", details)

    @staticmethod
    def _verb(request: web.Request, target: Target) -> str:
        method = request.method
        if method == "GET":
            if target.name is None:
                return "watch" if _is_true(request.query.get("watch")) else "list"
            return "get"
        if method == "POST":
            return "create"
        if method == "PUT":
            return "update"
        if method == "PATCH":
            return "patch"
        if method == "DELETE":
            return "delete" if target.name else "deletecollection"
        return method.lower()

    # --- discovery --------------------------------------------------------------

    def _api_versions(self, request: web.Request) -> web.Response:
        host = request.host or "127.0.0.1"
        return _json(
            {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": host}],
            }
        )

    def _group_entry(self, group: str, versions: list[str]) -> Obj:
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"name": group, "versions": entries, "preferredVersion": entries[0]}

    def _api_groups(self) -> web.Response:
        groups = [self._group_entry(g, vs) for g, vs in self.store.registry.groups().items() if g]
        return _json({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})

    def _api_group(self, group: str) -> web.Response:
        versions = self.store.registry.groups().get(group)
        if not versions or not group:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return _json({"kind": "APIGroup", "apiVersion": "v1", **self._group_entry(group, versions)})

    def _resource_list(self, group: str, version: str) -> web.Response:
        defs = list(self.store.registry.in_group_version(group, version))
        if not defs:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        resources = [entry for d in defs for entry in d.discovery()]
        group_version = f"{group}/{version}" if group else version
        return _json(
            {
                "kind": "APIResourceList",
                "apiVersion": "v1",
                "groupVersion": group_version,
                "resources": resources,
            }
        )

    # --- OpenAPI ------------------------------------------------------------------

    def _openapi_cached(self, key: tuple[str, str, str]) -> Obj:
        """One OpenAPI document, built once per change of the served kinds."""
        generation = self.store.registry.generation
        if self._openapi_generation != generation:
            self._openapi_cache.clear()
            self._openapi_generation = generation
        doc = self._openapi_cache.get(key)
        if doc is None:
            which, group, version = key
            if which == "v2":
                rds = list(self.store.registry.defs.values())
                doc = openapi.v2_document(rds, K8S_VERSION["gitVersion"])
            else:
                rds = list(self.store.registry.in_group_version(group, version))
                doc = openapi.v3_document(rds, K8S_VERSION["gitVersion"])
            self._openapi_cache[key] = doc
        return doc

    def _openapi_v2(self, request: web.Request) -> web.Response:
        """JSON, or the protobuf Document client-go asks for first."""
        accept = request.headers.get("Accept", "")
        doc = self._openapi_cached(("v2", "", ""))
        if openapi_proto.ACCEPT in accept:
            body = self._openapi_proto.get(self._openapi_generation)
            if body is None:
                body = openapi_proto.document(doc)
                self._openapi_proto = {self._openapi_generation: body}
            return web.Response(body=body, headers={"Content-Type": openapi_proto.CONTENT_TYPE})
        if accept and "json" not in accept and "*/*" not in accept:
            raise ApiError(
                406, "only the following media types are accepted: application/json", "NotAcceptable"
            )
        return _json(doc)

    def _openapi_v3(self, rest: list[str]) -> web.Response:
        """The index and the per-group-version documents (what kubectl explain and apply read)."""
        groups = self.store.registry.groups()
        if not rest:
            index: dict[str, Obj] = {}
            for group, versions in groups.items():
                for version in versions:
                    key = f"apis/{group}/{version}" if group else f"api/{version}"
                    doc = self._openapi_cached(("v3", group, version))
                    index[key] = {"serverRelativeURL": f"/openapi/v3/{key}?hash={openapi.content_hash(doc)}"}
            return _json({"paths": index})
        if rest[0] == "api" and len(rest) == 2:
            group, version = "", rest[1]
        elif rest[0] == "apis" and len(rest) == 3:
            group, version = rest[1], rest[2]
        else:
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        if version not in groups.get(group, []):
            raise ApiError(404, "the server could not find the requested resource", "NotFound")
        return _json(self._openapi_cached(("v3", group, version)))

    # --- resources --------------------------------------------------------------

    async def _serve(self, request: web.Request, t: Target, raw: bytes) -> web.StreamResponse:
        method = request.method
        store = self.store
        opts = WriteOptions(request.query.get("fieldValidation") or "Warn")
        if t.rd.group == authn.GROUP and t.rd.plural == "tokenreviews":
            if method != "POST" or t.name is not None:
                raise ApiError(405, "the server does not allow this method on the requested resource")
            review = authn.token_review(store, self.token_signer, _body(request, raw), self.clock(), opts)
            return _json(review, 201, opts.warnings)
        if t.subresource == "token":
            if method != "POST" or t.name is None or t.namespace is None:
                raise ApiError(405, "the server does not allow this method on the requested resource")
            answer = authn.token_request(
                store,
                self.token_signer,
                t.namespace,
                t.name,
                _body(request, raw),
                self.clock(),
                node_info=self.token_node_info,
                opts=opts,
            )
            return _json(answer, 201, opts.warnings)
        if t.name is None:
            if method == "GET":
                if _is_true(request.query.get("watch")):
                    return await self._watch(request, t)
                return self._list(request, t)
            if method == "POST":
                created = store.create(t.rd, t.namespace, _body(request, raw), opts)
                self.log.debug("object_created", kind=t.rd.kind, name=created["metadata"]["name"])
                return _json(created, 201, opts.warnings)
            if method == "DELETE":
                return self._delete_collection(request, t)
            raise ApiError(405, "the server does not allow this method on the requested resource")
        if t.subresource == "scale":
            if method == "GET":
                return _json(store.get_scale(t.rd, t.namespace, t.name))
            if method == "PUT":
                return _json(store.replace_scale(t.rd, t.namespace, t.name, _body(request, raw)))
            if method == "PATCH":
                return _json(
                    store.patch_scale(
                        t.rd, t.namespace, t.name, _patch_body(request, raw), request.content_type
                    )
                )
            raise ApiError(405, "the server does not allow this method on the requested resource")
        if method == "GET":
            if _is_true(request.query.get("watch")):
                raise bad_request("watch is served on collections; use fieldSelector=metadata.name=<name>")
            obj = store.get(t.rd, t.namespace, t.name)
            if tables.wants_table(request.headers.get("Accept", "")):
                return _json(self._table(request, t.rd, [obj], obj["metadata"].get("resourceVersion", "")))
            return _json(obj)
        if method == "PUT":
            replaced = store.replace(t.rd, t.namespace, t.name, _body(request, raw), t.subresource, opts)
            return _json(replaced, 200, opts.warnings)
        if method == "PATCH":
            body = _patch_body(request, raw)
            if request.content_type == "application/apply-patch+yaml" and not t.subresource:
                try:
                    store.get(t.rd, t.namespace, t.name)
                except ApiError as e:
                    if e.code != 404 or not isinstance(body, dict):
                        raise
                    # Server-side apply creates what is missing.
                    body.setdefault("metadata", {})["name"] = t.name
                    return _json(store.create(t.rd, t.namespace, body, opts), 201, opts.warnings)
            patched = store.patch(t.rd, t.namespace, t.name, body, request.content_type, t.subresource, opts)
            return _json(patched, 200, opts.warnings)
        if method == "DELETE":
            if t.subresource:
                raise ApiError(405, "the server does not allow this method on the requested resource")
            return self._delete(request, t, _optional_body(raw))
        raise ApiError(405, "the server does not allow this method on the requested resource")

    def _predicate(self, request: web.Request) -> Callable[[Obj], bool]:
        labels = label_selector(request.query.get("labelSelector"))
        fields = field_selector(request.query.get("fieldSelector"))
        return lambda obj: labels(obj) and fields(obj)

    def _list(self, request: web.Request, t: Target) -> web.Response:
        self.store.check_list_rv(
            request.query.get("resourceVersion"), request.query.get("resourceVersionMatch")
        )
        limit = _int(request.query.get("limit"))
        page = self.store.list_page(
            t.rd, t.namespace, self._predicate(request), limit, request.query.get("continue") or None
        )
        meta: Obj = {"resourceVersion": page.resource_version}
        if page.continue_token:
            meta["continue"] = page.continue_token
        if page.remaining is not None:
            meta["remainingItemCount"] = page.remaining
        if tables.wants_table(request.headers.get("Accept", "")):
            table = self._table(request, t.rd, page.items, page.resource_version)
            table["metadata"] = meta
            return _json(table)
        return _json(
            {"kind": t.rd.list_kind, "apiVersion": t.rd.api_version, "metadata": meta, "items": page.items}
        )

    def _table(self, request: web.Request, rd: ResourceDef, items: list[Obj], rv: str) -> Obj:
        return tables.table(rd, items, rv, self.clock(), request.query.get("includeObject", "Metadata"))

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        timeout_s = _float(request.query.get("timeoutSeconds"))
        bookmarks = _is_true(request.query.get("allowWatchBookmarks"))
        watcher = self.store.watch(
            t.rd, t.namespace, self._predicate(request), request.query.get("resourceVersion")
        )
        response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s if timeout_s else None
        next_bookmark = loop.time() + self.bookmark_interval_s
        as_table = tables.wants_table(request.headers.get("Accept", ""))
        first_row = True
        try:
            while not self.stopping.is_set():
                now = loop.time()
                wait = next_bookmark - now if bookmarks else self.bookmark_interval_s
                if deadline is not None:
                    wait = min(wait, deadline - now)
                if wait <= 0:
                    if deadline is not None and now >= deadline:
                        break
                    if bookmarks:
                        await response.write(_line(self.store.bookmark(t.rd)))
                        next_bookmark = now + self.bookmark_interval_s
                    continue
                try:
                    event = await asyncio.wait_for(watcher.queue.get(), timeout=wait)
                except TimeoutError:
                    continue
                if event is None:
                    break
                if as_table and event["type"] in ("ADDED", "MODIFIED", "DELETED"):
                    # kubectl get -w: each event carries a one-row Table; columns only in the first.
                    obj = event["object"]
                    rows = self._table(request, t.rd, [obj], obj["metadata"].get("resourceVersion", ""))
                    if not first_row:
                        rows["columnDefinitions"] = []
                    first_row = False
                    event = {"type": event["type"], "object": rows}
                await response.write(_line(event))
        except ConnectionResetError:
            # The client hung up (aiohttp's ClientConnectionResetError is one): the watch
            # ends, as an apiserver's does, with nothing to answer and nothing to log.
            return response
        finally:
            self.store.unwatch(watcher)
        with contextlib.suppress(ConnectionResetError):
            await response.write_eof()
        return response

    def _delete(self, request: web.Request, t: Target, options: Obj) -> web.Response:
        assert t.name is not None
        grace = options.get("gracePeriodSeconds", _float(request.query.get("gracePeriodSeconds")))
        propagation = (
            options.get("propagationPolicy") or request.query.get("propagationPolicy") or "Background"
        )
        pre = options.get("preconditions") or {}
        obj, gone_now = self.store.delete(
            t.rd,
            t.namespace,
            t.name,
            grace_period_s=float(grace) if grace is not None else None,
            propagation=str(propagation),
            precondition_rv=pre.get("resourceVersion"),
            precondition_uid=pre.get("uid"),
        )
        if gone_now and not t.rd.custom:
            details: Obj = {"name": t.name, "kind": t.rd.plural, "uid": obj["metadata"].get("uid")}
            if t.rd.group:
                details["group"] = t.rd.group
            body = status_body(200, "", "", details)
            body.update({"status": "Success"})
            for key in ("message", "reason"):
                body.pop(key, None)
            return _json(body)
        return _json(obj)

    def _delete_collection(self, request: web.Request, t: Target) -> web.Response:
        items, _ = self.store.list(t.rd, t.namespace, self._predicate(request))
        deleted = []
        for item in items:
            meta = item["metadata"]
            with contextlib.suppress(ApiError):
                deleted.append(self.store.delete(t.rd, meta.get("namespace"), meta["name"])[0])
        return _json(
            {
                "kind": t.rd.list_kind,
                "apiVersion": t.rd.api_version,
                "metadata": {"resourceVersion": str(self.store.rv)},
                "items": deleted,
            }
        )


def _line(event: Obj) -> bytes:
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"


def _is_true(value: str | None) -> bool:
    return (value or "").lower() in ("true", "1")


def _float(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        raise bad_request(f"invalid number {value!r}") from None


def _int(value: str | None) -> int | None:
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise bad_request(f"invalid integer {value!r}") from None


def _check_accept(request: web.Request) -> None:
    """406 for a client that takes nothing kube-sim writes (protobuf only)."""
    accept = request.headers.get("Accept", "")
    if not accept:
        return
    kinds = [part.split(";", 1)[0].strip().lower() for part in accept.split(",")]
    if any(k in ("*/*", "application/*") or "json" in k or "yaml" in k for k in kinds):
        return
    raise ApiError(
        406,
        "only the following media types are accepted: application/json, application/yaml, "
        "application/json;stream=watch",
        "NotAcceptable",
    )


def _parse(request: web.Request, raw: bytes, media: str) -> Any:
    if media in ("application/yaml", "application/apply-patch+yaml"):
        try:
            return yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise bad_request(f"the request body is not valid YAML: {e}") from None
    return _decode_json(raw)


def _decode_json(raw: bytes) -> Any:
    """JSON as Go's decoder reads it: NaN and Infinity are no JSON numbers (Python's reader takes them)."""

    def refuse(constant: str) -> Any:
        raise bad_request(f"the request body is not valid JSON: invalid character in {constant!r}")

    def number(text: str) -> float:
        value = float(text)
        if math.isinf(value):  # 1e400: Go's decoder answers "cannot unmarshal number ... out of range"
            raise bad_request(f"the request body is not valid JSON: number {text[:40]} out of range")
        return value

    return json.loads(raw, parse_constant=refuse, parse_float=number)


def _body(request: web.Request, raw: bytes) -> Any:
    """A create or update body: JSON or YAML; protobuf and the rest are 415 here."""
    if not raw:
        raise bad_request("the request needs a body")
    media = request.content_type.lower()
    if media not in BODY_TYPES:
        raise ApiError(
            415,
            f"the body of the request was in an unknown format - accepted media types include: {', '.join(BODY_TYPES)}",
            "UnsupportedMediaType",
        )
    return _parse(request, raw, media)


def _patch_body(request: web.Request, raw: bytes) -> Any:
    media = request.content_type.lower()
    if media not in PATCH_TYPES:
        raise unsupported_patch(custom=False)
    if not raw:
        raise bad_request("the request needs a body")
    return _parse(request, raw, media)


def _optional_body(raw: bytes) -> Obj:
    if not raw:
        return {}
    body = _decode_json(raw)
    return body if isinstance(body, dict) else {}
