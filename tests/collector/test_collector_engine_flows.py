"""Request flows from the engines' finished-request counters: the counter
totals read from the engines' own published expositions
(tests/fixtures/engine_metrics, sources in its README) through
``prometheus_client``'s parser as the scraper reads them, the rates between
two scrapes, and the same through the real scraper over HTTP."""

from __future__ import annotations

import asyncio
import math
from pathlib import Path

import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.wire import EngineSignals
from gpuscale_collector.core.engines import EngineReading, Flows, flows, recognise, select_lines

from .test_collector_engine_scraper_http import pod, scraper, serving, settled

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_metrics"
MODEL = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'


def read(text: str) -> EngineReading:
    """As the scraper does: keep the lines read here, parse them, recognise."""
    return recognise(text_string_to_metric_families(select_lines(text)))


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def vllm_page(*, stop: float, length: float, waiting: float, running: float, abort: float = 0.0) -> str:
    """vLLM's own example page (docs/design/metrics.md: running 8, success stop 1 /
    length 131 / abort 0), with these values and the waiting gauge vLLM also writes."""
    page = (
        sample("vllm_v1_design_doc.txt")
        .replace(
            f"vllm:num_requests_running{{{MODEL}}} 8.0", f"vllm:num_requests_running{{{MODEL}}} {running}"
        )
        .replace(f'finished_reason="stop",{MODEL}}} 1.0', f'finished_reason="stop",{MODEL}}} {stop}')
        .replace(f'finished_reason="length",{MODEL}}} 131.0', f'finished_reason="length",{MODEL}}} {length}')
        .replace(f'finished_reason="abort",{MODEL}}} 0.0', f'finished_reason="abort",{MODEL}}} {abort}')
    )
    return (
        page
        + "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        + "# TYPE vllm:num_requests_waiting gauge\n"
        + f"vllm:num_requests_waiting{{{MODEL}}} {waiting}\n"
    )


# --- what the parser makes of the counters (the assumptions the core rests on) --------


def test_the_parser_names_a_counter_family_without_total_and_its_samples_with_it() -> None:
    families = {f.name: f for f in text_string_to_metric_families(sample("vllm_v1_design_doc.txt"))}
    success = families["vllm:request_success"]
    assert success.type == "counter"
    assert {s.name for s in success.samples} == {"vllm:request_success_total"}
    # Triton writes its counters without _total; the parser adds it to the samples.
    triton = {f.name: f for f in text_string_to_metric_families(sample("triton.txt"))}
    assert [s.name for s in triton["nv_inference_request_success"].samples] == [
        "nv_inference_request_success_total"
    ]


def test_a_histogram_family_with_only_its_count_parses_as_that_histogram() -> None:
    kept = select_lines(sample("sglang.txt"))
    assert "_bucket" not in kept  # the buckets never reach the parser
    assert "_sum" not in kept
    (family,) = [
        f for f in text_string_to_metric_families(kept) if f.name == "sglang:e2e_request_latency_seconds"
    ]
    assert family.type == "histogram"
    assert [(s.name, s.value) for s in family.samples] == [
        ("sglang:e2e_request_latency_seconds_count", 11228.0)
    ]


# --- counter totals on the engines' own pages ------------------------------------------


def test_vllm_v1_every_finished_reason_counts() -> None:
    r = read(sample("vllm_v1_design_doc.txt"))
    assert r.requests_finished == 132.0  # stop 1 + length 131 + abort 0
    assert "vllm:request_success_total" in r.series


def test_vllm_v0_success_counter() -> None:
    assert read(sample("vllm_v0.txt")).requests_finished == 4.0


def test_sglang_finished_requests_are_the_e2e_latency_count() -> None:
    r = read(sample("sglang.txt"))
    assert r.requests_finished == 11228.0
    # The other histograms' counts (time to first token: 11008) are not requests finished.
    assert r.series.count("sglang:e2e_request_latency_seconds_count") == 1


