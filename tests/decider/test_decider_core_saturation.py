"""gpuscale's own rules on top of HPA's calculation: a metric pinned
at its ceiling is judged on its recent means (and sized by the engines' flows,
else their queues, where the pods report them); a queue waits for the capacity already requested
and asks for nothing while it falls. Named scenarios, as HPA's tests; each
rule says itself in the reason. Without recent means (an aggregator that does
not send them) every answer is HPA's."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.policy import GPUScaler
from gpuscale.wire import UNSET, MetricValues, PodMetrics, WorkloadMetrics
from gpuscale_decider.core.reconcile import observation_of
from gpuscale_decider.core.state import Capacity, TimedValue

from .scenario import NOW, P, pending, policy, recs, seen, step

UTIL = policy()  # gpu_util, target 70, max 10, HPA's scale-up rates
QUEUE = policy(metrics=[{"name": "requests_waiting", "target": 4}])


def pod(window: float, recent: float | None = None, **engine: float) -> P:
    """A Running, Ready pod: its window mean of gpu_util, and its recent means."""
    recent_values = {} if recent is None else {"gpu_util": recent}
    recent_values.update(engine)
    return P(window, recent=recent_values if recent is not None or engine else None)


def queue_pod(window: float, recent: float | None, **flows: float) -> P:
    recent_values = None if recent is None else {"requests_waiting": recent, **flows}
    return P({"requests_waiting": window}, recent=recent_values)


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
    "the demo's step read early, flows a few percent high (13.3 arrive, 6 finish: 2.2 times): 3, not 4": Case(
        # ceil(1 x 222/70) = 4 (HPA's rounding of a noisy estimate); 3 pods carry 222 at 74 each,
        # within the tolerance of 70, where HPA's own ratio holds.
        UTIL,
        1,
        (
            pod(
                36,
                97,
                requests_running=16,
                requests_waiting=10,
                request_arrival_rate=13.3,
                request_completion_rate=6,
            ),
        ),
        3,
        "3 pods carry it within the tolerance of the target",
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
    "pinned, one pod without flows: the queues size the step for all (1.5 times): 4 carry 2 x 150 within 70 x 1.1": Case(
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
        4,
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
    "backlog worked off inside the window: the old pod reads 70 now, 100 over the window, and keeps up: keep 3": Case(
        # The demo's step a minute on: HPA on the window, (100 + 66.7 + 66.7) / 3 = 77.8 over 70 x 1.1: 4.
        # Now: (70 + 66.7 + 66.7) / 3 = 67.8, within the tolerance.
        UTIL,
        3,
        (
            pod(100, 70, request_arrival_rate=5.3, request_completion_rate=5.3),
            pod(66.7, 66.7, request_arrival_rate=5.3, request_completion_rate=5.3),
            pod(66.7, 66.7, request_arrival_rate=5.3, request_completion_rate=5.3),
        ),
        3,
        "1 pod serving all that arrives, with gpu_util lower now than over the window (5.3 requests/s arrive",
    ),
    "lower now than over the window but short of capacity (10 arrive, 8 finish): the window's demand: 3": Case(
        # ceil(2 x 80/70) = 3; on the recent 76 it would be within the tolerance.
        UTIL,
        2,
        (
            pod(80, 76, request_arrival_rate=10, request_completion_rate=8),
            pod(80, 76, request_arrival_rate=10, request_completion_rate=8),
        ),
        3,
        "",
        "lower now",
    ),
    "lower now than over the window and keeping up: judged now, 76 within the tolerance of 70: keep 2": Case(
        UTIL,
        2,
        (
            pod(80, 76, request_arrival_rate=8, request_completion_rate=8),
            pod(80, 76, request_arrival_rate=8, request_completion_rate=8),
        ),
        2,
        "2 pods serving all that arrives, with gpu_util lower now than over the window",
    ),
    "lower now than over the window, no flows (a GPU workload without an engine): the window decides: 3": Case(
        UTIL, 2, (pod(80, 76), pod(80, 76)), 3, "", "lower now"
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
    "a ramp: pinned while the 2nd pod starts, 12.4 requests/s arrive and 8 finish (1.55 times): "
    "155 carried within the tolerance of 70 by 3: 3 now, not a start-up late": Case(
        UTIL,
        2,
        (pod(85, 99, request_arrival_rate=12.4, request_completion_rate=8), *pending(1)),
        3,
        "while 1 pod start, and the engines' flows say the capacity requested is short: 12.4 requests/s arrive "
        "per pod and 8.0/s finish, so what arrives at the serving pods is 155.0 of gpu_util, which 3 pods carry "
        "within the tolerance",
    ),
    "pinned while 2 requested pods start, the flows' load (16 for 8: 200) is what 3 carry: keep 3": Case(
        # The demo's step a few seconds after its one decision 1 -> 3.
        UTIL,
        3,
        (pod(60, 100, request_arrival_rate=16, request_completion_rate=8), *pending(2)),
        3,
        "",
        "flows say",
    ),
    "pinned while a pod starts, flows of too few finished requests (0.5/s over 3 s): no step on them: keep 2": Case(
        UTIL,
        2,
        (pod(85, 99, request_arrival_rate=12.4, request_completion_rate=0.5), *pending(1)),
        2,
        "",
        "flows say",
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
    "queue growing at the step, flows known: HPA's share of the level, ceil(16/4) = 4 (the flows never lower it)": Case(
        # Arrivals say 3 pods would serve it (ceil(16 x 1.1 / 8)); the user's target is about the queue,
        # and the level is not falling: HPA's answer stands.
        QUEUE,
        1,
        (queue_pod(2, 16, request_arrival_rate=16, request_completion_rate=8),),
        4,
        "the queue is growing",
        "flows",
    ),
    "queue growing, arrivals at twice a pod, level still 6: the tolerance to spare asks a third pod, not a second": Case(
        # HPA: ceil(6/4) = 2, and 2 pods at exactly the arrivals would leave the queue where it is: ceil(2 x 1.1) = 3.
        QUEUE,
        1,
        (queue_pod(1, 6, request_arrival_rate=16, request_completion_rate=8),),
        3,
        "the level so far understates what arrives: 16.0 requests/s arrive and a pod with a queue finishes "
        "8.0/s, so the capacity of 3 pods serves them",
    ),
    "queue growing, seen early: 6 waiting asks ceil(6/4) = 2, but 20 arrive/s for 8 served: 3 in one step": Case(
        # Two pods would serve 16 of the 20 a second: the queue would grow on, and the next step wait for them.
        QUEUE,
        1,
        (queue_pod(1, 6, request_arrival_rate=20, request_completion_rate=8),),
        3,
        "20.0 requests/s arrive and a pod with a queue finishes 8.0/s, so the capacity of 3 pods",
    ),
    "the step as the aggregator sent it: level 2.7 under target, but 11.7 arrive/s for 5.3 finished: 3 now": Case(
        # bench/scenarios.py's step, read off the wire 2 s after the load rose: HPA keeps 1 (2.7 / 4 within
        # the tolerance); 2 s later the level read 16 and HPA asked ceil(16/4) = 4, one pod over the 3 that
        # serve the arrivals. At 6.4 more a second the level passes 4.4 within the 3 s span.
        QUEUE,
        1,
        (queue_pod(0.3, 2.7, request_arrival_rate=11.7, request_completion_rate=5.3),),
        3,
        "the queue (2.7 over the last 3 s) passes the target within 3 s at the rate it grows (6.4 requests/s "
        "per pod): 11.7 requests/s arrive and a pod with a queue finishes 5.3/s, so the capacity of 3 pods",
    ),
    "queue under target, arrivals within the tolerance of what finishes (8.4 for 8): no step up; "
    "and not HPA's ceil(3 x 1.5/4) = 2, whose pods could not serve 25.2/s: keep 3": Case(
        QUEUE,
        3,
        tuple(queue_pod(1.2, 1.5, request_arrival_rate=8.4, request_completion_rate=8) for _ in range(3)),
        3,
        "25.2 requests/s arrive; a pod finished 8.0/s when it last had a queue (0 s ago), so the capacity of 4",
        "passes the target",
    ),
    "queue under target, growing 1 a second from 1: past 4.4 in 4 s, not within 3 s: no step up; "
    "and not HPA's ceil(2 x 1/4) = 1, a pod for 18/s: keep 2": Case(
        # A queue the target allows is the user's to allow; a slow rise is the level's to answer.
        QUEUE,
        2,
        tuple(queue_pod(0.8, 1, request_arrival_rate=9, request_completion_rate=8) for _ in range(2)),
        2,
        "the capacity of 3 pods serves them",
        "passes the target",
    ),
    "queue above target and growing, the 3 pods that serve it requested, 2 still starting: keep 3": Case(
        QUEUE,
        3,
        (queue_pod(3, 30, request_arrival_rate=11.7, request_completion_rate=5.3), *pending(2)),
        3,
        "2 pods of the target starting: capacity already requested",
    ),
    "queue growing fast, 2 requested (the first step sized on the seconds a burst began in), 1 starting: "
    "11.7 arrive and a pod finishes 5.3: 3 now, not once it serves": Case(
        QUEUE,
        2,
        (queue_pod(0.3, 2.7, request_arrival_rate=11.7, request_completion_rate=5.3), *pending(1)),
        3,
        "1 pod of the target starting, but 11.7 requests/s arrive and a pod with a queue finishes 5.3/s, "
        "so the capacity of 3 pods serves them",
    ),
    "the spike logged: 47 waiting on the 1 serving pod of 4, 32 arrive, 8.7 finish: the flows' 5, "
    "not the level's 12": Case(
        QUEUE,
        4,
        (queue_pod(4.7, 47, request_arrival_rate=32, request_completion_rate=8.7), *pending(3)),
        5,
        "3 pods of the target starting, but 32.0 requests/s arrive",
    ),
    "queue steady above target, pods finishing all that arrives: the target decides: HPA's 7, not the flows' 4": Case(
        # A queue at high utilization need not drain however the flows add up: they never lower HPA's answer.
        QUEUE,
        3,
        tuple(queue_pod(10, 10, request_arrival_rate=8, request_completion_rate=8) for _ in range(3)),
        7,
        "",
        "flows",
    ),
    "queue on one pod, none on the other, growing: HPA's ceil(2 x 9/4) = 5 (the flows' 3 does not lower it)": Case(
        QUEUE,
        2,
        (
            queue_pod(8, 16, request_arrival_rate=16, request_completion_rate=8),
            queue_pod(0.5, 0.5, request_arrival_rate=3, request_completion_rate=3),
        ),
        5,
        "",
        "flows",
    ),
    "queue held at capacity, falling only as requests give up: no 'falling', the target decides: HPA's 7": Case(
        # The old pod keeps its backlog at exactly its capacity (8 arrive, 8 served, 0.5/s give up and count
        # as finished, as vLLM's finished_reason="abort"); the new pod serves its 8 with no queue. Its level
        # (30 over the last 3 s, 40 in the window) falls by more than 2 %, which alone would keep 2.
        # HPA on the window: ceil(2 x 20/4) = 10, limited to max(2 x 2, 2 + 4) = 6.
        QUEUE,
        2,
        (
            queue_pod(40, 30, request_arrival_rate=8, request_completion_rate=8.5),
            queue_pod(0, 0, request_arrival_rate=8, request_completion_rate=8),
        ),
        6,
        "only as requests give up: 16.0 requests/s arrive and a pod with a queue finishes 8.5/s, "
        "so the capacity of 3 pods",
    ),
    "a new burst after a backlog worked off (13.5 in the window, 1.2 now): what arrives sizes it, 4, not HPA's 11": Case(
        # bench/scenarios.py's bursty trace: 3 pods had worked off the first burst's backlog when the second
        # began (25.6 requests/s for 3 x 8). The window's level is that backlog, gone: HPA's ceil(3 x 13.5/4)
        # = 11 (limited to 7) read it as demand; the queue now is within the target.
        QUEUE,
        3,
        tuple(queue_pod(13.5, 1.2, request_arrival_rate=8.53, request_completion_rate=8) for _ in range(3)),
        4,
        "the queue is within its target now (1.2 over the last 3 s, 13.5 in the window: a backlog worked off), "
        "but 25.6 requests/s arrive and a pod with a queue finishes 8.0/s, so the capacity of 4 pods",
    ),
    "queue falling and the flows show capacity to spare (12 arrive, 2 x 8 finish): the capacity is enough: keep 2": Case(
        QUEUE,
        2,
        (
            queue_pod(40, 30, request_arrival_rate=6, request_completion_rate=8),
            queue_pod(0, 0, request_arrival_rate=6, request_completion_rate=6),
        ),
        2,
        "the queue is falling",
        "give up",
    ),
    "queue below one request on every pod (none at its limit, no capacity to read): HPA's ceil(0.9/0.5) = 2": Case(
        # Flows known, but a pod that queues less than one request may be serving less than it can.
        policy(metrics=[{"name": "requests_waiting", "target": 0.5}]),
        1,
        (queue_pod(0.5, 0.9, request_arrival_rate=2, request_completion_rate=2),),
        2,
        "the queue is growing",
        "flows",
    ),
    "queue growing, too few requests finished to read a capacity (0.5/s over 3 s): HPA's answer": Case(
        QUEUE,
        1,
        (queue_pod(2, 16, request_arrival_rate=2, request_completion_rate=0.5),),
        4,
        "the queue is growing",
        "flows",
    ),
    "scale-down 2 s after pods became ready: new pods taking their first requests are no evidence: keep 3": Case(
        # The demo's step with a 0 s scale-down window: (100 + 18 + 18) / 3 = 45.3 under 70 asked for 2, and
        # the next decision went back to 3.
        # Averages over 2 s are also the last 3 s' means: no level now above them to hold on.
        UTIL,
        3,
        (pod(100, 100), pod(18, 18), pod(18, 18)),
        3,
        "a pod became ready 2 s ago (or the window was made longer): its first seconds",
        span_s=2.0,
    ),
    "scale-down once the averages span the window again: HPA's answer": Case(
        UTIL, 3, (pod(45, 45), pod(45, 45), pod(45, 45)), 2, "", "no evidence for a scale-down"
    ),
    "scale-up 2 s after pods became ready: no rule of ours in the way": Case(
        UTIL, 2, (pod(90, 90), pod(90, 90)), 3, "", "no evidence for a scale-down", span_s=2.0
    ),
    "queue below target 2 s after pods became ready: keep 3 (the old pod's queue, the new pods' none)": Case(
        QUEUE, 3, (queue_pod(4, 4), queue_pod(0, 0), queue_pod(0, 0)), 3, "became ready 2 s ago", span_s=2.0
    ),
    "burst begun seconds into the window: the window's 19 asks 2, the 40 now asks 3: 3, not 2": Case(
        # bursty with a 0 s scale-down window went 5 -> 2 -> 1 -> 3 as its next burst began.
        UTIL,
        5,
        tuple(pod(19, 40) for _ in range(5)),
        3,
        "gpu_util is higher now than over the window on 5 pods (40.0 over the last 3 s against 19.0)",
    ),
    "load back near the target now (65), the window still quiet (19): keep 5": Case(
        UTIL, 5, tuple(pod(19, 65) for _ in range(5)), 5, "the load is rising, and a scale-down must hold"
    ),
    "load falling (40 over the window, 20 now): HPA's scale-down on the window, ceil(5 x 40/70) = 3": Case(
        UTIL, 5, tuple(pod(40, 20) for _ in range(5)), 3, "", "rising"
    ),
    "power_w too (any metric with recent means): window 100 W asks 2, 250 W now ceil(5 x 250/300) = 5: keep 5": Case(
        policy(metrics=[{"name": "power_w", "target": 300}]),
        5,
        tuple(P({"power_w": 100}, recent={"power_w": 250}) for _ in range(5)),
        5,
        "power_w is higher now than over the window on 5 pods",
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
    """A queue 8 times what the pod runs asks for 11 (800 within 70 x 1.1); HPA's default rates allow 1 + 4 = 5."""
    s = step(UTIL, 1, (pod(60, 100, requests_running=16, requests_waiting=112),))
    assert s.evaluation is not None
    assert s.evaluation.recommendation == 11
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
@pytest.mark.parametrize("starting", [0, 1], ids=["all-serving", "one-starting"])
def test_wild_but_valid_gauges_neither_crash_nor_pass_max_replicas(
    engine: dict[str, float], window: float, starting: int
) -> None:
    """Values the contract allows (finite, >= 0) from a broken engine or a hostile peer."""
    s = step(UTIL, 2 + starting, (pod(window, 100, **engine), pod(window, 100, **engine), *pending(starting)))
    assert s.evaluation is not None
    assert 2 + starting <= s.evaluation.desired <= 10


