"""The GPUScaler ``.status`` the decider writes, built as a value.

Shaped like an HPA's status so ``kubectl get gpuscalers`` reads like
``kubectl get hpa``: ``reference`` (``Deployment/bert``) and ``targets``
(``83/70``, ``<unknown>/70``) feed the CRD's printer columns. Conditions keep
their ``lastTransitionTime`` while their status holds, so an unchanged
evaluation yields an equal status and the shell writes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuscale.policy import GPUScalerSpec, PolicyError
from gpuscale.timefmt import format_time, parse_time
from gpuscale_decider.core.conditions import Condition, Reason, able, active, limited, summary
from gpuscale_decider.core.evaluation import Evaluation

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
    conditions: Iterable[Condition], previous: Mapping[str, Any] | None, now: float
) -> list[dict[str, Any]]:
    old: dict[str, Mapping[str, Any]] = {}
    for c in (previous or {}).get("conditions") or ():
        if isinstance(c, Mapping) and isinstance(c.get("type"), str):
            old[c["type"]] = c
    out = []
    for c in conditions:
        status = "True" if c.status else "False"
        before = old.get(c.type.value)
        since = (
            before.get("lastTransitionTime")
            if before is not None and before.get("status") == status and before.get("lastTransitionTime")
            else rfc3339(now)
        )
        out.append(
            {
                "type": c.type.value,
                "status": status,
                "reason": c.reason.value,
                "message": c.message,
                "lastTransitionTime": since,
            }
        )
    return out


def evaluation_status(
    spec: GPUScalerSpec,
    generation: int,
    evaluation: Evaluation,
    last_scale_time: float | None,
    previous: Mapping[str, Any] | None,
    now: float,
) -> dict[str, Any]:
    fresh_averages = evaluation.usage if evaluation.fresh else None
    # No key while no fresh value: the API server's merge patch drops a null inside a list, so a
    # null here would read back as a difference and be written again.
    current_metrics = [
        {"name": m.name, "target": m.target}
        | ({} if (value := (fresh_averages or {}).get(m.name)) is None else {"current": value})
        for m in spec.metrics
    ]
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "reference": spec.scale_target_ref.reference(),
        "targets": targets_column(spec, fresh_averages),
        "currentReplicas": evaluation.current,
        "desiredReplicas": evaluation.desired,
        "currentMetrics": current_metrics,
        "reason": evaluation.reason,
        "conditions": _merge_conditions(
            _with_summary(tuple(evaluation.conditions), spec.paused, evaluation.fallback), previous, now
        ),
    }
    if last_scale_time is not None:
        status["lastScaleTime"] = rfc3339(last_scale_time)
    return status


def _with_summary(conditions: tuple[Condition, ...], paused: bool, fallback: bool) -> tuple[Condition, ...]:
    """HPA's three behind KEDA's Ready, then Paused and Fallback: the order
    ``kubectl describe`` lists them in."""
    ready, pause, fall = summary(conditions[0], paused, fallback)
    return (ready, *conditions, pause, fall)


def invalid_status(
    generation: int,
    error: PolicyError,
    previous: Mapping[str, Any] | None,
    now: float,
    paused: bool = False,
) -> dict[str, Any]:
    """An invalid policy is reported, never acted on."""
    message = f"invalid GPUScaler: {error.summary()}"
    conditions = (
        able(False, Reason.INVALID_POLICY, message),
        active(False, Reason.INVALID_POLICY, message),
        limited(False, Reason.DESIRED_WITHIN_RANGE, "no recommendation: the policy is invalid"),
    )
    return {
        "observedGeneration": generation,
        "reason": message,
        "conditions": _merge_conditions(_with_summary(conditions, paused, False), previous, now),
    }


def blocked_status(
    spec: GPUScalerSpec,
    generation: int,
    reason: Reason,
    message: str,
    current_replicas: int | None,
    averages: Mapping[str, float] | None,
    previous: Mapping[str, Any] | None,
    now: float,
) -> dict[str, Any]:
    """The decider will not act: another controller owns the target
    (``ConflictingController``), the target cannot be read (``FailedGetScale``), or
    evaluating this GPUScaler failed (``FailedEvaluation``)."""
    conditions = (
        able(False, reason, message),
        active(True, Reason.VALID_METRIC_FOUND, "GPU metrics are arriving")
        if averages is not None
        else active(False, Reason.FAILED_GET_GPU_METRICS, "no fresh GPU metrics"),
        limited(False, Reason.DESIRED_WITHIN_RANGE, "no recommendation while not able to scale"),
    )
    status: dict[str, Any] = {
        "observedGeneration": generation,
        "reference": spec.scale_target_ref.reference(),
        "targets": targets_column(spec, averages),
        "reason": message,
        "conditions": _merge_conditions(_with_summary(conditions, spec.paused, False), previous, now),
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
