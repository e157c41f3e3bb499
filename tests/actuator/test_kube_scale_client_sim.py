"""gpuscale.kube against kube-sim: the scale client, errors, events."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuscale.kube import (
    Conflict,
    Forbidden,
    NotFound,
    ScaleClient,
    ScaleTargetRef,
    Throttled,
    Unreachable,
    ping,
    record_event,
    request_json,
    retry_with_backoff,
)
from gpuscale_kubesim import KubeSim

from .kube_fixtures import api_client, deployment_path, events_about, rbac_kube_sim, workload

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
async def test_get_and_patch_replicas_through_scale(kube_sim: KubeSim, kind: str) -> None:
    await kube_sim.create(workload(kind, "bert", 2))
    ref = ScaleTargetRef("apps/v1", kind, "bert", "default")
    async with api_client(kube_sim.kubeconfig_path) as api:
        scale = ScaleClient(api)
        before = await scale.get(ref)
        assert before.replicas == 2
        assert "app=bert" in before.selector
        after = await scale.patch_replicas(ref, 3, before.resource_version)
        assert after.replicas == 3
        assert after.resource_version != before.resource_version
        assert (await scale.get(ref)).replicas == 3
        with pytest.raises(Conflict):  # the read resourceVersion is stale now
            await scale.patch_replicas(ref, 5, before.resource_version)
        assert (await scale.get(ref)).replicas == 3


async def test_plural_comes_from_discovery_for_unknown_kinds(kube_sim: KubeSim) -> None:
    async with api_client(kube_sim.kubeconfig_path) as api:
        scale = ScaleClient(api)
        ref = ScaleTargetRef("gpuscale.io/v1alpha1", "GPUScaler", "x", "default")
        assert await scale.plural(ref) == "gpuscalers"
        with pytest.raises(NotFound):
            await scale.plural(ScaleTargetRef("apps/v1", "NoSuchKind", "x", "default"))


async def test_missing_target_is_not_found(kube_sim: KubeSim) -> None:
    async with api_client(kube_sim.kubeconfig_path) as api:
        with pytest.raises(NotFound):
            await ScaleClient(api).get(ScaleTargetRef("apps/v1", "Deployment", "ghost", "default"))


async def test_throttling_is_retried_then_succeeds(kube_sim: KubeSim) -> None:
    await kube_sim.create(workload("Deployment", "bert", 2))
    kube_sim.faults.add("GET", r"/deployments/bert/scale$", status=429, count=2)
    ref = ScaleTargetRef("apps/v1", "Deployment", "bert", "default")
    retried: list[str] = []
    async with api_client(kube_sim.kubeconfig_path) as api:
        scale = ScaleClient(api)
        state = await retry_with_backoff(
            lambda: scale.get(ref),
            base_s=0.01,
            cap_s=0.05,
            on_retry=lambda e, _n, _d: retried.append(type(e).__name__),
        )
        assert state.replicas == 2
        assert retried == ["Throttled", "Throttled"]
        kube_sim.faults.add("GET", r"/deployments/bert/scale$", status=429, count=1)
        with pytest.raises(Throttled) as info:
            await scale.get(ref)
        assert info.value.retry_after_s is not None


async def test_forbidden_names_the_permission(tmp_path: Path) -> None:
    async with rbac_kube_sim(tmp_path) as (sim, actuator_kubeconfig):
        await sim.create(workload("Deployment", "bert", 2))
        ref = ScaleTargetRef("apps/v1", "Deployment", "bert", "default")
        async with api_client(actuator_kubeconfig) as api:
            scale = ScaleClient(api)
            state = await scale.get(ref)  # allowed
            with pytest.raises(Forbidden) as info:
                await scale.patch_replicas(ref, 3, state.resource_version)
            assert info.value.missing_permission == "patch deployments/scale in apps"


async def test_record_event_fills_regarding_with_the_uid(kube_sim: KubeSim) -> None:
    await kube_sim.create(workload("Deployment", "bert", 2))
    ref = ScaleTargetRef("apps/v1", "Deployment", "bert", "default")
    async with api_client(kube_sim.kubeconfig_path) as api:
        uid = (await request_json(api, "GET", deployment_path("bert")))["metadata"]["uid"]
        await record_event(api, ref, "SuccessfulRescale", "New size: 3; reason: test", "Normal")
        events = await events_about(api, "bert")
        assert len(events) == 1
        event = events[0]
        assert event["reason"] == "SuccessfulRescale"
        assert event["note"] == "New size: 3; reason: test"
        assert event["regarding"]["uid"] == uid
        assert event["regarding"]["kind"] == "Deployment"
        assert event["reportingController"] == "gpuscale.io/actuator"
        assert event["action"] == "Scale"


async def test_ping_and_unreachable(kube_sim: KubeSim) -> None:
    async with api_client(kube_sim.kubeconfig_path) as api:
        assert (await ping(api))[0] is True
        api.configuration.host = "http://127.0.0.1:9"  # discard port: nothing listens
        ok, detail = await ping(api, timeout_s=1.0)
        assert ok is False
        assert detail
        with pytest.raises(Unreachable):
            await request_json(api, "GET", "/api", timeout_s=1.0)


async def test_record_event_falls_back_to_core_v1_events(kube_sim: KubeSim) -> None:
    await kube_sim.create(workload("Deployment", "bert", 2))
    kube_sim.faults.add("POST", r"^/apis/events\.k8s\.io/v1/namespaces/default/events$", status=404, count=1)
    ref = ScaleTargetRef("apps/v1", "Deployment", "bert", "default")
    async with api_client(kube_sim.kubeconfig_path) as api:
        await record_event(api, ref, "FailedRescale", "New size: 3; error: x", "Warning", uid="uid-1")
        doc = await request_json(api, "GET", "/api/v1/namespaces/default/events")
    ours = [e for e in doc["items"] if e.get("reportingComponent") == "gpuscale.io/actuator"]
    assert len(ours) == 1
    event = ours[0]
    assert (event["reason"], event["type"], event["message"]) == (
        "FailedRescale",
        "Warning",
        "New size: 3; error: x",
    )
    assert event["involvedObject"]["uid"] == "uid-1"
    assert event["involvedObject"]["name"] == "bert"