@pytest.mark.parametrize(
    "flows",
    [
        {"request_arrival_rate": 1.7e308, "request_completion_rate": 8.0},
        {"request_arrival_rate": 1.7e308, "request_completion_rate": 1.7e308},
        {"request_arrival_rate": 16.0, "request_completion_rate": 1.7e308},
        {"request_arrival_rate": 0.0, "request_completion_rate": 8.0},
    ],
    ids=[
        "arrivals-at-the-largest-double",
        "both-at-the-largest-double",
        "capacity-at-the-largest-double",
        "none-arrive",
    ],
)
@pytest.mark.parametrize("starting", [0, 1], ids=["all-serving", "one-starting"])
@pytest.mark.parametrize("remembered", [None, 1e-300, 1.7e308], ids=["no-capacity", "tiny", "huge"])
@pytest.mark.parametrize("age_s", [10.0, 3.0e9], ids=["fresh", "ancient"])
def test_wild_but_valid_flows_on_a_queue_neither_crash_nor_pass_max_replicas(
    flows: dict[str, float], starting: int, remembered: float | None, age_s: float
) -> None:
    """Two queued pods whose flows add up past the largest double, or say nothing arrives;
    beside a pod still starting, and with a capacity remembered at the extremes, 10 s or
    95 years ago (past its 10 min: one pod at a time)."""
    state = seen(queue_capacity=None if remembered is None else Capacity(NOW - age_s, remembered))
    s = step(QUEUE, 2 + starting, (queue_pod(40, 60, **flows),) * 2 + pending(starting), state=state)
    assert s.evaluation is not None
    assert 2 + starting <= s.evaluation.desired <= 10
    idle = step(QUEUE, 2 + starting, (queue_pod(0, 0, **flows),) * 2 + pending(starting), state=state)
    assert idle.evaluation is not None
    assert 1 <= idle.evaluation.desired <= 2 + starting


