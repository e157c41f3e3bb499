"""kube-sim through kubernetes-asyncio: every endpoint the services use parses into the library's models."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client import ApiClient, ApiException, Configuration

from gpuscale.kube import new_api_client
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload, gpuscaler, keda_crd
from ..waiting import eventually

pytestmark = pytest.mark.integration

NS = "default"


def deployment(name: str, replicas: int = 1, gpus: int = 1) -> dict[str, Any]:
    return gpu_workload(name, replicas, namespace=NS, gpus=gpus, image="triton")


@pytest.fixture
async def api(kube_sim: KubeSim) -> AsyncIterator[ApiClient]:
    api_client = await new_api_client(kube_sim.kubeconfig_path)
    try:
        yield api_client
    finally:
        await api_client.close()


def client_with_token(sim: KubeSim, token: str | None) -> ApiClient:
    configuration = Configuration(host=sim.url)
    if token is not None:
        configuration.api_key = {"BearerToken": token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
    return ApiClient(configuration=configuration)


async def test_scale_subresource_read_patch_replace(kube_sim: KubeSim, api: ApiClient) -> None:
    await kube_sim.create(deployment("bert"))
    apps = client.AppsV1Api(api)

    scale = await apps.read_namespaced_deployment_scale("bert", NS)
    assert isinstance(scale, client.V1Scale)
    assert scale.spec.replicas == 1
    assert scale.status.selector == "app=bert"

    merged = await apps.patch_namespaced_deployment_scale("bert", NS, {"spec": {"replicas": 3}})
    assert merged.spec.replicas == 3
    # kubernetes-asyncio sends a strategic merge patch for a dict body; a merge patch works too.
    merged = await apps.patch_namespaced_deployment_scale(
        "bert", NS, {"spec": {"replicas": 2}}, _content_type="application/merge-patch+json"
    )
    assert merged.spec.replicas == 2
    json_patched = await apps.patch_namespaced_deployment_scale(
        "bert", NS, [{"op": "replace", "path": "/spec/replicas", "value": 3}]
    )
    assert json_patched.spec.replicas == 3

    # Read-then-replace races the controllers (a status write is a new resourceVersion, as on a real
    # server): let the Deployment settle first.
    await eventually(
        lambda: kube_sim.get("apps/v1", "Deployment", "bert")["status"].get("readyReplicas") == 3,
        what="the Deployment to settle",
    )
    scale = await apps.read_namespaced_deployment_scale("bert", NS)
    scale.spec.replicas = 4
    replaced = await apps.replace_namespaced_deployment_scale("bert", NS, scale)
    assert replaced.spec.replicas == 4
    assert int(replaced.metadata.resource_version) > int(scale.metadata.resource_version)

    deploy = await apps.read_namespaced_deployment("bert", NS)
    assert deploy.spec.replicas == 4
    assert deploy.metadata.generation >= 4  # every replicas change is a spec change


async def test_stale_resource_version_on_scale_is_a_conflict(kube_sim: KubeSim, api: ApiClient) -> None:
    await kube_sim.create(deployment("bert"))
    apps = client.AppsV1Api(api)
    stale = await apps.read_namespaced_deployment_scale("bert", NS)
    await apps.patch_namespaced_deployment_scale("bert", NS, {"spec": {"replicas": 2}})

    stale.spec.replicas = 5
    with pytest.raises(ApiException) as put_error:
        await apps.replace_namespaced_deployment_scale("bert", NS, stale)
    assert put_error.value.status == 409
    assert "the object has been modified" in put_error.value.body

    with pytest.raises(ApiException) as patch_error:
        await apps.patch_namespaced_deployment_scale(
            "bert",
            NS,
            {"metadata": {"resourceVersion": stale.metadata.resource_version}, "spec": {"replicas": 5}},
        )
    assert patch_error.value.status == 409
    assert (await apps.read_namespaced_deployment_scale("bert", NS)).spec.replicas == 2


async def test_statefulset_scale(kube_sim: KubeSim, api: ApiClient) -> None:
    sts = deployment("llm")
    sts["kind"] = "StatefulSet"
    sts["spec"]["serviceName"] = "llm"
    await kube_sim.create(sts)
    apps = client.AppsV1Api(api)
    scale = await apps.patch_namespaced_stateful_set_scale("llm", NS, {"spec": {"replicas": 2}})
    assert scale.spec.replicas == 2
    assert (await apps.read_namespaced_stateful_set_scale("llm", NS)).status.selector == "app=llm"


async def test_missing_object_is_404_with_status_body(api: ApiClient) -> None:
    apps = client.AppsV1Api(api)
    with pytest.raises(ApiException) as error:
        await apps.read_namespaced_deployment_scale("nope", NS)
    assert error.value.status == 404
    assert '"reason":"NotFound"' in error.value.body
    assert 'deployments.apps \\"nope\\" not found' in error.value.body


async def test_pods_list_and_watch_with_field_selector(kube_sim: KubeSim, api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    await kube_sim.create(deployment("bert", replicas=4))
    pods = await _wait_for_pods(core, "app=bert", 4, ready=True)
    node = pods[0].spec.node_name
    on_node = await core.list_namespaced_pod(NS, field_selector=f"spec.nodeName={node}")
    assert on_node.items
    assert {p.spec.node_name for p in on_node.items} == {node}
    assert all(p.metadata.owner_references[0].kind == "ReplicaSet" for p in on_node.items)

    rv = on_node.metadata.resource_version
    events: list[tuple[str, str]] = []
    w = watch.Watch()
    scale_task = asyncio.create_task(
        client.AppsV1Api(api).patch_namespaced_deployment_scale("bert", NS, {"spec": {"replicas": 8}})
    )
    async for event in w.stream(
        core.list_namespaced_pod,
        NS,
        field_selector=f"spec.nodeName={node}",
        resource_version=rv,
        allow_watch_bookmarks=True,
        timeout_seconds=5,
    ):
        assert isinstance(event["object"], client.V1Pod)
        assert event["object"].spec.node_name == node
        events.append((event["type"], event["object"].metadata.name))
        if event["type"] == "MODIFIED" and event["object"].status.phase == "Running":
            w.stop()
    await scale_task
    await w.close()
    assert ("ADDED", events[0][1]) == events[0], "a pod bound to the node shows up as ADDED"


async def test_watch_from_the_start_lists_then_streams(kube_sim: KubeSim, api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    seen = []
    async with watch.Watch() as w:
        async for event in w.stream(core.list_node, timeout_seconds=1):
            seen.append((event["type"], event["object"].metadata.name))
    assert seen == [("ADDED", "gpu-node-1"), ("ADDED", "gpu-node-2")]


async def test_watch_sends_bookmarks_when_asked() -> None:
    async with KubeSim(port=0, scenario="empty", bookmark_interval_s=0.1) as sim:
        api_client = await new_api_client(sim.kubeconfig_path)
        try:
            core = client.CoreV1Api(api_client)
            nodes = await core.list_node()
            kinds = []
            async with watch.Watch() as w:
                async for event in w.stream(
                    core.list_node,
                    resource_version=nodes.metadata.resource_version,
                    allow_watch_bookmarks=True,
                    timeout_seconds=2,
                ):
                    kinds.append(event["type"])
                    if event["type"] == "BOOKMARK":
                        assert (
                            event["raw_object"]["metadata"]["resourceVersion"]
                            == nodes.metadata.resource_version
                        )
                        w.stop()
            assert kinds == ["BOOKMARK"], "nothing changed, so only a bookmark arrives"
        finally:
            await api_client.close()


async def test_watch_with_a_compacted_resource_version_is_410() -> None:
    async with KubeSim(port=0, scenario="empty", history=5, startup_delay_s=0.1) as sim:
        api_client = await new_api_client(sim.kubeconfig_path)
        try:
            coordination = client.CoordinationV1Api(api_client)
            first = await coordination.create_namespaced_lease(NS, {"metadata": {"name": "l0"}, "spec": {}})
            for n in range(1, 8):
                await coordination.create_namespaced_lease(NS, {"metadata": {"name": f"l{n}"}, "spec": {}})
            async with watch.Watch() as w:
                stream = w.stream(
                    coordination.list_namespaced_lease,
                    NS,
                    resource_version=first.metadata.resource_version,
                    timeout_seconds=2,
                )
                with pytest.raises(ApiException) as error:
                    await stream.__anext__()
            assert error.value.status == 410
            # An exact list at that version is gone too.
            with pytest.raises(ApiException) as list_error:
                await coordination.list_namespaced_lease(
                    NS, resource_version=first.metadata.resource_version, resource_version_match="Exact"
                )
            assert list_error.value.status == 410
        finally:
            await api_client.close()


async def test_leases_create_replace_and_conflict(api: ApiClient) -> None:
    coordination = client.CoordinationV1Api(api)
    lease = client.V1Lease(
        metadata=client.V1ObjectMeta(name="gpuscale-decider"),
        spec=client.V1LeaseSpec(holder_identity="decider-a", lease_duration_seconds=15),
    )
    created = await coordination.create_namespaced_lease(NS, lease)
    assert created.spec.holder_identity == "decider-a"
    with pytest.raises(ApiException) as exists:
        await coordination.create_namespaced_lease(NS, lease)
    assert exists.value.status == 409
    assert "AlreadyExists" in exists.value.body

    created.spec.holder_identity = "decider-b"
    renewed = await coordination.replace_namespaced_lease("gpuscale-decider", NS, created)
    assert renewed.spec.holder_identity == "decider-b"

    created.spec.holder_identity = "decider-c"  # still carries the old resourceVersion
    with pytest.raises(ApiException) as stale:
        await coordination.replace_namespaced_lease("gpuscale-decider", NS, created)
    assert stale.value.status == 409
    assert "Conflict" in stale.value.body
    current = await coordination.read_namespaced_lease("gpuscale-decider", NS)
    assert current.spec.holder_identity == "decider-b"

    # A patch that names the resourceVersion it read is a precondition too, in either patch format.
    stale_rv = created.metadata.resource_version
    for body in (
        {"metadata": {"resourceVersion": stale_rv}, "spec": {"holderIdentity": "decider-c"}},
        [
            {"op": "replace", "path": "/metadata/resourceVersion", "value": stale_rv},
            {"op": "replace", "path": "/spec/holderIdentity", "value": "decider-c"},
        ],
    ):
        with pytest.raises(ApiException) as stale_patch:
            await coordination.patch_namespaced_lease("gpuscale-decider", NS, body)
        assert stale_patch.value.status == 409
    fresh = {
        "metadata": {"resourceVersion": current.metadata.resource_version},
        "spec": {"holderIdentity": "decider-c"},
    }
    patched = await coordination.patch_namespaced_lease("gpuscale-decider", NS, fresh)
    assert patched.spec.holder_identity == "decider-c"


async def test_events_written_either_way_are_read_both_ways(api: ApiClient) -> None:
    events_v1 = client.EventsV1Api(api)
    core = client.CoreV1Api(api)
    await events_v1.create_namespaced_event(
        NS,
        client.EventsV1Event(
            metadata=client.V1ObjectMeta(generate_name="bert-"),  # "bert." would end in a dot: invalid
            event_time="2026-01-01T00:00:00.000000Z",
            action="Scale",
            reason="ScaledUp",
            note="scaled from 1 to 3: gpu_util 90 over target 70",
            type="Normal",
            reporting_controller="gpuscale.io/actuator",
            reporting_instance="actuator-0",
            regarding=client.V1ObjectReference(kind="Deployment", name="bert", namespace=NS),
        ),
    )
    await core.create_namespaced_event(
        NS,
        client.CoreV1Event(
            metadata=client.V1ObjectMeta(name="bert.legacy"),
            involved_object=client.V1ObjectReference(kind="Deployment", name="bert", namespace=NS),
            reason="ScaledDown",
            message="scaled from 3 to 1",
            type="Normal",
            source=client.V1EventSource(component="gpuscale-actuator"),
        ),
    )
    core_list = await core.list_namespaced_event(NS, field_selector="involvedObject.name=bert")
    assert sorted(e.reason for e in core_list.items) == ["ScaledDown", "ScaledUp"]
    new_style = await events_v1.list_namespaced_event(NS)
    notes = {e.reason: e.note for e in new_style.items}
    assert notes["ScaledDown"] == "scaled from 3 to 1"
    assert {e.regarding.name for e in new_style.items} == {"bert"}


async def test_hpa_and_scaledobject_lists(kube_sim: KubeSim, api: ApiClient) -> None:
    await kube_sim.create(
        {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "bert", "namespace": NS},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bert"},
                "minReplicas": 1,
                "maxReplicas": 5,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 50},
                        },
                    }
                ],
            },
        }
    )
    await kube_sim.create(keda_crd())  # KEDA installed
    await kube_sim.create(
        {
            "apiVersion": "keda.sh/v1alpha1",
            "kind": "ScaledObject",
            "metadata": {"name": "llm", "namespace": NS},
            "spec": {"scaleTargetRef": {"name": "llm"}, "triggers": []},
        }
    )
    hpas = await client.AutoscalingV2Api(api).list_horizontal_pod_autoscaler_for_all_namespaces()
    assert [h.spec.scale_target_ref.name for h in hpas.items] == ["bert"]
    scaled = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        "keda.sh", "v1alpha1", NS, "scaledobjects"
    )
    assert [s["spec"]["scaleTargetRef"]["name"] for s in scaled["items"]] == ["llm"]


async def test_gpuscalers_with_status_subresource(api: ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    args = ("gpuscale.io", "v1alpha1", NS, "gpuscalers")
    created = await custom.create_namespaced_custom_object(*args, gpuscaler("bert", "bert"))
    assert created["metadata"]["generation"] == 1

    # A dict body to CustomObjectsApi.patch_* needs an explicit merge-patch content type (as with a real server).
    merge = {"_content_type": "application/merge-patch+json"}
    status = {
        "status": {
            "currentReplicas": 1,
            "desiredReplicas": 2,
            "targets": "90/70",
            "reference": "Deployment/bert",
        }
    }
    patched = await custom.patch_namespaced_custom_object_status(*args, "bert", status, **merge)
    assert patched["status"]["desiredReplicas"] == 2
    assert patched["metadata"]["generation"] == 1, "a status write is not a spec change"

    # The main resource ignores status; the status subresource ignores spec.
    ignored = await custom.patch_namespaced_custom_object(
        *args, "bert", {"status": {"desiredReplicas": 9}}, **merge
    )
    assert ignored["status"]["desiredReplicas"] == 2
    spec_change = await custom.patch_namespaced_custom_object(
        *args, "bert", {"spec": {"maxReplicas": 4}}, **merge
    )
    assert spec_change["metadata"]["generation"] == 2

    listed = await custom.list_namespaced_custom_object(*args)
    assert [o["metadata"]["name"] for o in listed["items"]] == ["bert"]

    # A decider watches them from the list's resourceVersion and sees the next change.
    async def change_later() -> None:
        await asyncio.sleep(0.05)
        await custom.patch_namespaced_custom_object(*args, "bert", {"spec": {"paused": True}}, **merge)

    changer = asyncio.create_task(change_later())
    async with watch.Watch() as w:
        async for event in w.stream(
            custom.list_namespaced_custom_object,
            *args,
            resource_version=listed["metadata"]["resourceVersion"],
            timeout_seconds=5,
        ):
            assert event["type"] == "MODIFIED"
            assert event["object"]["spec"]["paused"] is True
            w.stop()
    await changer

    stale = dict(created, status={"desiredReplicas": 3})
    with pytest.raises(ApiException) as conflict:
        await custom.replace_namespaced_custom_object_status(*args, "bert", stale)
    assert conflict.value.status == 409

    await custom.delete_namespaced_custom_object(*args, "bert")
    with pytest.raises(ApiException) as gone:
        await custom.get_namespaced_custom_object(*args, "bert")
    assert gone.value.status == 404


async def test_token_missing_is_401_and_rbac_denial_is_403() -> None:
    tokens = {
        "admin-token": None,
        "actuator-token": {
            "user": "system:serviceaccount:gpuscale:actuator",
            "rules": [{"verbs": ["get", "patch"], "resources": ["deployments/scale"], "apiGroups": ["apps"]}],
        },
    }
    async with KubeSim(port=0, scenario="empty", tokens=tokens, startup_delay_s=0.1) as sim:
        await sim.create(deployment("x"))
        anonymous = client_with_token(sim, None)
        actuator = client_with_token(sim, "actuator-token")
        admin = await new_api_client(sim.kubeconfig_path)  # the kubeconfig carries the admin token
        try:
            with pytest.raises(ApiException) as unauthorized:
                await client.AppsV1Api(anonymous).read_namespaced_deployment_scale("x", NS)
            assert unauthorized.value.status == 401

            apps = client.AppsV1Api(actuator)
            assert (
                await apps.patch_namespaced_deployment_scale("x", NS, {"spec": {"replicas": 2}})
            ).spec.replicas == 2
            with pytest.raises(ApiException) as forbidden:
                await apps.patch_namespaced_deployment("x", NS, {"spec": {"replicas": 3}})
            assert forbidden.value.status == 403
            assert (
                'deployments.apps \\"x\\" is forbidden: User \\"system:serviceaccount:gpuscale:actuator\\" '
                'cannot patch resource \\"deployments\\" in API group \\"apps\\" in the namespace \\"default\\"'
            ) in forbidden.value.body
            assert '"reason":"Forbidden"' in forbidden.value.body

            assert (await client.AppsV1Api(admin).read_namespaced_deployment("x", NS)).spec.replicas == 2
        finally:
            for c in (anonymous, actuator, admin):
                await c.close()


async def test_injected_faults_fail_then_clear(kube_sim: KubeSim, api: ApiClient) -> None:
    await kube_sim.create(deployment("bert"))
    apps = client.AppsV1Api(api)
    kube_sim.faults.add("PATCH", r"/deployments/bert/scale$", status=429, count=1)
    kube_sim.faults.add("PATCH", r"/deployments/bert/scale$", status=500, count=1)
    with pytest.raises(ApiException) as throttled:
        await apps.patch_namespaced_deployment_scale("bert", NS, {"spec": {"replicas": 2}})
    assert throttled.value.status == 429
    assert throttled.value.headers["Retry-After"] == "1"
    with pytest.raises(ApiException) as failed:
        await apps.patch_namespaced_deployment_scale("bert", NS, {"spec": {"replicas": 2}})
    assert failed.value.status == 500
    assert (
        await apps.patch_namespaced_deployment_scale("bert", NS, {"spec": {"replicas": 2}})
    ).spec.replicas == 2


async def _wait_for_pods(
    core: client.CoreV1Api, selector: str, count: int, ready: bool
) -> list[client.V1Pod]:
    async def pods() -> list[client.V1Pod]:
        listed = (await core.list_namespaced_pod(NS, label_selector=selector)).items
        alive = [p for p in listed if p.metadata.deletion_timestamp is None]
        have = [(p.metadata.name, p.status.phase) for p in listed]
        assert len(alive) == count, f"wanted {count} pods, have {have}"
        assert not ready or all(p.status.phase == "Running" for p in alive), f"wanted them running: {have}"
        return alive

    return await eventually(pods, what=f"{count} pods of {selector}")


async def test_a_watch_whose_client_went_away_ends_quietly(
    kube_sim: KubeSim, caplog: pytest.LogCaptureFixture
) -> None:
    """A real apiserver drops a watch whose client hung up; it logs no handler error. kube-sim
    printed aiohttp's "Error handling request" traceback on the next event it had to send
    (every benchmark run that stopped a decider mid-watch), and kept the watcher until then."""
    leases = f"{kube_sim.url}/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
    caplog.set_level(logging.ERROR, logger="aiohttp.server")
    async with aiohttp.ClientSession() as http:  # the fixture's kube-sim takes anyone
        response = await http.get(f"{leases}?watch=true")
        assert response.status == 200
        await eventually(lambda: len(kube_sim.store.watchers) == 1, what="the watch registered")
        response.close()  # hang up without reading on
        for n in range(5):  # events the server now tries to send down the closed connection
            async with http.post(leases, json={"metadata": {"name": f"gone-{n}"}, "spec": {}}) as created:
                assert created.status == 201
            await asyncio.sleep(0.05)
        await eventually(lambda: not kube_sim.store.watchers, what="the watch ended")
        async with http.get(leases) as listed:  # and the server serves on
            assert listed.status == 200
            assert len((await listed.json())["items"]) == 5
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []
