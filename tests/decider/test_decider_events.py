"""Events on the GPUScaler: which the pure core decides, and how the writer limits them.

The model is HPA's: ``kubectl describe hpa`` lists a ``SuccessfulRescale`` per
change and a Warning per failure (``FailedGetScale``, ``FailedComputeMetricsReplicas``);
client-go's recorder drops repeats and limits each object to a burst of 25
Events, one more every 5 minutes.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from gpuscale.kube import new_api_client
from gpuscale_decider.core.events import EventSpec, condition_events, decision_event
from gpuscale_decider.core.reconcile import Memory, Target, reconcile
from gpuscale_decider.core.state import ScalerState
from gpuscale_decider.kubeio import EventLimiter, EventWriter
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpuscaler
from ..waiting import eventually
from .scenario import NOW, SELECTOR, policy, running, seen, step, world


def status(*conditions: tuple[str, str, str]) -> dict[str, Any]:
    return {
        "conditions": [
            {"type": t, "status": s, "reason": r, "message": f"{t} says {r}"} for t, s, r in conditions
        ]
    }


HEALTHY = (
    ("Ready", "True", "GPUScalerReady"),
    ("AbleToScale", "True", "ReadyForNewScale"),
    ("ScalingActive", "True", "ValidMetricFound"),
    ("ScalingLimited", "False", "DesiredWithinRange"),
    ("Paused", "False", "NotPaused"),
    ("Fallback", "False", "FallbackInactive"),
)


def with_condition(base: tuple[tuple[str, str, str], ...], *changed: tuple[str, str, str]) -> dict[str, Any]:
    by_type = {c[0]: c for c in base}
    by_type.update({c[0]: c for c in changed})
    return status(*by_type.values())


def test_a_new_healthy_gpuscaler_records_nothing() -> None:
    assert condition_events(None, status(*HEALTHY)) == ()


def test_a_new_gpuscaler_in_trouble_records_a_warning_per_troubled_condition() -> None:
    new = with_condition(
        HEALTHY,
        ("Ready", "False", "ConflictingController"),
        ("AbleToScale", "False", "ConflictingController"),
    )
    (event,) = condition_events(None, new)
    # Ready mirrors AbleToScale: one Event says it.
    assert (event.type, event.reason) == ("Warning", "ConflictingController")
    assert event.message == "AbleToScale is False: AbleToScale says ConflictingController"
    assert event.action == "Evaluate"


def test_a_status_change_is_an_event_either_way() -> None:
    blind = with_condition(HEALTHY, ("ScalingActive", "False", "FailedGetGPUMetrics"))
    (lost,) = condition_events(status(*HEALTHY), blind)
    assert (lost.type, lost.reason) == ("Warning", "FailedGetGPUMetrics")
    (back,) = condition_events(blind, status(*HEALTHY))
    assert (back.type, back.reason) == ("Normal", "ValidMetricFound")
    assert back.message.startswith("ScalingActive is True")


def test_a_new_reason_while_in_trouble_is_an_event_a_new_reason_while_fine_is_not() -> None:
    conflicting = with_condition(HEALTHY, ("AbleToScale", "False", "ConflictingController"))
    gone = with_condition(HEALTHY, ("AbleToScale", "False", "FailedGetScale"))
    assert [e.reason for e in condition_events(conflicting, gone)] == ["FailedGetScale"]
    # Stabilization and cooldown reasons come and go with every evaluation: not Events.
    stabilized = with_condition(HEALTHY, ("AbleToScale", "True", "ScaleDownStabilized"))
    assert condition_events(status(*HEALTHY), stabilized) == ()


def test_pausing_is_news_not_trouble() -> None:
    paused = with_condition(
        HEALTHY,
        ("ScalingActive", "False", "ScalingDisabled"),
        ("Paused", "True", "PausedBySpec"),
    )
    events = condition_events(status(*HEALTHY), paused)
    assert {(e.type, e.reason) for e in events} == {("Normal", "ScalingDisabled"), ("Normal", "PausedBySpec")}


def test_the_fallback_in_force_is_a_warning() -> None:
    falling = with_condition(
        HEALTHY, ("ScalingActive", "False", "FailedGetGPUMetrics"), ("Fallback", "True", "FallbackActive")
    )
    events = condition_events(
        with_condition(HEALTHY, ("ScalingActive", "False", "FailedGetGPUMetrics")), falling
    )
    assert [(e.type, e.reason) for e in events] == [("Warning", "FallbackActive")]


def test_a_decision_reads_like_hpas_successful_rescale() -> None:
    up = decision_event(1, 2, "gpu_util 23/20: ceil(1 × 1.15) = 2", "d-1")
    assert (up.type, up.reason, up.action) == ("Normal", "ScaleUpDecided", "Decide")
    assert up.message == "New size: 2 (from 1); reason: gpu_util 23/20: ceil(1 × 1.15) = 2; decision d-1"
    assert decision_event(4, 3, "r", "d-2").reason == "ScaleDownDecided"


# --- the step -------------------------------------------------------------------------


def test_the_step_says_which_conditions_changed_with_the_status_it_writes() -> None:
    first = step(policy(), 2, running(2, 70))
    assert first.status is not None
    assert first.events == ()  # healthy on first sight
    views, observation = world(running(2, 70), received_at=NOW + 1)
    conflict = reconcile(
        first.memory,
        policy(),
        Target(2, SELECTOR, conflict="HorizontalPodAutoscaler ml/bert"),
        views,
        observation,
        NOW + 2,
    )
    assert [(e.type, e.reason) for e in conflict.events] == [("Warning", "ConflictingController")]
    # Nothing changed since: no status to write, no Event.
    again = reconcile(
        conflict.memory,
        policy(),
        Target(2, SELECTOR, conflict="HorizontalPodAutoscaler ml/bert"),
        views,
        observation,
        NOW + 3,
    )
    assert (again.status, again.events) == (None, ())


def test_a_restarted_decider_judges_changes_against_the_stored_status() -> None:
    before = step(policy(), 2, running(2, 70))
    assert before.status is not None
    # A new process: its memory starts from the object's status as listed.
    restarted = Memory(seen(), replace(before.memory.written, signature=None))
    views, observation = world(running(2, 70), received_at=NOW + 4)
    after = reconcile(restarted, policy(), Target(2, SELECTOR), views, observation, NOW + 5)
    assert after.events == ()
    assert after.status is None  # equal to what is stored: nothing to write


def test_a_paused_gpuscaler_shows_it_in_its_conditions() -> None:
    s = step(policy(paused=True), 3, running(3, 90), state=ScalerState(first_seen=NOW - 60))
    assert s.status is not None
    conditions = {c["type"]: (c["status"], c["reason"]) for c in s.status["conditions"]}
    assert conditions["Paused"] == ("True", "PausedBySpec")
    assert conditions["ScalingActive"] == ("False", "ScalingDisabled")
    assert conditions["Ready"] == ("True", "GPUScalerReady")


def test_the_fallback_in_force_shows_in_its_condition() -> None:
    s = step(
        policy(fallback={"afterSeconds": 30, "replicas": 4}),
        2,
        running(2, 70),
        state=ScalerState(first_seen=NOW - 300, last_fresh_metrics=NOW - 120),
        no_metrics=True,
    )
    assert s.status is not None
    conditions = {c["type"]: (c["status"], c["reason"]) for c in s.status["conditions"]}
    assert conditions["Fallback"] == ("True", "FallbackActive")
    assert conditions["ScalingActive"] == ("False", "FailedGetGPUMetrics")
    assert ("Warning", "FallbackActive") in [(e.type, e.reason) for e in s.events]


# --- the writer's limits --------------------------------------------------------------


def event(reason: str = "FailedGetScale", message: str = "gone") -> EventSpec:
    return EventSpec("Warning", reason, message, "Evaluate")


def test_an_identical_event_within_ten_minutes_is_dropped() -> None:
    limiter = EventLimiter()
    key = ("ml", "bert")
    assert limiter.admit(key, event(), NOW) == "recorded"
    assert limiter.admit(key, event(), NOW + 599) == "duplicate"
    assert limiter.admit(key, event(message="other"), NOW + 1) == "recorded"
    assert limiter.admit(("ml", "llama"), event(), NOW + 1) == "recorded"
    assert limiter.admit(key, event(), NOW + 601) == "recorded"


def test_each_object_gets_a_burst_of_25_then_one_every_5_minutes() -> None:
    limiter = EventLimiter()
    key = ("ml", "bert")
    verdicts = [limiter.admit(key, event(message=str(i)), NOW) for i in range(30)]
    assert verdicts.count("recorded") == 25
    assert verdicts[25:] == ["rate_limited"] * 5
    # Another GPUScaler is not held back by this one.
    assert limiter.admit(("ml", "llama"), event(), NOW) == "recorded"
    assert limiter.admit(key, event(message="later"), NOW + 299) == "rate_limited"
    assert limiter.admit(key, event(message="later still"), NOW + 301) == "recorded"


def test_a_cooldown_is_a_rule_not_trouble_ready_stays_true_and_no_warning() -> None:
    first = step(policy(), 2, running(2, 70))
    views, observation = world(running(2, 140), received_at=NOW + 1)
    cooling = reconcile(
        Memory(replace(first.memory.state, last_scale_up=NOW - 20), first.memory.written),
        policy(behavior={"scaleUp": {"cooldownSeconds": 60}, "scaleDown": {"stabilizationWindowSeconds": 0}}),
        Target(2, SELECTOR),
        views,
        observation,
        NOW + 2,
    )
    assert cooling.status is not None
    conditions = {c["type"]: (c["status"], c["reason"]) for c in cooling.status["conditions"]}
    assert conditions["AbleToScale"] == ("False", "BackoffUpscale")
    assert conditions["Ready"] == ("True", "GPUScalerReady")
    assert [e.type for e in cooling.events] == ["Normal"]


# --- the writer against an API server ---------------------------------------------------


@pytest.mark.integration
async def test_the_writer_records_events_on_the_gpuscaler_and_says_once_when_forbidden(
    tmp_path: Path,
) -> None:
    with capture_logs() as logs:
        await _write_allowed_then_refused(tmp_path)
    forbidden = [e for e in logs if e.get("event") == "event_write_forbidden"]
    assert len(forbidden) == 1, "said once, not per Event"
    assert "events" in forbidden[0]["missing_permission"]


async def _write_allowed_then_refused(tmp_path: Path) -> None:
    rules = [{"apiGroups": ["gpuscale.io"], "resources": ["gpuscalers"], "verbs": ["get", "list"]}]
    sim = KubeSim(port=0, scenario="empty", tokens={"admin-token": None, "no-events": rules})
    await sim.start()
    api = await new_api_client(Path(sim.kubeconfig_path))
    refused_api = await new_api_client(sim.write_kubeconfig(tmp_path / "refused", token="no-events"))  # noqa: S106 - a kube-sim test token
    try:
        scaler = await sim.create(gpuscaler("bert"))
        uid = scaler["metadata"]["uid"]
        results: list[str] = []
        writer = EventWriter(api, count=results.append, identity="decider-0")
        stop = asyncio.Event()
        task = asyncio.create_task(writer.run(stop))
        writer.record("default", "bert", uid, [decision_event(1, 2, "gpu_util 90/70", "d-1")] * 2)
        await eventually(lambda: len(results) == 2, what="both handled")
        assert results == ["recorded", "duplicate"]
        (event,) = sim.list_objects("events.k8s.io/v1", "Event", "default")
        assert event["regarding"] == {
            "apiVersion": "gpuscale.io/v1alpha1",
            "kind": "GPUScaler",
            "name": "bert",
            "namespace": "default",
            "uid": uid,
        }
        assert (event["reason"], event["reportingController"], event["action"]) == (
            "ScaleUpDecided",
            "gpuscale.io/decider",
            "Decide",
        )
        assert event["reportingInstance"] == "decider-0"

        refused: list[str] = []
        denied = EventWriter(refused_api, count=refused.append)
        denied_task = asyncio.create_task(denied.run(stop))
        denied.record(
            "default", "bert", uid, [decision_event(1, 2, "a", "d-2"), decision_event(2, 3, "b", "d-3")]
        )
        await eventually(lambda: refused == ["failed", "failed"], what="both refused")
        stop.set()
        await asyncio.gather(task, denied_task)
    finally:
        await api.close()
        await refused_api.close()
        await sim.stop()
