"""The demo's report: reaction time and violations, from a recorded run."""

from __future__ import annotations

import re
from pathlib import Path

from gpuscale_cli.demo.report import (
    ActionRecord,
    DecisionRecord,
    Followed,
    Limits,
    Provisioning,
    RunRecord,
    TimelinePoint,
    exact_points,
    needed_replicas,
    provisioning,
    reaction_s,
    record_provisioning,
    summary,
    summary_lines,
    violations,
)

WORKLOAD_FIELDS = (
    "workload", "metric", "target", "limits", "reaction_s", "time_to_adequate_s", "adequacy_episodes",
    "underprovisioned_gpu_s", "overprovisioned_gpu_s", "scale_events", "max_overshoot_replicas",
    "oscillations", "violations", "timeline", "decisions", "actions",
)  # fmt: skip


def point(
    t: float, load: float, replicas: int = 1, desired: int | None = None, util: float | None = 50.0
) -> TimelinePoint:
    return TimelinePoint(t, load, replicas, desired, util)


def applied(t: float, before: int, after: int, outcome: str = "applied") -> ActionRecord:
    return ActionRecord(t, 1000 + t, f"d-{t}", outcome, before, after, None)


def run(
    timeline: list[TimelinePoint], actions: list[ActionRecord], limits: Limits | None = None
) -> RunRecord:
    record = RunRecord("step", limits or Limits(1, 10))
    record.timeline.extend(timeline)
    record.actions.extend(actions)
    return record


def test_reaction_is_first_step_to_first_scale_up_patch() -> None:
    record = run(
        [point(0, 30), point(1, 30), point(20, 90), point(21, 90)], [applied(5, 2, 1), applied(48.5, 1, 2)]
    )
    assert reaction_s(record) == 28.5


def test_no_step_or_no_scale_up_gives_no_reaction() -> None:
    assert reaction_s(run([point(0, 30), point(10, 32)], [applied(5, 1, 2)])) is None
    assert (
        reaction_s(run([point(0, 30), point(10, 90)], [applied(12, 2, 1), applied(13, 1, 1, "failed")]))
        is None
    )


def test_replicas_outside_limits_are_violations() -> None:
    record = run([point(0, 30, replicas=1), point(1, 30, replicas=11)], [], Limits(1, 10))
    record.decisions.append(DecisionRecord(2, 1002, 10, 12, "too many", "d-x"))
    found = violations(record)
    assert len(found) == 2
    assert "11 replicas outside [1, 10]" in found[0]
    assert "to 12" in found[1]


def test_change_inside_cooldown_is_a_violation_only_in_the_same_direction() -> None:
    record = run(
        [],
        [applied(10, 1, 2), applied(20, 2, 1), applied(40, 1, 3), applied(100, 3, 5)],
        Limits(1, 10, scale_up_cooldown_s=60),
    )
    found = violations(record)
    assert found == ["t=40s: scale-up 30.0s after the last one, inside its 60s cooldown"]


def test_summary_is_the_run_then_a_list_of_workloads_each_in_one_shape() -> None:
    record = run([point(0, 30), point(20, 90)], [applied(25, 1, 2)])
    doc = summary("step", 120.0, [Followed("default/bert", "gpu_util", 70.0, record)])
    assert set(doc) == {"profile", "duration_s", "needed_per_pod", "workloads"}  # no workload's fields here
    (w,) = doc["workloads"]
    assert set(w) == set(WORKLOAD_FIELDS)
    assert (w["workload"], w["metric"], w["target"]) == ("default/bert", "gpu_util", 70.0)
    assert w["timeline"][0] == {
        "t": 0,
        "load": 30,
        "replicas": 1,
        "desired": None,
        "gpu_util_avg": 50.0,
        "metric_avg": None,
        "requests_waiting_avg": None,
        "recent_avg": None,
    }
    assert w["violations"] == []
    # 90 needs 2 at 70 per pod; 1 requested from t=20 until the PATCH at 25.
    assert (w["time_to_adequate_s"], w["underprovisioned_gpu_s"]) == (5.0, 5.0)


