"""Which gpuscale metric a Prometheus query measures, and in which unit (gpuscale_cli.convert.signals).

The queries are those users write into KEDA's Prometheus trigger (seed 000
and its usual variants); DCGM's units are dcgm-exporter's: utilization in %,
framebuffer in MiB, profiling fields as 0..1 ratios, power in W.
"""

from __future__ import annotations

import pytest

from gpuscale_cli.convert import promql
from gpuscale_cli.convert.signals import Unrecognised, pod_regex_target, recognise_query


@pytest.mark.parametrize(
    ("query", "metric", "threshold", "target", "aggregations", "window_s"),
    [
        pytest.param(
            'avg(DCGM_FI_DEV_GPU_UTIL{pod=~"bert-.*"})', "gpu_util", 70, 70, ["avg"], None, id="seed-000"
        ),
        pytest.param(
            'avg(avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod=~"bert-.*", namespace="prod"}[2m]))',
            "gpu_util",
            70,
            70,
            ["avg"],
            120,
            id="over-time-window",
        ),
        pytest.param(
            "avg(DCGM_FI_PROF_SM_ACTIVE{pod=~'bert-.*'})",
            "sm_active",
            0.7,
            70,
            ["avg"],
            None,
            id="sm-active-ratio",
        ),
        pytest.param(
            'avg(DCGM_FI_PROF_SM_ACTIVE{pod=~"bert-.*"}) * 100',
            "sm_active",
            70,
            70,
            ["avg"],
            None,
            id="sm-active-%",
        ),
        pytest.param(
            "avg(DCGM_FI_DEV_FB_USED / (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE))",
            "gpu_mem_used_ratio",
            0.8,
            80,
            ["avg"],
            None,
            id="memory-ratio-fraction",
        ),
        pytest.param(
            'sum(DCGM_FI_DEV_FB_USED{pod=~"bert-.*"}) / sum(DCGM_FI_DEV_FB_USED{pod=~"bert-.*"} '
            '+ DCGM_FI_DEV_FB_FREE{pod=~"bert-.*"}) * 100',
            "gpu_mem_used_ratio",
            80,
            80,
            ["sum"],
            None,
            id="memory-ratio-%",
        ),
        pytest.param(
            "DCGM_FI_DEV_FB_USED / DCGM_FI_DEV_FB_TOTAL * 100",
            "gpu_mem_used_ratio",
            75,
            75,
            [],
            None,
            id="fb-total",
        ),
        pytest.param(
            "sum by (pod) (DCGM_FI_DEV_FB_USED)", "gpu_mem_used_mib", 20000, 20000, ["sum"], None, id="fb-mib"
        ),
        pytest.param("max(DCGM_FI_DEV_POWER_USAGE)", "power_w", 300, 300, ["max"], None, id="power"),
        pytest.param("avg(DCGM_CUSTOM_PROCESS_SM_UTIL)", "sm_util", 20, 20, ["avg"], None, id="process-sm"),
        pytest.param(
            "avg(nvidia_gpu_memory_used_bytes) / 1024 / 1024",
            "gpu_mem_used_mib",
            4096,
            4096,
            ["avg"],
            None,
            id="bytes/MiB",
        ),
        pytest.param(
            "avg(nvidia_gpu_memory_used_bytes)", "gpu_mem_used_mib", 2**32, 4096, ["avg"], None, id="bytes"
        ),
        pytest.param(
            "ceil(avg(duty_cycle_current))", "gpu_util", 40, 40, ["avg"], None, id="ceil-duty-cycle"
        ),
        pytest.param(
            '{__name__="DCGM_FI_DEV_GPU_UTIL",pod=~"x-.*"}', "gpu_util", 50, 50, [], None, id="name-matcher"
        ),
    ],
)
def test_recognised_queries(
    query: str,
    metric: str,
    threshold: float,
    target: float,
    aggregations: list[str],
    window_s: float | None,
) -> None:
    signal = recognise_query(query)
    assert signal.metric == metric
    assert threshold / signal.per_unit == pytest.approx(target)
    assert signal.aggregations == aggregations
    assert signal.window_s == window_s


@pytest.mark.parametrize(
    ("query", "says"),
    [
        pytest.param("avg(DCGM_FI_DEV_GPU_TEMP)", "temperature is not a load signal", id="temperature"),
        pytest.param("avg(DCGM_FI_DEV_FB_FREE)", "free framebuffer falls as load rises", id="fb-free"),
        pytest.param("avg(container_cpu_usage_seconds_total)", "not a GPU metric gpuscale knows", id="cpu"),
        pytest.param("count(DCGM_FI_DEV_GPU_UTIL)", "does not measure load per pod", id="count"),
        pytest.param("avg(rate(DCGM_FI_DEV_GPU_UTIL[1m]))", "rate() is not understood", id="rate"),
        pytest.param("avg(DCGM_FI_DEV_GPU_UTIL) > 50", "outside the PromQL gpuscale reads", id="comparison"),
        pytest.param(
            "DCGM_FI_DEV_GPU_UTIL + DCGM_FI_DEV_GPU_TEMP",
            "does not match a known GPU metric",
            id="sum-of-two",
        ),
        pytest.param("100 / avg(DCGM_FI_DEV_GPU_UTIL)", "a number divided by a metric", id="inverse"),
        pytest.param('avg(DCGM_FI_DEV_GPU_UTIL{pod=~"x"', "outside the PromQL gpuscale reads", id="unclosed"),
        pytest.param("42", "the query is a constant", id="constant"),
        pytest.param("", "the query is empty", id="empty"),
    ],
)
def test_unrecognised_queries_say_why(query: str, says: str) -> None:
    with pytest.raises(Unrecognised) as info:
        recognise_query(query)
    assert says in str(info.value)


def test_the_parser_keeps_matchers_and_grouping() -> None:
    tree = promql.parse(
        'avg by (namespace) (avg_over_time(DCGM_FI_DEV_GPU_UTIL{pod=~"a-.*", gpu!="1"}[1m30s]))'
    )
    assert isinstance(tree, promql.Aggregation)
    assert (tree.op, tree.grouping, tree.without) == ("avg", ("namespace",), False)
    call = tree.expr
    assert isinstance(call, promql.Call)
    (rng,) = call.args
    assert isinstance(rng, promql.RangeSelector)
    assert rng.seconds == 90
    assert rng.selector.matchers == (promql.Matcher("pod", "=~", "a-.*"), promql.Matcher("gpu", "!=", "1"))


def test_matchers_are_reported_for_the_pod_and_namespace_checks() -> None:
    signal = recognise_query('avg(DCGM_FI_DEV_GPU_UTIL{exported_pod=~"bert-.*",exported_namespace="ml"})')
    assert [m.label for m in signal.pod_matchers] == ["exported_pod"]
    assert [m.value for m in signal.namespace_matchers] == ["ml"]


@pytest.mark.parametrize(
    ("regex", "stem"),
    [
        ("bert-intent-detection-.*", "bert-intent-detection"),
        (
            "58ecbfb07c7ae7056a96a3b1-image-common-production-.*",
            "58ecbfb07c7ae7056a96a3b1-image-common-production",
        ),
        ("bert.*", "bert"),
        ("bert-.+", "bert"),
        ("bert|other", None),
        ("(bert)-.*", None),
    ],
)
def test_pod_name_patterns_name_their_workload(regex: str, stem: str | None) -> None:
    assert pod_regex_target(promql.Matcher("pod", "=~", regex)) == stem
