"""Bad requests get the API server's Status answers, never a crash."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest

from gpuscale_kubesim import KubeSim
from tests.k8s_objects import gpu_workload, gpuscaler

pytestmark = pytest.mark.integration

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"


@dataclass(frozen=True)
class Bad:
    name: str
    method: str
    path: str
    body: Any
    content_type: str
    code: int
    reason: str


CASES = [
    Bad("unknown kind", "GET", "/apis/apps/v1/namespaces/default/widgets", None, "", 404, "NotFound"),
    Bad("unknown group", "GET", "/apis/nope.io/v1/things", None, "", 404, "NotFound"),
    Bad("body that is not JSON", "POST", DEPLOYMENTS, b"{nope", "application/json", 400, "BadRequest"),
    Bad("body that is a list", "POST", DEPLOYMENTS, b"[1]", "application/json", 400, "BadRequest"),
    Bad("no name", "POST", DEPLOYMENTS, b'{"metadata": {}}', "application/json", 422, "Invalid"),
    Bad(
        # The Go decoder refuses it before validation: 400, not 422.
        "labels that are not strings",
        "POST",
        DEPLOYMENTS,
        b'{"metadata": {"name": "x", "labels": {"a": 1}}}',
        "application/json",
        400,
        "BadRequest",
    ),
    Bad(
        "name that differs from the URL",
        "PUT",
        f"{DEPLOYMENTS}/bert",
        b'{"metadata": {"name": "other"}}',
        "application/json",
        400,
        "BadRequest",
    ),
    Bad(
        "patch type the server doesn't take",
        "PATCH",
        f"{DEPLOYMENTS}/bert",
        b"{}",
        "application/json",
        415,
        "UnsupportedMediaType",
    ),
    Bad(
        "negative replicas",
        "PATCH",
        f"{DEPLOYMENTS}/bert/scale",
        b'{"spec": {"replicas": -1}}',
        "application/merge-patch+json",
        422,
        "Invalid",
    ),
    Bad(
        "subresource the kind doesn't have",
        "GET",
        "/apis/coordination.k8s.io/v1/namespaces/default/leases/x/scale",
        None,
        "",
        404,
        "NotFound",
    ),
    Bad("bad label selector", "GET", f"{DEPLOYMENTS}?labelSelector=a%20in%20(b", None, "", 400, "BadRequest"),
    Bad(
        "bad resourceVersion",
        "GET",
        f"{DEPLOYMENTS}?watch=true&resourceVersion=abc",
        None,
        "",
        400,
        "BadRequest",
    ),
    Bad(
        "spec that is not an object",
        "PUT",
        f"{DEPLOYMENTS}/bert",
        b'{"metadata": {"name": "bert"}, "spec": 3}',
        "application/json",
        400,
        "BadRequest",
    ),
    Bad(
        "protobuf body",
        "POST",
        DEPLOYMENTS,
        b"k8s\x00\n\x0f",
        "application/vnd.kubernetes.protobuf",
        415,
        "UnsupportedMediaType",
    ),
    Bad(
        "strategic merge patch on a custom resource",
        "PATCH",
        "/apis/gpuscale.io/v1alpha1/namespaces/default/gpuscalers/bert",
        b"{}",
        "application/strategic-merge-patch+json",
        415,
        "UnsupportedMediaType",
    ),
    Bad(
        "object in a namespace that does not exist",
        "POST",
        "/apis/apps/v1/namespaces/nowhere/deployments",
        b'{"metadata": {"name": "x"}}',
        "application/json",
        404,
        "NotFound",
    ),
    Bad("bad continue token", "GET", f"{DEPLOYMENTS}?limit=1&continue=bm9wZQ", None, "", 400, "BadRequest"),
    Bad(
        "fieldValidation value the server does not know",
        "POST",
        f"{DEPLOYMENTS}?fieldValidation=Loose",
        b'{"metadata": {"name": "x"}}',
        "application/json",
        400,
        "BadRequest",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
async def test_bad_request_gets_a_status(kube_sim: KubeSim, case: Bad) -> None:
    await kube_sim.create(gpu_workload("bert"))
    await kube_sim.create(gpuscaler("bert"))
    headers = {"Content-Type": case.content_type} if case.content_type else {}
    async with (
        aiohttp.ClientSession() as http,
        http.request(case.method, kube_sim.url + case.path, data=case.body, headers=headers) as response,
    ):
        body = await response.json()
    assert response.status == case.code, body
    assert body["kind"] == "Status"
    assert (body["code"], body["reason"]) == (case.code, case.reason)
    # The server still works afterwards.
    assert kube_sim.get("apps/v1", "Deployment", "bert")["spec"]["replicas"] == 1


async def test_table_for_one_object_with_the_object_included(kube_sim: KubeSim) -> None:
    accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"
    async with (
        aiohttp.ClientSession() as http,
        http.get(
            f"{kube_sim.url}/api/v1/nodes/gpu-node-1?includeObject=Object", headers={"Accept": accept}
        ) as response,
    ):
        table = await response.json()
    assert table["kind"] == "Table"
    assert [c["name"] for c in table["columnDefinitions"]] == ["Name", "Status", "Roles", "Age", "Version"]
    (row,) = table["rows"]
    assert row["cells"][:2] == ["gpu-node-1", "Ready"]
    assert row["object"]["status"]["capacity"]["nvidia.com/gpu"] == "8"