def test_two_workloads_are_two_entries_and_none_is_repeated_at_the_top() -> None:
    one = Followed("default/llm-queue", "requests_waiting", 4.0, run([point(0, 30)], []))
    two = Followed("default/llm-util", "gpu_util", 70.0, run([point(0, 30)], []))
    doc = summary("llm", 60.0, [one, two])
    assert [w["workload"] for w in doc["workloads"]] == ["default/llm-queue", "default/llm-util"]
    assert "timeline" not in doc


def test_a_decision_carries_the_value_it_used_and_what_that_value_is() -> None:
    record = run([point(0, 30)], [])
    record.decisions.append(
        DecisionRecord(
            3.0, 1003.0, 1, 4, "gpu_util: estimated demand 237.5 ...", "d-1", 237.5, "estimated demand"
        )
    )
    (w,) = summary("step", 10.0, [Followed("default/bert", "gpu_util", 70.0, record)])["workloads"]
    assert w["decisions"][0]["value"] == 237.5
    assert w["decisions"][0]["basis"] == "estimated demand"
    lines = "\n".join(
        summary_lines(summary("step", 10.0, [Followed("default/bert", "gpu_util", 70.0, record)]), "/tmp/x")
    )
    assert "1 -> 4 [estimated demand 237.5]" in lines


def test_docs_define_every_field_of_the_report() -> None:
    """docs/DEMO.md has a row for each field the report writes, in the run, a workload,
    a timeline point, a decision and an action."""
    doc = (Path(__file__).parents[2] / "docs" / "DEMO.md").read_text()
    record = run([point(0, 30), point(5, 200)], [applied(1, 1, 2)])  # short of 3 from 5 s
    record.decisions.append(DecisionRecord(1.0, 1001.0, 1, 2, "r", "d-1", 80.0, "window mean"))
    full = summary("step", 10.0, [Followed("default/bert", "gpu_util", 70.0, record)])
    (w,) = full["workloads"]
    fields = {
        *full,
        *w,
        *w["timeline"][0],
        *w["decisions"][0],
        *w["actions"][0],
        *w["limits"],
        *w["adequacy_episodes"][0],
    }
    defined = set(re.findall(r"^\| `([a-z_.]+)`", doc, re.MULTILINE))
    missing = {f for f in fields if f not in defined and not any(d.endswith("." + f) for d in defined)}
    assert not missing, f"docs/DEMO.md does not define: {sorted(missing)}"


# --- provisioning: requested replicas against what the load needs -------------------

STEP = [(float(t), 30.0 if t < 15 else 200.0) for t in range(120)]  # 200 needs 3 at 70 per pod


def replicas_at(changes: dict[int, int]) -> list[int]:
    """Requested replicas per second from {t: new count}."""
    out, current = [], 1
    for t in range(120):
        current = changes.get(t, current)
        out.append(current)
    return out


def step_run(changes: dict[int, int]) -> Provisioning:
    return provisioning([(t, load, r) for (t, load), r in zip(STEP, replicas_at(changes), strict=True)])


def test_needed_replicas_is_load_over_per_pod_within_limits() -> None:
    assert [needed_replicas(x, 70.0) for x in (0, 30, 70, 70.01, 140, 200)] == [1, 1, 1, 2, 2, 3]
    assert needed_replicas(200, 70.0, max_replicas=2) == 2
    assert needed_replicas(10, 70.0, min_replicas=2) == 2


def test_the_staircase_of_the_issue() -> None:
    """1 → 2 at t+25 s → 3 at t+47 s → 4 at t+62 s after a step at t=15 that needs 3."""
    p = step_run({40: 2, 62: 3, 77: 4})
    assert p.time_to_adequate_s == 47.0
    assert p.episodes == ((15.0, 47.0),)
    assert p.underprovisioned_gpu_s == 2 * 25 + 1 * 22
    assert p.overprovisioned_gpu_s == 1 * (119 - 77)  # the last point holds for no time
    assert p.scale_events == 3
    assert p.max_overshoot_replicas == 1
    assert p.oscillations == 0