@pytest.mark.parametrize(
    ("since_ago", "span"),
    [(None, None), (10.0, 10.0), (30.0, None), (3600.0, None), (-5.0, 0.0)],
    ids=["absent", "inside-the-window", "at-the-window-start", "an-hour-old", "after-ts"],
)
def test_since_gives_a_span_only_inside_the_window(since_ago: float | None, span: float | None) -> None:
    """The contract sends ``since`` only when the averages start after ts - window_s; one
    at or before that says nothing and must not hold every scale-down back."""
    ts = 1_000_000.0
    message = WorkloadMetrics(
        namespace="ns",
        kind="Deployment",
        name="bert",
        ts=ts,
        window_s=30.0,
        pods=(PodMetrics("bert-0", MetricValues(gpu_util=40.0), ts),),
        averages=MetricValues(gpu_util=40.0),
        pods_fresh=1,
        pods_stale=0,
        since=UNSET if since_ago is None else ts - since_ago,
    )
    assert observation_of(message, ts).span_s == span


# The bursty trace with a 0 s scale-down window, as logged: 5 -> 3 with 200 GPU-% of load, then
# the 3 pods read 23.3 over the window and 45.6 over the last 3 s (2 s of them shared by 5 pods),
# and 3 x 45.6/70 asked for 2; the next decisions went back to 3. The metrics are received 1 s
# before NOW, so "down N s before" is N s before they were received.
AFTER_A_SCALE_DOWN = {
    "2 s after 5 -> 3, recent means still shared by 5 pods (45.6): keep 3, not 2": (
        (pod(23.3, 45.6), pod(23.3, 45.6), pod(23.3, 45.6)),
        2.0,
        3,
        "replicas went down 2 s ago: the means of the last 3 s still hold seconds when more pods",
    ),
    "half a second after, the same: keep 3, and the reason does not say 0 s": (
        (pod(23.3, 45.6), pod(23.3, 45.6), pod(23.3, 45.6)),
        0.5,
        3,
        "replicas went down less than a second ago: the means of the last 3 s still hold",
    ),
    "6 s after, recent means are the 3 pods' own (67): judged on them, keep 3": (
        (pod(30, 67), pod(30, 67), pod(30, 67)),
        6.0,
        3,
        "the load is rising",
    ),
    "6 s after, the load fell (20 over the window, 10 now): HPA's scale-down, ceil(3 x 20/70) = 1": (
        (pod(20, 10), pod(20, 10), pod(20, 10)),
        6.0,
        1,
        "",
    ),
    "no recent means (an older aggregator): the window's hold samples from before for 30 s: keep 3": (
        (pod(23.3), pod(23.3), pod(23.3)),
        20.0,
        3,
        "the means of the window still hold",
    ),
    "no recent means, 31 s after: the window is the 3 pods' own, HPA's answer": (
        (pod(23.3), pod(23.3), pod(23.3)),
        31.0,
        1,
        "",
    ),
    "a scale-up 2 s after a scale-down: no rule of ours in the way, ceil(3 x 90/70) = 4": (
        (pod(90), pod(90), pod(90)),
        2.0,
        4,
        "",
    ),
}


