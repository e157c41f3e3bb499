"""The actuator applies no decision its target's GPUScaler does not allow, and
one failing target never holds up another,
against kube-sim and a real nats-server."""

from __future__ import annotations

import time
from typing import Any

import pytest
from msgspec.structs import replace  # the wire messages are msgspec Structs

from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.policy import parse_gpuscaler
from gpuscale.wire import Decision
from gpuscale_actuator.core.admit import Cause, admit
from gpuscale_kubesim import KubeSim

from ..waiting import eventually
from .actuator_harness import WRITTEN, decision, publish, running_actuator, settings_for, watch_actions
from .kube_fixtures import policy_for, seed, workload

pytestmark = pytest.mark.integration


def replicas(sim: KubeSim, name: str) -> int:
    return int(sim.get("apps/v1", "Deployment", name)["spec"]["replicas"])


HOSTILE = [
    (
        "a billion replicas",
        lambda d: replace(d, to_replicas=10**9),
        "out_of_bounds",
        "outside GPUScaler default/victim's [1, 5]",
    ),
    ("above maxReplicas", lambda d: replace(d, to_replicas=6), "out_of_bounds", "[1, 5]"),
    ("below minReplicas", lambda d: replace(d, to_replicas=0), "out_of_bounds", "[1, 5]"),
    (
        "a Deployment no GPUScaler targets",
        lambda d: replace(d, name="orphan", inputs={}),
        "no_policy",
        "no valid GPUScaler targets",
    ),
    (
        "a path segment in the name",
        lambda d: replace(d, name="ghost/../victim", inputs={}),
        "invalid_target",
        "not a DNS-1123 subdomain",
    ),
    (
        "a query in the name",
        lambda d: replace(d, name="victim?x=1", inputs={}),
        "invalid_target",
        "not a DNS-1123 subdomain",
    ),
    (
        "a fragment in the name",
        lambda d: replace(d, name="victim#frag", inputs={}),
        "invalid_target",
        "not a DNS-1123 subdomain",
    ),
    (
        "another target's GPUScaler",
        lambda d: replace(d, inputs={"gpuscaler": "default/bystander-policy"}),
        "other_policy",
        "does not target",
    ),
    (
        "a bad apiVersion",
        lambda d: replace(d, api_version="apps/../v1"),
        "invalid_target",
        "not group/version",
    ),
]


async def test_hostile_decisions_are_refused_before_any_api_call(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "victim", 2, min_replicas=1, max_replicas=5)
    await kube_sim.create(workload("Deployment", "orphan", 1))  # no GPUScaler targets it
    await kube_sim.create(workload("Deployment", "bystander", 1))
    bystander_policy = policy_for("Deployment", "bystander")
    bystander_policy["metadata"]["name"] = "bystander-policy"
    await kube_sim.create(bystander_policy)
    patches = kube_sim.faults.add("PATCH", r"/deployments/", delay_s=0.0, count=None)  # counts every PATCH
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        for name, change, _, words in HOSTILE:  # one by one: several write the same workload's entry
            d: Decision = change(decision("victim", from_=2, to=3))
            await publish(nats_client, d)
            action = await actions.wait_for(d.id)
            assert action.outcome == "refused", (name, action)
            assert words in (action.error or ""), (name, action.error)
        for cause in {c for _, _, c, _ in HOSTILE}:
            expected = sum(1 for _, _, c, _ in HOSTILE if c == cause)
            assert actuator.metric("gpuscale_actuator_refused_total", cause=cause) == expected, cause
        assert patches.hits == 0
        assert [replicas(kube_sim, n) for n in ("victim", "orphan", "bystander")] == [2, 1, 1]
        # ... and the pipeline still works: a decision the policy allows is applied.
        good = decision("victim", from_=2, to=3)
        await publish(nats_client, good)
        assert (await actions.wait_for(good.id)).outcome in WRITTEN
    assert replicas(kube_sim, "victim") == 3


async def test_a_paused_gpuscaler_is_honoured_by_the_actuator_too(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2, paused=True)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings):
        d = decision("bert", from_=2, to=3)
        await publish(nats_client, d)
        action = await actions.wait_for(d.id)
    assert (action.outcome, action.error) == ("refused", "GPUScaler default/bert is paused")
    assert replicas(kube_sim, "bert") == 2


async def test_a_failing_target_does_not_hold_up_a_healthy_one(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    """Finding 5: behind a target whose PATCH kept failing, a healthy scale-up
    waited 58 s. Now each target is its own queue."""
    await seed(kube_sim, "Deployment", "broken", 1)
    await seed(kube_sim, "Deployment", "healthy", 1)
    kube_sim.faults.add("PATCH", r"/deployments/broken", status=503, count=None)
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, max_in_flight=4)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        stuck = decision("broken", from_=1, to=2)
        await publish(nats_client, stuck)
        await eventually(
            lambda: actuator.metric("gpuscale_actuator_kube_retries_total", error="ServerError") >= 1,
            what="the broken target failing",
        )
        started = time.monotonic()
        ok = decision("healthy", from_=1, to=2)
        await publish(nats_client, ok)
        assert (await actions.wait_for(ok.id, timeout_s=15)).outcome in WRITTEN
        took = time.monotonic() - started
        assert actions.for_decision(stuck.id) == []  # still being retried, not reported
    assert replicas(kube_sim, "healthy") == 2
    assert took < 10, took  # not behind the broken target's retries and backoff (which take minutes)


def scaler(name: str = "bert", **spec: Any) -> Any:
    body = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bert"},
        "minReplicas": 2,
        "maxReplicas": 6,
        "metrics": [{"name": "gpu_util", "target": 70}],
        **spec,
    }
    return parse_gpuscaler({"metadata": {"name": name, "namespace": "default"}, "spec": body})


@pytest.mark.parametrize(
    ("name", "to", "scalers", "cause"),
    [
        ("within bounds", 6, [scaler()], None),
        ("at min", 2, [scaler()], None),
        ("one above max", 7, [scaler()], Cause.OUT_OF_BOUNDS),
        ("one below min", 1, [scaler()], Cause.OUT_OF_BOUNDS),
        ("no policy at all", 3, [], Cause.NO_POLICY),
        ("paused", 3, [scaler(paused=True)], Cause.PAUSED),
    ],
)
def test_admit(name: str, to: int, scalers: list[Any], cause: Cause | None) -> None:
    refusal = admit(decision("bert", from_=3, to=to), scalers)
    assert (refusal.cause if refusal else None) == cause, (name, refusal)


def test_admit_follows_the_named_gpuscaler_when_several_target_one_workload() -> None:
    first, second = scaler(), scaler("bert-copy", maxReplicas=3)
    d = replace(decision("bert", from_=3, to=5), inputs={"gpuscaler": "default/bert"})
    assert admit(d, [first, second]) is None
    refusal = admit(replace(d, inputs={"gpuscaler": "default/bert-copy"}), [first, second])
    assert refusal is not None
    assert refusal.cause is Cause.OUT_OF_BOUNDS
    refusal = admit(replace(d, inputs={}), [first, second])
    assert refusal is not None
    assert refusal.cause is Cause.SEVERAL_POLICIES


def test_decision_subjects_escape_hostile_names() -> None:
    # The subject cannot be bent by the name either: escaped into one token.
    assert (
        subjects.decisions(subjects.WorkloadKey("default", "Deployment", "ghost/../victim")).count(".") == 5
    )
