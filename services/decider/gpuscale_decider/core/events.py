"""The Events the decider records on a GPUScaler, decided as values.

``kubectl describe gpuscaler`` shows them, as it shows an HPA's: one per
published decision (``ScaleUpDecided``/``ScaleDownDecided``, with the reason
in words and numbers) and one per condition change. A condition changes when
its status does (what ``lastTransitionTime`` marks), or when it stays in
trouble for another reason (``ConflictingController`` becoming
``FailedGetScale``). Conditions that merely appear, on a GPUScaler seen for
the first time, are recorded only when they are in trouble. Trouble is a
``Warning``, the rest ``Normal``. The shell writes them, rate-limited.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuscale_decider.core.conditions import ConditionType, is_trouble

NORMAL: Final = "Normal"
WARNING: Final = "Warning"
# The Event's `action` (events.k8s.io): what the decider did about the GPUScaler.
ACTION_DECIDE: Final = "Decide"
ACTION_EVALUATE: Final = "Evaluate"
# Ready mirrors AbleToScale (same reason, same message): one Event says it.
_MIRRORED: Final = frozenset({ConditionType.READY.value})


@dataclass(frozen=True, slots=True)
class EventSpec:
    type: str  # Normal | Warning
    reason: str  # CamelCase, what `kubectl get events --field-selector reason=...` filters on
    message: str
    action: str


def decision_event(from_replicas: int, to_replicas: int, reason: str, decision_id: str) -> EventSpec:
    """A published decision, worded as HPA's SuccessfulRescale ("New size: 3; reason: ...")."""
    up = to_replicas > from_replicas
    return EventSpec(
        NORMAL,
        "ScaleUpDecided" if up else "ScaleDownDecided",
        f"New size: {to_replicas} (from {from_replicas}); reason: {reason}; decision {decision_id}",
        ACTION_DECIDE,
    )


def _by_type(status: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    out: dict[str, Mapping[str, Any]] = {}
    for c in (status or {}).get("conditions") or ():
        if isinstance(c, Mapping) and isinstance(c.get("type"), str):
            out[c["type"]] = c
    return out


def condition_events(previous: Mapping[str, Any] | None, status: Mapping[str, Any]) -> tuple[EventSpec, ...]:
    """One Event per condition that changed from ``previous`` to ``status``."""
    before = _by_type(previous)
    events = []
    for type_, c in _by_type(status).items():
        if type_ in _MIRRORED:
            continue
        state, reason = str(c.get("status")), str(c.get("reason") or "")
        trouble = is_trouble(type_, state, reason)
        old = before.get(type_)
        if old is None:
            changed = trouble
        else:
            old_state, old_reason = str(old.get("status")), str(old.get("reason") or "")
            changed = old_state != state or (trouble and old_reason != reason)
        if changed:
            events.append(
                EventSpec(
                    WARNING if trouble else NORMAL,
                    reason or type_,
                    f"{type_} is {state}: {c.get('message') or reason}",
                    ACTION_EVALUATE,
                )
            )
    return tuple(events)
