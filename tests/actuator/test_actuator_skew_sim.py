"""Rolling upgrades: the actuator converges to desired counts written by deciders
one version newer and one older (real nats-server and JetStream KV, kube-sim).

A newer decider adds fields at every level of a desired entry (a decision); an older
one leaves out the optional ``api_version`` (apps/v1 then). Either is applied, its
outcome published, and each unknown name counted once; nothing is rejected.
"""

from __future__ import annotations

import time

import pytest

from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.wire import Decision
from gpuscale_kubesim import KubeSim

from ..skew import counted, golden, newer, newer_names, older, pack, restamp
from .actuator_harness import publish_raw, running_actuator, settings_for, watch_actions
from .kube_fixtures import seed
from .test_actuator_service_sim import replicas_of

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("variant", ["newer", "older"])
async def test_a_decision_from_another_decider_version_is_applied(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, variant: str
) -> None:
    await seed(kube_sim, "Deployment", "bert", 1)  # the workload and its GPUScaler default/bert
    base = golden("decisions")  # default/Deployment/bert, 1 -> 3
    payload = newer(base, Decision) if variant == "newer" else older(base, Decision)
    payload = restamp(payload, time.time())
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        key = subjects.desired_key(subjects.WorkloadKey("default", "Deployment", "bert"))
        await publish_raw(nats_client, key, pack(payload))
        action = await actions.wait_for(payload["id"])
        assert action.outcome in (
            "applied",
            "conflict_retried",
        )  # kube-sim may bump the resourceVersion first
        assert (action.replicas_before, action.replicas_after) == (1, 3)
        assert await replicas_of(kube_sim) == 3
        assert counted(actuator, "gpuscale_messages_rejected") == {}
        expected = newer_names(base, Decision) if variant == "newer" else set()
        assert counted(actuator, "gpuscale_messages_unknown_fields") == dict.fromkeys(expected, 1.0)
