"""A reason names the value it rests on: a window mean in HPA's words, and an
estimate as an estimated demand with its unit and the flows it rests on, never as a
reading of the metric (a gpu_util of 200 does not exist). The decision's inputs say
the same."""

from __future__ import annotations

import pytest

from gpuscale.policy import GPUScaler
from gpuscale_decider.core.demand import Demand

from .scenario import P, policy, step

UTIL = policy()  # gpu_util, target 70
QUEUE = policy(metrics=[{"name": "requests_waiting", "target": 4}])
# 16 requests/s arrive at a pod that finishes 8/s, over the window.
FLOWS = {"request_arrival_rate": 16.0, "request_completion_rate": 8.0}
RECENT = {"requests_waiting": 34.0, "request_completion_rate": 8.0}

CASES = {
    "window mean: HPA's wording": (UTIL, 2, (P(83.0), P(83.0)), "gpu_util 83.0 over target 70", "window mean"),
    "pinned, flows say twice what it serves: an estimated demand in GPU-%": (
        UTIL, 1, (P({"gpu_util": 100.0, **FLOWS}),),
        "gpu_util: estimated demand 200.0 GPU-% (16.0 requests/s arriving, 8.0/s served per pod) "
        "over target 70", "estimated demand",
    ),
    "one pod with flows, one without: named as both": (
        UTIL, 2, (P({"gpu_util": 100.0, **FLOWS}), P(80.0)),
        "gpu_util: estimated demand and window means 140.0 GPU-%", "estimated demand and window means",
    ),
    "a queue: sized by what arrives at the share of the pod's service rate its target holds": (
        QUEUE, 1, (P({"requests_waiting": 4.0, **FLOWS}),),
        "requests_waiting: estimated demand 9.7 requests (16.0 requests/s arriving and 4.0 waiting per pod; a pod "
        "serves 8.0/s at its limit, measured on a pod with a queue, held 83% busy for the target's queue) "
        "over target 4", "estimated demand",
    ),
    "a queue over its target: sized on the arrivals of the last seconds, and says so": (
        # 4 × (24/ρ₄ + (34 − 4)/30) / 8 = 15.0, on 24/s arriving in the last 3 s (16/s over the window).
        QUEUE, 1, (P({"requests_waiting": 34.0, **FLOWS}, recent={**RECENT, "request_arrival_rate": 24.0}),),
        "requests_waiting: estimated demand 15.0 requests (24.0 requests/s arriving (the last 3 s, the queue is "
        "over its target) and 34.0 waiting per pod;", "estimated demand",
    ),
    "a pinned pod with a queue: the last seconds' arrivals, less a count's noise, and says so": (
        # 24/s over the last 3 s, surely 24 − √8 = 21.17/s, at 12.5 GPU-% per request/s: 264.6.
        UTIL, 1, (P({"gpu_util": 100.0, **FLOWS, "requests_waiting": 12.0}, recent={**RECENT, "requests_waiting": 12.0, "request_arrival_rate": 24.0}),),
        "gpu_util: estimated demand 264.6 GPU-% (21.2 requests/s arriving (the last 3 s, less a count's noise: a "
        "queue stands) and 12.0 waiting, 8.0/s served per pod) over target 70", "estimated demand",
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("scaler", "current", "pods", "head", "basis"), list(CASES.values()), ids=list(CASES)
)
def test_the_reason_and_the_inputs_name_the_value_used(
    scaler: GPUScaler, current: int, pods: tuple[P, ...], head: str, basis: str
) -> None:
    s = step(scaler, current, pods)
    assert s.decision is not None
    assert s.decision.reason.startswith(head), s.decision.reason
    metric = next(iter(s.decision.inputs["averages"]))
    assert s.decision.inputs["averages_basis"] == {metric: basis}
    if basis == "estimated demand":
        assert "gpu_util 200" not in s.decision.reason


def test_a_pod_that_joined_and_has_no_rates_yet_is_named_so_not_as_without_samples() -> None:
    # It sent a gpu_util reading but not yet two scrapes' rates: HPA's missing-pod rule counts it,
    # and the reason says which kind of missing it is.
    pods = (P({"gpu_util": 100.0, **FLOWS, "requests_waiting": 2.0}), P({"gpu_util": 96.0}), P(None))
    s = step(UTIL, 3, pods, span_s=1.2)
    assert s.evaluation is not None
    said = s.evaluation.proposals[0].explanation
    assert "counting 2 pods without samples or rates yet as 0" in said, said
    s = step(UTIL, 2, pods[:2], span_s=1.2)
    assert s.evaluation is not None
    said = s.evaluation.proposals[0].explanation
    assert "counting 1 pod without rates yet as 0" in said, said


def test_a_scale_down_held_by_arrivals_that_rose_says_so() -> None:
    # Four pods 30 % busy on 2.3 requests/s over the window, 4/s each over the last 3 s.
    recent = {"requests_waiting": 0.0, "request_arrival_rate": 4.0, "request_completion_rate": 2.3}
    window = {"gpu_util": 30.0, "request_arrival_rate": 2.3, "request_completion_rate": 2.3}
    s = step(UTIL, 4, tuple(P(window, recent=recent) for _ in range(4)))
    assert s.decision is not None
    assert s.decision.to_replicas == 3  # ceil(4 × 37.1/70); the window alone says ceil(4 × 30/70) = 2
    assert "(more over the last 3 s: estimates held up to the target at most)" in s.decision.reason


def test_both_reads_of_the_last_seconds_are_told_in_one_aside() -> None:
    told = Demand({"bert-0": 70.0}, 1, 21.2, 12.0, 8.0, recent_s=3.0, read_now=True, held_up=True)
    assert told.said("gpu_util") == (
        "21.2 requests/s arriving (the last 3 s, less a count's noise: a queue stands; more over the "
        "last 3 s: estimates held up to the target at most) and 12.0 waiting, 8.0/s served per pod"
    )
