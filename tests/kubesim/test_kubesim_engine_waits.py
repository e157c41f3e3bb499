"""What users pay in kube-sim's engine queues: each request's wait, per workload.

Every expected figure comes from the queue model (a pod of 16 slots × 2 s serves
8 requests a second when full; FIFO; a waiting request gives up at rate
1/patience), not from the code: a fluid queue filled at ``a`` and drained at
``s`` grows by ``a − s`` a second, and a request that finds ``Q`` ahead of it
waits ``Q / s``.
"""

from __future__ import annotations

import math
from typing import Any

import aiohttp
import pytest

from gpuscale_kubesim import KubeSim
from gpuscale_kubesim.cluster.inference import (
    Endpoint,
    EngineConfig,
    EnginePod,
    InferenceWorkloads,
    WaitAccount,
)

from ..k8s_objects import gpu_workload, vllm_annotations
from ..waiting import eventually

PATIENT = EngineConfig(patience_s=1e12)  # nobody gives up
SERVES = PATIENT.requests_per_gpu_s  # 8 a second, one GPU full
ENDPOINT = Endpoint("vllm", 8000, "/metrics", "m")
DT = 0.1
STEP_WAIT = DT  # the accounting's resolution: a request is started at the end of a step
WORKLOAD = ("default", "llm")


def full_pod(config: EngineConfig = PATIENT) -> EnginePod:
    """A one-GPU pod with every slot busy: it completes ``SERVES`` a second from now on."""
    return EnginePod(1, ENDPOINT, running=config.max_running_per_gpu)


def run(pod: EnginePod, arriving_per_s: float, seconds: float, config: EngineConfig = PATIENT) -> None:
    for _ in range(round(seconds / DT)):
        pod.step(arriving_per_s, DT, config)


def test_a_pod_serving_8_a_second_with_10_arriving_for_10_s_has_queued_20_and_the_20th_waited_2_5_s() -> None:
    pod = full_pod()
    run(pod, 10.0, 10.0)
    assert pod.waiting == pytest.approx((10.0 - SERVES) * 10.0, rel=1e-6)  # 20 queued
    run(pod, 0.0, 5.0)  # the queue drains at 8 a second
    account = pod.account
    assert pod.waiting == 0.0
    # The last to arrive found 20 ahead of it: 20 / 8 = 2.5 s.
    assert account.wait_quantile_s(1.0) == pytest.approx(20.0 / SERVES, abs=STEP_WAIT)
    # Request-seconds: the queue's area, 10 s rising to 20 (100) and 2.5 s falling (25).
    assert account.waiting_request_s == pytest.approx(100.0 + 25.0, rel=0.02)
    assert account.arrived == pytest.approx(100.0)
    assert account.started == pytest.approx(100.0)


def test_on_a_growing_queue_each_arrival_waits_for_those_ahead_so_the_p90_is_nine_tenths_of_the_last() -> (
    None
):
    pod = full_pod()
    run(pod, 10.0, 10.0)
    run(pod, 0.0, 5.0)
    # Arriving at a, a request finds 2a ahead and waits 2a / 8: waits spread evenly over 0..2.5 s.
    assert pod.account.wait_quantile_s(0.9) == pytest.approx(0.9 * 2.5, abs=STEP_WAIT)
    assert pod.account.wait_quantile_s(0.5) == pytest.approx(0.5 * 2.5, abs=STEP_WAIT)


def test_below_its_capacity_a_pod_makes_nobody_wait() -> None:
    pod = full_pod()
    run(pod, 0.5 * SERVES, 30.0)
    assert pod.account.waiting_request_s == 0.0
    assert pod.account.wait_quantile_s(0.9) == 0.0
    assert pod.account.started == pytest.approx(0.5 * SERVES * 30.0)


def test_requests_that_give_up_thin_the_queue_and_the_last_served_waited_less() -> None:
    config = EngineConfig(patience_s=10.0)
    pod = full_pod(config)
    run(pod, 20.0 / DT, DT, config)  # 20 arrive at once
    run(pod, 0.0, 10.0, config)
    # dQ/dt = -8 - Q/10 from 20: Q(t) = 100·e^(-t/10) - 80, empty at 10·ln(100/80) = 2.23 s (not 2.5).
    drained_at = 10.0 * math.log(100.0 / 80.0)
    account = pod.account
    assert account.wait_quantile_s(1.0) == pytest.approx(drained_at, abs=2 * STEP_WAIT)
    assert account.abandoned == pytest.approx(20.0 - 8.0 * drained_at, abs=0.5)
    assert account.started + account.abandoned == pytest.approx(account.arrived)


