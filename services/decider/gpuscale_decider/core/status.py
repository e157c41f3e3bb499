"""The GPUScaler ``.status`` the decider writes, built as a value.

Shaped like an HPA's status so ``kubectl get gpuscalers`` reads like
``kubectl get hpa``: ``reference`` (``Deployment/bert``) and ``targets``
(``83/70``, ``<unknown>/70``) feed the CRD's printer columns. Conditions keep
their ``lastTransitionTime`` while their status holds, so an unchanged
evaluation yields an equal status and the shell writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuscale.timefmt import format_time, parse_time
from gpuscale_decider.core.algorithm import (
    ABLE_TO_SCALE,
    SCALING_ACTIVE,
    SCALING_LIMITED,
    Condition,
    Evaluation,
)
from gpuscale_decider.core.policy import GPUScalerSpec, PolicyError

# One home for Kubernetes times (gpuscale.timefmt); the names the decider used.
rfc3339 = format_time
parse_rfc3339 = parse_time


def targets_column(spec: GPUScalerSpec, averages: Mapping[str, float] | None) -> str:
    parts = []
    for m in spec.metrics:
        value = None if averages is None else averages.get(m.name)
        current = "<unknown>" if value is None else f"{value:.0f}"
        parts.append(f"{current}/{m.target:g}")
    return ", ".join(parts)


def _merge_conditions(
    conditions: Sequence[Condition], previous: Mapping[str, Any] | None, now: float
) -> list[dict[str, Any]]:
    old: dict[str, Mapping[str, Any]] = {}
    for c in (previous or {}).get("conditions") or ():
        if isinstance(c, Mapping) and isinstance(c.get("type"), str):
            old[c["type"]] = c
    out = []
    for c in conditions:
        status = "True" if c.status else "False"
        before = old.get(c.type)
        since = (
            before.get("lastTransitionTime")
            if before is not None and before.get("status") == status and before.get("lastTransitionTime")
            else rfc3339(now)
        )
        out.append(
            {
                "type": c.type,
                "status": status,
                "reason": c.reason,
                "message": c.message,
                "lastTransitionTime": since,
            }
        )
    return out


def evaluation_status(
    spec: GPUScalerSpec,
    generation: int,
    evaluation: Evaluation,
    averages: Mapping[str, float] | None,
    last_scale_time: float | None,
    previous: Mapping[str, Any] | None,
    now: float,
) -> dict[str, Any]:
    fresh_averages = averages if evaluation.fresh else None
    current_metrics = [
        {
            "name": m.name,
            "target": m.target,
            "current": None if fresh_averages is None else fresh_averages.get(m.name),
        }
        for m in spec.metrics
    ]
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "reference": spec.scale_target_ref.reference(),
        "targets": targets_column(spec, fresh_averages),
        "currentReplicas": evaluation.current_replicas,
        "desiredReplicas": evaluation.desired_replicas,
        "currentMetrics": current_metrics,
        "reason": evaluation.reason,
        "conditions": _merge_conditions(evaluation.conditions, previous, now),
    }
    if last_scale_time is not None:
        status["lastScaleTime"] = rfc3339(last_scale_time)
    return status


def invalid_status(
    generation: int, error: PolicyError, previous: Mapping[str, Any] | None, now: float
) -> dict[str, Any]:
    """An invalid policy is reported, never acted on."""
    message = f"invalid GPUScaler: {error.summary()}"
    conditions = (
        Condition(ABLE_TO_SCALE, False, "InvalidPolicy", message),
        Condition(SCALING_ACTIVE, False, "InvalidPolicy", message),
        Condition(SCALING_LIMITED, False, "DesiredWithinRange", "no recommendation: the policy is invalid"),
    )
    return {
        "observedGeneration": generation,
        "reason": message,
        "conditions": _merge_conditions(conditions, previous, now),
    }


def blocked_status(
    spec: GPUScalerSpec,
    generation: int,
    reason: str,
    message: str,
    current_replicas: int | None,
    averages: Mapping[str, float] | None,
    previous: Mapping[str, Any] | None,
    now: float,
) -> dict[str, Any]:
    """The decider will not act: another controller owns the target
    (``ConflictingController``) or the target cannot be read (``FailedGetScale``)."""
    conditions = (
        Condition(ABLE_TO_SCALE, False, reason, message),
        Condition(
            SCALING_ACTIVE,
            averages is not None,
            "ValidMetricFound" if averages is not None else "FailedGetGPUMetrics",
            "GPU metrics are arriving" if averages is not None else "no fresh GPU metrics",
        ),
        Condition(SCALING_LIMITED, False, "DesiredWithinRange", "no recommendation while not able to scale"),
    )
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "reference": spec.scale_target_ref.reference(),
        "targets": targets_column(spec, averages),
        "reason": message,
        "conditions": _merge_conditions(conditions, previous, now),
    }
    if current_replicas is not None:
        status["currentReplicas"] = current_replicas
        status["desiredReplicas"] = current_replicas
    last = (previous or {}).get("lastScaleTime")
    if isinstance(last, str):
        status["lastScaleTime"] = last
    return status


def status_differs(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether a write is needed. ``reason`` (the sentence) alone changing with
    every metric tick does not count: the numbers in it move all the time;
    the targets column, replicas and conditions are what matter."""
    if old is None:
        return True
    keys = set(old) | set(new)
    keys.discard("reason")
    return any(old.get(k) != new.get(k) for k in keys)
