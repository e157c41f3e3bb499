"""The actuator service end to end: real nats-server, kube-sim, the real shell."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.kube import request_json
from gpuscale.natsio import NATS
from gpuscale_kubesim import KubeSim

from ..waiting import eventually, holds_for
from .actuator_harness import (
    decision,
    publish,
    publish_raw,
    running_actuator,
    settings_for,
    watch_actions,
)
from .kube_fixtures import (
    ACTUATOR_RULES_SCALE_ONLY,
    api_client,
    deployment_path,
    events_about,
    policy_for,
    rbac_kube_sim,
    scalable_crd,
    seed,
)

pytestmark = pytest.mark.integration

PATCH_BERT = r"/apis/apps/v1/namespaces/default/deployments/bert/scale$"
SUCCESS = ("applied", "conflict_retried")


async def replicas_of(kube_sim: KubeSim, name: str = "bert") -> int:
    async with api_client(kube_sim.kubeconfig_path) as api:
        obj = await request_json(api, "GET", deployment_path(name))
    return int(obj["spec"]["replicas"])


async def test_applies_a_decision_records_an_event_and_publishes_the_outcome(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        d = decision(from_=2, to=3)
        await publish(nats_client, d)
        action = await actions.wait_for(d.id)
        assert action.outcome == "applied"
        assert (action.replicas_before, action.replicas_after) == (2, 3)
        assert (action.namespace, action.kind, action.name) == ("default", "Deployment", "bert")
        async with api_client(kube_sim.kubeconfig_path) as api:
            obj = await request_json(api, "GET", deployment_path("bert"))
            assert obj["spec"]["replicas"] == 3
            await eventually(lambda: events_about(api, "bert"), what="an event on the target")
            (event,) = await events_about(api, "bert")
        assert event["reason"] == "SuccessfulRescale"
        assert event["note"].startswith("New size: 3; reason: gpu_util 83.0 over target 70")
        assert event["regarding"]["uid"] == obj["metadata"]["uid"]
        assert actuator.metric("gpuscale_actuator_outcomes_total", outcome="applied") == 1
        assert actuator.metric("gpuscale_actuator_desired_updates_total") == 1
        assert actuator.metric("gpuscale_actuator_patch_latency_seconds_count") == 1
        assert actuator.metric("gpuscale_actuator_leader") == 1
        assert actuator.ctx is not None
        base = f"http://127.0.0.1:{actuator.ctx.http.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{base}/readyz") as resp:
                ready = await resp.json()
                assert resp.status == 200, ready
            assert ready["checks"]["nats"]["ok"] is True
            assert ready["checks"]["kubernetes"]["ok"] is True
            async with http.get(f"{base}/metrics") as resp:
                text = await resp.text()
            assert 'gpuscale_actuator_outcomes_total{outcome="applied"} 1.0' in text


async def test_statefulsets_scale_too(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "StatefulSet", "llm", 1)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings):
        d = decision("llm", kind="StatefulSet", from_=1, to=4)
        await publish(nats_client, d)
        assert (await actions.wait_for(d.id)).outcome in SUCCESS
        async with api_client(kube_sim.kubeconfig_path) as api:
            obj = await request_json(api, "GET", "/apis/apps/v1/namespaces/default/statefulsets/llm")
        assert obj["spec"]["replicas"] == 4


async def test_an_old_desired_count_converges_whatever_count_it_was_written_at(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    """Level-triggered: the entry is the state to reach, not a change to replay."""
    await seed(kube_sim, "Deployment", "bert", 2)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings):
        d = decision(from_=4, to=5, age_s=3600.0)  # written an hour ago, when the target had 4
        await publish(nats_client, d)
        action = await actions.wait_for(d.id)
    assert (action.outcome, action.replicas_before, action.replicas_after) == ("applied", 2, 5)
    assert await replicas_of(kube_sim) == 5


async def test_a_409_is_re_read_and_retried_once(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    kube_sim.faults.add("PATCH", PATCH_BERT, status=409, count=1)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings):
        d = decision(from_=2, to=3)
        await publish(nats_client, d)
        action = await actions.wait_for(d.id)
    assert action.outcome == "conflict_retried"
    assert action.replicas_after == 3
    assert await replicas_of(kube_sim) == 3


async def test_429_three_times_then_success(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    kube_sim.faults.add("PATCH", PATCH_BERT, status=429, count=3)
    patches = kube_sim.faults.add("PATCH", PATCH_BERT, delay_s=0.0, count=None)  # counts the rest
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        d = decision(from_=2, to=3)
        await publish(nats_client, d)
        action = await actions.wait_for(d.id, timeout_s=30)
        assert actuator.metric("gpuscale_actuator_kube_retries_total", error="Throttled") == 3
    # Retry-After makes this take seconds, in which kube-sim's pods may update the
    # Deployment's status (a new resourceVersion): then the PATCH meets a 409 once.
    assert action.outcome in SUCCESS
    assert patches.hits == (1 if action.outcome == "applied" else 2)
    assert await replicas_of(kube_sim) == 3


async def test_a_missing_rbac_permission_fails_clearly_and_the_service_goes_on(
    nats_server: EmbeddedNats, nats_client: NATS, tmp_path: Path
) -> None:
    async with rbac_kube_sim(tmp_path) as (sim, actuator_kubeconfig):
        await seed(sim, "Deployment", "bert", 2)
        settings = settings_for(nats_server.url, str(actuator_kubeconfig))
        async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
            for _ in range(2):  # the second one proves the service is still consuming
                denied = decision(from_=2, to=3)
                await publish(nats_client, denied)
                action = await actions.wait_for(denied.id)
                assert action.outcome == "failed"
                assert action.error == "missing RBAC permission: patch deployments/scale in apps"
            assert not actuator.task.done()
            assert actuator.metric("gpuscale_actuator_outcomes_total", outcome="failed") == 2
        assert sim.get("apps/v1", "Deployment", "bert")["spec"]["replicas"] == 2


async def test_a_missing_target_fails_with_the_reason(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await kube_sim.create(policy_for("Deployment", "ghost"))  # a GPUScaler on a Deployment never made
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        d = decision("ghost", from_=1, to=2)
        await publish(nats_client, d)
        action = await actions.wait_for(d.id)
        assert action.outcome == "failed"
        assert "not found" in (action.error or "")
        assert not actuator.task.done()


async def test_dry_run_changes_nothing(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, dry_run=True)
    async with watch_actions(nats_client) as actions, running_actuator(settings):
        d = decision(from_=2, to=3)
        await publish(nats_client, d)
        action = await actions.wait_for(d.id)
    assert action.outcome == "skipped_dry_run"
    assert await replicas_of(kube_sim) == 2


async def test_invalid_entries_are_rejected_counted_and_hold_up_no_other(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    await seed(kube_sim, "Deployment", "other", 2)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, resync_interval=0.5)
    key = subjects.desired_key(subjects.WorkloadKey("default", "Deployment", "bert"))
    good = decision(from_=2, to=3)
    bad: list[tuple[str, Any]] = [
        ("default.Deployment.other", b"\xc1not msgpack"),
        ("default.Deployment.v2", codec.encode_raw({"v": 2, "id": "x"})),
        ("default.Deployment.neg", codec.encode_raw({**good.to_wire(), "to_replicas": -1})),
        ("default.Deployment.elsewhere", codec.encode(good)),  # the entry names another workload than its key
        ("not-a-workload", codec.encode(good)),
    ]
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        for kv_key, payload in bad:
            await publish_raw(nats_client, kv_key, payload)
        await publish_raw(nats_client, key, codec.encode(good))  # after the bad ones: not held up
        # Written, at once or after one 409 (kube-sim's own controllers write the Deployment too).
        assert (await actions.wait_for(good.id)).outcome in SUCCESS
        reasons = ("undecodable", "wrong_version", "out_of_range", "key_mismatch", "bad_key")

        def rejected() -> dict[str, float]:
            return {
                r: actuator.metric("gpuscale_messages_rejected_total", kind="desired", reason=r)
                for r in reasons
            }

        await eventually(lambda: all(v == 1 for v in rejected().values()), what="each rejection counted")
        # Resynced every 0.5 s: each bad entry is still counted once, the good one reported once.
        resyncs = actuator.metric("gpuscale_actuator_resyncs_total")
        await eventually(
            lambda: actuator.metric("gpuscale_actuator_resyncs_total") >= resyncs + 3, what="three resyncs"
        )
        assert all(v == 1 for v in rejected().values()), rejected()
    assert len(actions.for_decision(good.id)) == 1
    assert await replicas_of(kube_sim, "other") == 2


async def test_the_same_desired_count_twice_is_one_write(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    patches = kube_sim.faults.add("PATCH", PATCH_BERT, delay_s=0.0, count=None)  # counts PATCHes
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, resync_interval=0.5)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        d = decision(from_=2, to=3)
        await publish(nats_client, d)
        assert (await actions.wait_for(d.id)).outcome == "applied"
        await publish(nats_client, d)  # written again (a new revision), and resynced
        await eventually(lambda: actuator.metric("gpuscale_actuator_desired_updates_total") == 2)
        resyncs = actuator.metric("gpuscale_actuator_resyncs_total")
        await eventually(
            lambda: actuator.metric("gpuscale_actuator_resyncs_total") >= resyncs + 2, what="two resyncs"
        )
    assert patches.hits == 1
    assert len(actions.for_decision(d.id)) == 1
    assert await replicas_of(kube_sim) == 3


async def test_two_desired_counts_in_a_row_end_at_the_latest(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    kube_sim.faults.add("PATCH", PATCH_BERT, delay_s=0.3, count=1)  # the first write is slow
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings):
        first, latest = decision(from_=2, to=3), decision(from_=2, to=6)
        await publish(nats_client, first)
        await publish(nats_client, latest)
        assert (await actions.wait_for(latest.id)).replicas_after == 6
    assert await replicas_of(kube_sim) == 6


async def test_a_failed_write_is_tried_again_at_the_resync(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    kube_sim.faults.add("PATCH", PATCH_BERT, status=409, count=2)  # 409 twice: failed this time
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, resync_interval=1.0)
    async with watch_actions(nats_client) as actions, running_actuator(settings):
        d = decision(from_=2, to=3)
        await publish(nats_client, d)
        failed = await actions.wait_for(d.id)
        assert failed.outcome == "failed"
        assert "409 Conflict twice" in (failed.error or "")
        await eventually(lambda: len(actions.for_decision(d.id)) == 2, 20, what="the resync's write")
        assert actions.for_decision(d.id)[1].outcome == "applied"
    assert await replicas_of(kube_sim) == 3


async def test_a_restarted_actuator_converges_from_the_bucket(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    """Written while no actuator ran (a crash, a roll-out): the next one reads it and converges."""
    await seed(kube_sim, "Deployment", "bert", 2)
    d = decision(from_=2, to=4)
    await publish(nats_client, d)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, identity="restarted")
    async with watch_actions(nats_client) as actions, running_actuator(settings):
        assert (await actions.wait_for(d.id, timeout_s=20)).outcome in SUCCESS
    assert await replicas_of(kube_sim) == 4


async def test_survives_a_nats_outage(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        first = decision(from_=2, to=3)
        await publish(nats_client, first)
        assert (await actions.wait_for(first.id)).outcome in SUCCESS
        nats_server.stop()
        # The fetch loop meets a dead connection for a while and must not end the service.
        await holds_for(lambda: not actuator.task.done(), 1.5, what="the actuator running")
        nats_server.start()
        await eventually(lambda: nats_client.is_connected, timeout_s=15, what="the test client to reconnect")
        second = decision(from_=3, to=4)
        await publish(nats_client, second)
        # The restarted server forgot the watch's consumer: the watch starts anew on the reconnect
        # (it waited ~18 s for the consumer's missed heartbeats before).
        assert (await actions.wait_for(second.id, timeout_s=12)).outcome in SUCCESS
        await eventually(
            lambda: actuator.metric("gpuscale_nats_reconnects_total") >= 1, 20, "the reconnect counted"
        )
    assert await replicas_of(kube_sim) == 4


async def test_an_api_server_outage_delays_the_decision_but_does_not_lose_it(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        await eventually(lambda: actuator.metric("gpuscale_actuator_leader") == 1, what="leadership")
        kube_sim.faults.add("GET", r"/deployments/bert(/scale)?$", status=503, count=None)
        d = decision(from_=2, to=3)
        await publish(nats_client, d)
        await eventually(
            lambda: actuator.metric("gpuscale_actuator_kube_retries_total", error="ServerError") >= 2,
            what="retries against the failing API server",
        )
        assert actions.for_decision(d.id) == []  # not final: not acked, not reported
        kube_sim.faults.clear()
        action = await actions.wait_for(d.id, timeout_s=30)
        assert action.outcome in SUCCESS
    assert await replicas_of(kube_sim) == 3


def pool_policies(tmp_path: Path) -> Path:
    """The CRD's GPUScaler targets Deployments and StatefulSets; a policies file
    (as the decider's ``--policies``) may target any kind with ``/scale``."""
    path = tmp_path / "policies.yaml"
    path.write_text(yaml.safe_dump(policy_for("InferencePool", "pool", api_version="example.com/v1")))
    return path


async def test_custom_resources_scale_through_the_scale_subresource(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(scalable_crd())
    await kube_sim.create(
        {
            "apiVersion": "example.com/v1",
            "kind": "InferencePool",
            "metadata": {"name": "pool", "namespace": "default"},
            "spec": {"replicas": 1},
        }
    )
    scale_patches = kube_sim.faults.add("PATCH", r"/inferencepools/pool/scale$", delay_s=0.0, count=None)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=pool_policies(tmp_path))
    d = decision("pool", kind="InferencePool", api_version="example.com/v1", from_=1, to=2)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        await publish(nats_client, d)
        assert (await actions.wait_for(d.id)).outcome in SUCCESS
        await publish(nats_client, d)  # the same count again: nothing to write
        await eventually(lambda: actuator.metric("gpuscale_actuator_desired_updates_total") == 2)
    assert scale_patches.hits == 1
    assert len(actions.for_decision(d.id)) == 1
    assert kube_sim.get("example.com/v1", "InferencePool", "pool")["spec"]["replicas"] == 2


async def test_with_scale_only_rbac_it_scales_through_scale(
    nats_server: EmbeddedNats, nats_client: NATS, tmp_path: Path
) -> None:
    async with rbac_kube_sim(tmp_path, ACTUATOR_RULES_SCALE_ONLY) as (sim, actuator_kubeconfig):
        await seed(sim, "Deployment", "bert", 2)
        scale_patches = sim.faults.add("PATCH", r"/deployments/bert/scale$", delay_s=0.0, count=None)
        settings = settings_for(nats_server.url, str(actuator_kubeconfig))
        d = decision(from_=2, to=3)
        async with watch_actions(nats_client) as actions, running_actuator(settings):
            await publish(nats_client, d)
            assert (await actions.wait_for(d.id)).outcome in SUCCESS
        assert scale_patches.hits == 1
        assert sim.get("apps/v1", "Deployment", "bert")["spec"]["replicas"] == 3