def test_a_pod_that_stops_serving_takes_its_queue_and_its_workload_keeps_what_was_paid() -> None:
    engines = InferenceWorkloads(PATIENT)
    both = {WORKLOAD: {"a": (1, ENDPOINT), "b": (1, ENDPOINT)}}
    engines.advance(0.0, both, lambda _w, _t: 0.0)
    engines.advance(10.0, both, lambda _w, _t: 400.0)  # 4 GPUs of work on 2
    queued = sum(p.waiting for p in engines.pods.values())
    paid = engines.accounts[WORKLOAD].waiting_request_s
    assert queued > 0
    assert paid > 0
    gone = engines.pods["b"].waiting
    engines.advance(10.0, {WORKLOAD: {"a": (1, ENDPOINT)}}, lambda _w, _t: 400.0)
    account = engines.accounts[WORKLOAD]
    assert account.dropped == pytest.approx(gone)
    assert account.waiting_request_s == pytest.approx(paid)
    # A tenant's workload is its own: another workload's account is untouched by it.
    engines.advance(
        12.0, {WORKLOAD: {"a": (1, ENDPOINT)}, ("other", "x"): {"c": (1, ENDPOINT)}}, lambda w, _t: 50.0
    )
    assert engines.accounts[("other", "x")].waiting_request_s == 0.0


def test_arrivals_while_no_pod_serves_are_counted_unserved() -> None:
    engines = InferenceWorkloads(PATIENT)
    engines.advance(0.0, {WORKLOAD: {"a": (1, ENDPOINT)}}, lambda _w, _t: 50.0)
    engines.advance(5.0, {WORKLOAD: {}}, lambda _w, _t: 50.0)
    account = engines.accounts[WORKLOAD]
    assert account.unserved == pytest.approx(0.5 * SERVES * 5.0)
    assert account.arrived == pytest.approx(account.unserved)


def test_an_account_read_back_from_json_and_taken_since_an_earlier_copy_keeps_the_quantiles() -> None:
    pod = full_pod()
    run(pod, 10.0, 10.0)
    earlier = pod.account.copy()
    run(pod, 0.0, 5.0)
    since = WaitAccount.from_json(pod.account.to_json()).since(earlier)
    # Only the drain's starts: the 20 queued at 10 s, who arrived at 5..10 s and waited 1.25..2.5 s.
    assert since.started == pytest.approx(20.0, abs=0.5)
    assert since.wait_quantile_s(0.0) >= 1.25 - STEP_WAIT
    assert since.wait_quantile_s(1.0) == pytest.approx(2.5, abs=STEP_WAIT)


async def test_the_sim_api_serves_what_a_workloads_requests_paid_and_leaves_others_alone() -> None:
    async with KubeSim(port=0, scenario="empty", startup_delay_s=0.3) as sim:
        await sim.create(gpu_workload("llm", 1, pod_annotations=vllm_annotations(18010)))
        await sim.create(gpu_workload("calm", 1, pod_annotations=vllm_annotations(18011)))
        await sim.create(gpu_workload("bert", 1))
        sim.set_load("default", "llm", 300)  # 3 GPUs of work on one
        sim.set_load("default", "calm", 20)

        async def workloads() -> dict[str, dict[str, Any]]:
            async with aiohttp.ClientSession() as http, http.get(f"{sim.url}/sim/v1/workloads") as response:
                assert response.status == 200
                return {w["name"]: w for w in (await response.json())["workloads"]}

        async def llm_paid() -> dict[str, dict[str, Any]]:
            found = await workloads()
            paid = found["llm"].get("requests_paid")
            assert isinstance(paid, dict), found["llm"]
            assert paid["waiting_request_s"] > 1.0, paid
            return found

        found = await eventually(llm_paid, 30, "the overloaded workload's requests waiting")
        account = WaitAccount.from_json(found["llm"]["requests_paid"])
        assert account.arrived > 0
        assert account.waiting_request_s > 1.0
        calm = found["calm"].get("requests_paid")
        assert isinstance(calm, dict)
        assert calm["waiting_request_s"] == 0.0
        assert calm["wait_p90_s"] == 0.0
        assert "requests_paid" not in found["bert"]  # not an inference server