def test_triton_success_and_failure_add_up_over_models() -> None:
    page = sample("triton.txt")
    assert read(page).requests_finished == 0.0  # an idle server: counted, not absent
    busy = (
        page.replace('nv_inference_request_success{model="tensorrt_llm",version="1"} 0', 'nv_inference_request_success{model="tensorrt_llm",version="1"} 40')
        .replace('nv_inference_request_failure{model="tensorrt_llm",version="1"} 0', 'nv_inference_request_failure{model="tensorrt_llm",version="1"} 2')
        + 'nv_inference_request_success{model="preprocessing",version="1"} 7\n'
    )  # fmt: skip
    r = read(busy)
    assert r.requests_finished == 49.0
    assert r.engines == ("triton",)


# TGI's counters (router/src: metrics::counter!("tgi_request_success"),
# ("tgi_request_failure", "err" => ...)) as the Rust metrics-exporter-prometheus
# writes them, with and without _total, and without a TYPE line.
@pytest.mark.parametrize(
    "page",
    [
        "# TYPE tgi_request_success counter\ntgi_request_success 40\n"
        '# TYPE tgi_request_failure counter\ntgi_request_failure{err="validation"} 2\n'
        'tgi_request_failure{err="overloaded"} 1\n',
        "# TYPE tgi_request_success_total counter\ntgi_request_success_total 40\n"
        '# TYPE tgi_request_failure_total counter\ntgi_request_failure_total{err="validation"} 2\n'
        'tgi_request_failure_total{err="overloaded"} 1\n',
        'tgi_request_success 40\ntgi_request_failure{err="validation"} 2\ntgi_request_failure{err="overloaded"} 1\n',
    ],
    ids=["typed", "typed_total", "untyped"],
)
def test_tgi_success_and_failure_add_up(page: str) -> None:
    names = {
        line.split("\t")[0]: line.split("\t")[1]
        for line in sample("tgi_names.txt").splitlines()
        if "\t" in line and not line.startswith("#")
    }
    assert names["tgi_request_success"] == "Counter"
    text = "# TYPE tgi_queue_size gauge\ntgi_queue_size 7\n# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 31\n"
    text += (
        "# TYPE tgi_request_count counter\ntgi_request_count 4021\n" + page
    )  # all requests, not finished ones
    r = read(text)
    assert r.requests_finished == 43.0
    assert r.signals() == EngineSignals("tgi", requests_waiting=7.0, requests_running=31.0)


def test_several_engines_counters_add_up() -> None:
    assert read(sample("vllm_v0.txt") + sample("sglang.txt")).requests_finished == 4.0 + 11228.0


@pytest.mark.parametrize("value", ["-3", "NaN", "+Inf"])
def test_an_impossible_counter_is_a_problem_and_no_total(value: str) -> None:
    page = vllm_page(stop=100, length=0, waiting=5, running=15).replace(
        f'vllm:request_success_total{{finished_reason="length",{MODEL}}} 0',
        f'vllm:request_success_total{{finished_reason="length",{MODEL}}} {value}',
    )
    r = read(page)
    # A total without that series would look like a reset now and a burst when it comes back.
    assert r.requests_finished is None
    assert "vllm:request_success_total" not in r.series
    assert any("is not a count of requests" in p for p in r.problems)
    assert (r.requests_waiting, r.requests_running) == (5.0, 15.0)  # the gauges still stand


@pytest.mark.parametrize(
    ("page", "problem"),
    [
        (
            "# TYPE vllm:request_success_total gauge\nvllm:request_success_total 4\n",
            "is a gauge, not a counter",
        ),
        ("# TYPE tgi_request_success gauge\ntgi_request_success 4\n", "is a gauge, not a counter"),
        (
            "# TYPE sglang:e2e_request_latency_seconds summary\nsglang:e2e_request_latency_seconds_count 4\n",
            "is a summary, not a histogram",
        ),
    ],
)
def test_a_counter_of_the_wrong_type_is_a_problem(page: str, problem: str) -> None:
    r = read(page + "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 4\n")
    assert r.requests_finished is None
    assert any(problem in p for p in r.problems)


