"""The engine-metrics core, table by table, on the engines' own published
expositions (tests/fixtures/engine_metrics, sources in its README) read by
``prometheus_client``'s parser exactly as the scraper reads them."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.wire import EngineSignals
from gpuscale_collector.core.engines import (
    FAILURES_BEFORE_BACKOFF,
    MAX_BACKOFF_S,
    EngineReading,
    Health,
    ScrapeTarget,
    TargetProblem,
    failed,
    recognise,
    scrape_target,
    select_lines,
)

SAMPLES = Path(__file__).resolve().parents[1] / "fixtures" / "engine_metrics"


def read(text: str) -> EngineReading:
    """As the scraper does: keep the lines read here, parse them, recognise."""
    return recognise(text_string_to_metric_families(select_lines(text)))


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


# --- the engines' own expositions ----------------------------------------------------


def test_vllm_v0_idle_server() -> None:
    r = read(sample("vllm_v0.txt"))
    assert r.engines == ("vllm",)
    # V0 has only the deprecated KV name: read as the fallback, 0-1 fraction → %.
    assert r.series == (
        "vllm:gpu_cache_usage_perc",
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:request_success_total",
    )
    assert (r.requests_waiting, r.requests_running, r.kv_cache_usage) == (0.0, 0.0, 0.0)
    assert r.requests_finished == 4.0
    assert r.signals() == EngineSignals("vllm", 0.0, 0.0, 0.0)


def test_vllm_v1_design_doc_has_only_running() -> None:
    r = read(sample("vllm_v1_design_doc.txt"))
    assert r.signals() == EngineSignals("vllm", requests_running=8.0)


def test_sglang_loaded_server_kv_fraction_becomes_percent() -> None:
    r = read(sample("sglang.txt"))
    assert r.engines == ("sglang",)
    assert r.series == (
        "sglang:e2e_request_latency_seconds_count",
        "sglang:num_queue_reqs",
        "sglang:num_running_reqs",
        "sglang:token_usage",
    )
    assert r.requests_waiting == 2826.0
    assert r.requests_running == 162.0
    assert r.kv_cache_usage == pytest.approx(28.0)


def test_triton_pending_requests_are_the_queue_and_only_request_counters_are_read() -> None:
    r = read(sample("triton.txt"))
    assert r.signals() == EngineSignals("triton", requests_waiting=0.0)
    # Success and failure counters (for the flows); durations and inference counts are not read.
    assert r.series == (
        "nv_inference_pending_request_count",
        "nv_inference_request_failure_total",
        "nv_inference_request_success_total",
    )


def test_triton_queue_summary_alone_is_no_engine_gauge() -> None:
    r = read(sample("triton_queue_summary.txt"))
    assert not r.found
    assert r.signals() is None


def test_trtllm_request_types_and_kv_fraction() -> None:
    r = read(sample("triton_trtllm.txt"))
    # waiting=1, active=0 (scheduled/context/max are other things), fraction 0.4875.
    assert r.signals() == EngineSignals(
        "triton", requests_waiting=1.0, requests_running=0.0, kv_cache_usage=48.75
    )


def test_tgi_gauges_from_its_documented_names() -> None:
    """TGI publishes no /metrics sample (its docs give a table of names:
    tgi_names.txt); this exposition is built from those names, as the Rust
    metrics-exporter-prometheus writes gauges. TGI has no KV-cache gauge."""
    names = {
        line.split("\t")[0]: line.split("\t")[1]
        for line in sample("tgi_names.txt").splitlines()
        if "\t" in line and not line.startswith("#")
    }
    assert names["tgi_queue_size"] == names["tgi_batch_current_size"] == "Gauge"
    text = (
        "# TYPE tgi_queue_size gauge\ntgi_queue_size 7\n"
        "# TYPE tgi_batch_current_size gauge\ntgi_batch_current_size 31\n"
        "# TYPE tgi_batch_current_max_tokens gauge\ntgi_batch_current_max_tokens 16000\n"
        "# TYPE tgi_request_count counter\ntgi_request_count 4021\n"
    )
    assert read(text).signals() == EngineSignals("tgi", requests_waiting=7.0, requests_running=31.0)


# --- what the published samples do not show ------------------------------------------

VLLM_V1_DP = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 12.0
vllm:num_requests_running{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 9.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
vllm:num_requests_waiting{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 5.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.8
vllm:kv_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.6
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.1
vllm:gpu_cache_usage_perc{engine="1",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.1
# HELP vllm:num_requests_waiting_by_reason Requests waiting, by reason.
# TYPE vllm:num_requests_waiting_by_reason gauge
vllm:num_requests_waiting_by_reason{reason="capacity"} 1000.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0e+06
"""