@pytest.mark.parametrize(
    ("pods", "down_before_s", "desired", "said"),
    list(AFTER_A_SCALE_DOWN.values()),
    ids=list(AFTER_A_SCALE_DOWN),
)
def test_a_scale_down_is_judged_on_what_came_after_the_last(
    pods: tuple[P, ...], down_before_s: float, desired: int, said: str
) -> None:
    received_at = NOW - 1.0
    s = step(UTIL, 3, pods, state=seen(last_scale_down=received_at - down_before_s))
    assert s.evaluation is not None
    assert s.evaluation.desired == desired, s.evaluation.reason
    if said:
        assert said in s.evaluation.reason
    else:
        assert "replicas went down" not in s.evaluation.reason


def test_the_user_s_scale_down_cooldown_speaks_for_itself_after_a_scale_down() -> None:
    """Within ``cooldownSeconds`` the cooldown holds the scale-down and says so (BackoffDownscale)."""
    cooling = policy(behavior={"scaleDown": {"stabilizationWindowSeconds": 0, "cooldownSeconds": 30}})
    s = step(cooling, 3, (pod(23.3, 45.6),) * 3, state=seen(last_scale_down=NOW - 3.0))
    assert s.evaluation is not None
    assert s.evaluation.desired == 3
    assert "cooling down" in s.evaluation.reason
    assert "replicas went down" not in s.evaluation.reason


