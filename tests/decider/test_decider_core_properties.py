"""Property tests of the decider's pure step over random metric streams."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.policy import GPUScaler, parse_gpuscaler
from gpuscale_decider.core.reconcile import Evaluation, Memory, Target, reconcile
from gpuscale_decider.core.state import ScalerState

from .scenario import SELECTOR, P, world

START = 1_700_000_000.0


@dataclass
class Tick:
    dt: float  # seconds since the previous tick
    util: float | None  # None: no metrics message this tick
    fresh_fraction: float  # share of current replicas that report
    age: float  # how old the message is when it arrives


ticks = st.lists(
    st.builds(
        Tick,
        dt=st.floats(0.5, 30.0),
        util=st.one_of(st.none(), st.floats(0.0, 100.0)),
        fresh_fraction=st.floats(0.0, 1.0),
        age=st.floats(0.0, 60.0),
    ),
    min_size=1,
    max_size=40,
)


@st.composite
def specs(draw: Any) -> GPUScaler:
    lo = draw(st.integers(1, 5))
    hi = draw(st.integers(lo, 20))
    body: dict[str, Any] = {
        "scaleTargetRef": {"kind": "Deployment", "name": "w"},
        "minReplicas": lo,
        "maxReplicas": hi,
        "metrics": [{"name": "gpu_util", "target": draw(st.sampled_from([20, 50, 70, 90]))}],
        "tolerance": draw(st.sampled_from([0.0, 0.05, 0.1, 0.3])),
        "behavior": {
            "scaleUp": {
                "stabilizationWindowSeconds": draw(st.sampled_from([0, 30, 120])),
                "cooldownSeconds": draw(st.sampled_from([0, 20, 90])),
                "selectPolicy": draw(st.sampled_from(["Max", "Min"])),
            },
            "scaleDown": {
                "stabilizationWindowSeconds": draw(st.sampled_from([0, 60, 300])),
                "cooldownSeconds": draw(st.sampled_from([0, 20, 90])),
            },
        },
    }
    if draw(st.booleans()):
        body["fallback"] = {
            "afterSeconds": draw(st.sampled_from([10, 60])),
            "replicas": draw(st.integers(1, hi)),
        }
    return parse_gpuscaler({"metadata": {"name": "p"}, "spec": body})


def evaluate(
    scaler: GPUScaler,
    current: int,
    util: float | None,
    fresh: int,
    state: ScalerState,
    now: float,
    age: float = 0,
) -> tuple[Evaluation, ScalerState]:
    """One step over ``current`` Running pods, the first ``fresh`` of them at ``util``."""
    pods = tuple(P(util if i < fresh else None) for i in range(current))
    views, observation = world(pods, received_at=now - age)
    metrics = observation if util is not None else None
    s = reconcile(Memory(state), scaler, Target(current, SELECTOR), views, metrics, now)
    assert s.evaluation is not None
    return s.evaluation, s.memory.state


def run_stream(
    scaler: GPUScaler, initial: int, stream: list[Tick]
) -> list[tuple[float, int, int, bool, ScalerState]]:
    """Feed the stream; each decision is applied at once, as the actuator would
    (the next step sees the new count on /scale and settles the desired count).
    Returns (now, from, to, fresh, state before) per tick."""
    now = START
    current = initial
    state = ScalerState()
    out = []
    for tick in stream:
        now += tick.dt
        before = state
        fresh = int(current * tick.fresh_fraction)
        result, state = evaluate(scaler, current, tick.util, fresh, state, now, tick.age)
        out.append((now, current, result.desired, result.fresh, before))
        current = result.desired
    return out


@settings(max_examples=150, deadline=None)
@given(scaler=specs(), stream=ticks, data=st.data())
def test_result_always_within_min_max(scaler: GPUScaler, stream: list[Tick], data: Any) -> None:
    initial = data.draw(st.integers(1, 30))
    for _, _, desired, _, _ in run_stream(scaler, initial, stream):
        assert scaler.spec.min_replicas <= desired <= scaler.spec.max_replicas


@settings(max_examples=150, deadline=None)
@given(scaler=specs(), stream=ticks, data=st.data())
def test_never_a_change_during_a_cooldown(scaler: GPUScaler, stream: list[Tick], data: Any) -> None:
    initial = data.draw(st.integers(scaler.spec.min_replicas, scaler.spec.max_replicas))
    for now, current, desired, _, before in run_stream(scaler, initial, stream):
        if desired > current and before.last_scale_up is not None:
            assert now - before.last_scale_up >= scaler.spec.scale_up.cooldown_seconds
        if desired < current and before.last_scale_down is not None:
            assert now - before.last_scale_down >= scaler.spec.scale_down.cooldown_seconds


@settings(max_examples=150, deadline=None)
@given(scaler=specs(), stream=ticks, data=st.data())
def test_never_a_scale_down_without_fresh_metrics(scaler: GPUScaler, stream: list[Tick], data: Any) -> None:
    # Within [min, max]: outside it, the bounds are enforced whatever the metrics.
    initial = data.draw(st.integers(scaler.spec.min_replicas, scaler.spec.max_replicas))
    for _, current, desired, fresh, _ in run_stream(scaler, initial, stream):
        if not fresh:
            assert desired >= current


@settings(max_examples=150, deadline=None)
@given(scaler=specs(), data=st.data())
def test_constant_load_within_tolerance_never_changes(scaler: GPUScaler, data: Any) -> None:
    target = scaler.spec.metrics[0].target
    ratio = data.draw(st.floats(1.0 - scaler.spec.scale_down_tolerance, 1.0 + scaler.spec.scale_up_tolerance))
    initial = data.draw(st.integers(scaler.spec.min_replicas, scaler.spec.max_replicas))
    steps = data.draw(st.integers(1, 30))
    now = START
    state = ScalerState()
    for _ in range(steps):
        now += 2.0
        result, state = evaluate(scaler, initial, target * ratio, initial, state, now)
        assert not result.change, result.reason


def reference_stabilize(
    history: list[tuple[float, int]], up_s: int, down_s: int, current: int, desired: int, now: float
) -> int:
    """HPA's stabilizeRecommendationWithBehaviors over the full, uncompacted history."""
    up = min([v for ts, v in history if ts > now - up_s] + [desired])
    down = max([v for ts, v in history if ts > now - down_s] + [desired])
    return min(max(current, up), down)