# --- the flows ---------------------------------------------------------------------------


def test_worked_example() -> None:
    """Counters 100 → 116 in 2 s while waiting + running grows 20 → 36: 8/s left
    the pod, and 16/s came in (the 8/s that left and 8/s more in the pod); of those
    that left, 2 gave up (abort), so 7/s were served."""
    before = read(vllm_page(stop=60, length=40, waiting=5, running=15))
    after = read(vllm_page(stop=70, length=44, abort=2, waiting=12, running=24))
    assert (before.requests_finished, after.requests_finished) == (100.0, 116.0)
    rates = flows(before, 10.0, after, 12.0)
    assert rates == Flows(arrival=16.0, completion=7.0)  # exact in binary floating point
    assert after.signals(rates) == EngineSignals(
        "vllm",
        requests_waiting=12.0,
        requests_running=24.0,
        request_arrival_rate=16.0,
        request_completion_rate=7.0,
    )


def test_requests_that_give_up_waiting_arrived_but_are_not_served() -> None:
    """A pod with a deep queue, finishing 8/s while 4/s give up: they left (the queue
    shrank by them), so arrivals count them, but the pod's service rate is 8/s, not 12/s."""
    before = read(vllm_page(stop=100, length=0, abort=10, waiting=200, running=16))
    after = read(vllm_page(stop=108, length=0, abort=14, waiting=196, running=16))
    assert flows(before, 0.0, after, 1.0) == Flows(arrival=8.0, completion=8.0)


def test_failed_requests_arrived_but_are_not_served() -> None:
    page = "# TYPE tgi_request_success counter\ntgi_request_success {}\n# TYPE tgi_request_failure counter\ntgi_request_failure {}\n"
    gauges = "tgi_queue_size 0\ntgi_batch_current_size 4\n"
    before, after = read(page.format(10, 5) + gauges), read(page.format(13, 8) + gauges)
    assert flows(before, 0.0, after, 1.0) == Flows(arrival=6.0, completion=3.0)


def test_a_draining_pod_arrives_at_zero_not_below() -> None:
    before = read(vllm_page(stop=100, length=0, waiting=30, running=10))
    after = read(vllm_page(stop=104, length=0, waiting=0, running=6))
    assert flows(before, 0.0, after, 1.0) == Flows(arrival=0.0, completion=4.0)


def test_first_scrape_has_no_rates() -> None:
    signals = read(vllm_page(stop=100, length=0, waiting=5, running=15)).signals()
    assert signals is not None
    assert (signals.request_arrival_rate, signals.request_completion_rate) == (None, None)


def test_a_reset_skips_the_round_and_counts_on_from_the_new_value() -> None:
    before = read(vllm_page(stop=100, length=16, waiting=5, running=15))
    restarted = read(vllm_page(stop=3, length=2, waiting=0, running=4))
    later = read(vllm_page(stop=9, length=4, waiting=0, running=4))
    assert flows(before, 0.0, restarted, 1.0) == Flows()
    assert flows(restarted, 1.0, later, 3.0) == Flows(arrival=4.0, completion=4.0)


def test_a_reset_hidden_in_the_sum_is_still_a_reset() -> None:
    """One series restarted while another grew more: the sum rose, the rate would be wrong."""
    before = read(vllm_page(stop=100, length=10, waiting=5, running=15))
    after = read(vllm_page(stop=0, length=130, waiting=5, running=15))
    assert (after.requests_finished or 0.0) > (before.requests_finished or math.inf)
    assert flows(before, 0.0, after, 1.0) == Flows()