@pytest.mark.parametrize(
    ("hold", "said"),
    [
        ("scaled down 3 s before", "replicas went down 2 s ago"),
        ("a pod ready 2 s before", "became ready 2 s ago"),
    ],
)
def test_a_hold_keeps_hpa_s_recommendations_for_the_stabilization_window(hold: str, said: str) -> None:
    """Held, the decision keeps 3, but the stabilization window keeps HPA's recommendation (1):
    held ones kept there would hold a slow decline, or the scale-down after a spike, a whole
    window (300 s) after the hold ended."""
    scaler = policy(behavior={"scaleDown": {"stabilizationWindowSeconds": 300}})
    after_scale_down = hold.startswith("scaled down")
    state = seen(last_scale_down=NOW - 3.0) if after_scale_down else seen()
    held = step(scaler, 3, (pod(10, 10),) * 3, state=state, span_s=None if after_scale_down else 2.0)
    assert held.evaluation is not None
    assert held.evaluation.desired == 3
    assert said in held.evaluation.reason
    able = held.evaluation.conditions.able_to_scale
    assert able.reason.value == ("BackoffDownscale" if after_scale_down else "ScaleDownStabilized")
    assert TimedValue(NOW, 1) in held.memory.state.recommendations
    later = step(scaler, 3, (pod(10, 10),) * 3, state=held.memory.state, now=NOW + 10)
    assert later.evaluation is not None
    assert later.evaluation.desired == 1, later.evaluation.reason


