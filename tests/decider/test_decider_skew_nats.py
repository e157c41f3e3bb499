"""Rolling upgrades: the decider reads metrics from aggregators one version
newer and one older, through its real subscription (nats-server, kube-sim).

A newer aggregator sends metric names this decider does not know (say a
latency percentile) beside gpu_util, and fields at every level: the decider
decides on gpu_util, counts each unknown name once, rejects nothing. An older
one sends no optional field. A metric a GPUScaler asks for that a message
lacks is missing data (no fresh value for it), not a rejected message.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gpuscale import natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.wire import WorkloadMetrics
from gpuscale_kubesim import KubeSim

from ..skew import NEWER_METRICS, counted, golden, newer, newer_names, older, pack, restamp
from ..waiting import eventually
from .decider_harness import (
    deployment,
    gpuscaler,
    running_decider,
    running_pods,
    settings_for,
    watch_decisions,
    write_policies,
)

pytestmark = pytest.mark.integration

KEY = subjects.WorkloadKey("default", "Deployment", "bert")


def _variant(name: str, pod: str) -> dict[str, Any]:
    """The golden metrics (gpu_util 43.5 on 1 fresh pod, 1 stale) as ``name``'s
    aggregator sends them, the fresh pod renamed to the target's real pod."""
    base = golden("metrics")
    if name == "newer":
        base = newer(base, WorkloadMetrics)
    elif name == "older":
        base = older(base, WorkloadMetrics)
    base["pods"][0]["pod"] = pod
    return base


@pytest.mark.parametrize("variant", ["newer", "older"])
async def test_metrics_from_another_aggregator_version_lead_to_a_decision(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path, variant: str
) -> None:
    await kube_sim.create(deployment("bert", 1))
    policies = write_policies(
        tmp_path / "policies.yaml",
        gpuscaler("bert", "bert", metrics=[{"name": "gpu_util", "target": 20}]),
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    async with running_decider(settings) as running, watch_decisions(nats_client) as decisions:
        (pod,) = await running_pods(kube_sim, "bert", 1)
        payload = pack(restamp(_variant(variant, pod), time.time()))
        for _ in range(3):  # the same message again changes nothing: one decision, names counted once
            await nats_client.publish(subjects.metrics(KEY), payload)
        await natsio.flush(nats_client)
        decision = await decisions.next()
        # docs/ARCHITECTURE.md#algorithm's worked example, scaled: 1 replica at 43.5 against 20 -> ceil(1 × 2.17) = 3.
        assert (decision.from_replicas, decision.to_replicas) == (1, 3)
        assert decision.reason.startswith("gpu_util 43.5 over target 20")
        assert not any(metric in decision.reason for metric in NEWER_METRICS)
        assert decision.inputs["averages"]["gpu_util"] == 43.5
        assert set(decision.inputs["averages"]).isdisjoint(NEWER_METRICS)
        await eventually(lambda: running.metric("gpuscale_messages_in_total", kind="metrics") == 3)
        assert counted(running, "gpuscale_messages_rejected") == {}
        expected = newer_names(golden("metrics"), WorkloadMetrics) if variant == "newer" else set()
        assert counted(running, "gpuscale_messages_unknown_fields") == dict.fromkeys(expected, 1.0)
        assert {
            "averages.time_to_first_token_p90_s",
            "pods.values.prefix_cache_hit_ratio",
        } <= expected or variant == "older"


async def test_a_metric_the_policy_asks_for_and_the_message_lacks_is_missing_data(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    """An older aggregator knows no sm_active (say): the policy's other metric still decides."""
    await kube_sim.create(deployment("bert", 1))
    policies = write_policies(
        tmp_path / "policies.yaml",
        gpuscaler(
            "bert",
            "bert",
            metrics=[{"name": "gpu_util", "target": 20}, {"name": "sm_active", "target": 50}],
        ),
    )
    (pod,) = await running_pods(kube_sim, "bert", 1)
    payload = _variant("older", pod)
    del payload["averages"]["sm_active"]
    for pod in payload["pods"]:
        del pod["values"]["sm_active"]
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    async with running_decider(settings) as running, watch_decisions(nats_client) as decisions:
        await nats_client.publish(subjects.metrics(KEY), pack(restamp(payload, time.time())))
        await natsio.flush(nats_client)
        decision = await decisions.next()
        assert (decision.from_replicas, decision.to_replicas) == (1, 3)
        assert decision.reason.startswith("gpu_util 43.5 over target 20")
        assert decision.inputs["proposals"] == {"gpu_util": 3, "sm_active": None}
        assert counted(running, "gpuscale_messages_rejected") == {}