def test_vllm_v1_data_parallel_engines_are_summed_and_kv_averaged() -> None:
    """vLLM V1 labels every series with ``engine``; a pod with DP=2 is one pod:
    queues add up, KV pools average. The deprecated KV name is ignored when the
    current one is there, and a family whose name only starts like ours is not ours."""
    r = read(VLLM_V1_DP)
    assert r.signals() == EngineSignals(
        "vllm", requests_waiting=8.0, requests_running=21.0, kv_cache_usage=70.0
    )
    assert "vllm:gpu_cache_usage_perc" not in r.series


def test_several_engines_in_one_pod_add_up() -> None:
    text = sample("vllm_v0.txt").replace(
        "vllm:num_requests_waiting{", 'vllm:num_requests_waiting{x="1",'
    ) + sample("sglang.txt")
    r = read(text)
    assert r.engines == ("sglang", "vllm")
    assert r.requests_waiting == 2826.0
    assert r.kv_cache_usage == pytest.approx(14.0)  # mean of vLLM's 0 % and SGLang's 28 %
    signals = r.signals()
    assert signals is not None
    assert signals.name == "sglang+vllm"


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("vllm:kv_cache_usage_perc 45.0", "is not a 0-1 fraction"),  # a % where a fraction belongs
        ("vllm:kv_cache_usage_perc NaN", "is not a count or fraction"),
        ("vllm:num_requests_waiting -3", "is not a count or fraction"),
        ("vllm:num_requests_waiting +Inf", "is not a count or fraction"),
    ],
)
def test_impossible_values_are_left_out_with_a_reason(line: str, problem: str) -> None:
    name = line.split(" ")[0]
    r = read(
        f"# TYPE {name} gauge\n{line}\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 4\n"
    )
    assert r.signals() == EngineSignals("vllm", requests_running=4.0)
    assert any(problem in p for p in r.problems)


def test_a_fraction_rounded_just_above_one_is_full() -> None:
    r = read("# TYPE sglang:token_usage gauge\nsglang:token_usage 1.0000000001\n")
    assert r.kv_cache_usage == 100.0


def test_a_counter_under_a_gauge_name_is_not_read() -> None:
    r = read("# TYPE tgi_queue_size counter\ntgi_queue_size_total 4\n")
    assert not r.found


def test_an_exposition_without_engine_gauges() -> None:
    r = read(
        '# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total 12.5\npython_info{version="3.12"} 1\n'
    )
    assert (r.found, r.signals(), r.series) == (False, None, ())


def test_select_lines_keeps_only_what_is_read() -> None:
    kept = select_lines(sample("sglang.txt")).splitlines()
    assert len(kept) == 8  # three gauges and the e2e-latency histogram's count × TYPE, sample
    assert all(
        "sglang:num_queue_reqs" in x
        or "sglang:num_running_reqs" in x
        or "sglang:token_usage" in x
        or x.startswith(
            ("# TYPE sglang:e2e_request_latency_seconds ", "sglang:e2e_request_latency_seconds_count{")
        )
        for x in kept
    )


def test_a_broken_line_elsewhere_does_not_break_the_read() -> None:
    text = "garbage line {{{\n" + sample("vllm_v0.txt") + "\nnot_a_metric{ 1 2 3\n"
    assert read(text).found


def test_a_broken_line_of_ours_is_a_parse_error() -> None:
    with pytest.raises(ValueError, match="could not convert"):
        read('# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{engine="0" 3\n')


