"""An aggregator whose clock disagrees with the decider's, through nats-server
and kube-sim: the decider judges freshness by when metrics arrive, so it
decides exactly as with a synchronised aggregator, shows the offset, and a
message dated far ahead pins nothing."""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
import pytest
from structlog.testing import capture_logs

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_kubesim import KubeSim

from ..waiting import eventually, holds_for
from .decider_harness import (
    deployment,
    gpuscaler,
    metrics_message,
    publish_metrics,
    running_decider,
    running_pods,
    settings_for,
    watch_decisions,
    write_policies,
)

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("skew_s", [0.0, -20.0, 20.0], ids=["synchronised", "20s-behind", "20s-ahead"])
async def test_an_aggregator_off_by_20s_leads_to_the_same_decision(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path, skew_s: float
) -> None:
    await kube_sim.create(deployment("bert", 1))
    policies = write_policies(
        tmp_path / "policies.yaml", gpuscaler("bert", "bert", metrics=[{"name": "gpu_util", "target": 20}])
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    with capture_logs() as logs:
        async with running_decider(settings) as running, watch_decisions(nats_client) as decisions:
            pods = await running_pods(kube_sim, "bert", 1)
            message = msgspec.structs.replace(
                metrics_message("bert", 23.0, 1, ts=time.time() + skew_s, pods=pods), source="aggregator-0"
            )
            await publish_metrics(nats_client, message)
            decision = await decisions.next()
            # HPA's arithmetic: 1 replica at 23 against 20 is a ratio of 1.15, past
            # the 0.1 tolerance: ceil(1 × 1.15) = 2.
            assert (decision.from_replicas, decision.to_replicas) == (1, 2)
            shown = running.metric(
                "gpuscale_decider_aggregator_clock_offset_seconds", aggregator="aggregator-0"
            )
            assert shown == pytest.approx(-skew_s, abs=1.0)
            running.decider.clock_watch.check()
    warned = [e for e in logs if e["event"] == "clock_offset_large"]
    assert [e["aggregator"] for e in warned] == ([] if skew_s == 0 else ["aggregator-0"])


async def test_a_message_dated_55s_ahead_pins_nothing(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    """A forged or mis-clocked message far ahead (within the contract's 60 s
    allowance) does not hide the synchronised ones that follow it."""
    await kube_sim.create(deployment("bert", 1))
    policies = write_policies(
        tmp_path / "policies.yaml", gpuscaler("bert", "bert", metrics=[{"name": "gpu_util", "target": 20}])
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    async with running_decider(settings) as running, watch_decisions(nats_client) as decisions:
        pods = await running_pods(kube_sim, "bert", 1)
        await publish_metrics(nats_client, metrics_message("bert", 20.0, 1, ts=time.time() + 55, pods=pods))
        await eventually(lambda: running.metric("gpuscale_messages_in_total", kind="metrics") == 1)
        # Two ticks of the decider at 0.5 s: it would have decided by now if it were going to.
        await holds_for(lambda: not decisions.decisions, 1.0, "no decision at the target")
        await publish_metrics(nats_client, metrics_message("bert", 43.5, 1, pods=pods))
        decision = await decisions.next()
        assert (decision.from_replicas, decision.to_replicas) == (1, 3)
        assert decision.inputs["averages"]["gpu_util"] == 43.5