def test_a_counter_series_that_goes_away_is_a_reset() -> None:
    page = sample("triton.txt") + 'nv_inference_request_success{model="preprocessing",version="1"} 7\n'
    before = read(page)
    after = read(sample("triton.txt"))  # the preprocessing model was unloaded
    assert flows(before, 0.0, after, 1.0) == Flows()


def test_a_new_counter_series_counts_from_zero() -> None:
    """vLLM V0 and TGI create a label's series at its first request."""
    before = read(sample("vllm_v0.txt"))  # stop: 4
    after = read(
        sample("vllm_v0.txt")
        + 'vllm:request_success_total{finished_reason="length",model_name="Qwen/Qwen2.5-Coder-1.5B-Instruct"} 2.0\n'
    )
    assert flows(before, 0.0, after, 1.0).completion == 2.0


def test_without_a_running_gauge_there_is_no_arrival() -> None:
    """Plain Triton says its queue but not what runs: finished requests only."""
    busy = sample("triton.txt").replace(
        'nv_inference_request_success{model="tensorrt_llm",version="1"} 0',
        'nv_inference_request_success{model="tensorrt_llm",version="1"} 30',
    )
    assert flows(read(sample("triton.txt")), 0.0, read(busy), 2.0) == Flows(arrival=None, completion=15.0)


@pytest.mark.parametrize("elapsed", [0.0, -1.0])
def test_time_that_did_not_move_forward_gives_no_rates(elapsed: float) -> None:
    before = read(vllm_page(stop=100, length=0, waiting=5, running=15))
    after = read(vllm_page(stop=116, length=0, waiting=12, running=24))
    assert flows(before, 5.0, after, 5.0 + elapsed) == Flows()


def test_no_counters_no_rates() -> None:
    page = "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n"
    before, after = read(page), read(page.replace(" 3\n", " 9\n"))
    assert before.requests_finished is None
    assert flows(before, 0.0, after, 1.0) == Flows()
    with_counter = read(vllm_page(stop=100, length=0, waiting=5, running=15))
    assert flows(before, 0.0, with_counter, 1.0) == Flows()
    assert flows(with_counter, 0.0, after, 1.0) == Flows()


def test_an_engine_that_joins_the_pod_is_not_a_burst() -> None:
    before = read(sample("vllm_v0.txt"))
    after = read(sample("vllm_v0.txt") + sample("sglang.txt"))  # + 11228 SGLang finished before
    assert flows(before, 0.0, after, 1.0) == Flows()


# --- through the scraper, over HTTP -----------------------------------------------------


async def test_two_scrapes_of_a_pod_give_its_rates() -> None:
    """A real server whose page moves on between two rounds: the first scrape
    has no rates, the second the counters' and the gauges' change over the time
    between the two answers; a pod that leaves starts again from nothing."""
    pages = iter(
        [
            vllm_page(stop=60, length=40, waiting=5, running=15),  # 100 finished, 20 in the pod
            vllm_page(stop=70, length=44, abort=2, waiting=12, running=24),  # 116, 36
            vllm_page(stop=80, length=44, abort=2, waiting=12, running=24),  # after the pod came back
        ]
    )

    async def metrics(_r: web.Request) -> web.Response:
        return web.Response(text=next(pages), content_type="text/plain")

    registry = CollectorRegistry()
    s = scraper(registry)
    loop = asyncio.get_running_loop()
    key = ("llm", "v")
    async with serving(metrics) as port:
        pods = {key: pod("v", port)}
        first_asked = loop.time()
        s.round(pods, first_asked)
        await settled(s)
        first_done = loop.time()
        first = s.current(first_done)[key]
        assert (first.request_arrival_rate, first.request_completion_rate) == (None, None)

        await asyncio.sleep(0.2)  # some time between the two answers
        second_asked = loop.time()
        s.round(pods, second_asked)
        await settled(s)
        second_done = loop.time()
        second = s.current(second_done)[key]

        s.round({}, loop.time())  # the pod leaves, then comes back
        s.round(pods, loop.time())
        await settled(s)
        back = s.current(loop.time())[key]
        await s.close()

    assert (second.requests_waiting, second.requests_running) == (12.0, 24.0)
    completion = second.request_completion_rate
    assert completion is not None
    # The two answers came within these bounds: 16 left over that time, 2 of them gave up: 14 served.
    assert 14.0 / (second_done - first_asked) <= completion <= 14.0 / (second_asked - first_done)
    assert second.request_arrival_rate == pytest.approx(
        32.0 / 14.0 * completion
    )  # 16 left, 16 more in the pod
    assert (back.request_arrival_rate, back.request_completion_rate) == (None, None)