@settings(max_examples=200, deadline=None)
@given(
    up_s=st.sampled_from([0, 15, 60]),
    down_s=st.sampled_from([0, 30, 300]),
    steps=st.lists(
        st.tuples(st.floats(0.5, 40.0), st.floats(0.0, 100.0), st.integers(1, 10)), min_size=1, max_size=60
    ),
)
def test_compacted_history_stabilizes_exactly_like_hpa(
    up_s: int, down_s: int, steps: list[tuple[float, float, int]]
) -> None:
    scaler = parse_gpuscaler(
        {
            "metadata": {"name": "p"},
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "w"},
                "maxReplicas": 1000,
                "metrics": [{"name": "gpu_util", "target": 50}],
                "tolerance": 0.0,
                "behavior": {
                    "scaleUp": {"stabilizationWindowSeconds": up_s, "selectPolicy": "Disabled"},
                    "scaleDown": {"stabilizationWindowSeconds": down_s, "selectPolicy": "Disabled"},
                },
            },
        }
    )
    now = START
    state = ScalerState(first_seen=now)  # no start-up seeding: compare the windows alone
    full: list[tuple[float, int]] = []
    for dt, util, current in steps:
        now += dt
        result, state = evaluate(scaler, current, util, current, state, now)
        assert result.recommendation is not None
        expected = reference_stabilize(full, up_s, down_s, current, result.recommendation, now)
        assert result.stabilized == expected
        full.append((now, result.recommendation))
    assert len(state.recommendations) <= len(full)
