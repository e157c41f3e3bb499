"""Per-GPUScaler windows end to end, through a real nats-server and
kube-sim: the decider tells the aggregator each policy's ``spec.window``; the
aggregator averages that workload over it (its own ``--window`` stays 30 s for
the rest); the metrics message says which window it carries; the decider acts
only on its policy's window.

The load tells the windows apart: 8 s at 20 %, then 90 %. A 4 s mean passes
55 (the target 50 and its tolerance) after two or three seconds of 90 and asks
for 3 or 4 replicas; a 30 s mean stays under the target (47 after 5 s of 90)
and asks for nothing."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from gpuscale import natsio
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.wire import UNSET
from gpuscale_kubesim import KubeSim

from ..aggregator.aggregator_builders import batch, gpu, owner
from ..aggregator.aggregator_harness import MetricsInbox, publish_batch, running_aggregator
from ..k8s_objects import gpu_workload
from ..waiting import eventually
from .decider_harness import (
    gpuscaler,
    running_decider,
    running_pods,
    settings_for,
    watch_decisions,
    write_policies,
)

pytestmark = pytest.mark.integration


async def feed(nc: NATS, pods: list[str], utils: list[float], workload: str) -> None:
    """One batch a second per pod, each pod on its own node, as collectors send them."""
    for i, util in enumerate(utils):
        for pod in pods:
            node = f"node-{pod}"
            b = batch(gpu(0, owner(pod, workload), util=util, node=node), node=node, ts=time.time(), seq=i)
            await publish_batch(nc, b)
        await natsio.flush(nc)
        await asyncio.sleep(1.0)


async def test_a_gpuscaler_s_window_is_what_the_aggregator_averages_and_the_decider_acts_on(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(gpu_workload("bert", 2))
    await kube_sim.create(gpu_workload("other", 2))
    bert = await running_pods(kube_sim, "bert", 2)
    other = await running_pods(kube_sim, "other", 2)
    hold_down = {"scaleDown": {"stabilizationWindowSeconds": 300}}  # 20 % must not scale down meanwhile
    policies = write_policies(
        tmp_path / "policies.yaml",
        gpuscaler(
            "bert", "bert", window="4s", behavior=hold_down, metrics=[{"name": "gpu_util", "target": 50}]
        ),
        gpuscaler(
            "other", "other", window="30s", behavior=hold_down, metrics=[{"name": "gpu_util", "target": 50}]
        ),
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    inbox = await MetricsInbox().start(nats_client)
    async with (
        running_aggregator(nats_server.url, window_s=30.0, publish_interval_s=0.5) as aggregator,
        running_decider(settings) as decider,
        watch_decisions(nats_client) as watch,
    ):
        load = [20.0] * 8 + [90.0] * 5
        await asyncio.gather(feed(nats_client, bert, load, "bert"), feed(nats_client, other, load, "other"))
        decision = await watch.next(1, timeout_s=10.0)
        applied = await eventually(
            lambda: (m := inbox.latest("bert")) is not None and m.window_s == 4.0 and m,
            what="a metrics message over bert's 4 s window",
        )
        assert applied.recent_s == 3.0
        assert all(p.recent is not UNSET and p.recent["gpu_util"] == 90.0 for p in applied.pods)
        held = inbox.latest("other")
        assert held is not None
        assert held.window_s == 30.0
        assert held.averages["gpu_util"] < 50.0
        assert aggregator.core.store.wanted[("default", "Deployment", "bert")].window_s == 4.0
        assert decider.metric("gpuscale_messages_out_total", kind="windows") >= 2
    assert decision.name == "bert"
    # The first 4 s mean past 55 (50 x 1.1): 72.5 or 90, for 3 or 4 replicas.
    assert decision.from_replicas == 2
    assert decision.to_replicas in (3, 4)
    assert decision.inputs["averages"]["gpu_util"] > 55.0
    assert decision.inputs["window_s"] == 4.0
    assert {d.name for d in watch.decisions} == {"bert"}  # nothing for the 30 s workload