# A queue reads 0 whenever capacity suffices, and HPA's ceil(n x 0 / 4) is the minimum. Logged
# on the step trace with a 0 s scale-down window: 3 pods served 13 requests/s with no queue, and
# the queue scaler went 3 -> 2 on an unchanged load (and would have gone back up). Each pod
# here is queue-free; ``capacity`` is what a pod finished when it last had a queue.
def idle_queue_pods(n: int, arriving: float) -> tuple[P, ...]:
    per_pod = arriving / n
    flows = {"request_arrival_rate": per_pod, "request_completion_rate": per_pod}
    return tuple(queue_pod(0, 0, **flows) for _ in range(n))


KEPT_SERVING = {
    "3 pods serve 13/s with no queue, a pod finished 6/s with one 40 s ago: ceil(13 x 1.1/6) = 3, keep 3": (
        3,
        idle_queue_pods(3, 13.0),
        Capacity(NOW - 40, 6.0),
        3,
        "a pod finished 6.0/s when it last had a queue (40 s ago), so the capacity of 3 pods serves them",
    ),
    "the load fell to 7/s: ceil(7 x 1.1/6) = 2, not HPA's 1": (
        3,
        idle_queue_pods(3, 7.0),
        Capacity(NOW - 40, 6.0),
        2,
        "the capacity of 2 pods serves them",
    ),
    "4 pods (one too many) serving 13/s: down to the 3 that serve them": (
        4,
        idle_queue_pods(4, 13.0),
        Capacity(NOW - 40, 6.0),
        3,
        "the capacity of 3 pods",
    ),
    "nothing arrives: an idle workload goes to its minimum, HPA's 1": (
        3,
        idle_queue_pods(3, 0.0),
        Capacity(NOW - 40, 6.0),
        1,
        "",
    ),
    "the capacity was measured 11 min ago (the request mix may have changed): one pod fewer, not HPA's 1": (
        3,
        idle_queue_pods(3, 13.0),
        Capacity(NOW - 660, 6.0),
        2,
        "a pod finished 6.0/s when it last had a queue, 11 min ago: too long ago to hold the count, so 2 pods are tried",
    ),
    "an hour-old capacity, 6 pods serving 32/s (ceil(32 x 1.1/6) = 6): one at a time still, 5": (
        6,
        idle_queue_pods(6, 32.0),
        Capacity(NOW - 3600, 6.0),
        5,
        "60 min ago: too long ago to hold the count, so 5 pods are tried",
    ),
    "an old capacity, 5 pods, the load fell to 7/s: ceil(7 x 1.1/6) = 2, below one fewer": (
        5,
        idle_queue_pods(5, 7.0),
        Capacity(NOW - 660, 6.0),
        2,
        "so 2 pods are tried",
    ),
    "an old capacity, nothing arrives: HPA's 1": (
        3,
        idle_queue_pods(3, 0.0),
        Capacity(NOW - 660, 6.0),
        1,
        "",
    ),
    "no capacity remembered (never had a queue): HPA's 1": (3, idle_queue_pods(3, 13.0), None, 1, ""),
    "engines without flows: HPA's 1": (3, (queue_pod(0, 0),) * 3, Capacity(NOW - 40, 6.0), 1, ""),
    "2 pods serve 13/s, more than the remembered capacity says they can: keep 2, no scale-up on a memory": (
        2,
        idle_queue_pods(2, 13.0),
        Capacity(NOW - 40, 6.0),
        2,
        "keep 2",
    ),
}


