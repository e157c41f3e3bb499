"""A hostile peer floods every gpuscale subject while a healthy workload needs
to scale: aggregator, decider and actuator run as in
production against kube-sim and nats-server, the decider and the actuator
reading GPUScalers from the cluster. The flood is seeded (tests/hostile.py):
long names, wildcard and path characters, extreme numbers, timestamps far
off, huge counts, forged ids and decisions outside any policy, each also
written as a desired count into the bucket the actuator converges to.

The healthy workload still scales on its own samples, the victim the flood
aims its decisions at is never touched, every consumer counts what it
refused, none dies, and each logs a line a minute per reason, not per
message.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gpuscale import natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_kubesim import KubeSim

from ..actuator.actuator_harness import running_actuator
from ..actuator.actuator_harness import settings_for as actuator_settings
from ..aggregator.aggregator_builders import batch, gpu, owner
from ..aggregator.aggregator_harness import counter, publish_batch, running_aggregator
from ..decider.decider_harness import running_decider
from ..decider.decider_harness import settings_for as decider_settings
from ..hostile import Hostile, hostile_messages
from ..k8s_objects import gpu_workload, gpuscaler
from ..waiting import eventually, sample_value

pytestmark = [pytest.mark.integration, pytest.mark.slow]

HEALTHY_NODE = "gpu-node-1"
SEED = 20261123
DECISIONS = f"{subjects.PREFIX}.decisions."
DESIRED = f"$KV.{subjects.DESIRED_BUCKET}."


def replicas(sim: KubeSim, name: str) -> int:
    return int(sim.get("apps/v1", "Deployment", name)["spec"]["replicas"])


def running_pods(sim: KubeSim, app: str) -> list[str]:
    return sorted(
        p["metadata"]["name"]
        for p in sim.pods("default", f"app={app}")
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    )


@contextlib.asynccontextmanager
async def feeding(nc: NATS, sim: KubeSim) -> AsyncIterator[None]:
    """The healthy collector: bert's running pods at 90 % every half second."""
    stop = asyncio.Event()

    async def run() -> None:
        seq = 0
        while not stop.is_set():
            seq += 1
            gpus = [
                gpu(i, owner(pod), util=90.0, node=HEALTHY_NODE)
                for i, pod in enumerate(running_pods(sim, "bert"))
            ]
            await publish_batch(nc, batch(*gpus, node=HEALTHY_NODE, ts=time.time(), seq=seq, interval_s=0.5))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 0.5)

    task = asyncio.create_task(run())
    try:
        yield
    finally:
        stop.set()
        await task


@contextlib.asynccontextmanager
async def flooding(url: str, count: int) -> AsyncIterator[list[int]]:
    """``count`` hostile messages, in bursts, on a connection of its own, while
    the body runs; yields how many went out. The server closes a connection
    that sends an over-long subject: the peer connects again, as an attacker would."""
    sent = [0]
    source = Hostile(SEED, spare_workloads={"bert"}, spare_node=HEALTHY_NODE)

    async def run() -> None:
        nc: NATS | None = None
        try:
            for subject, payload in hostile_messages(source, count):
                if nc is None or nc.is_closed:
                    nc = NATS()
                    await nc.connect(servers=[url], allow_reconnect=False, name="hostile")
                with contextlib.suppress(Exception):  # refused by the client (max_payload) or the server
                    await nc.publish(subject, payload)
                    sent[0] += 1
                    if subject.startswith(DECISIONS):  # ... and as the desired count the actuator reads
                        await nc.publish(DESIRED + subject[len(DECISIONS) :].replace("~", "="), payload)
                if sent[0] % 100 == 0:
                    with contextlib.suppress(Exception):
                        await nc.flush(timeout=2)
                    await asyncio.sleep(0.05)
        finally:
            if nc is not None and not nc.is_closed:
                await nc.close()

    task = asyncio.create_task(run())
    try:
        yield sent
    finally:
        await task


async def test_a_flood_on_every_subject_neither_blinds_nor_steers(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(gpu_workload("bert", 1, gpus=1))
    await kube_sim.create(
        gpuscaler("bert", min_replicas=1, max_replicas=2, metrics=[{"name": "gpu_util", "target": 50}])
    )
    await kube_sim.create(gpu_workload("victim", 1, gpus=None))
    await kube_sim.create(gpuscaler("victim", min_replicas=1, max_replicas=1))
    await eventually(lambda: len(running_pods(kube_sim, "bert")) == 1, what="bert's pod running")
    kubeconfig = str(kube_sim.kubeconfig_path)
    with capture_logs() as logs:
        async with (
            running_aggregator(nats_server.url) as aggregator,
            running_decider(decider_settings(nats_server.url, kubeconfig)) as decider,
            running_actuator(actuator_settings(nats_server.url, kubeconfig)) as actuator,
        ):
            await eventually(lambda: aggregator.replay_done, what="replay")
            async with flooding(nats_server.url, 3000) as sent, feeding(nats_client, kube_sim):
                # 1 pod at 90 against 50: ceil(1 x 1.8) = 2, as HPA would.
                await eventually(
                    lambda: replicas(kube_sim, "bert") == 2, timeout_s=60, what="bert scaled to 2"
                )
            assert sent[0] > 2500  # a few exceed max_payload and never leave the client
            await natsio.flush(nats_client)
            services = {"aggregator": aggregator.ctx, "decider": decider.ctx, "actuator": actuator.ctx}
            assert not decider.task.done()
            assert not actuator.task.done()
            assert aggregator.nc is not None
            assert aggregator.nc.is_connected

            def refused(name: str, family: str) -> float:
                registry = services[name].metrics.registry
                return sum(
                    s.value
                    for m in registry.collect()
                    if m.name == "gpuscale_messages_rejected"
                    for s in m.samples
                    if s.name.endswith("_total") and s.labels.get("kind") == family
                )

            await eventually(lambda: refused("aggregator", "samples") > 100, what="samples refused")
            assert refused("decider", "metrics") > 100
            assert refused("decider", "actions") > 100
            refused_decisions = refused("actuator", "desired") + sample_value(
                actuator.ctx.metrics.registry, "gpuscale_actuator_outcomes_total", outcome="refused"
            )
            assert refused_decisions > 100
            assert counter(aggregator, "gpuscale_aggregator_gpu_samples_total") > 0
    assert replicas(kube_sim, "victim") == 1
    assert replicas(kube_sim, "bert") == 2
    warnings = [e for e in logs if e["log_level"] in ("warning", "error") and "suppressed" in e]
    per_reason: dict[tuple[str, str, str], int] = {}
    for e in warnings:
        key = (e["event"], str(e.get("kind")), str(e.get("reason")))
        per_reason[key] = per_reason.get(key, 0) + 1
    assert per_reason, "the flood was logged"
    assert max(per_reason.values()) == 1, per_reason  # the test runs for less than a minute
