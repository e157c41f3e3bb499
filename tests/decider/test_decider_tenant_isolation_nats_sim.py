"""One tenant's GPUScaler cannot stop the decider for the others.

The finding: a GPUScaler whose target rounded to 0 milli-units made every one of its
evaluations raise, and the first exception ended the decider's tick, so every other
workload lost its tick-driven work: another tenant's fallback never fired. Here the
same failure is planted at our own function boundary (``milli()`` says 0 for the
poisoned target's value only: the CRD and the policy no longer let such a target in)
and the real decider runs against a real nats-server and kube-sim.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import Any

import msgspec
import pytest
from structlog.testing import capture_logs

from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_decider.core import replicas
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
)

pytestmark = pytest.mark.integration

POISONED_NS = "tenant-a"  # listed first: the tick meets it before the others
HEALTHY_NS = "tenant-b"
POISONED_TARGET = 61.25  # no other policy in this test uses it
FALLBACK_AFTER_S = 2
# The fallback is due FALLBACK_AFTER_S after the decider first sees the workload; this
# much more is for a busy 2-core machine (a tick is 0.5 s, a decision a few ms).
ON_TIME_S = 20.0


def plant_zero_milli_target(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Make the poisoned target's milli-value 0, as a target of 5e-10 was before the fix;
    returns the cure."""
    real = replicas.milli
    poisoned = {"on": True}

    def milli(value: float) -> int:
        return 0 if poisoned["on"] and value == POISONED_TARGET else real(value)

    monkeypatch.setattr(replicas, "milli", milli)
    return lambda: poisoned.update(on=False)


async def namespace(sim: KubeSim, name: str) -> None:
    await sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})


def conditions_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in (obj.get("status") or {}).get("conditions") or []}


def events_in(sim: KubeSim, ns: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in sim.list_objects("events.k8s.io/v1", "Event", ns) if e.get("reason") == reason]


class Flood:
    """The poisoned workload's metrics, arriving as the aggregator sends them, until stopped."""

    def __init__(self, nc: NATS, name: str, ns: str, pods: list[str]) -> None:
        self.message = metrics_message(name, 80.0, 1, namespace=ns, pods=pods)
        self.nc = nc
        self.task: asyncio.Task[None] | None = None

    async def _loop(self) -> None:
        while True:
            await publish_metrics(self.nc, msgspec.structs.replace(self.message, ts=time.time()))
            await asyncio.sleep(0.1)

    def start(self) -> None:
        self.task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.task