@pytest.mark.parametrize(
    ("current", "pods", "capacity", "desired", "said"), list(KEPT_SERVING.values()), ids=list(KEPT_SERVING)
)
def test_a_queue_within_its_target_keeps_the_pods_that_serve_what_arrives(
    current: int, pods: tuple[P, ...], capacity: Capacity | None, desired: int, said: str
) -> None:
    s = step(QUEUE, current, pods, state=seen(queue_capacity=capacity))
    assert s.evaluation is not None
    assert s.evaluation.desired == desired, s.evaluation.reason
    if said:
        assert said in s.evaluation.reason
    else:
        assert "last had a queue" not in s.evaluation.reason


def test_the_step_s_capacity_keeps_its_three_pods_once_the_queue_is_gone() -> None:
    """The step trace's own sequence through the stored state: the queue at 2.7 with 11.7
    requests/s arriving and 5.3 finishing asks for 3; a minute later the 3 pods serve the 11.7
    with no queue, and HPA's answer on the queue (1) is held at the 3 the step was sized to."""
    growing = queue_pod(2.7, 2.7, request_arrival_rate=11.7, request_completion_rate=5.3)
    first = step(QUEUE, 1, (growing,))
    assert first.evaluation is not None
    assert first.evaluation.desired == 3, first.evaluation.reason
    assert first.memory.state.queue_capacity == Capacity(NOW, 5.3)
    later = step(QUEUE, 3, idle_queue_pods(3, 11.7), state=first.memory.state, now=NOW + 60)
    assert later.evaluation is not None
    assert later.evaluation.desired == 3, later.evaluation.reason
    assert "(60 s ago)" in later.evaluation.reason
    assert later.memory.state.queue_capacity == Capacity(NOW, 5.3)  # no queue: nothing measured anew


def test_a_steady_load_past_the_memory_loses_one_pod_and_its_queue_measures_the_capacity_again() -> None:
    """3 pods serve 13 requests/s with no queue for 11 min after their capacity (6/s) was
    measured. Let go to HPA's answer, they fell to 1 and the queue came back two pods short;
    now one pod goes, the queue that forms on 2 measures 6/s again, and the step it grows
    into is sized by the flows, ceil(13 x 1.1 / 6) = 3, before the level asks."""
    old = Capacity(NOW - 660, 6.0)
    down = step(QUEUE, 3, idle_queue_pods(3, 13.0), state=seen(queue_capacity=old))
    assert down.evaluation is not None
    assert down.evaluation.desired == 2, down.evaluation.reason
    # On 2 pods, 6.5/s arrive at each and 6.0/s finish: the queue grows 0.5/s a pod.
    queued = queue_pod(1.0, 3.0, request_arrival_rate=6.5, request_completion_rate=6.0)
    back = step(QUEUE, 2, (queued, queued), state=down.memory.state, now=NOW + 60)
    assert back.memory.state.queue_capacity == Capacity(NOW + 60, 6.0)
    assert back.evaluation is not None
    assert back.evaluation.desired == 3, back.evaluation.reason
    assert "13.0 requests/s arrive" in back.evaluation.reason


