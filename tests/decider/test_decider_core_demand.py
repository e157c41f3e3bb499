"""The demand table, row by row, from the model of a serving replica: requests
arrive at λ, wait (W) and finish at C ≤ μ; a pod is asked for D = λ + B / window.
Each expected value is worked out from the model in the test's name or comment,
not read off the code."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.catalog import DemandKind
from gpuscale.policy import MAX_TARGET, MIN_TARGET, NotReadyPods
from gpuscale_decider.core.demand import DEMAND, ServiceRate, demand, held_busy, service_rate
from gpuscale_decider.core.replicas import Tolerances, metric_proposal
from gpuscale_decider.core.state import Capacity

from .scenario import NOW, P, policy, seen, step, world

WINDOW_S = 30.0


def flows(arriving: float, served: float, **more: float) -> dict[str, float]:
    return {"request_arrival_rate": arriving, "request_completion_rate": served, **more}


def estimates(name: str, target: float, *pods: P, remembered: float | None = None) -> dict[str, float]:
    _, observation = world(pods, window_s=WINDOW_S, metric=name)
    rate = service_rate(observation, remembered)
    return dict(demand(name, target, observation, rate).values)


def one(name: str, target: float, pod: P, remembered: float | None = None) -> float:
    return estimates(name, target, pod, remembered=remembered)["bert-0"]


# --- served: value × D / C ---------------------------------------------------------


def test_served_a_pod_serving_all_that_arrives_reads_its_value() -> None:
    assert one("gpu_util", 70, P({"gpu_util": 55.0, **flows(6.0, 6.0)})) == pytest.approx(55.0)


def test_served_a_gpu_pinned_with_twice_what_it_serves_arriving_is_asked_for_200() -> None:
    # U = C × S: 100 % at 8/s is 12.5 GPU-% per request/s; 16/s arrive (2 wait): 200 GPU-%.
    assert one(
        "gpu_util", 70, P({"gpu_util": 100.0, **flows(16.0, 8.0, requests_waiting=2.0)})
    ) == pytest.approx(200.0)


def test_served_a_pod_filling_just_after_a_pod_joined_reads_its_value() -> None:
    # Just ready: 8/s arrive, 3/s finish so far, none waits: the other 5/s are requests that
    # started and run (the reading shows them as they do), not demand beyond the pod.
    pod = P({"gpu_util": 60.0, **flows(8.0, 3.0)})
    _, observation = world((pod,), window_s=WINDOW_S)
    joined = replace(observation, span_s=5.0)
    assert demand("gpu_util", 70, joined, None).values["bert-0"] == pytest.approx(60.0)


def test_served_a_rise_without_a_queue_asks_for_what_arrives() -> None:
    # Completions lag arrivals by a service time: U = C × S, so 60 % at 3/s finished is
    # 20 GPU-% per request/s, and the 8/s arriving will keep it 160 % busy once they run.
    assert one("gpu_util", 70, P({"gpu_util": 60.0, **flows(8.0, 3.0)})) == pytest.approx(160.0)


def test_served_a_backlog_being_worked_off_counts_at_what_arrives() -> None:
    # Finishing 8/s with 4/s arriving and nothing waiting: half of what it serves is asked.
    assert one("gpu_util", 70, P({"gpu_util": 100.0, **flows(4.0, 8.0)})) == pytest.approx(50.0)


def test_served_a_backlog_beyond_what_the_target_s_headroom_serves_is_asked_for() -> None:
    # 12.5 GPU-% per request/s. 120 waiting served within 30 s: 4/s, 50 GPU-%; the 30 GPU-%
    # a target of 70 keeps free serves 30 of it, so 20 more: 120 GPU-% in all.
    pod = P({"gpu_util": 100.0, **flows(8.0, 8.0)}, recent={"requests_waiting": 120.0})
    assert one("gpu_util", 70, pod) == pytest.approx(120.0)


def test_served_a_backlog_the_target_s_headroom_serves_within_the_window_asks_for_nothing() -> None:
    # 60 waiting: 25 GPU-% over 30 s, within the 30 GPU-% a target of 70 keeps free.
    pod = P({"gpu_util": 100.0, **flows(8.0, 8.0)}, recent={"requests_waiting": 60.0})
    assert one("gpu_util", 70, pod) == pytest.approx(100.0)


def test_served_a_pod_with_a_queue_reads_the_last_seconds_arrivals_less_a_count_s_noise() -> None:
    # A queue stands: the pod is at its limit, and 16/s arrived over the last 3 s, a count of 48
    # requests: one Poisson standard error below is 16 − √(16/3) = 13.69/s, over the window's
    # 8/s. 12.5 GPU-% per request/s: 171.1, and the backlog's 20 GPU-% past the headroom.
    now = {"requests_waiting": 120.0, "request_arrival_rate": 16.0, "request_completion_rate": 8.0}
    pod = P({"gpu_util": 100.0, **flows(8.0, 8.0)}, recent=now)
    assert one("gpu_util", 70, pod) == pytest.approx(12.5 * (16.0 - math.sqrt(16.0 / 3.0)) + 20.0)


def test_served_pods_with_a_queue_take_off_the_noise_of_their_count_together() -> None:
    # Four such pods count 192 requests over 3 s: one standard error of the sum is 1/√192 of it,
    # half the share one pod's 48 would lose, so each reads 16 × (1 − 1/√192) = 14.85/s.
    now = {"requests_waiting": 120.0, "request_arrival_rate": 16.0, "request_completion_rate": 8.0}
    pods = [P({"gpu_util": 100.0, **flows(8.0, 8.0)}, recent=now) for _ in range(4)]
    each = 12.5 * 16.0 * (1.0 - 1.0 / math.sqrt(192.0)) + 20.0
    assert estimates("gpu_util", 70, *pods) == pytest.approx({f"bert-{i}": each for i in range(4)})


def test_served_a_pod_without_a_queue_reads_arrivals_over_the_window() -> None:
    # No queue: what the last seconds show is a burst its headroom absorbs, not yet demand.
    now = {"requests_waiting": 0.5, "request_arrival_rate": 16.0, "request_completion_rate": 8.0}
    pod = P({"gpu_util": 80.0, **flows(8.0, 8.0)}, recent=now)
    assert one("gpu_util", 70, pod) == pytest.approx(80.0)


def test_served_recent_arrivals_within_their_noise_of_the_window_s_leave_it_as_it_is() -> None:
    # 9/s over 3 s is 9 − √3 = 7.27/s surely: not more than the window's 8/s.
    now = {"requests_waiting": 12.0, "request_arrival_rate": 9.0, "request_completion_rate": 8.0}
    pod = P({"gpu_util": 100.0, **flows(8.0, 8.0)}, recent=now)
    assert one("gpu_util", 70, pod) == pytest.approx(100.0)


def rising(now: float, window: float = 2.3) -> tuple[P, ...]:
    """Four pods 30 % busy on ``window`` requests/s over the window, ``now``/s over the last 3 s."""
    recent = {"requests_waiting": 0.0, "request_arrival_rate": now, "request_completion_rate": window}
    window_means = {"gpu_util": 30.0, "requests_waiting": 0.0, **flows(window, window)}
    return tuple(P(window_means, recent=recent) for _ in range(4))


def test_a_scale_down_holds_on_arrivals_that_rose_beyond_the_noise_of_their_count() -> None:
    # 16/s over the last 3 s across the workload, a count of 48: 1 − 2/√48 of it is surely there,
    # 11.4/s, over the window's 9.2/s. Each pod is read on 4 × 0.711 = 2.84/s at 30/2.3 GPU-% per
    # request/s: 37.1, where the window alone says 30.
    share = 1.0 - 2.0 / math.sqrt(48.0)
    assert estimates("gpu_util", 70, *rising(4.0)) == pytest.approx(
        {f"bert-{i}": 30.0 / 2.3 * 4.0 * share for i in range(4)}
    )


def test_arrivals_within_two_standard_errors_of_the_window_s_leave_the_estimate_as_it_is() -> None:
    # 3/s a pod, 36 in 3 s over the workload: 1 − 2/√36 = 2/3 of 12/s is 8/s, not over 9.2/s.
    assert estimates("gpu_util", 70, *rising(3.0)) == pytest.approx({f"bert-{i}": 30.0 for i in range(4)})


def test_risen_arrivals_hold_an_estimate_up_to_the_target_never_past_it() -> None:
    # 20/s a pod now: a scale-down is held, but no pod is added on a few seconds without a queue.
    assert estimates("gpu_util", 70, *rising(20.0)) == pytest.approx({f"bert-{i}": 70.0 for i in range(4)})
    queue = estimates("requests_waiting", 4, *rising(20.0), remembered=8.0)
    assert queue == pytest.approx({f"bert-{i}": 4.0 for i in range(4)})


def test_served_pods_asked_for_and_starting_bring_their_headroom_for_the_backlog() -> None:
    # 120 waiting (50 GPU-% over 30 s): one pod's 30 GPU-% headroom leaves 20 asked for; with
    # two more pods starting, 90 GPU-% of headroom serves it all once they take their share.
    pod = P({"gpu_util": 100.0, **flows(8.0, 8.0)}, recent={"requests_waiting": 120.0})
    _, observation = world((pod,), window_s=WINDOW_S)
    assert demand("gpu_util", 70, observation, None).values["bert-0"] == pytest.approx(120.0)
    assert demand("gpu_util", 70, observation, None, starting=2).values["bert-0"] == pytest.approx(100.0)


def test_served_a_pod_the_scheduler_has_no_node_for_brings_no_headroom() -> None:
    # As above, 120 waiting at 100 GPU-% on the one serving pod: two Pending pods that will start
    # tolerate the backlog (100); two the scheduler left Unschedulable will not serve it (120).
    serving = P({"gpu_util": 100.0, **flows(8.0, 8.0)}, recent={"requests_waiting": 120.0})
    will_start = P(None, phase="Pending", ready=False)
    no_node = replace(will_start, unschedulable=True)

    def usage(*pending: P) -> float | None:
        s = step(policy(), 3, (serving, *pending))
        assert s.evaluation is not None
        return s.evaluation.proposals[0].usage

    assert usage(will_start, will_start) == pytest.approx(100.0)
    assert usage(no_node, no_node) == pytest.approx(120.0)


def test_queue_pods_starting_tolerate_their_target_s_queue_too() -> None:
    # 34 waiting at λ = μ = 8: 30 over one pod's target of 4 (1/s more over 30 s); with two pods
    # starting, 3 × 4 are tolerated and 22 are over.
    pod = P({"requests_waiting": 34.0, **flows(8.0, 8.0)})
    _, observation = world((pod,), window_s=WINDOW_S, metric="requests_waiting")
    rate = ServiceRate(8.0, True)
    alone = demand("requests_waiting", 4, observation, rate).values["bert-0"]
    assert alone == pytest.approx(4.0 * (8.0 / RHO_4 + 30.0 / 30.0) / 8.0)
    starting = demand("requests_waiting", 4, observation, rate, starting=2).values["bert-0"]
    assert starting == pytest.approx(4.0 * (8.0 / RHO_4 + 22.0 / 30.0) / 8.0)


def test_served_a_metric_without_a_ceiling_keeps_no_headroom_for_a_backlog() -> None:
    # requests_running: 16 running at 8/s finished, 2 s each; 60 waiting over 30 s is 2/s more.
    pod = P({"requests_running": 16.0, **flows(8.0, 8.0)}, recent={"requests_waiting": 60.0})
    assert one("requests_running", 12, pod) == pytest.approx(20.0)


@pytest.mark.parametrize("name", ["sm_active", "sm_util", "kv_cache_usage", "requests_running"])
def test_served_every_metric_proportional_to_what_is_served_scales_with_what_is_asked(name: str) -> None:
    # Little's law for running requests (R = C × T), the utilization law for the rest; 2 wait,
    # which a metric without a ceiling also asks for (5 per request/s × 2 / 30 s).
    backlog = 5.0 * 2.0 / WINDOW_S if name == "requests_running" else 0.0
    assert one(name, 10, P({name: 40.0, **flows(12.0, 8.0, requests_waiting=2.0)})) == pytest.approx(
        60.0 + backlog
    )


def test_served_too_few_finished_to_price_a_request_reads_the_value() -> None:
    # 2 requests in 30 s: a scrape counts whole requests, no rate to divide by.
    assert one("gpu_util", 70, P({"gpu_util": 90.0, **flows(3.0, 2.0 / WINDOW_S)})) == 90.0


# --- queue: target × (λ/ρ + B/window) / μ, ρ where an M/M/1 queue's mean is the target ---

# ρ for a target of 4: ρ²/(1 − ρ) = 4 gives ρ = 2√2 − 2.
RHO_4 = 2.0 * math.sqrt(2.0) - 2.0


@given(st.floats(0.001, 1e6))
def test_queue_the_busy_share_held_is_where_one_server_s_mean_queue_is_the_target(target: float) -> None:
    rho = held_busy(target)
    assert 0.0 < rho < 1.0
    assert rho * rho / (1.0 - rho) == pytest.approx(target, rel=1e-6)


def test_queue_the_busy_share_is_a_share_at_the_policy_s_bounds() -> None:
    assert 0.03 < held_busy(MIN_TARGET) < 0.032  # about √target near 0: a tiny target asks for many pods
    assert 0.999 < held_busy(MAX_TARGET) <= 1.0


def test_queue_a_lower_target_keeps_more_headroom() -> None:
    assert held_busy(1.0) == pytest.approx((math.sqrt(5.0) - 1.0) / 2.0)  # the golden ratio's inverse
    assert held_busy(0.5) == pytest.approx(0.5)
    assert held_busy(1.0) < held_busy(4.0) < held_busy(16.0)


def test_queue_arriving_at_the_service_rate_has_no_steady_queue_and_asks_for_1_over_rho() -> None:
    # λ = μ: ρ = 1, where a random queue grows; a target of 4 holds pods at ρ₄.
    pod = P({"requests_waiting": 4.0, **flows(8.0, 8.0)})
    assert one("requests_waiting", 4, pod) == pytest.approx(4.0 / RHO_4)


def test_queue_twice_what_a_pod_serves_arriving_asks_for_two_pods_at_rho() -> None:
    pod = P({"requests_waiting": 4.0, **flows(16.0, 8.0)})
    assert one("requests_waiting", 4, pod) == pytest.approx(4.0 * 2.0 / RHO_4)


def test_queue_the_same_flows_under_a_lower_target_ask_for_more_pods() -> None:
    # Pods asked: estimate ÷ target. λ = μ, one waiting (no backlog over either target):
    # 1/ρ₄ ≈ 1.21 pods at a target of 4, 1/ρ₁ ≈ 1.62 at 1.
    pod = P({"requests_waiting": 1.0, **flows(8.0, 8.0)})
    assert one("requests_waiting", 4, pod) / 4 == pytest.approx(1.0 / RHO_4)
    assert one("requests_waiting", 1, pod) / 1 == pytest.approx(2.0 / (math.sqrt(5.0) - 1.0))


def test_queue_a_backlog_over_the_target_is_served_within_the_window_at_mu() -> None:
    # 4 + 120 waiting at λ = μ = 8: 120 more over 30 s is 4/s, half a pod at its limit.
    pod = P({"requests_waiting": 124.0, **flows(8.0, 8.0)})
    assert one("requests_waiting", 4, pod) == pytest.approx(4.0 * (8.0 / RHO_4 + 4.0) / 8.0)


def test_queue_over_its_target_is_sized_on_what_arrives_now_not_on_the_window_s_mean() -> None:
    # A step: the window still averages 8/s, the last seconds 16/s, and 10 wait (6 over 4):
    # the queue shows the 16/s have lasted, so 16/s at ρ₄ plus 6 over 30 s, at μ = 8.
    now = {"requests_waiting": 10.0, "request_arrival_rate": 16.0, "request_completion_rate": 8.0}
    pod = P({"requests_waiting": 6.0, **flows(8.0, 8.0)}, recent=now)
    assert one("requests_waiting", 4, pod) == pytest.approx(4.0 * (16.0 / RHO_4 + 6.0 / 30.0) / 8.0)


def test_queue_within_its_target_reads_arrivals_over_the_window() -> None:
    # A burst of the last seconds with 3 waiting: the queue absorbs it, the window's 8/s stand.
    now = {"requests_waiting": 3.0, "request_arrival_rate": 16.0, "request_completion_rate": 8.0}
    pod = P({"requests_waiting": 2.0, **flows(8.0, 8.0)}, recent=now)
    assert one("requests_waiting", 4, pod) == pytest.approx(4.0 * (8.0 / RHO_4) / 8.0)


def test_queue_over_its_target_with_arrivals_falling_reads_the_window_s_larger_mean() -> None:
    # The backlog of a load that is leaving: the window's 12/s still ask, not the last 4/s.
    now = {"requests_waiting": 34.0, "request_arrival_rate": 4.0, "request_completion_rate": 8.0}
    pod = P({"requests_waiting": 30.0, **flows(12.0, 8.0)}, recent=now)
    assert one("requests_waiting", 4, pod) == pytest.approx(4.0 * (12.0 / RHO_4 + 1.0) / 8.0)


def test_queue_gone_keeps_the_pods_that_serve_what_arrives_at_the_remembered_rate() -> None:
    # No queue, 4/s arriving at a pod that served 8/s at its limit: half a pod's worth at ρ₄.
    pod = P({"requests_waiting": 0.0, **flows(4.0, 4.0)})
    assert one("requests_waiting", 4, pod, remembered=8.0) == pytest.approx(2.0 / RHO_4)


def test_queue_never_queued_takes_the_service_rate_from_the_utilization_law() -> None:
    # 4/s served at 50 % busy: 8/s when all busy.
    pod = P({"requests_waiting": 0.0, "gpu_util": 50.0, **flows(4.0, 4.0)})
    assert one("requests_waiting", 4, pod) == pytest.approx(2.0 / RHO_4)


def test_queue_with_no_service_rate_known_is_hpa_s_level() -> None:
    # Less than one waiting: not at its limit, and no GPU reading or memory to bound μ by.
    pod = P({"requests_waiting": 0.5, **flows(4.0, 4.0)})
    assert one("requests_waiting", 4, pod) == 0.5


def test_queue_a_measured_rate_wins_over_a_remembered_one_and_a_bound_never_lowers_it() -> None:
    queued = P({"requests_waiting": 5.0, "gpu_util": 100.0, **flows(9.0, 6.0)})
    _, observation = world((queued,), window_s=WINDOW_S, metric="requests_waiting")
    assert service_rate(observation, 10.0) == ServiceRate(6.0, True)
    idle = P({"requests_waiting": 0.0, "gpu_util": 50.0, **flows(2.0, 2.0)})
    _, observation = world((idle,), window_s=WINDOW_S, metric="requests_waiting")
    assert service_rate(observation, 10.0) == ServiceRate(10.0, False, "as last measured")  # bound: 4
    assert service_rate(observation, 3.0) == ServiceRate(4.0, False, "as its GPU's utilization bounds it")
    assert service_rate(observation, None) == ServiceRate(4.0, False, "as its GPU's utilization bounds it")


# --- level -----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["gpu_mem_used_ratio", "gpu_mem_used_mib", "power_w"])
def test_level_metrics_with_no_model_read_their_value(name: str) -> None:
    assert DEMAND.get(name, DemandKind.LEVEL) is DemandKind.LEVEL
    assert one(name, 50, P({name: 80.0, **flows(16.0, 8.0)})) == 80.0


@given(
    st.lists(st.floats(0.0, 100.0, allow_nan=False), min_size=1, max_size=8),
    st.sampled_from(["gpu_util", "requests_waiting", "requests_running", "kv_cache_usage"]),
)
def test_without_engine_rates_every_estimate_is_the_value_and_the_answer_hpa_s(
    values: list[float], name: str
) -> None:
    pods = tuple(P({name: v}) for v in values)
    views, observation = world(pods, window_s=WINDOW_S, metric=name)
    d = demand(name, 50.0, observation, service_rate(observation, 8.0))
    assert d.estimated == 0
    assert dict(d.values) == observation.values[name]
    tolerances = Tolerances(0.1, 0.1)
    hpa = metric_proposal(name, 50.0, observation.values[name], views, 3, tolerances, NotReadyPods.MISSING)
    recommended = step(policy(metrics=[{"name": name, "target": 50}]), 3, pods).memory.state.recommendations
    assert recommended[-1].value == hpa.replicas


@pytest.mark.parametrize("arriving", [1e300, 1e308])
def test_wild_but_finite_rates_neither_crash_nor_pass_max_replicas(arriving: float) -> None:
    pods = (P({"gpu_util": 100.0, "requests_waiting": 1e300, **flows(arriving, 1e-300)}),)
    for metric in ("gpu_util", "requests_waiting"):
        s = step(policy(metrics=[{"name": metric, "target": 4}]), 2, pods)
        assert s.decision is None or s.decision.to_replicas <= 10


# --- through HPA's calculation, once ----------------------------------------------------


def test_a_step_pinned_one_pod_with_twice_its_service_arriving_asks_for_three_at_70() -> None:
    s = step(policy(), 1, (P({"gpu_util": 100.0, **flows(16.0, 8.0, requests_waiting=2.0)}),))
    assert s.decision is not None
    assert s.decision.to_replicas == 3


def test_a_queue_gone_scales_down_to_the_pods_that_serve_what_arrives_not_to_hpa_s_minimum() -> None:
    queue = policy(metrics=[{"name": "requests_waiting", "target": 4}])
    # 3 pods, 13 requests/s in all, a pod served 6/s at its limit: 13 / (6 ρ₄) = 2.6 → 3 pods.
    pods = tuple(P({"requests_waiting": 0.0, **flows(13.0 / 3, 13.0 / 3)}) for _ in range(3))
    state = seen(queue_capacity=Capacity(NOW - 600, 6.0))
    assert step(queue, 3, pods, state=state).decision is None
    # 7/s: 1.4 → 2 pods.
    pods = tuple(P({"requests_waiting": 0.0, **flows(7.0 / 3, 7.0 / 3)}) for _ in range(3))
    s = step(queue, 3, pods, state=state)
    assert s.decision is not None
    assert s.decision.to_replicas == 2


def test_a_service_rate_measured_now_is_remembered_with_its_time() -> None:
    queue = policy(metrics=[{"name": "requests_waiting", "target": 4}])
    s = step(queue, 1, (P({"requests_waiting": 6.0, **flows(9.0, 6.0)}),))
    assert s.memory.state.queue_capacity == Capacity(NOW, 6.0)
    s = step(queue, 1, (P({"requests_waiting": 0.0, **flows(2.0, 2.0)}),), state=s.memory.state)
    assert s.memory.state.queue_capacity == Capacity(NOW, 6.0)  # not measured without a queue


def test_pending_pods_count_as_capacity_asked_for_so_a_rate_is_not_asked_twice() -> None:
    # 200 GPU-% asked of 1 serving pod while 2 start: ceil(200 / 70) = 3 already asked.
    pods = (P({"gpu_util": 100.0, **flows(16.0, 8.0)}), P(None, phase="Pending", ready=False))
    s = step(policy(), 3, (*pods, replace(pods[1])))
    assert s.decision is None


def test_an_estimate_is_finite_for_every_row() -> None:
    for name in DEMAND:
        v = one(name, 4, P({name: 50.0, "gpu_util": 50.0, **flows(5.0, 4.0)}), remembered=8.0)
        assert math.isfinite(v)
        assert v >= 0.0


def test_served_just_after_a_capacity_change_a_rate_needs_its_requests_within_the_span() -> None:
    # 2 requests/s over the 1 s the means cover: 2 finished, too few to price one.
    pod = P({"gpu_util": 90.0, **flows(6.0, 2.0, requests_waiting=2.0)})
    _, observation = world((pod,), window_s=WINDOW_S, metric="gpu_util")
    short = replace(observation, span_s=1.0)
    assert demand("gpu_util", 70, short, None).values["bert-0"] == 90.0
    assert demand("gpu_util", 70, observation, None).values["bert-0"] == pytest.approx(270.0)


# --- a pod that just joined ------------------------------------------------------------


def test_a_pod_that_joined_without_rates_yet_beside_pods_with_them_is_missing() -> None:
    # Its first scrape has no rates (a rate is a difference of two): its reading, taken while its
    # share of the load arrived, is no estimate, and HPA's missing-pod rules count it.
    pods = (P({"gpu_util": 100.0, **flows(16.0, 8.0, requests_waiting=2.0)}), P({"gpu_util": 96.0}))
    _, observation = world(pods, window_s=WINDOW_S)
    joined = demand("gpu_util", 70, replace(observation, span_s=1.2), None)
    assert dict(joined.values) == {"bert-0": pytest.approx(200.0)}
    steady = demand("gpu_util", 70, observation, None)  # no pod joined: an engine without rates
    assert dict(steady.values) == {"bert-0": pytest.approx(200.0), "bert-1": 96.0}
