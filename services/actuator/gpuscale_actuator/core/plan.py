"""What to do about one workload's desired count, given what its target shows now. Pure.

Level-triggered (docs/ARCHITECTURE.md#fault-model): converging twice is harmless."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gpuscale.wire import Action, Decision, Outcome


class StepKind(StrEnum):
    PATCH = "patch"
    REPORT = "report"  # nothing to write: an outcome to report (or none, when already converged)


@dataclass(frozen=True, slots=True)
class Step:
    kind: StepKind
    outcome: Outcome | None = None  # for REPORT (None: converged, nothing to say); for PATCH once it succeeds
    replicas: int | None = None  # for PATCH: the value to write
    why: str = ""  # a short reason for logs and the action's error field


def plan_step(desired: Decision, *, current_replicas: int, dry_run: bool, attempt: int = 1) -> Step:
    """The step that brings a target at ``current_replicas`` to ``desired.to_replicas``."""
    if current_replicas == desired.to_replicas:
        return Step(StepKind.REPORT, None, why="the target is at the desired count")
    if dry_run:
        return Step(
            StepKind.REPORT,
            Outcome.SKIPPED_DRY_RUN,
            why=f"dry run: would scale {current_replicas} -> {desired.to_replicas}",
        )
    return Step(
        StepKind.PATCH,
        Outcome.APPLIED if attempt <= 1 else Outcome.CONFLICT_RETRIED,
        replicas=desired.to_replicas,
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
