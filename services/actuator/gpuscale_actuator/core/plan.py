"""What to do with one decision, given what the target looks like now.

The shell reads the target and asks :func:`plan_step`; it answers with one
step: skip (stale, already applied, nothing to change), report a dry run, or
patch. After a 409 Conflict the shell re-reads and asks again with
``attempt=2``; a patch on that second try is reported as ``conflict_retried``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gpuscale.wire import Action, Decision, Outcome

# The annotation the same PATCH that changes replicas writes (exactly-once:
# a redelivered decision finds its own id on the target and is not applied again).
LAST_DECISION_ANNOTATION: Final = "gpuscale.io/last-decision-id"


class StepKind(StrEnum):
    PATCH = "patch"
    REPORT = "report"  # final without a write: an outcome to publish and ack


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    outcome: Outcome | None = None  # for REPORT; for PATCH the outcome once it succeeds
    replicas: int | None = None  # for PATCH: the value to write
    why: str = ""  # a short reason for logs and the action's error field
    already_applied: bool = False  # REPORT of a decision applied before (redelivery)


def decision_age_s(decision: Decision, now: float) -> float:
    return max(0.0, now - decision.ts)


def is_too_old(decision: Decision, now: float, max_age_s: float) -> bool:
    return decision_age_s(decision, now) > max_age_s


def too_old_step(decision: Decision, now: float, max_age_s: float) -> Step | None:
    """Checked before any API call: a decision on stale data is never acted on."""
    if is_too_old(decision, now, max_age_s):
        return Step(
            StepKind.REPORT,
            Outcome.SKIPPED_STALE,
            why=f"decision is {decision_age_s(decision, now):.1f} s old (limit {max_age_s:g} s)",
        )
    return None


def plan_step(
    decision: Decision,
    *,
    current_replicas: int,
    last_decision_id: str | None,
    already_recorded: bool,
    dry_run: bool,
    attempt: int = 1,
) -> Step:
    """The step for ``decision`` given the target's current replicas.

    ``last_decision_id`` is the target's annotation (None where the kind
    cannot carry it atomically); ``already_recorded`` says the applied-decisions
    record holds this id.
    """
    if last_decision_id == decision.id or already_recorded:
        return Step(
            StepKind.REPORT,
            Outcome.APPLIED,
            why="already applied (redelivered decision)",
            already_applied=True,
        )
    if current_replicas != decision.from_replicas:
        return Step(
            StepKind.REPORT,
            Outcome.SKIPPED_STALE,
            why=(
                f"target has {current_replicas} replicas, the decision was made at "
                f"{decision.from_replicas}; the decider decides again"
            ),
        )
    if dry_run:
        return Step(
            StepKind.REPORT,
            Outcome.SKIPPED_DRY_RUN,
            why=f"dry run: would scale {decision.from_replicas} -> {decision.to_replicas}",
        )
    return Step(
        StepKind.PATCH,
        Outcome.APPLIED if attempt <= 1 else Outcome.CONFLICT_RETRIED,
        replicas=decision.to_replicas,
    )


# --- reporting ---------------------------------------------------------------

SUCCESSFUL_RESCALE: Final = "SuccessfulRescale"
FAILED_RESCALE: Final = "FailedRescale"


@dataclass(frozen=True, slots=True)
class EventSpec:
    reason: str
    message: str
    type: str  # Normal | Warning


def event_for(
    decision: Decision, outcome: Outcome, replicas_after: int | None, error: str | None
) -> EventSpec | None:
    """The Kubernetes Event an outcome deserves (HPA's wording), or None.

    Skips write no Event: nothing happened to the target.
    """
    if outcome in (Outcome.APPLIED, Outcome.CONFLICT_RETRIED):
        size = decision.to_replicas if replicas_after is None else replicas_after
        return EventSpec(SUCCESSFUL_RESCALE, f"New size: {size}; reason: {decision.reason}", "Normal")
    if outcome == Outcome.FAILED:
        return EventSpec(
            FAILED_RESCALE,
            f"New size: {decision.to_replicas}; reason: {decision.reason}; error: {error or 'unknown'}",
            "Warning",
        )
    return None


def action_for(
    decision: Decision,
    outcome: Outcome,
    *,
    replicas_before: int | None,
    replicas_after: int | None,
    error: str | None,
    now: float,
) -> Action:
    return Action(
        decision_id=decision.id,
        ts=now,
        outcome=outcome,
        replicas_before=replicas_before,
        replicas_after=replicas_after,
        error=error,
        namespace=decision.namespace,
        kind=decision.kind,
        name=decision.name,
    )
