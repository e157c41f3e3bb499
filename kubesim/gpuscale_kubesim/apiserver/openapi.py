"""The OpenAPI documents kube-sim serves (``/openapi/v2``, ``/openapi/v3``). Pure.

Built-in kinds use Kubernetes' own definitions (see :mod:`typed`); a custom
resource's schema is its CRD's ``openAPIV3Schema`` with ObjectMeta for
``metadata``, named as the API server names it (``io.gpuscale.v1alpha1.
GPUScaler``) and tagged with its group, version and kind. That is what
``kubectl explain`` reads, and what kubectl's client-side validation checks a
manifest against. Every object path declares the ``fieldValidation``
parameter, which tells kubectl the server validates fields itself.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from collections.abc import Iterable
from typing import Any

from gpuscale_kubesim.apiserver import patch, typed
from gpuscale_kubesim.apiserver.resources import ResourceDef

Obj = dict[str, Any]
_REF = re.compile(r'"#/definitions/([^"]+)"')
META = "io.k8s.apimachinery.pkg.apis.meta.v1."


def crd_schema_name(rd: ResourceDef, kind: str | None = None) -> str:
    """``io.gpuscale.v1alpha1.GPUScaler``: the group reversed, the version, the kind."""
    reversed_group = ".".join(reversed(rd.group.split(".")))
    return f"{reversed_group}.{rd.version}.{kind or rd.kind}"


def _gvk(rd: ResourceDef, kind: str | None = None) -> list[Obj]:
    return [{"group": rd.group, "version": rd.version, "kind": kind or rd.kind}]


def _custom_schemas(rd: ResourceDef) -> dict[str, Obj]:
    schema: Obj = (
        copy.deepcopy(rd.schema)
        if rd.schema
        else {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
    )
    props: Obj = schema.setdefault("properties", {})
    defs = typed.definitions().definitions
    deployment = defs["io.k8s.api.apps.v1.Deployment"]["properties"]
    props["apiVersion"] = copy.deepcopy(deployment["apiVersion"])
    props["kind"] = copy.deepcopy(deployment["kind"])
    props["metadata"] = {
        "$ref": f"#/definitions/{META}ObjectMeta",
        "description": deployment["metadata"]["description"],
    }
    schema["x-kubernetes-group-version-kind"] = _gvk(rd)
    list_schema = {
        "description": f"{rd.kind}List is a list of {rd.kind}",
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": copy.deepcopy(deployment["apiVersion"]),
            "kind": copy.deepcopy(deployment["kind"]),
            "items": {
                "description": f"List of {rd.plural}.",
                "type": "array",
                "items": {"$ref": f"#/definitions/{crd_schema_name(rd)}"},
            },
            "metadata": {"$ref": f"#/definitions/{META}ListMeta"},
        },
        "x-kubernetes-group-version-kind": _gvk(rd, rd.list_kind),
    }
    return {crd_schema_name(rd): schema, crd_schema_name(rd, rd.list_kind): list_schema}


def _closure(roots: dict[str, Obj]) -> dict[str, Obj]:
    """The roots plus every built-in definition they reference."""
    defs = typed.definitions().definitions
    out = dict(roots)
    todo = [name for schema in roots.values() for name in _REF.findall(json.dumps(schema))]
    while todo:
        name = todo.pop()
        if name in out or name not in defs:
            continue
        out[name] = defs[name]
        todo.extend(_REF.findall(json.dumps(defs[name])))
    return out


def definitions_for(rds: Iterable[ResourceDef]) -> dict[str, Obj]:
    """Swagger-2.0 definitions of these kinds and all they reference."""
    defs = typed.definitions()
    roots: dict[str, Obj] = {}
    for rd in rds:
        if rd.custom:
            roots.update(_custom_schemas(rd))
            continue
        kinds = [(rd.group, rd.version, rd.kind), (rd.group, rd.version, rd.list_kind)]
        if "token" in rd.subresources:  # serviceaccounts/token takes and answers a TokenRequest
            kinds.append(("authentication.k8s.io", "v1", "TokenRequest"))
        for group, version, kind in kinds:
            name = defs.name_for(group, version, kind)
            if name is not None:
                roots[name] = defs.definitions[name]
    for extra in ("Status", "DeleteOptions", "Patch"):
        if f"{META}{extra}" in defs.definitions:
            roots[f"{META}{extra}"] = defs.definitions[f"{META}{extra}"]
    return _closure(roots)


def _schema_ref(rd: ResourceDef, v3: bool) -> str:
    name = crd_schema_name(rd) if rd.custom else typed.definitions().name_for(rd.group, rd.version, rd.kind)
    prefix = "#/components/schemas/" if v3 else "#/definitions/"
    return prefix + str(name)


def _param(name: str, v3: bool, location: str = "query") -> Obj:
    if v3:
        return {"name": name, "in": location, "schema": {"type": "string", "uniqueItems": True}}
    return {"name": name, "in": location, "type": "string", "uniqueItems": True}


def _operation(rd: ResourceDef, action: str, v3: bool, *, body: bool = False, writes: bool = False) -> Obj:
    op: Obj = {
        "operationId": f"{action}{rd.kind}",
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": rd.group, "version": rd.version, "kind": rd.kind},
        "responses": {"200": {"description": "OK"}},
    }
    params = []
    if writes:
        params += [_param(p, v3) for p in ("dryRun", "fieldManager", "fieldValidation")]
    if body:
        ref = {"$ref": _schema_ref(rd, v3)}
        if v3:
            op["requestBody"] = {"content": {"*/*": {"schema": ref}}, "required": True}
        else:
            params.append({"name": "body", "in": "body", "required": True, "schema": ref})
    if params:
        op["parameters"] = params
    return op


def _patch_operation(rd: ResourceDef, v3: bool) -> Obj:
    """A PATCH and the patch types it takes: kubectl apply picks its patch by them
    (strategic merge where offered: built-in kinds; JSON merge for custom resources)."""
    op = _operation(rd, "patch", v3, writes=True)
    types = [patch.JSON_PATCH, patch.MERGE_PATCH, patch.APPLY_PATCH]
    if not rd.custom:
        types.insert(2, patch.STRATEGIC_MERGE_PATCH)
    if v3:
        op["requestBody"] = {
            "content": {t: {"schema": {"$ref": f"#/components/schemas/{META}Patch"}} for t in types},
            "required": True,
        }
    else:
        op["consumes"] = types
        op.setdefault("parameters", []).append(
            {"name": "body", "in": "body", "required": True, "schema": {"$ref": f"#/definitions/{META}Patch"}}
        )
    return op


def paths_for(rds: Iterable[ResourceDef], v3: bool) -> Obj:
    paths: Obj = {}
    for rd in rds:
        prefix = f"/apis/{rd.group}/{rd.version}" if rd.group else f"/api/{rd.version}"
        collection = (
            f"{prefix}/namespaces/{{namespace}}/{rd.plural}" if rd.namespaced else f"{prefix}/{rd.plural}"
        )
        verbs = set(rd.verbs)
        ops = {
            "get": _operation(rd, "list", v3) if "list" in verbs else None,
            "post": _operation(rd, "post", v3, body=True, writes=True) if "create" in verbs else None,
        }
        paths[collection] = {method: op for method, op in ops.items() if op is not None}
        if verbs & {"get", "update", "patch", "delete"}:  # not for create-only kinds (TokenReview)
            paths[f"{collection}/{{name}}"] = {
                "get": _operation(rd, "get", v3),
                "put": _operation(rd, "put", v3, body=True, writes=True),
                "patch": _patch_operation(rd, v3),
                "delete": _operation(rd, "delete", v3),
            }
        for sub in sorted(rd.subresources):
            if sub == "token":  # serviceaccounts/token: create a TokenRequest
                token = ResourceDef("authentication.k8s.io", "v1", "tokenrequests", "", "TokenRequest")
                paths[f"{collection}/{{name}}/token"] = {
                    "post": _operation(token, "post", v3, body=True, writes=True)
                }
                continue
            paths[f"{collection}/{{name}}/{sub}"] = {
                "get": _operation(rd, "get", v3),
                "put": _operation(rd, "put", v3, writes=True),
                "patch": _patch_operation(rd, v3),
            }
    return paths


def _to_v3(node: Any) -> Any:
    if isinstance(node, dict):
        return {
            k: (
                v.replace("#/definitions/", "#/components/schemas/")
                if k == "$ref" and isinstance(v, str)
                else _to_v3(v)
            )
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_to_v3(v) for v in node]
    return node


def v2_document(rds: list[ResourceDef], version: str) -> Obj:
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths_for(rds, v3=False),
        "definitions": definitions_for(rds),
    }


def v3_document(rds: list[ResourceDef], version: str) -> Obj:
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": version},
        "paths": paths_for(rds, v3=True),
        "components": {"schemas": _to_v3(definitions_for(rds))},
    }


def content_hash(doc: Obj) -> str:
    return hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:64].upper()
