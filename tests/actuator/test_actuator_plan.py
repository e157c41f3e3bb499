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
    dry_run: bool = False
    attempt: int = 1
    kind: StepKind = StepKind.PATCH
    outcome: Outcome | None = Outcome.APPLIED


CASES = [
    Case("target short of the desired count: patch", current=2),
    Case("target above it: patch", current=7),
    Case("second try after a 409: conflict_retried", current=2, attempt=2, outcome=Outcome.CONFLICT_RETRIED),
    Case("target at the desired count: nothing to do", current=3, kind=StepKind.REPORT, outcome=None),
    Case(
        "dry run: report only", current=2, dry_run=True, kind=StepKind.REPORT, outcome=Outcome.SKIPPED_DRY_RUN
    ),
    Case("dry run at the count: nothing to say", current=3, dry_run=True, kind=StepKind.REPORT, outcome=None),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_plan_step(case: Case) -> None:
    step = plan_step(decision(), current_replicas=case.current, dry_run=case.dry_run, attempt=case.attempt)
    assert step.kind == case.kind
    assert step.outcome == case.outcome
    if step.kind == StepKind.PATCH:
        assert step.replicas == 3


@given(
    current=st.integers(0, 1000),
    from_=st.integers(0, 1000),
    to=st.integers(0, 1000),
    age_s=st.floats(0, 86_400),
    dry_run=st.booleans(),
)
def test_the_step_depends_on_the_desired_and_current_counts_only(
    current: int, from_: int, to: int, age_s: float, dry_run: bool
) -> None:
    """Level-triggered: converging twice is harmless, whatever the entry was written at or when."""
    step = plan_step(decision(from_=from_, to=to, age_s=age_s), current_replicas=current, dry_run=dry_run)
    assert step == plan_step(decision(to=to), current_replicas=current, dry_run=dry_run)
    assert (step.kind == StepKind.PATCH) == (current != to and not dry_run)
    if step.kind == StepKind.PATCH:
        assert step.replicas == to
    again = plan_step(decision(to=to), current_replicas=to, dry_run=dry_run)
    assert (again.kind, again.outcome) == (StepKind.REPORT, None)  # once there, nothing more to write


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