@pytest.mark.serial  # it times the other tenants' decisions: alone, not beside another worker's test
async def test_a_gpuscaler_whose_evaluation_raises_leaves_the_other_tenants_on_time(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, monkeypatch: pytest.MonkeyPatch
) -> None:
    cure = plant_zero_milli_target(monkeypatch)
    for ns in (POISONED_NS, HEALTHY_NS):
        await namespace(kube_sim, ns)
    await kube_sim.create(deployment("poisoned", 1, POISONED_NS))
    await kube_sim.create(deployment("steady", 2, HEALTHY_NS))
    await kube_sim.create(deployment("blind", 1, HEALTHY_NS))
    poisoned_metrics = [{"name": "gpu_util", "target": POISONED_TARGET}]
    await kube_sim.create(gpuscaler("poisoned", "poisoned", namespace=POISONED_NS, metrics=poisoned_metrics))
    await kube_sim.create(gpuscaler("steady", "steady", namespace=HEALTHY_NS))
    # No metrics ever come for this one: only the tick can raise it to its fallback.
    fallback = {"afterSeconds": FALLBACK_AFTER_S, "replicas": 3}
    await kube_sim.create(gpuscaler("blind", "blind", namespace=HEALTHY_NS, fallback=fallback))
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    poisoned_key = subjects.WorkloadKey(POISONED_NS, "Deployment", "poisoned")

    def poisoned() -> dict[str, Any]:
        return kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", "poisoned", POISONED_NS)

    flood = Flood(
        nats_client, "poisoned", POISONED_NS, await running_pods(kube_sim, "poisoned", 1, POISONED_NS)
    )
    with capture_logs() as logs:
        async with running_decider(settings) as running, watch_decisions(nats_client) as watch:
            flood.start()
            started = time.monotonic()
            await eventually(lambda: len(running.decider.workloads) == 3, what="the three GPUScalers listed")
            # The poisoned one is first in the tick's walk: before the fix, its exception ended the walk.
            assert next(iter(running.decider.workloads)) == poisoned_key

            # The other tenant: a decision on its metrics, and its fallback from the tick, on time.
            steady_pods = await running_pods(kube_sim, "steady", 2, HEALTHY_NS)
            await publish_metrics(
                nats_client, metrics_message("steady", 83.0, 2, namespace=HEALTHY_NS, pods=steady_pods)
            )

            def decided(name: str) -> Any:
                return next((d for d in watch.decisions if d.name == name), None)

            steady = await eventually(lambda: decided("steady"), ON_TIME_S, "steady's decision")
            assert (steady.from_replicas, steady.to_replicas) == (2, 3)
            blind = await eventually(lambda: decided("blind"), ON_TIME_S, "blind's fallback decision")
            assert (blind.from_replicas, blind.to_replicas) == (1, 3)
            assert "fallback to 3" in blind.reason
            assert time.monotonic() - started < FALLBACK_AFTER_S + ON_TIME_S
            assert all(d.namespace == HEALTHY_NS for d in watch.decisions)

            # The poisoned one fails visibly, on its own status: Ready and AbleToScale False, one Warning.
            await eventually(
                lambda: conditions_of(poisoned()).get("AbleToScale", {}).get("reason") == "FailedEvaluation",
                what="the poisoned GPUScaler's condition",
            )
            conditions = conditions_of(poisoned())
            assert (conditions["Ready"]["status"], conditions["Ready"]["reason"]) == (
                "False",
                "FailedEvaluation",
            )
            assert "ZeroDivisionError" in conditions["AbleToScale"]["message"]
            warnings = await eventually(
                lambda: events_in(kube_sim, POISONED_NS, "FailedEvaluation"), what="the Warning Event"
            )
            assert [e["type"] for e in warnings] == ["Warning"]
            assert warnings[0]["regarding"]["name"] == "poisoned"
            assert events_in(kube_sim, HEALTHY_NS, "FailedEvaluation") == []
            assert (
                conditions_of(kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", "steady", HEALTHY_NS))[
                    "Ready"
                ]["status"]
                == "True"
            )

            # Bounded: every failure is counted, but the status is written once, not per message.
            def errors(stage: str) -> float:
                return running.metric("gpuscale_decider_evaluation_errors_total", stage=stage)

            await eventually(lambda: errors("message") >= 20, what="failures on messages counted")
            version = poisoned()["metadata"]["resourceVersion"]
            seen = running.metric("gpuscale_messages_in_total", kind="metrics")
            await eventually(
                lambda: running.metric("gpuscale_messages_in_total", kind="metrics") >= seen + 10,
                what="ten more poisoned messages",
            )
            # No more messages: the tick evaluates it (its metrics are fresh for the 30 s window).
            await flood.stop()
            await eventually(lambda: errors("tick") >= 2, what="failures on ticks counted")
            # Ten messages and two ticks failed since (a write is queued at once): none was written.
            await holds_for(
                lambda: poisoned()["metadata"]["resourceVersion"] == version, 0.5, what="no status rewrite"
            )

            # Cured: the next evaluation (a tick's) clears the condition.
            cure()
            await eventually(
                lambda: conditions_of(poisoned()).get("Ready", {}).get("status") == "True",
                what="the condition cleared",
            )
            assert conditions_of(poisoned())["AbleToScale"]["reason"] != "FailedEvaluation"
            assert not running.task.done()
        await flood.stop()

    failed = [e for e in logs if e.get("event") == "evaluation_failed"]
    assert len(failed) == 1, f"logged once, not per message or tick: {len(failed)}"
    assert failed[0]["gpuscaler"] == f"{POISONED_NS}/poisoned"
    assert [e["gpuscaler"] for e in logs if e.get("event") == "evaluation_recovered"] == [
        f"{POISONED_NS}/poisoned"
    ]
    assert not [e for e in logs if e.get("event") == "tick_failed"]
