"""The scale-out bench's reading and judging (no timing): connz, the generator's lines, keep-up, the order of steps."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench modules import their siblings by name, as the scripts run

import aggregator_scaleout as so  # noqa: E402
import aggscale_step as step  # noqa: E402

PART = "gpuscale.v1.aggregator.part"


def connz(part0: int, split0: int, part1: int, split1: int) -> dict[str, Any]:
    def conn(i: int, part: int, split: int) -> dict[str, Any]:
        return {
            "subscriptions_list_detail": [
                {"subject": f"{PART}.{i}.>", "msgs": part},
                {"subject": "gpuscale.v1.windows.>", "msgs": 3},
                {"subject": "gpuscale.v1.samples.>", "qgroup": "gpuscale-aggregator-split", "msgs": split},
            ]
        }

    bystander = {"subscriptions_list_detail": [{"subject": "gpuscale.v1.metrics.>", "msgs": 9}]}
    return {"connections": [conn(1, part1, split1), bystander, conn(0, part0, split0), {}]}


def metrics(samples: float, published: float = 0.0, backlog: float = 0.0, age_s: float = 0.05) -> str:
    """An instance's /metrics text: its counters, a batch age all in one bucket, a short cycle."""
    count = samples / 8
    return "\n".join(
        [
            f'gpuscale_messages_in_total{{kind="samples"}} {samples}',
            f'gpuscale_messages_out_total{{kind="metrics"}} {published}',
            f"gpuscale_aggregator_live_backlog {backlog}",
            f'gpuscale_aggregator_batch_age_seconds_bucket{{le="{age_s}"}} {count}',
            f'gpuscale_aggregator_batch_age_seconds_bucket{{le="+Inf"}} {count}',
            f'gpuscale_aggregator_publish_cycle_seconds_bucket{{le="0.1"}} {count}',
            f'gpuscale_aggregator_publish_cycle_seconds_bucket{{le="+Inf"}} {count}',
            "gpuscale_aggregator_workloads 100",
        ]
    )


def snap(t: float, texts: list[str], subs: dict[int, dict[str, float]], cpu: float) -> dict[str, Any]:
    return {"t": t, "text": texts, "subs": subs, "cpu": {"agg": [cpu, cpu], "nats": [cpu], "gen": [cpu]}}


def test_connz_gives_each_partition_what_nats_server_delivered() -> None:
    assert step.parse_connz(connz(10, 2, 20, 3)) == {0: {"part": 10, "split": 2}, 1: {"part": 20, "split": 3}}


def test_the_generator_lines_are_read_by_key() -> None:
    assert step.parse_generator("late_max_s 0.012\npublished 1200\n") == {
        "late_max_s": 0.012,
        "published": 1200,
    }


def judged(processed_1: float, age_s: float = 0.05, published: float = 20_000) -> dict[str, Any]:
    before = snap(0.0, [metrics(0), metrics(0)], step.parse_connz(connz(0, 0, 0, 0)), 0.0)
    after = snap(
        10.0,
        [metrics(40_000, 1000), metrics(processed_1, 1000, age_s=age_s)],
        step.parse_connz(connz(40_000, 10_000, 40_000, 10_000)),
        5.0,
    )
    final = snap(12.0, after["text"], after["subs"], 6.0)
    gen = [{"late_max_s": 0.01, "published": published}]
    return step.judge(2, 1000, before, after, final, [50.0, 60.0], gen, 20.0, 2.0)


def test_a_step_keeps_up_when_every_instance_does() -> None:
    r = judged(40_000)
    assert r["kept_up"]
    assert r["failed"] == []
    assert r["agg_cpu"] == [0.5, 0.5]
    assert r["metrics_per_s"] == 200
    assert not r["generator_behind"]


def test_one_slow_instance_fails_the_step_and_says_which() -> None:
    r = judged(30_000)
    assert not r["kept_up"]
    assert r["failed"] == ["p1 processed 0.750 of what it was sent", "p1 10000 never processed"]


def test_a_late_batch_fails_the_step() -> None:
    assert judged(40_000, age_s=2.5)["failed"] == ["p1 batch age p99 2.48 s"]


def test_a_generator_short_of_1_hz_is_reported() -> None:
    r = judged(40_000, published=15_000)
    assert r["generator_behind"]
    assert r["kept_up"]


def test_node_batches_the_split_stages_never_got_fail_the_step() -> None:
    r = judged(40_000, published=30_000)
    assert not r["generator_behind"]
    assert r["failed"] == ["split stages got 20000 of 30000 node batches"]


def run_order(steps: list[int], start: int, passes: set[int]) -> list[int]:
    kept: dict[int, bool] = {}
    ran = []
    while (i := so.step_order(steps, start, kept)) is not None:
        ran.append(steps[i])
        kept[i] = steps[i] in passes
    return ran


def test_steps_rise_until_one_fails() -> None:
    assert run_order([1, 2, 3, 4], 0, {1, 2}) == [1, 2, 3]
    assert run_order([1, 2, 3, 4], 1, {1, 2, 3, 4}) == [2, 3, 4]


def test_a_failed_first_step_goes_down_until_one_keeps_up() -> None:
    assert run_order([1, 2, 3, 4], 2, {1}) == [3, 2, 1]
    assert run_order([1, 2, 3, 4], 2, set()) == [3, 2, 1]


def test_the_summary_names_the_largest_step_kept_up_and_the_next_limit() -> None:
    ok = judged(40_000)
    bad = {**judged(30_000), "nodes": 2000, "agg_cpu": [0.95, 0.97]}
    meta = {"cores": 4, "agg_cores": [2, 3], "other_cores": [0, 1], "window": 10, "warmup": 10, "seconds": 15}
    text = so.summary([ok, bad], [2], 2, {**meta, "loadavg": "0.1 0.1 0.1"})
    assert "| 2 | 1,000 | 8,000 | 0.50 (max 0.50) | 0.50 | 0.50 | 1,000 | 200 | 2000: the aggregator" in text
    assert "| 2 | 2,000 | NO |" in text
