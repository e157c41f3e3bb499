"""Whether a decision may be applied at all. Pure.

The actuator alone writes to the cluster, so it takes a decision's word for nothing: a
name that could become another path, a query or a fragment never reaches a URL."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from gpuscale.names import target_problems
from gpuscale.policy import GPUScaler, Mode
from gpuscale.wire import Decision


class Cause(StrEnum):
    """Why a decision was refused: a bounded label for /metrics."""

    INVALID_TARGET = "invalid_target"
    NO_POLICY = "no_policy"
    OTHER_POLICY = "other_policy"
    SEVERAL_POLICIES = "several_policies"
    PAUSED = "paused"
    SHADOW = "shadow"
    OUT_OF_BOUNDS = "out_of_bounds"


@dataclass(frozen=True, slots=True)
class Refusal:
    cause: Cause
    detail: str


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def targets(scaler: GPUScaler, decision: Decision) -> bool:
    ref = scaler.spec.scale_target_ref
    return (
        scaler.namespace == decision.namespace
        and ref.kind == decision.kind
        and ref.name == decision.name
        and _group(ref.api_version) == _group(decision.api_version)
    )


def admit(decision: Decision, scalers: Iterable[GPUScaler]) -> Refusal | None:
    """None when ``decision`` may be applied; else why not. ``scalers`` are the
    valid GPUScalers of the decision's namespace."""
    problems = target_problems(decision.namespace, decision.api_version, decision.kind, decision.name)
    if problems:
        return Refusal(Cause.INVALID_TARGET, "; ".join(problems))
    target = f"{decision.kind} {decision.namespace}/{decision.name}"
    matching = [s for s in scalers if targets(s, decision)]
    named = decision.inputs.get("gpuscaler")
    if isinstance(named, str) and named:
        chosen = [s for s in matching if s.key == named]
        if not chosen:
            if not matching:
                return Refusal(Cause.NO_POLICY, f"no valid GPUScaler targets {target}")
            return Refusal(Cause.OTHER_POLICY, f"GPUScaler {named[:120]} does not target {target}")
        scaler = chosen[0]
    elif len(matching) == 1:
        scaler = matching[0]
    elif not matching:
        return Refusal(Cause.NO_POLICY, f"no valid GPUScaler targets {target}")
    else:
        names = ", ".join(sorted(s.key for s in matching))
        return Refusal(
            Cause.SEVERAL_POLICIES,
            f"several GPUScalers target {target} ({names}) and the decision names none",
        )
    spec = scaler.spec
    if spec.paused:
        return Refusal(Cause.PAUSED, f"GPUScaler {scaler.key} is paused")
    if spec.mode is Mode.SHADOW:
        return Refusal(Cause.SHADOW, f"GPUScaler {scaler.key} is in shadow mode: it advises, never scales")
    if not spec.min_replicas <= decision.to_replicas <= spec.max_replicas:
        return Refusal(
            Cause.OUT_OF_BOUNDS,
            f"{decision.to_replicas} replicas is outside GPUScaler {scaler.key}'s "
            f"[{spec.min_replicas}, {spec.max_replicas}]",
        )
    return None
