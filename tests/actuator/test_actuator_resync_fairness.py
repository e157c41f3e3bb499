"""One team's many targets must not queue another team's fresh desired count behind its
resync: the real actuator process, resyncing every second, against kube-sim and a real
nats-server. team-b names 4,000 Deployments that do not exist (each resync reads each
one's /scale, 404, already reported: nothing more to say); team-a's new count must be
written at once, not after every one of team-b's reads (4,000: a median of 2.9 s before)."""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from pathlib import Path

import pytest

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS, declare_kv, jetstream
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload, gpuscaler
from .actuator_harness import WRITTEN, decision, publish, watch_actions
from .test_actuator_failover_process import _spawn

pytestmark = [pytest.mark.integration, pytest.mark.slow]


TEAM_B_TARGETS = 4_000
SAMPLES = 6


@pytest.mark.serial  # it times a write against a bound: 0.04 s fair, 2.9 s behind the resync
async def test_one_teams_resync_does_not_queue_another_teams_new_count(
    kube_sim: KubeSim, nats_server: EmbeddedNats, nats_client: NATS, tmp_path: Path
) -> None:
    for ns in ("team-a", "team-b"):
        await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    await kube_sim.create(gpu_workload("bert", 1, namespace="team-a", gpus=None))
    await kube_sim.create(gpuscaler("bert", namespace="team-a"))
    desired = await declare_kv(jetstream(nats_client), subjects.DESIRED)
    for i in range(TEAM_B_TARGETS):  # what one team may write in its own namespace: GPUScalers
        await kube_sim.create(gpuscaler(f"w{i}", namespace="team-b"))
        d = decision(
            f"w{i}", from_=1, to=2, namespace="team-b"
        )  # ... and the desired counts the decider writes for them
        await desired.put(
            subjects.desired_key(subjects.WorkloadKey("team-b", "Deployment", f"w{i}")), codec.encode(d)
        )
    args = [
        str(Path(sys.executable).parent / "gpuscale"), "actuator",
        "--nats-url", nats_server.url, "--kubeconfig", str(kube_sim.kubeconfig_path),
        "--http-port", "0", "--identity", "fair", "--resync-interval", "1",
        "--lease-duration", "2", "--renew-deadline", "1.5", "--retry-period", "0.2",
    ]  # fmt: skip
    proc = _spawn(args, tmp_path / "actuator.log")
    took: list[float] = []
    try:
        async with watch_actions(nats_client) as actions:
            first = decision("bert", from_=1, to=2, namespace="team-a")
            await publish(nats_client, first)
            assert (await actions.wait_for(first.id, timeout_s=120)).outcome in WRITTEN
            count = 2
            for _ in range(SAMPLES):
                await asyncio.sleep(0.37)  # land anywhere in a resync
                d = decision("bert", from_=count, to=count + 1, namespace="team-a")
                started = time.monotonic()
                await publish(nats_client, d)
                assert (await actions.wait_for(d.id, timeout_s=120)).outcome in WRITTEN
                took.append(time.monotonic() - started)
                count += 1
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)
    print(f"team-a's new counts written in {[round(t, 2) for t in took]} s")
    assert statistics.median(took) < 1.0, took


async def test_slots_serve_a_new_count_before_resync_work_and_pass_on_a_cancelled_grant() -> None:
    from gpuscale_actuator.actuator import Slots

    slots = Slots(1)
    await slots.acquire("held", urgent=False)
    order: list[str] = []

    async def take(key: str, urgent: bool) -> None:
        await slots.acquire(key, urgent=urgent)
        order.append(key)
        slots.release()

    waiters = [asyncio.create_task(take(f"resync-{i}", False)) for i in range(3)]
    waiters.append(asyncio.create_task(take("new", True)))
    await asyncio.sleep(0)
    slots.hurry("resync-2")  # its count changed while it waited behind resync work
    cancelled = asyncio.create_task(take("gone", True))
    await asyncio.sleep(0)
    cancelled.cancel()
    slots.release()
    await asyncio.gather(*waiters)
    assert order == ["new", "resync-2", "resync-0", "resync-1"]
    await asyncio.wait_for(slots.acquire("again", urgent=False), 1)  # no slot was lost
