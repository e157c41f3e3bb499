"""The API surface around the objects: paging, groups served only with their CRD,
content types, and the OpenAPI documents clients read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient, ApiException

from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload, gpuscaler, keda_crd, servicemonitor_crd

pytestmark = pytest.mark.integration

NS = "default"


async def get(sim: KubeSim, path: str, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as session, session.get(sim.url + path, headers=headers or {}) as r:
        return r.status, await r.json(content_type=None)


# --- paging ------------------------------------------------------------------------


async def test_lists_page_with_limit_and_continue(kube_sim: KubeSim, api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    for i in range(7):
        await core.create_namespaced_config_map(NS, {"metadata": {"name": f"cm-{i}"}, "data": {"i": str(i)}})
    names: list[str] = []
    token: str | None = None
    pages = 0
    first_rv = None
    while True:
        page = await core.list_namespaced_config_map(NS, limit=3, _continue=token)
        pages += 1
        names += [c.metadata.name for c in page.items]
        first_rv = first_rv or page.metadata.resource_version
        assert page.metadata.resource_version == first_rv, "every chunk is of the first chunk's list"
        token = page.metadata._continue
        if not token:
            assert page.metadata.remaining_item_count is None
            break
        assert page.metadata.remaining_item_count == 7 - len(names)
    assert pages == 3
    assert names == [f"cm-{i}" for i in range(7)]


async def test_a_bad_continue_token_is_400_and_an_expired_one_410() -> None:
    async with KubeSim(port=0, scenario="empty", startup_delay_s=0.2, history=5) as sim:
        for i in range(4):
            await sim.create(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": NS}}
            )
        status, body = await get(sim, f"/api/v1/namespaces/{NS}/configmaps?limit=2&continue=not-a-token")
        assert (status, body["reason"]) == (400, "BadRequest")
        status, page = await get(sim, f"/api/v1/namespaces/{NS}/configmaps?limit=2")
        token = page["metadata"]["continue"]
        # Enough writes that the first chunk's resourceVersion leaves the history.
        for i in range(10):
            await sim.create(
                {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"more-{i}", "namespace": NS}}
            )
        status, body = await get(sim, f"/api/v1/namespaces/{NS}/configmaps?limit=2&continue={token}")
        assert (status, body["reason"], body["code"]) == (410, "Expired", 410)
        assert "The provided continue parameter is too old" in body["message"]


# --- API groups that come with their CRD ---------------------------------------------


async def test_keda_and_prometheus_groups_exist_only_with_their_crds(
    kube_sim: KubeSim, api: ApiClient
) -> None:
    status, groups = await get(kube_sim, "/apis")
    assert {"keda.sh", "monitoring.coreos.com"}.isdisjoint(g["name"] for g in groups["groups"])
    assert (await get(kube_sim, "/apis/keda.sh/v1alpha1"))[0] == 404
    assert (await get(kube_sim, f"/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects"))[0] == 404
    assert (await get(kube_sim, "/apis/monitoring.coreos.com/v1/servicemonitors"))[0] == 404

    extensions = client.ApiextensionsV1Api(api)
    await extensions.create_custom_resource_definition(keda_crd())
    await extensions.create_custom_resource_definition(servicemonitor_crd())
    status, groups = await get(kube_sim, "/apis")
    assert {"keda.sh", "monitoring.coreos.com"} <= {g["name"] for g in groups["groups"]}
    status, resources = await get(kube_sim, "/apis/keda.sh/v1alpha1")
    assert status == 200
    assert "scaledobjects" in [r["name"] for r in resources["resources"]]
    listed = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        "keda.sh", "v1alpha1", NS, "scaledobjects"
    )
    assert listed["items"] == []

    await extensions.delete_custom_resource_definition("scaledobjects.keda.sh")
    assert (await get(kube_sim, "/apis/keda.sh/v1alpha1"))[0] == 404


# --- content types -----------------------------------------------------------------


async def test_protobuf_bodies_are_415_and_protobuf_only_answers_406(kube_sim: KubeSim) -> None:
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{kube_sim.url}/apis/apps/v1/namespaces/{NS}/deployments",
            data=b"k8s\x00\n\x0f\n\x07apps/v1",
            headers={"Content-Type": "application/vnd.kubernetes.protobuf"},
        ) as r:
            body = await r.json()
            assert (r.status, body["reason"]) == (415, "UnsupportedMediaType")
            assert body["message"].startswith("the body of the request was in an unknown format")
        async with session.get(
            f"{kube_sim.url}/api/v1/namespaces/{NS}/pods",
            headers={"Accept": "application/vnd.kubernetes.protobuf"},
        ) as r:
            assert r.status == 406
        async with session.get(
            f"{kube_sim.url}/api/v1/namespaces/{NS}/pods",
            headers={"Accept": "application/vnd.kubernetes.protobuf, application/json"},
        ) as r:
            assert r.status == 200, "a client that also takes JSON gets JSON"


async def test_yaml_bodies_are_taken(kube_sim: KubeSim) -> None:
    text = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: from-yaml}\ndata: {a: b}\n"
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            f"{kube_sim.url}/api/v1/namespaces/{NS}/configmaps",
            data=text,
            headers={"Content-Type": "application/yaml"},
        ) as r,
    ):
        assert r.status == 201


# --- OpenAPI -----------------------------------------------------------------------


async def test_openapi_v3_describes_the_gpuscaler_and_built_ins(kube_sim: KubeSim) -> None:
    _, index = await get(kube_sim, "/openapi/v3")
    url = index["paths"]["apis/gpuscale.io/v1alpha1"]["serverRelativeURL"]
    assert "?hash=" in url
    _, doc = await get(kube_sim, url)
    schemas = doc["components"]["schemas"]
    scaler = schemas["io.gpuscale.v1alpha1.GPUScaler"]
    assert scaler["x-kubernetes-group-version-kind"] == [
        {"group": "gpuscale.io", "version": "v1alpha1", "kind": "GPUScaler"}
    ]
    assert (
        scaler["properties"]["metadata"]["$ref"]
        == "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
    )
    assert "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta" in schemas
    assert "reason" in scaler["properties"]["status"]["properties"]
    patch = doc["paths"]["/apis/gpuscale.io/v1alpha1/namespaces/{namespace}/gpuscalers/{name}"]["patch"]
    assert "fieldValidation" in [p["name"] for p in patch["parameters"]]

    _, doc = await get(kube_sim, index["paths"]["apis/apps/v1"]["serverRelativeURL"])
    deployment = doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"]
    assert deployment["x-kubernetes-group-version-kind"][0]["kind"] == "Deployment"
    assert "io.k8s.api.core.v1.PodSpec" in doc["components"]["schemas"]


async def test_openapi_follows_crds(kube_sim: KubeSim, api: ApiClient) -> None:
    _, index = await get(kube_sim, "/openapi/v3")
    assert "apis/keda.sh/v1alpha1" not in index["paths"]
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(keda_crd())
    _, index = await get(kube_sim, "/openapi/v3")
    _, doc = await get(kube_sim, index["paths"]["apis/keda.sh/v1alpha1"]["serverRelativeURL"])
    assert "sh.keda.v1alpha1.ScaledObject" in doc["components"]["schemas"]


async def test_openapi_v2_in_json_and_in_protobuf(kube_sim: KubeSim) -> None:
    status, doc = await get(kube_sim, "/openapi/v2", {"Accept": "application/json"})
    assert status == 200
    assert doc["swagger"] == "2.0"
    assert "io.gpuscale.v1alpha1.GPUScaler" in doc["definitions"]
    assert "io.k8s.api.coordination.v1.Lease" in doc["definitions"]
    async with (
        aiohttp.ClientSession() as session,
        session.get(
            f"{kube_sim.url}/openapi/v2",
            headers={"Accept": "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"},
        ) as r,
    ):
        # client-go asks for the protobuf Document first (kubectl explain --output=plaintext-openapiv2 reads it).
        assert r.status == 200
        assert r.headers["Content-Type"] == "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
        body = await r.read()
    assert body.startswith(b"\n\x032.0"), "field 1 (swagger) first"
    assert b"io.gpuscale.v1alpha1.GPUScaler" in body


def test_served_built_in_schemas_are_the_kubernetes_release() -> None:
    """The committed definitions are what the generator makes from kubernetes-validate now."""
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location(
        "gen_builtin_schemas",
        Path(__file__).resolve().parents[2] / "kubesim" / "tools" / "gen_builtin_schemas.py",
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_builtin_schemas"] = module
    spec.loader.exec_module(module)
    committed = json.loads(gzip.decompress(module.OUT.read_bytes()))
    assert committed == module.build(), "run kubesim/tools/gen_builtin_schemas.py"


async def test_server_side_dry_run_validates_without_storing(kube_sim: KubeSim) -> None:
    bad = gpu_workload("bert")
    bad["spec"]["replicas"] = -2
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"{kube_sim.url}/apis/apps/v1/namespaces/{NS}/deployments?dryRun=All",
            data=json.dumps(bad),
            headers={"Content-Type": "application/json"},
        ) as r:
            assert r.status == 422
        async with session.post(
            f"{kube_sim.url}/apis/gpuscale.io/v1alpha1/namespaces/{NS}/gpuscalers?dryRun=All",
            data=json.dumps(gpuscaler("bert")),
            headers={"Content-Type": "application/json"},
        ) as r:
            assert r.status == 201
    assert kube_sim.list_objects("gpuscale.io/v1alpha1", "GPUScaler", NS) == []


async def test_status_body_for_an_expired_token_is_a_status(api: ApiClient) -> None:
    with pytest.raises(ApiException) as raised:
        await client.CoreV1Api(api).list_namespaced_config_map(
            NS, limit=1, _continue="eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MCwic3RhcnQiOiJ4In0"
        )
    assert raised.value.status == 400
    assert json.loads(raised.value.body)["kind"] == "Status"
