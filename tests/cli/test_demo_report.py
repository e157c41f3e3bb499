"""The demo's report: reaction time and violations, from a recorded run."""

from __future__ import annotations

from gpuscale_cli.demo.report import (
    ActionRecord,
    DecisionRecord,
    Limits,
    RunRecord,
    TimelinePoint,
    reaction_s,
    summary,
    violations,
)


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


def test_summary_has_the_documented_fields() -> None:
    doc = summary(run([point(0, 30), point(20, 90)], [applied(25, 1, 2)]), 120.0)
    assert {"profile", "duration_s", "reaction_s", "timeline", "decisions", "actions", "violations"} <= set(
        doc
    )
    assert doc["timeline"][0] == {"t": 0, "load": 30, "replicas": 1, "desired": None, "gpu_util_avg": 50.0}
    assert doc["violations"] == []
