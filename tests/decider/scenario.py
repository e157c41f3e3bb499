"""Small builders for the decider's pure step: a policy, the target's pods
and their fresh values, one call of ``reconcile``. Scenarios read like HPA's
own tests: "5 replicas, 1 Running at 10, 4 Pending, target 50: 1"."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from gpuscale.policy import GPUScaler, parse_gpuscaler
from gpuscale_decider.core.reconcile import Config, Memory, Observation, Step, Target, reconcile
from gpuscale_decider.core.replicas import PodView
from gpuscale_decider.core.state import ScalerState, TimedValue

NOW = 1_000_000.0
SELECTOR = "app=bert"
RECENT_S = 3.0  # what the decider asks for with a 30 s window


def policy(**overrides: Any) -> GPUScaler:
    """A GPUScaler with HPA's defaults; ``overrides`` replace spec keys.
    Default: gpu_util target 70, min 1, max 10, no scale-down window (so most
    scenarios test one rule at a time)."""
    body: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bert"},
        "minReplicas": 1,
        "maxReplicas": 10,
        "metrics": [{"name": "gpu_util", "target": 70}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
    }
    body.update(overrides)
    return parse_gpuscaler(
        {"kind": "GPUScaler", "metadata": {"name": "bert", "namespace": "ns"}, "spec": body}
    )


@dataclass(frozen=True)
class P:
    """One pod of the target: its fresh value(s) (None: no sample) and state."""

    value: float | Mapping[str, float] | None = None
    phase: str = "Running"
    ready: bool = True
    deleting: bool = False
    recent: Mapping[str, float] | None = None  # means over the last RECENT_S, where sent
    unschedulable: bool = False  # Pending, and the scheduler found no node for it


def running(n: int, value: float | Mapping[str, float] | None) -> tuple[P, ...]:
    return tuple(P(value) for _ in range(n))


def pending(n: int) -> tuple[P, ...]:
    return tuple(P(None, phase="Pending", ready=False) for _ in range(n))


def world(
    pods: tuple[P, ...], *, received_at: float = NOW - 1.0, window_s: float = 30.0, metric: str = "gpu_util"
) -> tuple[tuple[PodView, ...], Observation]:
    views: list[PodView] = []
    values: dict[str, dict[str, float]] = {}
    recent: dict[str, dict[str, float]] = {}
    for i, p in enumerate(pods):
        name = f"bert-{i}"
        views.append(PodView(name, p.phase, p.ready, p.deleting, p.unschedulable))
        pod_values = {metric: p.value} if isinstance(p.value, int | float) else dict(p.value or {})
        for m, v in pod_values.items():
            values.setdefault(m, {})[name] = float(v)
        for m, v in (p.recent or {}).items():
            recent.setdefault(m, {})[name] = float(v)
    fresh = sum(1 for p in pods if p.value is not None)
    averages = {m: sum(v.values()) / len(v) for m, v in values.items() if v}
    observation = Observation(
        received_at=received_at,
        sent_at=received_at,
        window_s=window_s,
        values=values,
        averages=averages,
        pods_fresh=fresh,
        pods_stale=0,
        recent=recent,
        recent_s=RECENT_S if any(p.recent is not None for p in pods) else None,
    )
    return tuple(views), observation


def seen(**kw: Any) -> ScalerState:
    """A state that has seen the workload before (no first-sight seeding)."""
    return ScalerState(first_seen=NOW - 10_000, **kw)


def recs(*pairs: tuple[float, int]) -> tuple[TimedValue, ...]:
    """Recommendations as (seconds ago, replicas)."""
    return tuple(TimedValue(NOW - ago, value) for ago, value in pairs)


def step(
    scaler: GPUScaler,
    current: int,
    pods: tuple[P, ...] | None,
    *,
    state: ScalerState | None = None,
    now: float = NOW,
    received_s_ago: float = 1.0,
    no_metrics: bool = False,
    conflict: str | None = None,
    config: Config | None = None,
    span_s: float | None = None,
) -> Step:
    views, observation = world(pods or (), received_at=now - received_s_ago)
    if span_s is not None:
        observation = replace(observation, span_s=span_s)
    return reconcile(
        Memory(state if state is not None else seen()),
        scaler,
        Target(current, SELECTOR, conflict=conflict),
        views if pods is not None else None,
        None if no_metrics else observation,
        now,
        config or Config(),
    )
