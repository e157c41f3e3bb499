"""The actuator's pure core, table-style: what to do with a decision."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.wire import Decision
from gpuscale_actuator.core.plan import (
    FAILED_RESCALE,
    SUCCESSFUL_RESCALE,
    Outcome,
    StepKind,
    action_for,
    event_for,
    plan_step,
    too_old_step,
)

NOW = 1_800_000_000.0


def decision(*, id: str = "d-1", from_: int = 2, to: int = 3, age_s: float = 1.0) -> Decision:  # noqa: A002 - reads like the wire field
    return Decision(
        id=id,
        ts=NOW - age_s,
        namespace="default",
        kind="Deployment",
        name="bert",
        from_replicas=from_,
        to_replicas=to,
        reason="gpu_util 83.0 over target 70",
        inputs={},
    )


@dataclass(frozen=True)
class Case:
    name: str
    current: int
    last_id: str | None = None
    recorded: bool = False
    dry_run: bool = False
    attempt: int = 1
    kind: StepKind = StepKind.PATCH
    outcome: Outcome = Outcome.APPLIED
    already_applied: bool = False


CASES = [
    Case("target at from_replicas: patch", current=2),
    Case("second try after a 409: conflict_retried", current=2, attempt=2, outcome=Outcome.CONFLICT_RETRIED),
    Case("target moved: skipped_stale", current=4, kind=StepKind.REPORT, outcome=Outcome.SKIPPED_STALE),
    Case(
        "annotation holds this id: already applied",
        current=3,
        last_id="d-1",
        kind=StepKind.REPORT,
        already_applied=True,
    ),
    Case(
        "KV record holds this id: already applied",
        current=3,
        recorded=True,
        kind=StepKind.REPORT,
        already_applied=True,
    ),
    Case("annotation of another decision: patch", current=2, last_id="d-0"),
    Case(
        "dry run: report only", current=2, dry_run=True, kind=StepKind.REPORT, outcome=Outcome.SKIPPED_DRY_RUN
    ),
    Case(
        "dry run on a moved target: stale wins",
        current=5,
        dry_run=True,
        kind=StepKind.REPORT,
        outcome=Outcome.SKIPPED_STALE,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plan_step(case: Case) -> None:
    step = plan_step(
        decision(),
        current_replicas=case.current,
        last_decision_id=case.last_id,
        already_recorded=case.recorded,
        dry_run=case.dry_run,
        attempt=case.attempt,
    )
    assert step.kind == case.kind
    assert step.outcome == case.outcome
    assert step.already_applied == case.already_applied
    if step.kind == StepKind.PATCH:
        assert step.replicas == 3


@pytest.mark.parametrize(
    ("age_s", "max_age_s", "stale"),
    [(1.0, 60.0, False), (60.0, 60.0, False), (60.5, 60.0, True), (3600.0, 60.0, True), (-5.0, 60.0, False)],
)
def test_decisions_older_than_the_bound_are_stale(age_s: float, max_age_s: float, stale: bool) -> None:
    step = too_old_step(decision(age_s=age_s), NOW, max_age_s)
    assert (step is not None) == stale
    if step is not None:
        assert step.outcome == Outcome.SKIPPED_STALE
        assert "old" in step.why


@given(
    current=st.integers(0, 1000),
    from_=st.integers(0, 1000),
    to=st.integers(0, 1000),
    dry_run=st.booleans(),
    recorded=st.booleans(),
)
def test_only_a_target_at_from_replicas_is_ever_patched(
    current: int, from_: int, to: int, dry_run: bool, recorded: bool
) -> None:
    step = plan_step(
        decision(from_=from_, to=to),
        current_replicas=current,
        last_decision_id=None,
        already_recorded=recorded,
        dry_run=dry_run,
    )
    if step.kind == StepKind.PATCH:
        assert current == from_
        assert not dry_run
        assert not recorded
        assert step.replicas == to


@pytest.mark.parametrize(
    ("outcome", "reason", "type_", "snippet"),
    [
        (Outcome.APPLIED, SUCCESSFUL_RESCALE, "Normal", "New size: 3; reason: gpu_util 83.0 over target 70"),
        (Outcome.CONFLICT_RETRIED, SUCCESSFUL_RESCALE, "Normal", "New size: 3"),
        (Outcome.FAILED, FAILED_RESCALE, "Warning", "error: boom"),
    ],
)
def test_events_use_hpa_wording(outcome: Outcome, reason: str, type_: str, snippet: str) -> None:
    spec = event_for(decision(), outcome, 3, "boom")
    assert spec is not None
    assert (spec.reason, spec.type) == (reason, type_)
    assert snippet in spec.message


@pytest.mark.parametrize("outcome", [Outcome.SKIPPED_STALE, Outcome.SKIPPED_DRY_RUN])
def test_skips_write_no_event(outcome: Outcome) -> None:
    assert event_for(decision(), outcome, 2, None) is None


def test_action_carries_the_decision_and_the_result() -> None:
    action = action_for(decision(), Outcome.APPLIED, replicas_before=2, replicas_after=3, error=None, now=NOW)
    wire = action.to_wire()
    assert wire["decision_id"] == "d-1"
    assert wire["outcome"] == "applied"
    assert (wire["replicas_before"], wire["replicas_after"]) == (2, 3)
    assert (wire["namespace"], wire["kind"], wire["name"]) == ("default", "Deployment", "bert")