def test_past_the_memory_the_pods_go_one_per_stabilization_window() -> None:
    """HPA's default scale-down window (300 s): the old capacity's one-fewer is a
    recommendation like any other, so 6 pods whose engines got faster (32 requests/s and
    never a queue) lose one pod per window, not all but one at the first."""
    scaler = policy(
        metrics=[{"name": "requests_waiting", "target": 4}],
        behavior={"scaleDown": {"stabilizationWindowSeconds": 300}},
    )
    held = recs((290, 6), (150, 6), (15, 6))  # 6 kept by the capacity while it was fresh
    state, current, changes = seen(queue_capacity=Capacity(NOW - 660, 6.0), recommendations=held), 6, []
    for t in range(0, 961, 15):
        s = step(scaler, current, idle_queue_pods(current, 32.0), state=state, now=NOW + t)
        assert s.evaluation is not None
        state = s.memory.state  # the actuator applies it at once: the next step sees it on /scale
        if s.evaluation.desired != current:
            changes.append((t, current, s.evaluation.desired))
            current = s.evaluation.desired
    # The last 6 leaves the window at 285 s; each one-fewer then waits out its own window.
    assert changes == [(285, 6, 5), (585, 5, 4), (885, 4, 3)]


def test_only_a_pod_with_a_queue_and_enough_finished_requests_measures_the_capacity() -> None:
    old = Capacity(NOW - 100, 6.0)
    queued = queue_pod(6, 6, request_arrival_rate=9.0, request_completion_rate=7.0)
    measured = step(
        QUEUE, 2, (queued, queue_pod(0, 0.5, request_arrival_rate=3.0, request_completion_rate=3.0))
    )
    # Only the pod with a queue finishes all it can; the other's 3/s says nothing of its limit.
    assert measured.memory.state.queue_capacity == Capacity(NOW, 7.0)
    few = queue_pod(6, 6, request_arrival_rate=9.0, request_completion_rate=0.5)  # 1.5 over 3 s
    assert step(QUEUE, 1, (few,), state=seen(queue_capacity=old)).memory.state.queue_capacity == old
    # A policy with no queue metric keeps none (and pays nothing for it).
    assert (
        step(
            UTIL, 1, (pod(60, 60, requests_waiting=6, request_arrival_rate=9, request_completion_rate=7),)
        ).memory.state.queue_capacity
        is None
    )


_rates = st.floats(min_value=0.0, max_value=50.0)


@settings(max_examples=300, deadline=None)
@given(
    current=st.integers(min_value=1, max_value=10),
    pods=st.lists(
        st.tuples(st.floats(0.0, 20.0), st.floats(0.0, 20.0), _rates, _rates), min_size=1, max_size=10
    ),
    per_pod=st.floats(min_value=0.01, max_value=100.0),
    age_s=st.floats(min_value=0.0, max_value=7200.0),  # held (up to 600 s), then one pod at a time
)
def test_a_remembered_capacity_never_scales_up_and_never_lowers_a_decision(
    current: int, pods: list[tuple[float, float, float, float]], per_pod: float, age_s: float
) -> None:
    """Whatever the queue and its flows, the memory only holds a scale-down: the decision
    with it is at least the one without, and above the current count only where that one is."""
    views = tuple(
        queue_pod(window, recent, request_arrival_rate=a, request_completion_rate=c)
        for window, recent, a, c in pods[:current]
    )
    without = step(QUEUE, current, views)
    remembered = step(QUEUE, current, views, state=seen(queue_capacity=Capacity(NOW - age_s, per_pod)))
    assert without.evaluation is not None
    assert remembered.evaluation is not None
    before, after = without.evaluation.desired, remembered.evaluation.desired
    assert after >= before, remembered.evaluation.reason
    if after > current:
        assert after == before, remembered.evaluation.reason