async def test_rates_span_a_failed_scrape() -> None:
    """Counters are cumulative: after a failure, the next success is counted
    from the last success (nothing is published meanwhile)."""
    answers = iter(
        [
            vllm_page(stop=100, length=0, waiting=5, running=15),
            None,  # the server stumbles once
            vllm_page(stop=130, length=0, waiting=5, running=15),
        ]
    )

    async def metrics(_r: web.Request) -> web.Response:
        page = next(answers)
        if page is None:
            return web.Response(status=503, text="busy")
        return web.Response(text=page, content_type="text/plain")

    registry = CollectorRegistry()
    s = scraper(registry)
    loop = asyncio.get_running_loop()
    key = ("llm", "v")
    async with serving(metrics) as port:
        pods = {key: pod("v", port)}
        first_asked = loop.time()
        s.round(pods, first_asked)
        await settled(s)
        first_done = loop.time()
        s.round(pods, loop.time())
        await settled(s)
        assert key not in s.current(loop.time())
        await asyncio.sleep(0.1)
        third_asked = loop.time()
        s.round(pods, third_asked)
        await settled(s)
        third_done = loop.time()
        third = s.current(third_done)[key]
        await s.close()

    completion = third.request_completion_rate
    assert completion is not None
    assert 30.0 / (third_done - first_asked) <= completion <= 30.0 / (third_asked - first_done)
    assert third.request_arrival_rate == pytest.approx(completion)  # nothing more in the pod


# --- values a broken or hostile engine may serve: finite each, not in sum ---------------------


def test_counters_and_gauges_that_add_up_past_the_largest_double_are_problems_not_values() -> None:
    """Each value is finite (1.7e308), their sum is not: the wire takes finite
    numbers only, so the pod's reading leaves them out and says why, rather than
    making the node's batch undecodable (or the sum raise)."""
    big = 1.7e308
    r = read(vllm_page(stop=big, length=big, waiting=big, running=8))
    assert r.requests_finished is None
    assert r.requests_running == 8.0
    assert r.requests_waiting == big  # one series: finite
    assert any("finished-request counters add up past" in p for p in r.problems)
    two_engines = (
        "# TYPE vllm:num_requests_waiting gauge\n"
        f'vllm:num_requests_waiting{{engine="0"}} {big}\nvllm:num_requests_waiting{{engine="1"}} {big}\n'
    )
    q = read(two_engines)
    assert q.requests_waiting is None
    assert any("requests_waiting adds up past" in p for p in q.problems)


def test_a_counter_that_leaps_by_the_largest_double_gives_no_rate() -> None:
    before = read(vllm_page(stop=0, length=0, waiting=big_gauge(), running=big_gauge()))
    after = read(vllm_page(stop=1.7e308, length=0, waiting=0, running=0))
    assert flows(before, 10.0, after, 10.5) == Flows()
    # waiting + running themselves past the largest double: the completion rate, no arrival.
    small_before = read(vllm_page(stop=10, length=0, waiting=big_gauge(), running=big_gauge()))
    small_after = read(vllm_page(stop=14, length=0, waiting=0, running=0))
    assert flows(small_before, 10.0, small_after, 12.0) == Flows(None, 2.0)


def big_gauge() -> float:
    return 1.7e308
