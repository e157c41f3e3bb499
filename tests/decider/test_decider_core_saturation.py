"""gpuscale's own rules on top of HPA's calculation (issue 14): a metric pinned
at its ceiling is judged on its recent means (and sized by the engines' flows,
else their queues, where the pods report them); a queue waits for the capacity already requested
and asks for nothing while it falls. Named scenarios, as HPA's tests; each
rule says itself in the reason. Without recent means (an aggregator that does
not send them) every answer is HPA's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpuscale.policy import GPUScaler

from .scenario import P, pending, policy, step

UTIL = policy()  # gpu_util, target 70, max 10, HPA's scale-up rates
QUEUE = policy(metrics=[{"name": "requests_waiting", "target": 4}])


def pod(window: float, recent: float | None = None, **engine: float) -> P:
    """A Running, Ready pod: its window mean of gpu_util, and its recent means."""
    recent_values = {} if recent is None else {"gpu_util": recent}
    recent_values.update(engine)
    return P(window, recent=recent_values if recent is not None or engine else None)


def queue_pod(window: float, recent: float | None) -> P:
    return P({"requests_waiting": window}, recent=None if recent is None else {"requests_waiting": recent})


@dataclass(frozen=True)
class Case:
    scaler: GPUScaler
    current: int
    pods: tuple[P, ...]
    desired: int
    said: str = ""  # in the reason
    not_said: str = ""
    span_s: float | None = None  # the averages start this long ago (a pod became ready)


CASES = {
    "pinned: two pods at 100 over the last seconds, window mean 60: ceil(2 x 100/70) = 3 now": Case(
        UTIL, 2, (pod(60, 100), pod(60, 100)), 3, "gpu_util pinned at its ceiling on every counted pod"
    ),
    "pinned, engines report their queues: running 16 + waiting 16 is twice the pod: ceil(1 x 200/70) = 3": Case(
        UTIL,
        1,
        (pod(53, 100, requests_running=16, requests_waiting=16),),
        3,
        "the engines' queues size the step: running 16.0 + waiting 16.0 per pod is 2.0 times what they run",
    ),
    "pinned, engines report their flows: 16 requests/s arrive, 8 finish: twice the pod: ceil(1 x 200/70) = 3": Case(
        # The queue's stock (running 16 + waiting 80: 6 times) would ask ceil(600/70) = 9.
        UTIL,
        1,
        (
            pod(
                53,
                100,
                requests_running=16,
                requests_waiting=80,
                request_arrival_rate=16,
                request_completion_rate=8,
            ),
        ),
        3,
        "the engines' flows size the step: 16.0 requests/s arrive per pod and 8.0/s finish, 2.0 times",
    ),
    "pinned, flows of a draining backlog (fewer arrive than finish): no more than the ceiling: ceil(100/70) = 2": Case(
        UTIL,
        1,
        (
            pod(
                53,
                100,
                requests_running=16,
                requests_waiting=30,
                request_arrival_rate=5,
                request_completion_rate=8,
            ),
        ),
        2,
        "flows size the step",
    ),
    "pinned, too few requests finished to measure a rate (0.5/s over 3 s): the queue sizes it: 3": Case(
        UTIL,
        1,
        (
            pod(
                53,
                100,
                requests_running=16,
                requests_waiting=16,
                request_arrival_rate=9,
                request_completion_rate=0.5,
            ),
        ),
        3,
        "the engines' queues size the step",
        "flows",
    ),
    "pinned, one pod without flows: the queues size the step for all (1.5 times): ceil(2 x 150/70) = 5": Case(
        UTIL,
        2,
        (
            pod(
                53,
                100,
                requests_running=16,
                requests_waiting=8,
                request_arrival_rate=12,
                request_completion_rate=8,
            ),
            pod(53, 100, requests_running=16, requests_waiting=8),
        ),
        5,
        "the engines' queues size the step",
        "flows",
    ),
    "backlog after capacity arrived: one pod pinned while it drains (5.3 arrive, 8 finish), two at 67: keep 3": Case(
        # HPA alone: (100 + 67 + 67) / 3 = 78 over 70, ratio 1.11 beyond the tolerance: ceil(3 x 1.11) = 4.
        UTIL,
        3,
        (
            pod(
                100,
                100,
                requests_running=16,
                requests_waiting=90,
                request_arrival_rate=5.3,
                request_completion_rate=8,
            ),
            pod(
                67,
                67,
                requests_running=11,
                requests_waiting=0,
                request_arrival_rate=5.3,
                request_completion_rate=5.3,
            ),
            pod(
                67,
                67,
                requests_running=11,
                requests_waiting=0,
                request_arrival_rate=5.3,
                request_completion_rate=5.3,
            ),
        ),
        3,
        "1 pod pinned only by a backlog being worked off (5.3 requests/s arrive, 8.0/s finish",
    ),
    "pinned and draining, yet the others ask for more on their own: their step, not the backlog's": Case(
        # Judged: (66 + 95 + 95) / 3 = 85.3 over 70: ceil(3 x 1.22) = 4; HPA alone: (100 + 95 + 95) / 3: 5.
        UTIL,
        3,
        (
            pod(100, 100, request_arrival_rate=5.3, request_completion_rate=8),
            pod(95, 90, request_arrival_rate=7.6, request_completion_rate=7.6),
            pod(95, 90, request_arrival_rate=7.6, request_completion_rate=7.6),
        ),
        4,
        "pinned only by a backlog",
    ),
    "pinned and not draining (more arrive than finish), not every pod pinned: HPA's answer": Case(
        UTIL,
        3,
        (
            pod(100, 100, request_arrival_rate=9, request_completion_rate=8),
            pod(67, 67, request_arrival_rate=5.3, request_completion_rate=5.3),
            pod(67, 67, request_arrival_rate=5.3, request_completion_rate=5.3),
        ),
        4,
        "",
        "backlog",
    ),
    "draining pods never cause a scale-down: window below target, HPA's scale-down as it was": Case(
        UTIL,
        3,
        (pod(40, 100, request_arrival_rate=2, request_completion_rate=8), pod(20, 20), pod(20, 20)),
        2,
        "",
        "backlog",
    ),
    "pinned, no queue waiting: the ceiling itself: ceil(1 x 100/70) = 2": Case(
        UTIL, 1, (pod(53, 100, requests_running=16, requests_waiting=0),), 2, "pinned at its ceiling"
    ),
    "not pinned: one counted pod below 95 % of the ceiling: the window decides (HPA: keep 2)": Case(
        UTIL, 2, (pod(60, 100), pod(60, 90)), 2, "", "pinned"
    ),
    "pinned while a requested pod starts: no further step, and no scale-down either: keep 2, not 1": Case(
        # On the window's 60 alone HPA leaves the Pending pod out of a scale-down: ceil(1 x 60/70) = 1.
        UTIL,
        2,
        (pod(60, 100), *pending(1)),
        2,
        "while 1 pod start: no scale-down",
    ),
    "pinned with a growing queue while requested pods start: the start-up's backlog asks nothing: keep 3": Case(
        UTIL, 3, (pod(100, 100, requests_running=16, requests_waiting=80), *pending(2)), 3, "", "queues size"
    ),
    "pinned never lowers: window mean above the recent mean: the window's answer": Case(
        UTIL, 2, (pod(100, 96), pod(100, 96)), 3, "", "pinned"
    ),
    "no recent means (an older aggregator): HPA's answer on the window mean": Case(
        UTIL, 2, (pod(60), pod(60)), 2, "", "pinned"
    ),
    "queue growing: recent 16 waiting against 2 in the window: ceil(1 x 16/4) = 4": Case(
        QUEUE, 1, (queue_pod(2, 16),), 4, "the queue is growing: 16.0 over the last 3 s"
    ),
    "queue while a requested pod starts: capacity already requested: keep 2": Case(
        QUEUE,
        2,
        (queue_pod(40, 44), *pending(1)),
        2,
        "1 pod of the target starting: capacity already requested",
    ),
    "queue right after the capacity arrived: the old backlog on one pod is no trend yet: keep 3": Case(
        QUEUE,
        3,
        (queue_pod(90, 90), queue_pod(0, 0), queue_pod(0, 0)),
        3,
        "capacity changed 2 s ago",
        span_s=2.0,
    ),
    "queue falling after the capacity arrived: recent 5 against 20 in the window: keep 3": Case(
        QUEUE, 3, (queue_pod(20, 5), queue_pod(20, 5), queue_pod(20, 5)), 3, "the queue is falling"
    ),
    "queue steady above target with nobody starting: HPA's AverageValue: ceil(3 x 10/4) = 8, rate limit max(2 x 3, 3 + 4) = 7": Case(
        QUEUE, 3, (queue_pod(10, 10), queue_pod(10, 10), queue_pod(10, 10)), 7, "", "falling"
    ),
    "queue below target: HPA's scale-down, no rule of ours": Case(
        QUEUE, 3, (queue_pod(1, 1), queue_pod(1, 1), queue_pod(1, 1)), 1, "", "queue is"
    ),
}


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_saturation_and_queue_scenarios(case: Case) -> None:
    s = step(case.scaler, case.current, case.pods, span_s=case.span_s)
    assert s.evaluation is not None
    assert s.evaluation.desired == case.desired, s.evaluation.reason
    if case.said:
        assert case.said in s.evaluation.reason
    if case.not_said:
        assert case.not_said not in s.evaluation.reason


def test_a_held_queue_step_says_what_hpa_s_calculation_gave() -> None:
    s = step(QUEUE, 2, (queue_pod(40, 44), *pending(1)))
    assert s.evaluation is not None
    # 44 waiting on the one serving pod: HPA would ask ceil(44/4) = 11; the reason says both.
    assert "= 11" in s.evaluation.reason
    assert s.evaluation.reason.endswith("keep 2") or "keep 2" in s.evaluation.reason
    assert s.decision is None


def test_the_pinned_step_goes_through_the_rate_policy() -> None:
    """A queue 8 times what the pod runs asks for 12; HPA's default rates allow 1 + 4 = 5."""
    s = step(UTIL, 1, (pod(60, 100, requests_running=16, requests_waiting=112),))
    assert s.evaluation is not None
    assert s.evaluation.recommendation == 12
    assert s.evaluation.desired == 5
    assert "ScaleUpLimit" in {c.reason.value for c in s.evaluation.conditions}


@pytest.mark.parametrize(
    ("engine", "window"),
    [
        ({"requests_running": 1e-300, "requests_waiting": 1.7e308}, 60.0),
        ({"requests_running": 16, "requests_waiting": 1.7e308}, 60.0),
        ({}, 1.7e308),
        ({"request_arrival_rate": 1.7e308, "request_completion_rate": 1.0}, 60.0),
        ({"request_arrival_rate": 1.7e308, "request_completion_rate": 1.7e308}, 60.0),
    ],
    ids=[
        "running-near-zero",
        "waiting-at-the-largest-double",
        "window-at-the-largest-double",
        "arrivals-at-the-largest-double",
        "both-flows-at-the-largest-double",
    ],
)
def test_wild_but_valid_gauges_neither_crash_nor_pass_max_replicas(
    engine: dict[str, float], window: float
) -> None:
    """Values the contract allows (finite, >= 0) from a broken engine or a hostile peer."""
    s = step(UTIL, 2, (pod(window, 100, **engine), pod(window, 100, **engine)))
    assert s.evaluation is not None
    assert 2 <= s.evaluation.desired <= 10
