"""Table tests of the aggregator's window core: no server, no clock."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import pytest

from gpuscale.codec import decode, encode, encode_raw
from gpuscale.wire import WorkloadMetrics
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import WindowConfig

from .aggregator_builders import NOW, batch, engine, gpu, owner

W = 30.0  # window


@dataclass
class Scenario:
    batches: list[dict[str, Any]]
    now: float
    # workload name -> expected averages (subset of metrics checked)
    averages: dict[str, dict[str, float]] = field(default_factory=dict)
    # workload name -> {pod: {metric: value}} (subset)
    pods: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)
    fresh_stale: dict[str, tuple[int, int]] = field(default_factory=dict)
    absent_metrics: dict[str, tuple[str, ...]] = field(default_factory=dict)
    workloads: tuple[str, ...] | None = None  # exactly these workloads published


def run(s: Scenario, config: WindowConfig | None = None) -> dict[str, WorkloadMetrics]:
    agg = Aggregator(config or WindowConfig(window_s=W))
    seq_by_node: dict[str, int] = {}
    for b in s.batches:
        seq_by_node[b["node"]] = seq_by_node.get(b["node"], -1) + 1
        b = {**b, "seq": seq_by_node[b["node"]]}
        result = agg.ingest(encode_raw(b), now=max(b["ts"], NOW), subject_node=b["node"])
        assert result.status == "accepted", result
    return {m.name: m for m in agg.snapshot(s.now)}


SCENARIOS = {
    "mean over GPUs then over pods (HPA style, not over GPUs)": Scenario(
        batches=[
            batch(gpu(0, owner("a-1"), util=40.0), gpu(1, owner("a-1"), util=60.0), ts=NOW),
            batch(gpu(0, owner("a-2"), util=80.0, node="node-b"), node="node-b", ts=NOW),
        ],
        now=NOW + 1,
        pods={"bert": {"a-1": {"gpu_util": 50.0}, "a-2": {"gpu_util": 80.0}}},
        averages={"bert": {"gpu_util": 65.0}},
        fresh_stale={"bert": (2, 0)},
    ),
    "mean over samples in the window": Scenario(
        batches=[
            batch(gpu(0, owner("a-1"), util=20.0), ts=NOW),
            batch(gpu(0, owner("a-1"), util=40.0), ts=NOW + 1),
            batch(gpu(0, owner("a-1"), util=90.0), ts=NOW + 2),
        ],
        now=NOW + 2,
        averages={"bert": {"gpu_util": 50.0}},
    ),
    "a pod with two GPUs: memory, power and ratio are means over its GPUs": Scenario(
        batches=[
            batch(
                gpu(0, owner("a-1"), util=10.0, fb_used_mib=2000.0, fb_free_mib=8000.0, power_w=100.0),
                gpu(1, owner("a-1"), util=30.0, fb_used_mib=6000.0, fb_free_mib=4000.0, power_w=300.0),
                ts=NOW,
            )
        ],
        now=NOW,
        averages={
            "bert": {
                "gpu_util": 20.0,
                "gpu_mem_used_mib": 4000.0,
                "gpu_mem_used_ratio": 40.0,
                "power_w": 200.0,
            }
        },
        absent_metrics={"bert": ("sm_active", "sm_util")},
    ),
    "two pods on one GPU with per-process values": Scenario(
        batches=[
            batch(
                gpu(
                    0,
                    owner("a-1", sm_util=30.0, fb_used_mib=1000.0),
                    owner("b-1", "llama", sm_util=50.0, fb_used_mib=3000.0),
                    util=90.0,
                    fb_used_mib=4000.0,
                    fb_free_mib=6000.0,
                ),
                ts=NOW,
            )
        ],
        now=NOW,
        averages={
            "bert": {
                "gpu_util": 90.0,
                "sm_util": 30.0,
                "gpu_mem_used_mib": 1000.0,
                "gpu_mem_used_ratio": 10.0,
            },
            "llama": {
                "gpu_util": 90.0,
                "sm_util": 50.0,
                "gpu_mem_used_mib": 3000.0,
                "gpu_mem_used_ratio": 30.0,
            },
        },
    ),
    "a workload whose pods are on several nodes": Scenario(
        batches=[
            batch(gpu(0, owner("a-1"), util=10.0, node=n), node=n, ts=NOW)
            for n in ("node-a", "node-b", "node-c")
        ]
        + [batch(gpu(1, owner("a-2"), util=40.0, node="node-c"), node="node-c", ts=NOW + 1)],
        now=NOW + 1,
        # a-1 has one GPU on each of three nodes (unusual, but the maths must hold): 10; a-2: 40
        pods={"bert": {"a-1": {"gpu_util": 10.0}, "a-2": {"gpu_util": 40.0}}},
        averages={"bert": {"gpu_util": 25.0}},
        fresh_stale={"bert": (2, 0)},
    ),
    "sm_active only where the GPU reports it": Scenario(
        batches=[
            batch(gpu(0, owner("a-1"), sm_active=60.0), ts=NOW),
            batch(gpu(0, owner("a-2"), sm_active=None, node="node-b"), node="node-b", ts=NOW),
        ],
        now=NOW,
        pods={"bert": {"a-1": {"sm_active": 60.0}, "a-2": {"gpu_util": 50.0}}},
        averages={"bert": {"sm_active": 60.0, "gpu_util": 50.0}},
    ),
    "a GPU whose health is not ok contributes no values": Scenario(
        batches=[
            batch(
                gpu(0, owner("a-1"), util=40.0),
                gpu(1, owner("a-1"), util=None, health="GPU is lost", fb_used_mib=None, power_w=None),
                ts=NOW,
            ),
            batch(
                gpu(0, owner("a-2"), util=None, health="GPU is lost", node="node-b"),
                node="node-b",
                ts=NOW,
            ),
        ],
        now=NOW,
        pods={"bert": {"a-1": {"gpu_util": 40.0}}},
        averages={"bert": {"gpu_util": 40.0}},
        fresh_stale={"bert": (1, 0)},  # a-2 never had a value: not a pod of the window
    ),
    "stale pod: listed, counted, not averaged": Scenario(
        batches=[
            batch(gpu(0, owner("a-1"), util=20.0), ts=NOW),
            batch(gpu(0, owner("a-2"), util=80.0, node="node-b"), node="node-b", ts=NOW + 10),
        ],
        now=NOW + 10,  # a-1: 10 s > 3 × 1 s interval
        pods={"bert": {"a-1": {"gpu_util": 20.0}, "a-2": {"gpu_util": 80.0}}},
        averages={"bert": {"gpu_util": 80.0}},
        fresh_stale={"bert": (1, 1)},
    ),
    "exactly three intervals old is still fresh": Scenario(
        batches=[batch(gpu(0, owner("a-1"), util=20.0), ts=NOW)],
        now=NOW + 3.0,
        fresh_stale={"bert": (1, 0)},
        averages={"bert": {"gpu_util": 20.0}},
    ),
    "all pods stale: no averages, pods still listed": Scenario(
        batches=[batch(gpu(0, owner("a-1"), util=20.0), ts=NOW)],
        now=NOW + 3.5,
        fresh_stale={"bert": (0, 1)},
        absent_metrics={"bert": ("gpu_util",)},
        pods={"bert": {"a-1": {"gpu_util": 20.0}}},
    ),
    "window edge: a sample exactly on the lower boundary is out": Scenario(
        batches=[
            batch(gpu(0, owner("a-1"), util=10.0), ts=NOW),
            batch(gpu(0, owner("a-1"), util=50.0), ts=NOW + 1),
        ],
        now=NOW + W,  # NOW == now - window: out; NOW + 1: in
        averages={},
        pods={"bert": {"a-1": {"gpu_util": 50.0}}},
    ),
    "window edge: just inside the boundary is in": Scenario(
        batches=[
            batch(gpu(0, owner("a-1"), util=10.0), ts=NOW),
            batch(gpu(0, owner("a-1"), util=50.0), ts=NOW + 1),
        ],
        now=NOW + W - 0.001,
        pods={"bert": {"a-1": {"gpu_util": 30.0}}},
    ),
    "dropped pod: no sample left in the window": Scenario(
        batches=[
            batch(gpu(0, owner("a-1"), util=10.0), ts=NOW),
            batch(gpu(0, owner("a-2"), util=50.0, node="node-b"), node="node-b", ts=NOW + 5),
        ],
        now=NOW + W,
        pods={"bert": {"a-2": {"gpu_util": 50.0}}},
        fresh_stale={"bert": (0, 1)},
    ),
    "unready pod (loading its model) is missing, not a fresh pod at 0 %": Scenario(
        batches=[
            batch(gpu(0, owner("a-1", ready=True), util=90.0), ts=NOW),
            batch(gpu(0, owner("a-2", ready=False), util=0.0, node="node-b"), node="node-b", ts=NOW),
        ],
        now=NOW + 1,
        pods={"bert": {"a-1": {"gpu_util": 90.0}}},
        averages={"bert": {"gpu_util": 90.0}},
        fresh_stale={"bert": (1, 0)},
    ),
    "engine gauges: per-pod mean over samples, workload mean over fresh pods": Scenario(
        batches=[
            batch(gpu(0, owner("q-1", "llm", engine=engine(4.0, 16.0, 80.0)), util=100.0), ts=NOW),
            batch(gpu(0, owner("q-1", "llm", engine=engine(8.0, 16.0, 90.0)), util=100.0), ts=NOW + 1),
            batch(
                gpu(0, owner("q-2", "llm", engine=engine(0.0, 6.0, 30.0)), util=40.0, node="node-b"),
                node="node-b",
                ts=NOW + 1,
            ),
        ],
        now=NOW + 1,
        pods={
            "llm": {
                "q-1": {"requests_waiting": 6.0, "requests_running": 16.0, "kv_cache_usage": 85.0},
                "q-2": {"requests_waiting": 0.0, "requests_running": 6.0, "kv_cache_usage": 30.0},
            }
        },
        averages={
            "llm": {
                "requests_waiting": 3.0,
                "requests_running": 11.0,
                "kv_cache_usage": 57.5,
                "gpu_util": 70.0,
            }
        },
    ),
    "a pod on two GPUs carries its engine gauges on both: its value, not twice it": Scenario(
        batches=[
            batch(
                gpu(0, owner("q-1", "llm", engine=engine(10.0, 32.0, 70.0)), util=100.0),
                gpu(1, owner("q-1", "llm", engine=engine(10.0, 32.0, 70.0)), util=100.0),
                ts=NOW,
            )
        ],
        now=NOW,
        averages={"llm": {"requests_waiting": 10.0, "requests_running": 32.0, "kv_cache_usage": 70.0}},
    ),
    "an engine without a KV gauge (TGI), and ticks without engine values": Scenario(
        batches=[
            batch(gpu(0, owner("t-1", "tgi", engine=engine(2.0, 8.0, None, "tgi"))), ts=NOW),
            batch(gpu(0, owner("t-1", "tgi")), ts=NOW + 1),  # a scrape that failed: no engine this tick
            batch(gpu(0, owner("t-1", "tgi", engine=engine(4.0, 8.0, None, "tgi"))), ts=NOW + 2),
        ],
        now=NOW + 2,
        averages={"tgi": {"requests_waiting": 3.0, "requests_running": 8.0}},
        absent_metrics={"tgi": ("kv_cache_usage",)},
    ),
    "pods without an engine have no engine metrics, and do not dilute others'": Scenario(
        batches=[
            batch(gpu(0, owner("m-1", "mixed", engine=engine(6.0, 10.0, 50.0))), ts=NOW),
            batch(gpu(0, owner("m-2", "mixed"), node="node-b"), node="node-b", ts=NOW),
        ],
        now=NOW,
        pods={"mixed": {"m-1": {"requests_waiting": 6.0}, "m-2": {"gpu_util": 50.0}}},
        averages={"mixed": {"requests_waiting": 6.0, "kv_cache_usage": 50.0}},
    ),
    "a stale engine pod is listed, not averaged": Scenario(
        batches=[
            batch(gpu(0, owner("q-1", "llm", engine=engine(20.0, 16.0, 99.0))), ts=NOW),
            batch(
                gpu(0, owner("q-2", "llm", engine=engine(2.0, 8.0, 40.0)), node="node-b"),
                node="node-b",
                ts=NOW + 10,
            ),
        ],
        now=NOW + 10,
        averages={"llm": {"requests_waiting": 2.0}},
        pods={"llm": {"q-1": {"requests_waiting": 20.0}, "q-2": {"requests_waiting": 2.0}}},
        fresh_stale={"llm": (1, 1)},
    ),
    "a workload whose pods all left the window is forgotten": Scenario(
        batches=[
            batch(gpu(0, owner("a-1", "old"), util=10.0), ts=NOW),
            batch(gpu(0, owner("b-1", "new"), util=50.0, node="node-b"), node="node-b", ts=NOW + 20),
        ],
        now=NOW + W + 1,
        workloads=("new",),
    ),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS.values()), ids=list(SCENARIOS))
def test_window_scenario(scenario: Scenario) -> None:
    got = run(scenario)
    if scenario.workloads is not None:
        assert sorted(got) == sorted(scenario.workloads)
    for workload, expected in scenario.averages.items():
        for metric, value in expected.items():
            assert got[workload].averages[metric] == pytest.approx(value), metric
    for workload, pods in scenario.pods.items():
        by_pod = {p.pod: p for p in got[workload].pods}
        assert set(by_pod) == set(pods)
        for pod, values in pods.items():
            for metric, value in values.items():
                assert by_pod[pod].values[metric] == pytest.approx(value), (pod, metric)
    for workload, (fresh, stale) in scenario.fresh_stale.items():
        assert (got[workload].pods_fresh, got[workload].pods_stale) == (fresh, stale)
    for workload, metrics in scenario.absent_metrics.items():
        for metric in metrics:
            assert metric not in got[workload].averages


def test_metrics_message_fields() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    agg.ingest(encode_raw(batch(gpu(0, owner("a-1", namespace="ml", kind="StatefulSet")))), NOW)
    (m,) = agg.snapshot(NOW + 1)
    assert (m.namespace, m.kind, m.name, m.ts, m.window_s) == ("ml", "StatefulSet", "bert", NOW + 1, W)
    assert m.pods[0].last_seen == NOW
    # What we publish passes the wire contract the decider checks.
    assert decode(encode(m), WorkloadMetrics, NOW + 1) == m


def test_bucket_keeps_merged_samples_until_its_newest_leaves() -> None:
    """Two samples in one 1 s bucket: the bucket leaves with its newest sample."""
    agg = Aggregator(WindowConfig(window_s=W, bucket_s=1.0))
    base = float(int(NOW))
    agg.ingest(encode_raw(batch(gpu(0, owner("a-1"), util=10.0), ts=base + 0.2, seq=0)), base + 0.2)
    agg.ingest(encode_raw(batch(gpu(0, owner("a-1"), util=30.0), ts=base + 0.7, seq=1)), base + 0.7)
    (m,) = agg.snapshot(base + 0.2 + W)  # the 0.2 sample alone would be out...
    assert m.pods[0].values["gpu_util"] == pytest.approx(20.0)  # ...but shares a bucket with 0.7
    assert agg.snapshot(base + 0.7 + W) == []


def test_memory_is_bounded_by_the_window() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    for t in range(300):
        for node in range(5):
            b = batch(
                *[gpu(i, owner(f"p{node}-{i}", f"w{i % 3}"), node=f"n{node}") for i in range(8)],
                node=f"n{node}",
                ts=NOW + t,
                seq=t,
            )
            assert agg.ingest(encode_raw(b), NOW + t).status == "accepted"
        agg.snapshot(NOW + t)
    assert agg.store.pod_count == 40
    assert agg.store.bucket_count <= 40 * (W + 1)
    # Everyone goes silent: after one window nothing is left, sources included.
    assert agg.snapshot(NOW + 299 + W) == []
    assert agg.store.workload_count == 0
    assert len(agg.sequences) == 0


def test_running_sums_match_exact_means_after_many_evictions() -> None:
    agg = Aggregator(WindowConfig(window_s=10.0))
    values = [((t * 37) % 101) * 0.99 for t in range(2000)]
    for t, v in enumerate(values):
        agg.ingest(encode_raw(batch(gpu(0, owner("a-1"), util=min(v, 100.0)), ts=NOW + t, seq=t)), NOW + t)
        agg.store.expire(NOW + t)
    (m,) = agg.snapshot(NOW + 1999)
    window_values = [min(v, 100.0) for v in values[-10:]]
    # Samples are kept as float32 (7 significant digits): the running totals hold
    # exactly the sum of the stored values, with no drift after 2,000 evictions...
    stored = [struct.unpack("<f", struct.pack("<f", v))[0] for v in window_values]
    assert m.averages["gpu_util"] == pytest.approx(sum(stored) / 10, abs=1e-9)
    # ...which is the exact mean to float32's precision.
    assert m.averages["gpu_util"] == pytest.approx(sum(window_values) / 10, rel=1e-7)


def test_engine_sums_match_exact_means_after_many_evictions_and_reused_pods() -> None:
    """The engine ring folds and evicts with the pod's buckets: no drift after
    thousands of evictions, and a pod number (and engine number) reused by a new
    pod starts from nothing."""
    agg = Aggregator(WindowConfig(window_s=10.0))
    waits = [float((t * 37) % 101) for t in range(600)]
    for t, v in enumerate(waits):
        pod = "q-1" if t < 300 else "q-2"  # q-1 leaves; q-2 arrives after q-1's window is over
        if 300 <= t < 315:
            agg.store.expire(NOW + t)
            continue
        owners = owner(pod, "llm", engine=engine(v, 16.0, min(v, 100.0)))
        agg.ingest(encode_raw(batch(gpu(0, owners), ts=NOW + t, seq=t)), NOW + t)
        agg.store.expire(NOW + t)
    (m,) = agg.snapshot(NOW + 599)
    assert [p.pod for p in m.pods] == ["q-2"]
    stored = [struct.unpack("<f", struct.pack("<f", v))[0] for v in waits[-10:]]
    assert m.averages["requests_waiting"] == pytest.approx(sum(stored) / 10, abs=1e-6)
    assert m.averages["requests_running"] == pytest.approx(16.0)
    assert agg.store._engine_capacity == 1  # q-2 took q-1's engine number again


def test_late_engine_samples_land_in_their_bucket() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    for seq, t in enumerate((NOW, NOW + 2)):
        b = batch(gpu(0, owner("q-1", "llm", engine=engine(10.0, 4.0, 20.0))), ts=t, seq=seq)
        agg.ingest(encode_raw(b), t)
    late = batch(gpu(0, owner("q-1", "llm", engine=engine(40.0, 4.0, 80.0))), ts=NOW + 1, seq=5)
    agg.store.add_batch(agg.reader.decode(encode_raw(late), NOW + 2), NOW + 1)
    (m,) = agg.snapshot(NOW + 2)
    assert m.averages["requests_waiting"] == pytest.approx(20.0)
    assert m.averages["kv_cache_usage"] == pytest.approx(40.0)
    assert decode(encode(m), WorkloadMetrics, NOW + 2) == m  # within the contract


def test_engine_flows_average_per_pod_and_workload_beside_the_gauges() -> None:
    """Arrival and completion rates (requests/s) ride in the engine ring: per-pod
    means over the window, the workload's mean over fresh pods, recent means too;
    a late sample lands in its bucket, and a scrape without flows dilutes nothing."""
    agg = Aggregator(WindowConfig(window_s=W))
    flows = {NOW: (16.0, 8.0), NOW + 1: (None, None), NOW + 2: (12.0, 8.0)}
    for seq, (t, (arrival, completion)) in enumerate(flows.items()):
        b = batch(
            gpu(
                0, owner("q-1", "llm", engine=engine(5.0, 16.0, 90.0, arrival=arrival, completion=completion))
            ),
            gpu(
                1, owner("q-2", "llm", engine=engine(0.0, 4.0, 20.0, arrival=2.0, completion=2.0)), node="n-b"
            ),
            ts=t,
            seq=seq,
        )
        agg.ingest(encode_raw(b), t)
    late = batch(
        gpu(0, owner("q-1", "llm", engine=engine(5.0, 16.0, 90.0, arrival=20.0, completion=8.0))),
        ts=NOW + 1,
        seq=9,
    )
    agg.store.add_batch(agg.reader.decode(encode_raw(late), NOW + 2), NOW + 1)
    agg.store.request(("default", "Deployment", "llm"), W, 1.0, NOW, 60.0)
    (m,) = agg.snapshot(NOW + 2)
    pods = {p.pod: p for p in m.pods}
    recent = pods["q-1"].recent
    assert recent is not None
    assert recent["request_arrival_rate"] == pytest.approx(12.0)  # the last second: the newest bucket
    assert pods["q-1"].values["request_arrival_rate"] == pytest.approx(16.0)  # (16 + 20 + 12) / 3
    assert pods["q-1"].values["request_completion_rate"] == pytest.approx(8.0)
    assert pods["q-2"].values["request_arrival_rate"] == pytest.approx(2.0)
    assert m.averages["request_arrival_rate"] == pytest.approx(9.0)
    assert m.averages["request_completion_rate"] == pytest.approx(5.0)
    assert m.averages["requests_running"] == pytest.approx(10.0)
    assert decode(encode(m), WorkloadMetrics, NOW + 2) == m  # within the contract


def test_a_pod_that_gets_its_engine_later_averages_only_what_it_sent() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    for seq in range(5):
        agg.ingest(encode_raw(batch(gpu(0, owner("q-1", "llm")), ts=NOW + seq, seq=seq)), NOW + seq)
    for seq in range(5, 7):
        b = batch(gpu(0, owner("q-1", "llm", engine=engine(3.0, 9.0, 33.0))), ts=NOW + seq, seq=seq)
        agg.ingest(encode_raw(b), NOW + seq)
    (m,) = agg.snapshot(NOW + 6)
    assert m.pods[0].values["requests_waiting"] == pytest.approx(3.0)
    assert m.pods[0].values["gpu_util"] == pytest.approx(50.0)


def test_a_pod_without_an_engine_has_no_engine_values() -> None:
    got = run(SCENARIOS["pods without an engine have no engine metrics, and do not dilute others'"])
    plain = next(p for p in got["mixed"].pods if p.pod == "m-2")
    assert "requests_waiting" not in plain.values
    assert "kv_cache_usage" not in plain.values
    only_gpu = run(SCENARIOS["mean over samples in the window"])["bert"]
    assert not {"requests_waiting", "requests_running", "kv_cache_usage"} & set(only_gpu.averages)


def test_engine_signals_sent_once_per_pod_feed_the_pod_as_on_each_owner() -> None:
    """A collector of this release sends a pod's engine signals once, beside the GPUs;
    the previous release's sent them on each of the pod's GPU owners: same means."""
    signals = engine(6.0, 12.0, 40.0, arrival=9.0, completion=8.0)

    def once_per_pod(ts: float) -> dict[str, Any]:
        b = batch(gpu(0, owner("q-1", "llm"), util=40.0), gpu(1, owner("q-1", "llm"), util=60.0), ts=ts)
        return b | {"engines": [{"pod_uid": "uid-q-1", "signals": signals}]}

    def on_each_owner(ts: float) -> dict[str, Any]:
        return batch(
            gpu(0, owner("q-1", "llm", engine=signals), util=40.0),
            gpu(1, owner("q-1", "llm", engine=signals), util=60.0),
            ts=ts,
        )

    got = [
        run(Scenario([make(NOW), make(NOW + 1)], now=NOW + 1))["llm"]
        for make in (once_per_pod, on_each_owner)
    ]
    assert got[0].pods[0].values == got[1].pods[0].values
    assert got[0].pods[0].values["requests_waiting"] == pytest.approx(6.0)
    assert got[0].pods[0].values["request_completion_rate"] == pytest.approx(8.0)
    assert got[0].pods[0].values["gpu_util"] == pytest.approx(50.0)


def test_engine_signals_of_a_pod_not_on_the_batch_feed_nothing() -> None:
    b = batch(gpu(0, owner("q-1", "llm")), ts=NOW) | {
        "engines": [{"pod_uid": "uid-elsewhere", "signals": engine(6.0, 12.0, 40.0)}]
    }
    (m,) = run(Scenario([b], now=NOW)).values()
    assert "requests_waiting" not in m.pods[0].values
