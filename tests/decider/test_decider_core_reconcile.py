"""Table tests of the decider's pure step, each a named scenario.

The expected counts are HPA's: from Kubernetes' ``replica_calculator.go`` and
``horizontal.go`` and their tests (``TestReplicaCalcScaleUpCM``, "scale down:
exclude unscheduled pods", ...), worked by hand in the comments. Where
gpuscale adds a rule (cooldown, fallback, paused, notReadyPods: Missing), the
scenario says so in its name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuscale.policy import GPUScaler
from gpuscale_decider.core.conditions import ConditionType
from gpuscale_decider.core.reconcile import Config, Evaluation, Memory, Note, Step, Target, reconcile
from gpuscale_decider.core.state import ScalerState, TimedValue

from .scenario import NOW, SELECTOR, P, pending, policy, recs, running, seen, step, world


@dataclass
class Case:
    name: str
    scaler: GPUScaler
    current: int
    pods: tuple[P, ...] | None
    expect: int
    state: ScalerState = field(default_factory=seen)
    reason_has: tuple[str, ...] = ()
    conditions: dict[str, str] = field(default_factory=dict)  # type -> "True:Reason"
    check: Callable[[Evaluation], bool] | None = None
    received_s_ago: float = 1.0
    no_metrics: bool = False


TWO_METRICS = [{"name": "gpu_util", "target": 70}, {"name": "sm_active", "target": 50}]
HPA_DEFAULTS: dict[str, Any] = {}  # behavior left out: HPA's defaults, 300 s scale-down window

CASES = [
    # --- HPA's replica calculator for a Pods metric ----------------------------------
    Case(
        "TestReplicaCalcScaleUpCM: 20, 10, 30 against 15 on 3 gives 4",
        policy(metrics=[{"name": "gpu_util", "target": 15}]),
        3,
        (P(20), P(10), P(30)),
        4,
        reason_has=("ceil(3 × 1.33) = 4",),
    ),
    Case(
        "TestReplicaCalcScaleDownCM: 5 pods at 12 against 20 give 3",
        policy(metrics=[{"name": "gpu_util", "target": 20}]),
        5,
        running(5, 12),
        3,
    ),
    Case(
        "TestReplicaCalcToleranceCM: 20, 21, 21 against 20 is within 10 %",
        policy(metrics=[{"name": "gpu_util", "target": 20}]),
        3,
        (P(20), P(21), P(21)),
        3,
        reason_has=("within tolerance, keep 3",),
    ),
    Case(
        "TestReplicaCalcConfigurableToleranceCM: a 1 % scale-up tolerance scales the same pods to 4",
        policy(
            metrics=[{"name": "gpu_util", "target": 20}],
            behavior={"scaleUp": {"tolerance": 0.01}, "scaleDown": {"stabilizationWindowSeconds": 0}},
        ),
        3,
        (P(20), P(21), P(21)),
        4,
    ),
    Case(
        "TestReplicaCalcScaleUpCMUnreadyHotCpuScaleWouldScaleDown: average truncated in milli-units",
        # (50000 + 15000 + 30000) // 3 = 31666 -> ratio 2.111 -> ceil(6.33) = 7 (HPA counts
        # not-Ready pods for a Pods metric: notReadyPods: Counted)
        policy(metrics=[{"name": "gpu_util", "target": 15}], notReadyPods="Counted"),
        3,
        (P(50, ready=False), P(15), P(30, ready=False)),
        7,
    ),
    Case(
        "TestReplicaCalcScaleUpCMUnreadyHotCpuNoLessScale: with notReadyPods Counted, 6 as HPA",
        policy(metrics=[{"name": "gpu_util", "target": 15}], notReadyPods="Counted"),
        3,
        (P(50), P(10), P(30, ready=False)),
        6,
    ),
    Case(
        "gpuscale's default notReadyPods Missing: the same pods give 4, and the reason says why",
        # ready 50, 10 -> 30 -> ratio 2; the not-Ready pod as 0: 60/3 = 20 -> ceil(3 × 1.33) = 4
        policy(metrics=[{"name": "gpu_util", "target": 15}]),
        3,
        (P(50), P(10), P(30, ready=False)),
        4,
        reason_has=("counting 1 pod without samples as 0: ratio 1.33",),
    ),
    Case(
        "seeds example: 1 replica at 23 against 20 gives 2",
        policy(metrics=[{"name": "gpu_util", "target": 20}]),
        1,
        (P(23),),
        2,
        reason_has=("ceil(1 × 1.15) = 2",),
    ),
    Case(
        "83 over 70 on 2 of 2 pods gives 3",
        policy(),
        2,
        running(2, 83),
        3,
        reason_has=("gpu_util 83.0 over target 70 (ratio 1.19) on 2 of 2 pods: ceil(2 × 1.19) = 3",),
        conditions={"ScalingActive": "True:ValidMetricFound", "ScalingLimited": "False:DesiredWithinRange"},
    ),
    Case("exactly at the tolerance edge keeps", policy(), 4, running(4, 77), 4),
    Case(
        "tolerance 2.0 is accepted, as Kubernetes does: 190 against 100 stays",
        policy(metrics=[{"name": "gpu_util", "target": 50}], tolerance=2.0),
        3,
        running(3, 95),
        3,
    ),
    Case(
        "several metrics take the largest",
        policy(metrics=[{"name": "gpu_util", "target": 70}, {"name": "gpu_mem_used_ratio", "target": 50}]),
        2,
        running(2, {"gpu_util": 70, "gpu_mem_used_ratio": 100}),
        4,
        reason_has=("gpu_mem_used_ratio 100.0 over target 50",),
    ),
    # --- idle workloads --------------------------------------------------------------
    Case(
        "idle: every pod at 0 % goes to minReplicas (TooFewReplicas)",
        policy(metrics=[{"name": "gpu_util", "target": 90}], minReplicas=2),
        3,
        running(3, 0),
        2,
        reason_has=("ceil(3 × 0.00) = 0", "raised to minReplicas 2"),
        conditions={"ScalingLimited": "True:TooFewReplicas"},
    ),
    Case(
        "idle: a rate-limited scale-down walks down by the policy's limit (ScaleDownLimit)",
        policy(
            behavior={
                "scaleDown": {
                    "stabilizationWindowSeconds": 0,
                    "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
                }
            }
        ),
        10,
        running(10, 0),
        8,
        reason_has=("scale-down limited to 2 pods per 60 s: 8",),
        conditions={"ScalingLimited": "True:ScaleDownLimit"},
    ),
    # --- missing, Pending, terminating and surge pods ------------------------------------
    Case(
        "ratio exactly 1 with a missing pod: HPA fills nothing and keeps 2",
        policy(),
        2,
        (P(70), P(None)),
        2,
        reason_has=("within tolerance: keep 2",),
    ),
    Case(
        "scale down: exclude unscheduled pods (5 replicas, 4 Pending, 1 at 10 against 50: 1)",
        policy(metrics=[{"name": "gpu_util", "target": 50}]),
        5,
        (P(10), *pending(4)),
        1,
        reason_has=("4 pods Pending left out", "ceil(1 × 0.20) = 1"),
    ),
    Case(
        "pods that do not exist yet do not count: 4 replicas, 1 pod at 100 against 50: 2",
        policy(metrics=[{"name": "gpu_util", "target": 50}]),
        4,
        (P(100),),
        2,
    ),
    Case(
        "scale up with Pending pods: they count as 0 (1 at 140 + 1 Pending vs 70: within, keep)",
        policy(),
        2,
        (P(140), *pending(1)),
        2,
        reason_has=("1 pod Pending as 0: ratio 1.00",),
    ),
    Case(
        "scale up with Pending pods under heavy load still scales (1 at 280 + 1 Pending vs 70: 4)",
        policy(),
        2,
        (P(280), *pending(1)),
        4,
    ),
    Case(
        "a terminating pod with fresh samples is ignored: 53 against 70 on 3 stays 3 (no flapping)",
        policy(),
        3,
        (*running(3, 53), P(53, deleting=True)),
        3,
    ),
    Case(
        "a Failed pod is ignored",
        policy(),
        2,
        (*running(2, 83), P(None, phase="Failed", ready=False)),
        3,
    ),
    Case(
        "surge pods of a rolling update count when they report: 4 ready pods at 35 on 3 replicas",
        # HPA: ceil(0.5 × 4 ready pods) = 2
        policy(),
        3,
        running(4, 35),
        2,
    ),
    Case(
        "cascade: 1 ready at 90 plus 1 loading pod: no second scale-up",
        policy(),
        2,
        (P(90), P(None)),
        2,
        reason_has=("counting 1 pod without samples as 0: ratio 0.64", "reverses the direction"),
    ),
    Case(
        "missing pods counted as 0 still scale up under heavy load",
        policy(metrics=[{"name": "gpu_util", "target": 40}]),
        2,
        (P(100), P(None)),  # (100+0)/2/40 = 1.25 -> ceil(2 × 1.25) = 3
        3,
        reason_has=("counting 1 pod without samples as 0: ratio 1.25", "ceil(2 × 1.25) = 3"),
    ),
    Case(
        "missing pods at target on the way down",
        policy(),
        4,
        (P(14), P(14), P(None), P(None)),  # (14×2 + 70×2)/4/70 = 0.6 -> ceil(4 × 0.6) = 3
        3,
        reason_has=("counting 2 pods without samples at target: ratio 0.60",),
    ),
    Case(
        "missing pods at target landing in tolerance: no change",
        policy(),
        4,
        (P(50), *running(3, None)),  # (50 + 210)/4/70 = 0.93
        4,
        reason_has=("within tolerance",),
    ),
    # --- a metric without a value -------------------------------------------------------
    Case(
        "a metric without value blocks scale-down on the others, and ScalingActive is False",
        policy(metrics=TWO_METRICS),
        4,
        running(4, {"gpu_util": 20}),
        4,
        reason_has=("no scale-down on the other metrics while one has no value",),
        conditions={"ScalingActive": "False:FailedGetGPUMetrics"},
    ),
    Case(
        "a metric without value does not block scale-up on the others",
        policy(metrics=TWO_METRICS),
        2,
        running(2, {"gpu_util": 140}),
        4,
        conditions={"ScalingActive": "True:ValidMetricFound"},
    ),
    Case(
        "no pod with a value: no decision",
        policy(),
        4,
        running(4, None),
        4,
        conditions={"ScalingActive": "False:FailedGetGPUMetrics"},
        reason_has=("no fresh value from any running pod",),
    ),
    Case(
        "no pods match the selector: no decision",
        policy(),
        4,
        (),
        4,
        reason_has=("no pods match the target's selector",),
    ),
    Case("the pod list is not there yet: no decision", policy(), 4, None, 4, reason_has=("not listed yet",)),
    # --- per-direction tolerance (KEP-4951) --------------------------------------------
    Case(
        "scale-up tolerance wider than the default holds",
        policy(behavior={"scaleUp": {"tolerance": 0.3}, "scaleDown": {"stabilizationWindowSeconds": 0}}),
        4,
        running(4, 84),
        4,
    ),
    Case(
        "scale-down tolerance narrower: 20 pods at 0.95 go to 19",
        policy(maxReplicas=30, behavior={"scaleDown": {"tolerance": 0.01, "stabilizationWindowSeconds": 0}}),
        20,
        running(20, 66.5),
        19,
    ),
    Case("default tolerance holds the same 20 pods", policy(maxReplicas=30), 20, running(20, 66.5), 20),
    # --- bounds ------------------------------------------------------------------------
    Case(
        "clamped at maxReplicas",
        policy(maxReplicas=5),
        4,
        running(4, 140),
        5,
        reason_has=("capped at maxReplicas 5",),
        conditions={"ScalingLimited": "True:TooManyReplicas"},
    ),
    Case(
        "raised to minReplicas",
        policy(minReplicas=3),
        4,
        running(4, 10),
        3,
        reason_has=("raised to minReplicas 3",),
        conditions={"ScalingLimited": "True:TooFewReplicas"},
    ),
    Case(
        "current above max goes to max even without metrics",
        policy(maxReplicas=3),
        5,
        running(5, None),
        3,
        conditions={"ScalingLimited": "True:TooManyReplicas"},
    ),
    Case("current below min goes to min", policy(minReplicas=2), 1, running(1, 70), 2),
    Case(
        "target scaled to zero by hand disables scaling",
        policy(),
        0,
        (),
        0,
        conditions={"ScalingActive": "False:ScalingDisabled"},
    ),
    # --- stabilization -------------------------------------------------------------------
    Case(
        "scale-down held by the 300 s window",
        policy(behavior=HPA_DEFAULTS),
        4,
        running(4, 35),
        4,
        state=seen(recommendations=recs((200, 4), (100, 4))),
        reason_has=("held by the 300 s scale-down stabilization window at 4",),
        conditions={"AbleToScale": "True:ScaleDownStabilized"},
    ),
    Case(
        "scale-down released after the 300 s window",
        policy(behavior=HPA_DEFAULTS),
        4,
        running(4, 35),
        2,
        state=seen(recommendations=recs((301, 4), (400, 4))),
    ),
    Case(
        "scale-down goes to the highest recent recommendation",
        policy(behavior=HPA_DEFAULTS),
        6,
        running(6, 35),
        5,
        state=seen(recommendations=recs((250, 5), (100, 4))),
    ),
    Case(
        "a controller seeing a workload first seeds its history with the current count",
        policy(behavior=HPA_DEFAULTS),
        4,
        running(4, 35),
        4,
        state=ScalerState(),
    ),
    Case(
        "first sight with a 60 s scale-up window and no scale-down window holds the scale-up",
        policy(
            behavior={
                "scaleUp": {"stabilizationWindowSeconds": 60},
                "scaleDown": {"stabilizationWindowSeconds": 0},
            }
        ),
        2,
        running(2, 140),
        2,
        state=ScalerState(),
        conditions={"AbleToScale": "True:ScaleUpStabilized"},
    ),
    Case(
        "scale-up takes the lowest recommendation of its window",
        policy(
            behavior={
                "scaleUp": {"stabilizationWindowSeconds": 60},
                "scaleDown": {"stabilizationWindowSeconds": 0},
            }
        ),
        2,
        running(2, 140),
        3,
        state=seen(recommendations=recs((30, 3), (10, 5))),
        conditions={"AbleToScale": "True:ScaleUpStabilized"},
    ),
    # --- rate policies ------------------------------------------------------------------
    Case(
        "default scale-up: Percent 100 vs Pods 4, Max picks +4 from 2",
        policy(maxReplicas=50),
        2,
        running(2, 700),
        6,
        reason_has=("scale-up limited to 4 pods per 15 s: 6",),
        conditions={"ScalingLimited": "True:ScaleUpLimit"},
    ),
    Case(
        "default scale-up: Max picks +100 % from 10",
        policy(maxReplicas=50),
        10,
        running(10, 280),
        20,
        reason_has=("scale-up limited to 100% per 15 s: 20",),
    ),
    Case(
        "scale-up with Min select picks the smaller",
        policy(
            maxReplicas=50,
            behavior={"scaleUp": {"selectPolicy": "Min"}, "scaleDown": {"stabilizationWindowSeconds": 0}},
        ),
        10,
        running(10, 280),
        14,
        reason_has=("4 pods per 15 s",),
    ),
    Case(
        "scale-up events in the period count against the limit",
        policy(
            maxReplicas=50,
            behavior={"scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}},
        ),
        4,
        running(4, 280),
        4,
        state=seen(scale_up_events=(TimedValue(NOW - 30, 2),)),
        conditions={"ScalingLimited": "True:ScaleUpLimit"},
    ),
    Case(
        "scale-up events older than the period do not count",
        policy(
            maxReplicas=50,
            behavior={"scaleUp": {"policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}]}},
        ),
        4,
        running(4, 280),
        6,
        state=seen(scale_up_events=(TimedValue(NOW - 61, 2),)),
    ),
    Case(
        "scale-down Percent 50 with Max select",
        policy(
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
        running(10, 7),
        5,
        reason_has=("scale-down limited to 50% per 60 s: 5",),
        conditions={"ScalingLimited": "True:ScaleDownLimit"},
    ),
    Case(
        "scale-down Percent 50 vs Pods 1 with Min select removes 1",
        policy(
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
        running(10, 7),
        9,
        reason_has=("1 pod per 60 s",),
    ),
    Case(
        "scale-down Disabled never scales down",
        policy(behavior={"scaleDown": {"stabilizationWindowSeconds": 0, "selectPolicy": "Disabled"}}),
        10,
        running(10, 7),
        10,
    ),
    Case(
        "scale-up Disabled never scales up",
        policy(
            behavior={"scaleUp": {"selectPolicy": "Disabled"}, "scaleDown": {"stabilizationWindowSeconds": 0}}
        ),
        2,
        running(2, 140),
        2,
    ),
    # --- gpuscale's cooldown ------------------------------------------------------------
    Case(
        "gpuscale cooldown: a scale-up within cooldownSeconds holds",
        policy(behavior={"scaleUp": {"cooldownSeconds": 60}, "scaleDown": {"stabilizationWindowSeconds": 0}}),
        2,
        running(2, 140),
        2,
        state=seen(last_scale_up=NOW - 20),
        reason_has=("scale-up cooling down (20 s since the last, cooldownSeconds 60): keep 2",),
        conditions={"AbleToScale": "False:BackoffUpscale"},
    ),
    Case(
        "gpuscale cooldown: over after cooldownSeconds",
        policy(behavior={"scaleUp": {"cooldownSeconds": 60}, "scaleDown": {"stabilizationWindowSeconds": 0}}),
        2,
        running(2, 140),
        4,
        state=seen(last_scale_up=NOW - 61),
    ),
    Case(
        "gpuscale cooldown: each direction has its own",
        policy(
            behavior={
                "scaleUp": {"cooldownSeconds": 600},
                "scaleDown": {"stabilizationWindowSeconds": 0, "cooldownSeconds": 30},
            }
        ),
        4,
        running(4, 35),
        2,
        state=seen(last_scale_up=NOW - 20, last_scale_down=NOW - 40),
    ),
    Case(
        "gpuscale cooldown: a scale-down within cooldownSeconds holds",
        policy(behavior={"scaleDown": {"stabilizationWindowSeconds": 0, "cooldownSeconds": 30}}),
        4,
        running(4, 35),
        4,
        state=seen(last_scale_down=NOW - 10),
        conditions={"AbleToScale": "False:BackoffDownscale"},
    ),
    # --- paused, staleness, fallback ----------------------------------------------------
    Case(
        "gpuscale paused: changes nothing but still computes the metrics",
        policy(paused=True),
        2,
        running(2, 140),
        2,
        conditions={"ScalingActive": "False:ScalingDisabled"},
        check=lambda e: e.desired == 2 and e.proposals[0].replicas == 4,
    ),
    Case(
        "metrics that arrived longer ago than the window are not acted on",
        policy(window="30s"),
        2,
        running(2, 140),
        2,
        received_s_ago=31,
        reason_has=("longer than the 30 s window",),
        conditions={"ScalingActive": "False:FailedGetGPUMetrics"},
    ),
    Case(
        "gpuscale fallback: not yet due",
        policy(fallback={"afterSeconds": 120, "replicas": 5}),
        2,
        running(2, None),
        2,
        state=seen(last_fresh_metrics=NOW - 60),
        no_metrics=True,
        reason_has=("fallback to 5 after 120 s, blind for 60 s",),
    ),
    Case(
        "gpuscale fallback: raises to its count after afterSeconds",
        policy(fallback={"afterSeconds": 120, "replicas": 5}),
        2,
        running(2, None),
        5,
        state=seen(last_fresh_metrics=NOW - 121),
        no_metrics=True,
        reason_has=("no metrics received for 121 s: fallback to 5",),
        conditions={"ScalingActive": "False:FailedGetGPUMetrics"},
    ),
    Case(
        "gpuscale fallback: never scales down",
        policy(fallback={"afterSeconds": 120, "replicas": 2}),
        6,
        running(6, None),
        6,
        state=seen(last_fresh_metrics=NOW - 500),
    ),
    Case(
        "gpuscale fallback: counts from first sight when no metrics ever came",
        policy(fallback={"afterSeconds": 120, "replicas": 3}),
        1,
        running(1, None),
        3,
        state=ScalerState(first_seen=NOW - 130),
        no_metrics=True,
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_scenario(case: Case) -> None:
    result = step(
        case.scaler,
        case.current,
        case.pods,
        state=case.state,
        received_s_ago=case.received_s_ago,
        no_metrics=case.no_metrics,
    ).evaluation
    assert result is not None
    if case.check is not None:
        assert case.check(result), result.reason
    else:
        assert result.desired == case.expect, result.reason
    for fragment in case.reason_has:
        assert fragment in result.reason, result.reason
    for type_, expected in case.conditions.items():
        c = result.conditions.of(ConditionType(type_))
        assert f"{c.status}:{c.reason.value}" == expected, c


# --- several steps ---------------------------------------------------------------------


def test_scale_down_window_round_trip() -> None:
    """A load drop is held for 300 s by the default window, then released."""
    scaler = policy(behavior=HPA_DEFAULTS)
    state = seen(recommendations=recs((1, 4)))
    for t in range(0, 300, 15):
        s = step(scaler, 4, running(4, 35), state=state, now=NOW + t)
        assert s.evaluation is not None
        assert s.evaluation.desired == 4, (t, s.evaluation.reason)
        state = s.memory.state
    s = step(scaler, 4, running(4, 35), state=state, now=NOW + 300)
    assert s.evaluation is not None
    assert s.evaluation.desired == 2, s.evaluation.reason


def test_cascade_held_until_new_pods_report() -> None:
    """docs/ARCHITECTURE.md#algorithm (missing pods): after 1 -> 2, the new pod loads a model for 20 s without
    samples: no second scale-up until it reports; then the true load decides."""
    scaler = policy()
    first = step(scaler, 1, (P(90),))
    assert first.decision is not None
    assert (first.decision.from_replicas, first.decision.to_replicas) == (1, 2)
    state = first.memory.state
    for t in range(2, 21, 2):  # pod 2 loading: not Ready, no samples; pod 1 still at 90
        s = step(scaler, 2, (P(90), P(None, ready=False)), state=state, now=NOW + t)
        assert s.decision is None, (t, s.evaluation)
        state = s.memory.state
    s = step(scaler, 2, running(2, 90), state=state, now=NOW + 22)
    assert s.decision is not None
    assert s.decision.to_replicas == 3


def test_a_written_count_is_counted_from_until_the_scale_shows_it_and_nothing_waits() -> None:
    """The step writes the desired count and goes on: until /scale shows it, the next
    steps count from it (as HPA from the spec.replicas it wrote), so a lagging /scale
    neither repeats the change nor undoes it through the rate limits."""
    scaler = policy(
        behavior={
            "scaleUp": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 2, "periodSeconds": 60}],
            },
            "scaleDown": {"stabilizationWindowSeconds": 0},
        }
    )
    first = step(scaler, 2, running(2, 300))
    assert first.decision is not None
    assert (first.decision.from_replicas, first.decision.to_replicas) == (2, 4)
    written = first.memory.state.desired
    assert written is not None
    assert (written.decision_id, written.to_replicas, written.settled) == (first.decision.id, 4, False)
    assert first.memory.state.scale_up_events == (TimedValue(NOW, 2),)  # the write is the scale event
    # /scale still shows 2: counted from 4, the period's 2 pods are spent, nothing new is written.
    lagging = step(scaler, 2, running(2, 300), state=first.memory.state, now=NOW + 1)
    assert lagging.decision is None
    assert lagging.evaluation is not None
    assert lagging.evaluation.desired == 4, lagging.evaluation.reason
    # /scale shows it: settled, and the next period's change is written at once.
    shown = step(scaler, 4, running(4, 300), state=lagging.memory.state, now=NOW + 2)
    assert [n for n, _ in shown.notes] == [Note.DESIRED_REACHED]
    assert shown.decision is None
    later = step(scaler, 4, running(4, 300), state=shown.memory.state, now=NOW + 61)
    assert later.decision is not None
    assert (later.decision.from_replicas, later.decision.to_replicas) == (4, 6)


def test_a_count_the_scale_never_shows_gives_way_to_the_scale() -> None:
    """Another writer moved the target, or the actuator never got there in the grace:
    /scale is the truth, and a desired count no longer wanted is written over."""
    scaler = policy()
    first = step(scaler, 2, running(2, 140))
    assert first.decision is not None
    assert first.decision.to_replicas == 4
    moved = step(scaler, 7, running(7, 70), state=first.memory.state, now=NOW + 2)
    assert [n for n, _ in moved.notes] == [Note.TARGET_CHANGED_ELSEWHERE]
    assert moved.decision is not None  # 7 is what the load wants now: 4 is written over
    assert (moved.decision.from_replicas, moved.decision.to_replicas) == (7, 7)
    still = step(scaler, 7, running(7, 70), state=moved.memory.state, now=NOW + 4)
    assert (still.decision, still.notes) == (None, ())

    quiet = step(scaler, 2, running(2, 70), state=first.memory.state, now=NOW + 31, config=Config(30.0))
    assert [n for n, _ in quiet.notes] == [Note.DESIRED_NOT_REACHED_IN_TIME]
    assert quiet.decision is not None  # 2 is wanted now: 4 is written over
    assert (quiet.decision.from_replicas, quiet.decision.to_replicas) == (2, 2)


def test_the_actuator_s_refusal_is_said_on_the_status_and_holds_nothing() -> None:
    from gpuscale.wire import Action
    from gpuscale_decider.core.reconcile import action_seen

    scaler = policy()
    first = step(scaler, 2, running(2, 140))
    assert first.decision is not None
    refused = Action(first.decision.id, NOW + 1, "refused", None, None, "GPUScaler ns/bert is paused")
    state = action_seen(first.memory.state, refused)
    assert state.last_failure == "GPUScaler ns/bert is paused"
    assert action_seen(state, Action("another", NOW + 1, "applied", 2, 4, None)) == state
    told = step(scaler, 2, running(2, 140), state=state, now=NOW + 40, config=Config(30.0))
    assert told.decision is None  # 4 is still wanted and written: the actuator tries again
    assert told.evaluation is not None
    assert told.evaluation.conditions.able_to_scale.reason.value == "FailedRescale"
    assert "GPUScaler ns/bert is paused" in told.evaluation.reason


def test_decision_ids_are_derived_from_the_workload_counts_and_instant() -> None:
    a = step(policy(), 2, running(2, 140)).decision
    b = step(policy(), 2, running(2, 140)).decision
    c = step(policy(), 2, running(2, 140), now=NOW + 0.001).decision
    assert a is not None
    assert b is not None
    assert c is not None
    assert a.id == b.id
    assert a.id != c.id


def test_another_controller_on_the_target_gets_a_condition_and_no_decision() -> None:
    s = step(policy(), 2, running(2, 140), conflict="HorizontalPodAutoscaler ns/bert")
    assert s.decision is None
    assert s.status is not None
    able = {c["type"]: c for c in s.status["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "ConflictingController")
    assert "HorizontalPodAutoscaler ns/bert already scales Deployment/bert" in able["message"]


def test_status_is_written_when_it_changes_and_refreshed_at_most_every_15_s() -> None:
    scaler = policy()

    def at(memory: Memory, t: float, util: float) -> Step:
        views, observation = world(running(4, util), received_at=NOW + t - 1)
        return reconcile(memory, scaler, Target(4, SELECTOR), views, observation, NOW + t)

    first = at(Memory(seen()), 0, 70)
    assert first.status is not None
    assert first.status["targets"] == "70/70"
    moved = at(first.memory, 5, 71)
    assert moved.status is None  # only the value moved, 5 s later: not yet
    refreshed = at(moved.memory, 16, 71)
    assert refreshed.status is not None  # HPA's sync period passed: the value is refreshed
    assert refreshed.status["targets"] == "71/70"
    changed = at(refreshed.memory, 17, 140)
    assert changed.status is not None  # replicas and conditions changed: at once
    assert changed.status["desiredReplicas"] == 8
    # The clock set back an hour after a write: the value is refreshed at once, not an hour on.
    assert at(refreshed.memory, 18, 72).status is None
    assert at(refreshed.memory, 18 - 3600, 72).status is not None


def test_state_round_trips_and_tolerates_damage() -> None:
    from gpuscale_decider.core.state import Capacity, Desired

    state = seen(
        recommendations=recs((5, 3)),
        scale_up_events=(TimedValue(NOW, 2),),
        last_scale_up=NOW,
        last_fresh_metrics=NOW,
        desired=Desired("d-1", 2, 3, NOW, settled=True),
        queue_capacity=Capacity(NOW - 40, 6.5),
    )
    assert ScalerState.from_dict(state.to_dict()) == state
    damaged = ScalerState.from_dict(
        {
            "recommendations": [[1.0], "x", [2.0, 3]],
            "last_scale_up": "yesterday",
            "desired": ["d", "2", 3, 1.0, False],
            "queue_capacity": [NOW, 0],
        }
    )
    assert damaged.recommendations == (TimedValue(2.0, 3),)
    assert damaged.last_scale_up is None
    assert damaged.desired is None
    assert damaged.queue_capacity is None  # a pod that serves nothing is no capacity to divide by
    for raw in ([NOW, -1.0], [NOW, float("inf")], [NOW, True], [NOW], "6/s", [float("nan"), 6.0]):
        assert ScalerState.from_dict({"queue_capacity": raw}).queue_capacity is None, raw
    # A record written before the capacity was kept reads as none remembered.
    assert ScalerState.from_dict({"last_scale_up": NOW}).queue_capacity is None
    assert ScalerState.from_dict(None) == ScalerState()


def test_status_last_scale_time_seeds_cooldown_after_restart() -> None:
    from gpuscale_decider.core.state import seed_last_scale

    scaler = policy(
        behavior={"scaleUp": {"cooldownSeconds": 60}, "scaleDown": {"stabilizationWindowSeconds": 0}}
    )
    state = seed_last_scale(seen(), NOW - 30)
    result = step(scaler, 2, running(2, 140), state=state).evaluation
    assert result is not None
    assert result.desired == 2
    assert "cooling down" in result.reason


def test_shadow_mode_advises_once_per_change_and_never_decides() -> None:
    """spec.mode Shadow: evaluated even while an HPA owns the target; what
    gpuscale would do is advice, published once for each new (from, to)."""
    scaler = policy(mode="Shadow")
    hpa = "HorizontalPodAutoscaler ns/bert"
    first = step(scaler, 2, running(2, 140), conflict=hpa)
    assert first.decision is None
    assert first.advice is not None
    assert (first.advice.from_replicas, first.advice.to_replicas) == (2, 4)
    assert (
        "shadow mode: would scale 2 → 4; HorizontalPodAutoscaler ns/bert owns the target"
        in first.advice.reason
    )
    assert first.status is not None
    able = {c["type"]: c for c in first.status["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "ShadowMode")
    assert first.status["desiredReplicas"] == 4  # what it would do
    assert first.memory.state.desired is None  # advice writes no desired count
    again = step(scaler, 2, running(2, 140), state=first.memory.state, now=NOW + 2, conflict=hpa)
    assert (again.advice, again.decision) == (None, None)
    # The live controller scaled to 3 and the load stays: new advice, 3 -> 6.
    moved = step(scaler, 3, running(3, 140), state=again.memory.state, now=NOW + 4, conflict=hpa)
    assert moved.advice is not None
    assert (moved.advice.from_replicas, moved.advice.to_replicas) == (3, 6)
    settled = step(scaler, 6, running(6, 70), state=moved.memory.state, now=NOW + 6, conflict=hpa)
    # Agreement is said once too: keep 6, the 3 -> 6 advice no longer stands.
    assert settled.advice is not None
    assert (settled.advice.from_replicas, settled.advice.to_replicas) == (6, 6)
    assert "shadow mode: would keep 6" in settled.advice.reason
    assert settled.decision is None
    quiet = step(scaler, 6, running(6, 70), state=settled.memory.state, now=NOW + 8, conflict=hpa)
    assert quiet.advice is None


def test_metrics_over_another_window_than_the_policy_s_are_never_acted_on() -> None:
    """A 30 s mean is no answer to a policy that asked for 10 s. Until the
    aggregator applies the policy's window: no decision either way, ScalingActive
    False with the reason, the count kept."""
    views, observation = world(running(2, 140), received_at=NOW - 1, window_s=30.0)
    short = reconcile(Memory(seen()), policy(window="10s"), Target(2, SELECTOR), views, observation, NOW)
    assert short.evaluation is not None
    assert short.decision is None
    assert short.evaluation.desired == 2
    assert "averages this workload over 30 s, not spec.window 10 s" in short.evaluation.reason
    active = short.evaluation.conditions.scaling_active
    assert (active.status, active.reason.value) == (False, "FailedGetGPUMetrics")
    idle, idle_observation = world(running(3, 0), received_at=NOW - 1, window_s=30.0)
    down = reconcile(Memory(seen()), policy(window="60s"), Target(3, SELECTOR), idle, idle_observation, NOW)
    assert down.decision is None
    assert down.evaluation is not None
    assert down.evaluation.desired == 3
    same = reconcile(Memory(seen()), policy(window="30s"), Target(2, SELECTOR), views, observation, NOW)
    assert same.evaluation is not None
    assert same.decision is not None
    assert "spec.window" not in same.evaluation.reason


def test_a_window_within_a_millisecond_is_the_policy_s() -> None:
    views, observation = world(running(2, 140), received_at=NOW - 1, window_s=10.0004)
    s = reconcile(Memory(seen()), policy(window="10s"), Target(2, SELECTOR), views, observation, NOW)
    assert s.decision is not None


def test_averages_restarted_by_a_new_pod_are_said_in_the_reason() -> None:
    """The aggregator dropped what was measured before a pod became ready 6 s ago."""
    from dataclasses import replace as with_

    views, observation = world(running(3, 66.7), received_at=NOW - 1)
    assert observation is not None
    s = reconcile(Memory(seen()), policy(), Target(3, SELECTOR), views, with_(observation, span_s=6.0), NOW)
    assert s.evaluation is not None
    assert s.evaluation.desired == 3
    assert "averages of the last 6 s of the 30 s window only: a pod became ready then" in s.evaluation.reason


@pytest.mark.parametrize(
    ("span_s", "said"),
    [
        (0.013, "averages of what was measured since a pod became ready, less than a second ago, only"),
        (2.5, "averages of the last 2.5 s of the 30 s window only"),
        (12.4, "averages of the last 12 s of the 30 s window only"),
    ],
)
def test_averages_that_restarted_under_a_second_ago_say_so_not_zero_seconds(span_s: float, said: str) -> None:
    """The aggregator tells a capacity change as soon as every pod was measured after
    it, often well under a second later: "the last 0 s" would read as no data."""
    from dataclasses import replace as with_

    views, observation = world(running(3, 66.7), received_at=NOW - 1)
    assert observation is not None
    s = reconcile(
        Memory(seen()), policy(), Target(3, SELECTOR), views, with_(observation, span_s=span_s), NOW
    )
    assert s.evaluation is not None
    assert said in s.evaluation.reason
    assert " 0 s" not in s.evaluation.reason


# --- a clock set back ----------------------------------------------------------------
# The state is stored in a KV bucket and read by whichever decider replica leads: one
# whose clock is an hour behind the writer's (or this one's after a step back) finds
# times in its future. Each wait then lasts its own length from now, never the skew.
HOUR = 3600.0


def test_a_cooldown_stored_an_hour_ahead_holds_its_own_length_not_the_hour() -> None:
    scaler = policy(behavior={"scaleDown": {"stabilizationWindowSeconds": 0, "cooldownSeconds": 30}})
    state = seen(last_scale_down=NOW + HOUR)
    first = step(scaler, 3, running(3, 20), state=state)
    assert first.evaluation is not None
    assert first.evaluation.desired == 3
    assert "cooling down" in first.evaluation.reason
    later = step(scaler, 3, running(3, 20), state=first.memory.state, now=NOW + 31)
    assert later.evaluation is not None
    assert later.evaluation.desired == 1, later.evaluation.reason  # before: held until NOW + 1 h 30 s


def test_a_recommendation_stored_an_hour_ahead_leaves_the_scale_down_window_once_it_has_passed() -> None:
    scaler = policy(behavior={"scaleDown": {"stabilizationWindowSeconds": 300}})
    state = seen(recommendations=(TimedValue(NOW + HOUR, 5),))
    first = step(scaler, 3, running(3, 20), state=state)
    assert first.evaluation is not None
    assert first.evaluation.desired == 3
    later = step(scaler, 3, running(3, 20), state=first.memory.state, now=NOW + 301)
    assert later.evaluation is not None
    assert later.evaluation.desired == 1, later.evaluation.reason


def test_scale_up_events_stored_an_hour_ahead_limit_the_rate_for_one_period() -> None:
    scaler = policy(behavior={"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}})
    state = seen(scale_up_events=(TimedValue(NOW + HOUR, 1),), last_scale_up=NOW + HOUR)
    first = step(scaler, 2, running(2, 140), state=state)
    assert first.evaluation is not None
    assert first.evaluation.desired == 2  # the period's one pod is spent
    later = step(scaler, 2, running(2, 140), state=first.memory.state, now=NOW + 61)
    assert later.evaluation is not None
    assert later.evaluation.desired == 3, later.evaluation.reason


def test_clock_bounded_brings_every_stored_time_to_now_and_leaves_a_sane_state_alone() -> None:
    from gpuscale_decider.core.state import Capacity, Desired, clock_bounded

    ahead = ScalerState(
        recommendations=(TimedValue(NOW - 10, 2), TimedValue(NOW + HOUR, 5)),
        scale_up_events=(TimedValue(NOW + HOUR, 1),),
        scale_down_events=(TimedValue(NOW + HOUR, 2),),
        last_scale_up=NOW + HOUR,
        last_scale_down=NOW + HOUR,
        last_fresh_metrics=NOW + HOUR,
        first_seen=NOW + HOUR,
        desired=Desired("d", 2, 3, NOW + HOUR),
        queue_capacity=Capacity(NOW + HOUR, 6.0),
    )
    bounded = clock_bounded(ahead, NOW)
    assert bounded.recommendations == (TimedValue(NOW - 10, 2), TimedValue(NOW, 5))
    assert bounded.scale_up_events == (TimedValue(NOW, 1),)
    assert bounded.scale_down_events == (TimedValue(NOW, 2),)
    assert (bounded.last_scale_up, bounded.last_scale_down) == (NOW, NOW)
    assert (bounded.last_fresh_metrics, bounded.first_seen) == (NOW, NOW)
    assert bounded.desired == Desired("d", 2, 3, NOW)
    assert bounded.queue_capacity == Capacity(NOW, 6.0)
    # Only the capacity ahead: bounded too (measured "in the future" it would be kept an hour longer).
    assert clock_bounded(ScalerState(queue_capacity=Capacity(NOW + HOUR, 6.0)), NOW).queue_capacity == (
        Capacity(NOW, 6.0)
    )

    sane = ScalerState(recommendations=(TimedValue(NOW - 10, 2),), last_scale_up=NOW - 5, first_seen=NOW)
    assert clock_bounded(sane, NOW) is sane

    # A stored history out of order (damaged, or hand-written) is read in time order, so the
    # check of its newest entry, the last, finds the one ahead.
    unordered = ScalerState.from_dict({"recommendations": [[NOW + HOUR, 5], [NOW - 10, 2]]})
    assert unordered.recommendations == (TimedValue(NOW - 10, 2), TimedValue(NOW + HOUR, 5))
    assert clock_bounded(unordered, NOW).recommendations == (
        TimedValue(NOW - 10, 2),
        TimedValue(NOW, 5),
    )


def test_metrics_that_arrived_after_now_on_a_clock_set_back_are_not_acted_on() -> None:
    """Received and judged on the decider's one clock: metrics "from the future" mean it was set
    back since they arrived, and read as fresh they would be acted on for the skew."""
    result = step(policy(), 2, running(2, 140), received_s_ago=-HOUR).evaluation
    assert result is not None
    assert result.desired == 2
    assert "clock was set back 3600 s since the latest metrics arrived" in result.reason
    assert not result.fresh
