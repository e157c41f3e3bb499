"""Regenerate kube-sim's OpenAPI definitions of the built-in kinds it serves.

kube-sim validates built-in objects (types, unknown fields, time formats)
and serves /openapi/v2 and /openapi/v3 from the real Kubernetes schemas. They
come from the kubernetes-validate package (a dev dependency: the upstream
OpenAPI of each Kubernetes release, converted to JSON Schema); this script
turns the definitions the served kinds need back into swagger-2.0 form and
writes them, gzipped, next to the package:

    .venv/bin/python kubesim/tools/gen_builtin_schemas.py

tests/kubesim/test_kubesim_openapi.py checks the committed file is current.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from importlib import resources
from pathlib import Path
from typing import Any

K8S_VERSION = "1.32.0"
OUT = Path(__file__).resolve().parents[1] / "gpuscale_kubesim" / "data" / "builtin-openapi.json.gz"

# The kinds kube-sim serves, and what their requests and answers use.
ROOTS = [
    *(f"io.k8s.api.core.v1.{k}" for k in ("Pod", "Node", "Namespace", "Event", "Secret", "ConfigMap")),
    *(f"io.k8s.api.core.v1.{k}" for k in ("Service", "ServiceAccount", "Endpoints")),
    *(f"io.k8s.api.apps.v1.{k}" for k in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet")),
    "io.k8s.api.coordination.v1.Lease",
    "io.k8s.api.events.v1.Event",
    "io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler",
    "io.k8s.api.autoscaling.v1.Scale",
    "io.k8s.api.policy.v1.PodDisruptionBudget",
    "io.k8s.api.scheduling.v1.PriorityClass",
    *(f"io.k8s.api.rbac.v1.{k}" for k in ("Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding")),
    "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    "io.k8s.kube-aggregator.pkg.apis.apiregistration.v1.APIService",
    # TokenReview (create only) and TokenRequest (serviceaccounts/token).
    *(f"io.k8s.api.authentication.v1.{k}" for k in ("TokenReview", "TokenRequest")),
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.APIResourceList",
]
_REF = re.compile(r"#/\$defs/([^\"]+)")


def _source() -> dict[str, Any]:
    base = resources.files("kubernetes_validate").joinpath("kubernetes-json-schema", f"v{K8S_VERSION}-local")
    doc: dict[str, Any] = json.loads(base.joinpath("_definitions.json").read_text())
    return doc["$defs"]


def _closure(defs: dict[str, Any]) -> list[str]:
    seen: set[str] = set()
    todo = list(ROOTS)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_REF.findall(json.dumps(defs[name])))
    return sorted(seen)


def _swagger(node: Any) -> Any:
    """JSON Schema (nullable type lists, $defs refs) back to swagger 2.0."""
    if isinstance(node, list):
        return [_swagger(v) for v in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = "#/definitions/" + value.rsplit("/", 1)[-1]
        elif key == "type" and isinstance(value, list):
            kinds = [t for t in value if t != "null"]
            out[key] = kinds[0] if len(kinds) == 1 else kinds
        else:
            out[key] = _swagger(value)
    return out


def build() -> dict[str, Any]:
    defs = _source()
    out: dict[str, Any] = {}
    for name in _closure(defs):
        schema = _swagger(defs[name])
        if name.endswith("intstr.IntOrString"):
            schema = {"type": "string", "format": "int-or-string"}
        elif name.endswith("resource.Quantity"):
            schema = {"type": "string", "format": "quantity"}
        for prop in ("apiVersion", "kind"):
            # The JSON-Schema conversion pins these with an enum; the API's own schema does not.
            (schema.get("properties") or {}).get(prop, {}).pop("enum", None)
        out[name] = schema
    return {"kubernetesVersion": K8S_VERSION, "definitions": out}


def encoded() -> bytes:
    text = json.dumps(build(), sort_keys=True, separators=(",", ":")).encode()
    return gzip.compress(text, mtime=0)


def main() -> int:
    OUT.write_bytes(encoded())
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
