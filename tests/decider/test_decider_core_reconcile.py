"""Table tests of the decider's pure algorithm: HPA's rules plus cooldown,
fallback and paused, each a named scenario."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuscale_decider.core.algorithm import (
    Evaluation,
    Observation,
    ScalerState,
    TimedValue,
    evaluate,
    record_scale,
    seed_last_scale,
)
from gpuscale_decider.core.policy import GPUScalerSpec, parse_gpuscaler

NOW = 1_000_000.0


def spec(**overrides: Any) -> GPUScalerSpec:
    """A GPUScaler spec with HPA's defaults; ``overrides`` replace spec keys.
    Default: one metric gpu_util target 70, min 1 max 10, no scale-down window
    (so most scenarios test one rule at a time)."""
    body: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "bert"},
        "minReplicas": 1,
        "maxReplicas": 10,
        "metrics": [{"name": "gpu_util", "target": 70}],
        "behavior": {"scaleDown": {"stabilizationWindowSeconds": 0}},
    }
    body.update(overrides)
    return parse_gpuscaler(
        {"kind": "GPUScaler", "metadata": {"name": "t", "namespace": "ns"}, "spec": body}
    ).spec


def obs(fresh: int, age_s: float = 1.0, **averages: float) -> Observation:
    return Observation(ts=NOW - age_s, averages=averages, pods_fresh=fresh)


def seen(**kw: Any) -> ScalerState:
    """A state that has seen the workload before (no start-up window seeding)."""
    return ScalerState(first_seen=NOW - 10_000, **kw)


def recs(*pairs: tuple[float, int]) -> tuple[TimedValue, ...]:
    """Recommendations as (seconds ago, replicas)."""
    return tuple(TimedValue(NOW - ago, value) for ago, value in pairs)


@dataclass
class Case:
    name: str
    spec: GPUScalerSpec
    current: int
    observation: Observation | None
    expect: int
    state: ScalerState = field(default_factory=seen)
    reason_has: tuple[str, ...] = ()
    conditions: dict[str, str] = field(default_factory=dict)  # type -> "True:Reason"
    check: Callable[[Evaluation], bool] | None = None


CASES = [
    # --- the ratio, tolerance, ceil ----------------------------------------------
    Case(
        "within tolerance keeps the count",
        spec(),
        4,
        obs(4, gpu_util=75),
        4,
        reason_has=("within tolerance",),
    ),
    Case("exactly at the tolerance edge keeps", spec(), 4, obs(4, gpu_util=77), 4),
    Case(
        "seeds example: 1 replica at 23 vs target 20 gives 2",
        spec(metrics=[{"name": "gpu_util", "target": 20}]),
        1,
        obs(1, gpu_util=23),
        2,
        reason_has=("ceil(1 × 1.15) = 2",),
    ),
    Case(
        "issue example: 83 over 70 on 2 of 2 pods gives 3",
        spec(),
        2,
        obs(2, gpu_util=83),
        3,
        reason_has=("gpu_util 83.0 over target 70 (ratio 1.19) on 2 of 2 pods: ceil(2 × 1.19) = 3",),
        conditions={"ScalingActive": "True:ValidMetricFound", "ScalingLimited": "False:DesiredWithinRange"},
    ),
    Case("scale down by ratio", spec(), 4, obs(4, gpu_util=35), 2, reason_has=("ceil(4 × 0.50) = 2",)),
    Case(
        "several metrics take the largest",
        spec(metrics=[{"name": "gpu_util", "target": 70}, {"name": "gpu_mem_used_ratio", "target": 50}]),
        2,
        obs(2, gpu_util=70, gpu_mem_used_ratio=100),
        4,
        reason_has=("gpu_mem_used_ratio 100.0 over target 50",),
    ),
    Case(
        "a metric without value blocks scale-down on the others",
        spec(metrics=[{"name": "gpu_util", "target": 70}, {"name": "sm_active", "target": 50}]),
        4,
        obs(4, gpu_util=20),
        4,
        reason_has=("no value for sm_active, so no scale-down",),
    ),
    Case(
        "a metric without value does not block scale-up on the others",
        spec(metrics=[{"name": "gpu_util", "target": 70}, {"name": "sm_active", "target": 50}]),
        2,
        obs(2, gpu_util=140),
        4,
    ),
    # --- per-direction tolerance (KEP-4951) -----------------------------------
    Case(
        "scale-up tolerance wider than the default holds",
        spec(behavior={"scaleUp": {"tolerance": 0.3}, "scaleDown": {"stabilizationWindowSeconds": 0}}),
        4,
        obs(4, gpu_util=84),
        4,
    ),
    Case(
        "scale-down tolerance narrower: 20 pods at 0.95 go to 19",
        spec(maxReplicas=30, behavior={"scaleDown": {"tolerance": 0.01, "stabilizationWindowSeconds": 0}}),
        20,
        obs(20, gpu_util=66.5),
        19,
    ),
    Case("default tolerance holds the same 20 pods", spec(maxReplicas=30), 20, obs(20, gpu_util=66.5), 20),
    # --- missing pods ---------------------------------------------------------
    Case(
        "cascade: 1 ready at 90 plus 1 loading pod: no second scale-up",
        spec(),
        2,
        obs(1, gpu_util=90),
        2,
        reason_has=("counting 1 pod without samples as 0: ratio 0.64", "reverses the direction"),
    ),
    Case(
        "cascade: 1 ready at 100 plus 1 loading pod is still held",
        spec(),
        2,
        obs(1, gpu_util=100),  # 100/70 = 1.43 up; (100+0)/2/70 = 0.71 down: keep
        2,
    ),
    Case(
        "missing pods counted as 0 still scale up under heavy load",
        spec(metrics=[{"name": "gpu_util", "target": 40}]),
        2,
        obs(1, gpu_util=100),  # (100+0)/2/40 = 1.25 -> ceil(2 × 1.25) = 3
        3,
        reason_has=("counting 1 pod without samples as 0: ratio 1.25", "ceil(2 × 1.25) = 3"),
    ),
    Case(
        "missing pods at target on the way down",
        spec(),
        4,
        obs(2, gpu_util=14),  # (14×2 + 70×2)/4/70 = 0.6 -> ceil(4 × 0.6) = 3
        3,
        reason_has=("counting 2 pods without samples at target: ratio 0.60",),
    ),
    Case(
        "missing pods at target landing in tolerance: no change",
        spec(),
        4,
        obs(1, gpu_util=50),  # (50 + 210)/4/70 = 0.93
        4,
        reason_has=("within tolerance",),
    ),
    # --- clamps -----------------------------------------------------------------
    Case(
        "clamped at maxReplicas",
        spec(maxReplicas=5),
        4,
        obs(4, gpu_util=140),
        5,
        reason_has=("capped at maxReplicas 5",),
        conditions={"ScalingLimited": "True:TooManyReplicas"},
    ),
    Case(
        "raised to minReplicas",
        spec(minReplicas=3),
        4,
        obs(4, gpu_util=10),
        3,
        reason_has=("raised to minReplicas 3",),
        conditions={"ScalingLimited": "True:TooFewReplicas"},
    ),
    Case(
        "current above max goes to max even without metrics",
        spec(maxReplicas=3),
        5,
        None,
        3,
        conditions={"ScalingLimited": "True:TooManyReplicas"},
    ),
    Case("current below min goes to min", spec(minReplicas=2), 1, obs(1, gpu_util=70), 2),
    Case(
        "target scaled to zero by hand disables scaling",
        spec(),
        0,
        obs(0),
        0,
        conditions={"ScalingActive": "False:ScalingDisabled"},
    ),
    # --- stabilization ---------------------------------------------------------
    Case(
        "scale-down held by the 300 s window",
        spec(behavior={}),
        4,
        obs(4, gpu_util=35),
        4,
        state=seen(recommendations=recs((200, 4), (100, 4))),
        reason_has=("held by the 300 s scale-down stabilization window at 4",),
        conditions={"AbleToScale": "True:ScaleDownStabilized"},
    ),
    Case(
        "scale-down released after the 300 s window",
        spec(behavior={}),
        4,
        obs(4, gpu_util=35),
        2,
        state=seen(recommendations=recs((301, 4), (400, 4))),
    ),
    Case(
        "scale-down goes to the highest recent recommendation",
        spec(behavior={}),
        6,
        obs(6, gpu_util=35),
        5,
        state=seen(recommendations=recs((250, 5), (100, 4))),
    ),
    Case(
        "a fresh decider waits a scale-down window before its first scale-down",
        spec(behavior={}),
        4,
        obs(4, gpu_util=35),
        4,
        state=ScalerState(),
    ),
    Case(
        "scale-up takes the lowest recommendation of its window",
        spec(
            behavior={
                "scaleUp": {"stabilizationWindowSeconds": 60},
                "scaleDown": {"stabilizationWindowSeconds": 0},
            }
        ),
        2,
        obs(2, gpu_util=140),
        3,
        state=seen(recommendations=recs((30, 3), (10, 5))),
        conditions={"AbleToScale": "True:ScaleUpStabilized"},
    ),
    # --- rate policies -----------------------------------------------------------
    Case(
        "default scale-up: Percent 100 vs Pods 4, Max picks +4 from 2",
        spec(maxReplicas=50),
        2,
        obs(2, gpu_util=700),
        6,
        reason_has=("scale-up limited to 4 pods per 15 s: 6",),
        conditions={"ScalingLimited": "True:ScaleUpLimit"},
    ),
    Case(
        "default scale-up: Max picks +100 % from 10",
        spec(maxReplicas=50),
        10,
        obs(10, gpu_util=280),
        20,
        reason_has=("scale-up limited to 100% per 15 s: 20",),
    ),
    Case(
        "scale-up with Min select picks the smaller",
        spec(
            maxReplicas=50,
            behavior={
                "scaleUp": {"selectPolicy": "Min"},
                "scaleDown": {"stabilizationWindowSeconds": 0},
            },
        ),
        10,
        obs(10, gpu_util=280),
        14,
        reason_has=("4 pods per 15 s",),
    ),
    Case(
        "scale-up events in the period count against the limit",
        spec(
            maxReplicas=50,
            behavior={"scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}},
        ),
        4,
        obs(4, gpu_util=280),
        4,
        state=seen(scale_up_events=(TimedValue(NOW - 30, 2),)),
        conditions={"ScalingLimited": "True:ScaleUpLimit"},
    ),
    Case(
        "scale-up events older than the period do not count",
        spec(
            maxReplicas=50,
            behavior={"scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}},
        ),
        4,
        obs(4, gpu_util=280),
        6,
        state=seen(scale_up_events=(TimedValue(NOW - 61, 2),)),
    ),
    Case(
        "scale-down Percent 50 with Max select",
        spec(
            behavior={
                "scaleDown": {
                    "stabilizationWindowSeconds": 0,
                    "policies": [
                        {"type": "Percent", "value": 50, "periodSeconds": 60},
                        {"type": "Pods", "value": 1, "periodSeconds": 60},
                    ],
                    "selectPolicy": "Max",
                }
            }
        ),
        10,
        obs(10, gpu_util=7),
        5,
        reason_has=("scale-down limited to 50% per 60 s: 5",),
        conditions={"ScalingLimited": "True:ScaleDownLimit"},
    ),
    Case(
        "scale-down Percent 50 vs Pods 1 with Min select removes 1",
        spec(
            behavior={
                "scaleDown": {
                    "stabilizationWindowSeconds": 0,
                    "policies": [
                        {"type": "Percent", "value": 50, "periodSeconds": 60},
                        {"type": "Pods", "value": 1, "periodSeconds": 60},
                    ],
                    "selectPolicy": "Min",
                }
            }
        ),
        10,
        obs(10, gpu_util=7),
        9,
        reason_has=("1 pod per 60 s",),
    ),
    Case(
        "scale-down Disabled never scales down",
        spec(behavior={"scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Disabled"}}),
        10,
        obs(10, gpu_util=7),
        10,
    ),
    Case(
        "scale-up Disabled never scales up",
        spec(
            behavior={"scaleUp": {"selectPolicy": "Disabled"}, "scaleDown": {"stabilizationWindowSeconds": 0}}
        ),
        2,
        obs(2, gpu_util=140),
        2,
    ),
    # --- cooldown ---------------------------------------------------------------
    Case(
        "scale-up cooldown holds",
        spec(behavior={"scaleUp": {"cooldownSeconds": 60}, "scaleDown": {"stabilizationWindowSeconds": 0}}),
        2,
        obs(2, gpu_util=140),
        2,
        state=seen(last_scale_up=NOW - 20),
        reason_has=("scale-up cooling down (20 s since the last, cooldownSeconds 60): keep 2",),
        conditions={"AbleToScale": "False:BackoffUpscale"},
    ),
    Case(
        "scale-up cooldown over",
        spec(behavior={"scaleUp": {"cooldownSeconds": 60}, "scaleDown": {"stabilizationWindowSeconds": 0}}),
        2,
        obs(2, gpu_util=140),
        4,
        state=seen(last_scale_up=NOW - 61),
    ),
    Case(
        "scale-down cooldown is its own direction",
        spec(
            behavior={
                "scaleUp": {"cooldownSeconds": 600},
                "scaleDown": {"stabilizationWindowSeconds": 0, "cooldownSeconds": 30},
            }
        ),
        4,
        obs(4, gpu_util=35),
        2,
        state=seen(last_scale_up=NOW - 20, last_scale_down=NOW - 40),
    ),
    Case(
        "scale-down cooldown holds",
        spec(behavior={"scaleDown": {"stabilizationWindowSeconds": 0, "cooldownSeconds": 30}}),
        4,
        obs(4, gpu_util=35),
        4,
        state=seen(last_scale_down=NOW - 10),
        conditions={"AbleToScale": "False:BackoffDownscale"},
    ),
    # --- paused, staleness, fallback ---------------------------------------------
    Case(
        "paused changes nothing but still computes the metrics",
        spec(paused=True),
        2,
        obs(2, gpu_util=140),
        2,
        conditions={"ScalingActive": "False:ScalingDisabled"},
        check=lambda e: e.metrics[0].replicas == 4,
    ),
    Case(
        "metrics older than the window are not acted on",
        spec(window="30s"),
        2,
        obs(2, age_s=31, gpu_util=140),
        2,
        reason_has=("older than the 30 s window",),
        conditions={"ScalingActive": "False:FailedGetGPUMetrics"},
    ),
    Case(
        "no fresh pod: no decision",
        spec(),
        4,
        obs(0, gpu_util=10),
        4,
        conditions={"ScalingActive": "False:FailedGetGPUMetrics"},
    ),
    Case(
        "fallback not yet due",
        spec(fallback={"afterSeconds": 120, "replicas": 5}),
        2,
        None,
        2,
        state=seen(last_fresh_metrics=NOW - 60),
        reason_has=("fallback to 5 after 120 s, blind for 60 s",),
    ),
    Case(
        "fallback raises to its count after afterSeconds",
        spec(fallback={"afterSeconds": 120, "replicas": 5}),
        2,
        None,
        5,
        state=seen(last_fresh_metrics=NOW - 121),
        reason_has=("no metrics received for 121 s: fallback to 5",),
        conditions={"ScalingActive": "False:FailedGetGPUMetrics"},
    ),
    Case(
        "fallback never scales down",
        spec(fallback={"afterSeconds": 120, "replicas": 2}),
        6,
        obs(0),
        6,
        state=seen(last_fresh_metrics=NOW - 500),
    ),
    Case(
        "fallback counts from first sight when no metrics ever came",
        spec(fallback={"afterSeconds": 120, "replicas": 3}),
        1,
        None,
        3,
        state=ScalerState(first_seen=NOW - 130),
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scenario(case: Case) -> None:
    result, _ = evaluate(case.spec, case.current, case.observation, case.state, NOW)
    if case.check is not None:
        assert case.check(result), result
    else:
        assert result.desired_replicas == case.expect, result.reason
    for fragment in case.reason_has:
        assert fragment in result.reason, result.reason
    for type_, expected in case.conditions.items():
        c = result.condition(type_)
        assert f"{c.status}:{c.reason}" == expected, c


def test_scale_down_window_round_trip() -> None:
    """A load drop is held for 300 s by the default window, then released."""
    s = spec(behavior={})
    state = seen(recommendations=recs((1, 4)))
    for t in range(0, 300, 15):
        result, state = evaluate(s, 4, Observation(NOW + t, {"gpu_util": 35}, 4), state, NOW + t)
        assert result.desired_replicas == 4, (t, result.reason)
    result, state = evaluate(s, 4, Observation(NOW + 300, {"gpu_util": 35}, 4), state, NOW + 300)
    assert result.desired_replicas == 2, result.reason


def test_cascade_held_until_new_pods_report() -> None:
    """DESIGN.md §4: after 1 -> 2, the new pod loads a model for 20 s without
    samples: no second scale-up until it reports; then the true load decides."""
    s = spec()
    state = seen()
    result, state = evaluate(s, 1, Observation(NOW, {"gpu_util": 90}, 1), state, NOW)
    assert result.desired_replicas == 2
    state = record_scale(state, 1, 2, NOW, 15)
    for t in range(2, 21, 2):  # pod 2 loading: only pod 1 reports, still at 90
        result, state = evaluate(s, 2, Observation(NOW + t, {"gpu_util": 90}, 1), state, NOW + t)
        assert result.desired_replicas == 2, (t, result.reason)
    result, state = evaluate(s, 2, Observation(NOW + 22, {"gpu_util": 90}, 2), state, NOW + 22)
    assert result.desired_replicas == 3, result.reason


def test_record_scale_feeds_rate_limit_and_cooldown() -> None:
    state = record_scale(seen(), 2, 6, NOW, 15)
    assert state.last_scale_up == NOW
    assert state.scale_up_events == (TimedValue(NOW, 4),)
    state = record_scale(state, 6, 3, NOW + 20, 15)
    assert state.scale_up_events == ()  # pruned: older than the longest period
    assert state.scale_down_events == (TimedValue(NOW + 20, 3),)
    assert state.last_scale_down == NOW + 20


def test_state_round_trips_and_tolerates_damage() -> None:
    state = seen(
        recommendations=recs((5, 3)),
        scale_up_events=(TimedValue(NOW, 2),),
        last_scale_up=NOW,
        last_fresh_metrics=NOW,
    )
    assert ScalerState.from_dict(state.to_dict()) == state
    damaged = ScalerState.from_dict({"recommendations": [[1.0], "x", [2.0, 3]], "last_scale_up": "yesterday"})
    assert damaged.recommendations == (TimedValue(2.0, 3),)
    assert damaged.last_scale_up is None
    assert ScalerState.from_dict(None) == ScalerState()


def test_status_last_scale_time_seeds_cooldown_after_restart() -> None:
    s = spec(behavior={"scaleUp": {"cooldownSeconds": 60}, "scaleDown": {"stabilizationWindowSeconds": 0}})
    state = seed_last_scale(ScalerState(), NOW - 30)
    result, _ = evaluate(s, 2, obs(2, gpu_util=140), state, NOW)
    assert result.desired_replicas == 2
    assert "cooling down" in result.reason
