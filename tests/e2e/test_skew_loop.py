"""Version skew across the whole loop: a workload is scaled while its metrics
come from an aggregator one step newer (metrics and fields it does not know
present), then from one a step older (those metrics and optional fields
absent). The real decider and actuator run against a real nats-server and
kube-sim; decisions keep flowing in both phases, the target's replicas follow,
and every decision's reason names the metric it used.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuscale import natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.wire import WorkloadMetrics
from gpuscale_kubesim import KubeSim

from ..actuator import actuator_harness
from ..actuator.test_actuator_service_sim import replicas_of
from ..decider import decider_harness
from ..skew import NEWER_METRICS, golden, newer, older, pack, restamp
from ..waiting import eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KEY = subjects.WorkloadKey("default", "Deployment", "bert")
# kube-sim's own pod bookkeeping may bump the Deployment's resourceVersion
# between the actuator's read and its PATCH: a retried PATCH is a success too.
SUCCESS = ("applied", "conflict_retried")


class Aggregator:
    """Plays an aggregator of another version: sends its metrics for bert every 0.2 s."""

    def __init__(self, nc: NATS) -> None:
        self.nc = nc
        self.build: Callable[[float], dict[str, Any]] | None = None
        self.stop = asyncio.Event()

    async def run(self) -> None:
        while not self.stop.is_set():
            if self.build is not None:
                await self.nc.publish(subjects.metrics(KEY), pack(self.build(time.time())))
                await natsio.flush(self.nc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stop.wait(), 0.2)


def newer_metrics(pod: str) -> Callable[[float], dict[str, Any]]:
    """Golden metrics (gpu_util 43.5 on 1 fresh pod) as a newer aggregator sends them,
    the fresh pod being the target's real pod."""

    def build(now: float) -> dict[str, Any]:
        payload = newer(golden("metrics"), WorkloadMetrics)
        payload["pods"][0]["pod"] = pod
        return restamp(payload, now)

    return build


def older_metrics(pods: list[str]) -> Callable[[float], dict[str, Any]]:
    """An older aggregator's message: no optional field, no newer metric; every pod fresh at 43.5."""

    def build(now: float) -> dict[str, Any]:
        base = older(golden("metrics"), WorkloadMetrics)
        values = {"gpu_util": 43.5, "power_w": 300.0}
        base["pods"] = [{"pod": pod, "values": values, "last_seen": now - 0.5} for pod in pods]
        base["averages"] = values
        base["pods_fresh"], base["pods_stale"] = len(pods), 0
        base["ts"] = now
        return base

    return build


async def test_decisions_flow_while_producers_run_other_versions(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(decider_harness.deployment("bert", 1))
    policies = decider_harness.write_policies(
        tmp_path / "policies.yaml",
        decider_harness.gpuscaler("bert", "bert", metrics=[{"name": "gpu_util", "target": 20}]),
    )
    decider_settings = decider_harness.settings_for(
        nats_server.url, kube_sim.kubeconfig_path, policies=policies
    )
    actuator_settings = actuator_harness.settings_for(
        nats_server.url, kube_sim.kubeconfig_path, policies=policies
    )
    fake = Aggregator(nats_client)
    sender = asyncio.create_task(fake.run())
    try:
        async with (
            actuator_harness.watch_actions(nats_client) as actions,
            decider_harness.watch_decisions(nats_client) as decisions,
            decider_harness.running_decider(decider_settings) as decider,
            actuator_harness.running_actuator(actuator_settings) as actuator,
        ):
            # One step newer: unknown metrics and fields beside gpu_util.
            fake.build = newer_metrics((await decider_harness.running_pods(kube_sim, "bert", 1))[0])
            first = await decisions.next(1, timeout_s=20)
            assert (first.from_replicas, first.to_replicas) == (1, 3)
            assert first.reason.startswith("gpu_util 43.5 over target 20")
            assert (await actions.wait_for(first.id)).outcome in SUCCESS  # published after the PATCH
            assert await replicas_of(kube_sim) == 3

            # One step older: no newer metric, no optional field; the 3 pods report.
            fake.build = older_metrics(await decider_harness.running_pods(kube_sim, "bert", 3))
            second = await decisions.next(2, timeout_s=20)
            assert second.from_replicas == 3
            assert second.to_replicas > 3
            assert second.reason.startswith("gpu_util 43.5 over target 20")
            assert (await actions.wait_for(second.id)).outcome in SUCCESS
            await eventually(lambda: _replicas_are(kube_sim, second.to_replicas), what="the second PATCH")

            for d in (first, second):
                assert not any(metric in d.reason for metric in NEWER_METRICS)
            assert (
                decider.metric(
                    "gpuscale_messages_unknown_fields_total",
                    kind="metrics",
                    field="averages.time_to_first_token_p90_s",
                )
                == 1
            )
            rejected = [
                s
                for running in (decider, actuator)
                for family in running.ctx.metrics.registry.collect()
                if family.name == "gpuscale_messages_rejected"
                for s in family.samples
                if s.name.endswith("_total") and s.value  # every reason's series exists, at 0
            ]
            assert rejected == []
    finally:
        fake.stop.set()
        await sender


async def _replicas_are(kube_sim: KubeSim, expected: int) -> bool:
    return await replicas_of(kube_sim) == expected
