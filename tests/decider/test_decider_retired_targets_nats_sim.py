"""A tenant that keeps moving its GPUScaler to new targets cannot fill the shared buckets.

The finding: the decider wrote one GPUSCALE_DESIRED entry (and one state entry) per
target and never removed one, so a team that pointed its GPUScaler at target after
target (or created and deleted GPUScalers) filled the buckets' byte budgets. JetStream
then refuses every new key ("maximum bytes exceeded"): another team's new workload got
no desired count, ever. Here the buckets are small so that a few dozen targets fill them,
and the real decider runs against a real nats-server and kube-sim.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import nats.errors
import pytest
from nats.js.errors import KeyNotFoundError

from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.jetstreams import declare_kv
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, jetstream
from gpuscale_decider import sources
from gpuscale_decider.sources import state_key
from gpuscale_kubesim import KubeSim

from ..waiting import eventually
from .decider_harness import deployment, gpuscaler, running_decider, settings_for, watch_decisions

pytestmark = pytest.mark.integration

HOSTILE_NS = "tenant-a"
VICTIM_NS = "tenant-b"
TARGETS = 30  # before the fix, their decisions overflowed the 12 KiB buckets
BUCKET_BYTES = 12 * 1024
MARKER_KEEP_S = 2.0  # 600 s in service: the purge markers go too, in this test's time


async def namespace(sim: KubeSim, name: str) -> None:
    await sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def retarget(sim: KubeSim, name: str, ns: str, target: str) -> None:
    """The tenant edits its GPUScaler's scaleTargetRef (an update, as ``kubectl edit`` makes)."""
    obj = sim.get("gpuscale.io/v1alpha1", "GPUScaler", name, ns)
    spec = {**obj["spec"], "scaleTargetRef": {**obj["spec"]["scaleTargetRef"], "name": target}}
    sim.store.put(sim.resource("gpuscale.io/v1alpha1", "GPUScaler"), {**obj, "spec": spec})


async def keys(kv: Any) -> set[str]:
    try:
        return set(await kv.keys())
    except Exception:  # noqa: BLE001 - nats-py raises NoKeysError for an empty bucket
        return set()


async def test_a_tenant_moving_its_gpuscaler_from_target_to_target_leaves_the_buckets_room(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sources, "MARKER_KEEP_S", MARKER_KEEP_S)
    js = jetstream(nats_client)
    desired = await declare_kv(js, dataclasses.replace(subjects.DESIRED, max_bytes=BUCKET_BYTES))
    state = await declare_kv(js, dataclasses.replace(subjects.decider_state(), max_bytes=BUCKET_BYTES))
    for ns in (HOSTILE_NS, VICTIM_NS):
        await namespace(kube_sim, ns)
    for i in range(TARGETS):
        await kube_sim.create(deployment(f"t-{i}", 1, HOSTILE_NS))
    await kube_sim.create(deployment("victim", 1, VICTIM_NS))
    # Below its minReplicas: each target it names gets a desired count at once.
    await kube_sim.create(gpuscaler("roaming", "t-0", namespace=HOSTILE_NS, min_replicas=2))
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)

    async with running_decider(settings) as running, watch_decisions(nats_client) as watch:

        def decided(ns: str, name: str) -> Any:
            return next((d for d in watch.decisions if (d.namespace, d.name) == (ns, name)), None)

        for i in range(TARGETS):
            if i:
                retarget(kube_sim, "roaming", HOSTILE_NS, f"t-{i}")
            failures = running.metric("gpuscale_decider_publish_failures_total")
            await eventually(
                lambda i=i, failures=failures: (
                    decided(HOSTILE_NS, f"t-{i}")
                    or running.metric("gpuscale_decider_publish_failures_total") > failures
                ),
                what=f"t-{i} decided (or its write refused)",
            )
        hostile_now = f"{HOSTILE_NS}.Deployment.t-{TARGETS - 1}"

        # The other team's new workload gets its desired count and keeps its state.
        await kube_sim.create(gpuscaler("victim", "victim", namespace=VICTIM_NS, min_replicas=2))
        victim = await eventually(lambda: decided(VICTIM_NS, "victim"), 20, "the victim's decision")
        assert (victim.from_replicas, victim.to_replicas) == (1, 2)
        victim_key = subjects.WorkloadKey(VICTIM_NS, "Deployment", "victim")
        assert (await desired.get(subjects.desired_key(victim_key))).value

        async def saved() -> bool:
            try:
                return bool((await state.get(state_key(victim_key))).value)
            except KeyNotFoundError:
                return False

        await eventually(saved, what="the victim's state saved")

        async def left() -> set[str]:
            return {k for k in await keys(desired) if k.startswith(HOSTILE_NS)}

        assert await left() <= {hostile_now}, "the targets it left keep no desired count"
        assert {k for k in await keys(state) if k.startswith(HOSTILE_NS)} <= {hostile_now}

        # The purge markers go after MARKER_KEEP_S: each bucket holds the two live entries alone.
        async def live_only(bucket: str) -> bool:
            return (await js.stream_info(f"KV_{bucket}")).state.messages == 2

        for bucket in (subjects.DESIRED_BUCKET, subjects.DECIDER_STATE_BUCKET):
            await eventually(lambda bucket=bucket: live_only(bucket), 10, f"{bucket}'s markers removed")
        assert (await desired.get(subjects.desired_key(victim_key))).value, "a live entry stays"
        assert running.metric("gpuscale_decider_evaluation_errors_total", stage="retire") == 0
        # /metrics keeps the series of the workloads GPUScalers target now, not of every one ever.
        per_workload = {
            sample.labels["name"]
            for family in running.ctx.metrics.registry.collect()
            if family.name == "gpuscale_decisions"
            for sample in family.samples
        }
        assert per_workload == {f"t-{TARGETS - 1}", "victim"}
        # Every write went through, the roaming tenant's own included.
        assert running.metric("gpuscale_decider_publish_failures_total") == 0
        assert not running.task.done()


async def test_purge_markers_nats_refused_to_remove_are_removed_on_the_next_sweep(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    js = jetstream(nats_client)
    desired = await declare_kv(js, subjects.DESIRED)
    await declare_kv(js, subjects.decider_state())
    key = subjects.WorkloadKey(HOSTILE_NS, "Deployment", "left")
    await desired.put(subjects.desired_key(key), b"3")
    leaving = await connect([nats_server.url], ServiceMetrics("leaving"), name="leaving")
    retirement = sources.Retirement(
        jetstream(leaving), subjects.DESIRED_BUCKET, subjects.DECIDER_STATE_BUCKET
    )
    await retirement.retire(key, 0.0)
    await leaving.close()  # NATS away for this sweep
    with pytest.raises(nats.errors.ConnectionClosedError):
        await retirement.sweep(sources.MARKER_KEEP_S)
    assert key in retirement.markers, "a refused purge keeps its marker to try again"
    retirement.js = js
    await retirement.sweep(sources.MARKER_KEEP_S)
    assert not retirement.markers
    stream = f"KV_{subjects.DESIRED_BUCKET}"
    assert (await js.stream_info(stream)).state.messages == 0