# --- where to scrape ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ip", "annotations", "expected"),
    [
        ("10.1.2.3", {"gpuscale.io/metrics-port": "8000"}, "http://10.1.2.3:8000/metrics"),
        (
            "10.1.2.3",
            {"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-path": "/stats"},
            "http://10.1.2.3:8000/stats",
        ),
        ("10.1.2.3", {"prometheus.io/port": "9090", "prometheus.io/path": "/m"}, "http://10.1.2.3:9090/m"),
        # Each annotation falls back on its own: gpuscale port, Prometheus path.
        (
            "10.1.2.3",
            {"gpuscale.io/metrics-port": "8000", "prometheus.io/path": "/m"},
            "http://10.1.2.3:8000/m",
        ),
        (
            "10.1.2.3",
            {"gpuscale.io/metrics-port": "8000", "prometheus.io/port": "9090"},
            "http://10.1.2.3:8000/metrics",
        ),
        ("fd00::7", {"gpuscale.io/metrics-port": " 8000 "}, "http://[fd00::7]:8000/metrics"),
        # Prometheus' opt-out holds for Prometheus' port, not for an explicit gpuscale one.
        ("10.1.2.3", {"prometheus.io/scrape": "false", "prometheus.io/port": "9090"}, None),
        (
            "10.1.2.3",
            {"prometheus.io/scrape": "false", "gpuscale.io/metrics-port": "8000"},
            "http://10.1.2.3:8000/metrics",
        ),
        ("10.1.2.3", {}, None),
        ("10.1.2.3", None, None),
        ("", {"gpuscale.io/metrics-port": "8000"}, None),  # no IP yet
    ],
)
def test_scrape_target_from_annotations(
    ip: str, annotations: dict[str, str] | None, expected: str | None
) -> None:
    target = scrape_target(ip, annotations)
    if expected is None:
        assert target is None
    else:
        assert isinstance(target, ScrapeTarget)
        assert target.url == expected


@pytest.mark.parametrize(
    ("annotations", "reason"),
    [
        ({"gpuscale.io/metrics-port": "http"}, "bad_port"),
        ({"gpuscale.io/metrics-port": "0"}, "bad_port"),
        ({"gpuscale.io/metrics-port": "70000"}, "bad_port"),
        ({"prometheus.io/port": "-1"}, "bad_port"),
        ({"gpuscale.io/metrics-port": "²"}, "bad_port"),  # isdigit() yet int() raised ValueError
        ({"gpuscale.io/metrics-port": "1" * 5000}, "bad_port"),  # past int()'s 4300 digits
        ({"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-path": "/" + "a" * 1024}, "bad_path"),
        ({"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-path": "metrics"}, "bad_path"),
        ({"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-path": "/a b"}, "bad_path"),
        ({"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-path": "/a#b"}, "bad_path"),
    ],
)
def test_annotations_that_cannot_work_say_why(annotations: dict[str, str], reason: str) -> None:
    target = scrape_target("10.1.2.3", annotations)
    assert isinstance(target, TargetProblem)
    assert target.reason == reason


# --- backoff -------------------------------------------------------------------------------


def test_a_failing_pod_is_retried_each_round_then_less_and_less_often() -> None:
    h = Health()
    waits = []
    for i in range(12):
        h = failed(h, "timeout", now=100.0, interval_s=1.0, jitter=0.0)
        waits.append(h.retry_at - 100.0)
        assert h.failures == i + 1
    assert waits[: FAILURES_BEFORE_BACKOFF - 1] == [0.0] * (FAILURES_BEFORE_BACKOFF - 1)
    assert waits[FAILURES_BEFORE_BACKOFF - 1 : FAILURES_BEFORE_BACKOFF + 2] == [2.0, 4.0, 8.0]
    assert max(waits) == MAX_BACKOFF_S
    assert not h.due(100.0 + MAX_BACKOFF_S - 0.1)
    assert h.due(100.0 + MAX_BACKOFF_S)


def test_jitter_stretches_a_backoff_by_at_most_half() -> None:
    base = failed(failed(failed(Health(), "t", 0.0, 1.0, 0.0), "t", 0.0, 1.0, 0.0), "t", 0.0, 1.0, 0.0)
    stretched = failed(failed(failed(Health(), "t", 0.0, 1.0, 0.0), "t", 0.0, 1.0, 0.0), "t", 0.0, 1.0, 0.999)
    assert base.retry_at < stretched.retry_at < base.retry_at * 1.5