def test_one_decision_to_the_need_has_no_overshoot() -> None:
    p = step_run({20: 3})
    assert (p.time_to_adequate_s, p.underprovisioned_gpu_s, p.overprovisioned_gpu_s) == (5.0, 10.0, 0.0)
    assert (p.scale_events, p.max_overshoot_replicas, p.oscillations) == (1, 0, 0)


def test_flapping_around_the_need_is_oscillation() -> None:
    p = step_run({20: 3, 50: 4, 60: 3, 70: 4, 80: 3})
    assert p.oscillations == 3  # 4→3, 3→4, 4→3 while the need stayed 3
    assert p.max_overshoot_replicas == 1


def test_following_the_need_down_is_not_oscillation() -> None:
    load = [(float(t), 200.0 if t < 60 else 40.0) for t in range(120)]
    requested = [3 if t < 90 else 1 for t in range(120)]
    p = provisioning([(t, x, r) for (t, x), r in zip(load, requested, strict=True)])
    assert (p.oscillations, p.time_to_adequate_s, p.max_overshoot_replicas) == (0, None, 0)
    assert p.overprovisioned_gpu_s == 2 * 30


def test_a_shortfall_open_at_the_end_lasts_until_then_and_gpus_per_pod_scale_the_integrals() -> None:
    p = provisioning([(0.0, 200.0, 1), (10.0, 200.0, 1), (20.0, 200.0, 2)], gpus_per_pod=2)
    assert p.episodes == ((0.0, 20.0),)
    assert p.underprovisioned_gpu_s == 2 * 2 * 10 + 2 * 2 * 10  # short 2 pods of 2 GPUs for 20 s


# --- measured at the events' own times, not the polls' ---------------------------------
# The observer polls the cluster once a second. A step the cluster says began at 14.3 s
# is seen at the 15 s poll, and a PATCH applied at 39.1 s at the 40 s poll: on polls
# alone a time to adequate is off by up to a second at either end (the demo's step read
# 25.04 s where it took 24.8).


def demo_step_run(load_changes: list[tuple[float, float]]) -> RunRecord:
    timeline = [point(t, 30.0 if t < 15 else 200.0, 1 if t < 19 else 2 if t < 40 else 3) for t in range(60)]
    record = run(timeline, [applied(18.8, 1, 2), applied(39.1, 2, 3)])
    record.load_changes.extend(load_changes)
    return record


def test_a_step_and_its_patches_are_measured_at_their_own_times() -> None:
    record = demo_step_run([(0.0, 30.0), (14.3, 200.0)])
    p = record_provisioning(record)
    assert p.time_to_adequate_s == 24.8  # 39.1 - 14.3; the polls say 40 - 15
    assert p.episodes == ((14.3, 24.8),)
    assert reaction_s(record) == 4.5  # 18.8 - 14.3
    # Short 2 pods from 14.3 to 18.8, then 1 until 39.1 (70 GPU-% a pod, one GPU each).
    assert p.underprovisioned_gpu_s == round(2 * 4.5 + 1 * 20.3, 1)


def test_without_level_starts_the_polled_load_stands_and_patches_are_still_exact() -> None:
    """A ramp or a sine has no level start: the step is where a poll saw it."""
    p = record_provisioning(demo_step_run([]))
    assert p.time_to_adequate_s == 24.1  # 39.1 - 15
    assert reaction_s(demo_step_run([])) == 3.8


def test_a_poll_and_an_event_at_the_same_time_take_the_event() -> None:
    record = run(
        [point(0, 30.0), point(10, 30.0, replicas=1), point(20, 200.0, replicas=1)], [applied(10, 1, 3)]
    )
    points = exact_points(record)
    assert points == [(0, 30.0, 1), (10, 30.0, 1), (10, 30.0, 3), (20, 200.0, 1)]
