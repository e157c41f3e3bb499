"""Ingest rules of the core: validation, node check, ordering, seq resets,
and hostile batches never crashing it nor reaching the window unchecked."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.codec import decode, encode, encode_raw
from gpuscale.subjects import aggregator_partition_mapping
from gpuscale.wire import ERROR_CODES, SampleBatch, WorkloadMetrics
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.scaleout import split_by_workload
from gpuscale_aggregator.core.window import WindowConfig
from gpuscale_aggregator.settings import partition_spec

from .aggregator_builders import NOW, batch, engine, gpu, one_pod_batch, owner


def ingest_all(steps: list[tuple[dict[str, Any], float]]) -> tuple[Aggregator, list[str]]:
    agg = Aggregator(WindowConfig(window_s=30.0))
    return agg, [agg.ingest(encode_raw(b), now, subject_node=b.get("node")).status for b, now in steps]


ORDERING = {
    "increasing seq is accepted": (
        [(one_pod_batch("a-1", 10, seq=0), NOW), (one_pod_batch("a-1", 20, seq=1, ts=NOW + 1), NOW + 1)],
        ["accepted", "accepted"],
    ),
    "same seq again is a duplicate": (
        [(one_pod_batch("a-1", 10, seq=5), NOW), (one_pod_batch("a-1", 10, seq=5), NOW + 1)],
        ["accepted", "duplicate"],
    ),
    "older seq is out of order": (
        [(one_pod_batch("a-1", 10, seq=5, ts=NOW + 1), NOW + 1), (one_pod_batch("a-1", 10, seq=4), NOW + 1)],
        ["accepted", "out_of_order"],
    ),
    "collector restart: seq 0 with a clearly newer ts is accepted": (
        [(one_pod_batch("a-1", 10, seq=900), NOW), (one_pod_batch("a-1", 30, seq=0, ts=NOW + 5), NOW + 5)],
        ["accepted", "accepted"],
    ),
    "seq 0 not clearly newer (on the receiver's clock) is still out of order": (
        [
            (one_pod_batch("a-1", 10, seq=900), NOW),
            (one_pod_batch("a-1", 30, seq=0, ts=NOW + 0.2), NOW + 0.2),
        ],
        ["accepted", "out_of_order"],
    ),
    "seq is per node": (
        [(one_pod_batch("a-1", 10, seq=7), NOW), (one_pod_batch("b-1", 10, seq=7, node="node-b"), NOW)],
        ["accepted", "accepted"],
    ),
    "a batch from before the window (on its node's usual clock) is too old": (
        [(one_pod_batch("a-1", 10, seq=2), NOW), (one_pod_batch("a-1", 10, seq=1, ts=NOW - 30), NOW + 0.5)],
        ["accepted", "too_old"],
    ),
    "the first batch of a node whose clock is 30 s behind is not too old": (
        [(one_pod_batch("a-1", 10, seq=1, ts=NOW - 30), NOW)],
        ["accepted"],
    ),
}


@pytest.mark.parametrize(("steps", "expected"), list(ORDERING.values()), ids=list(ORDERING))
def test_ordering(steps: list[tuple[dict[str, Any], float]], expected: list[str]) -> None:
    _, statuses = ingest_all(steps)
    assert statuses == expected


def test_seq_reset_is_reported_and_its_values_are_used() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0))
    agg.ingest(encode_raw(one_pod_batch("a-1", 10, seq=900)), NOW)
    result = agg.ingest(encode_raw(one_pod_batch("a-1", 30, seq=0, ts=NOW + 5)), NOW + 5)
    assert result.seq_reset
    assert agg.ingest(encode_raw(one_pod_batch("a-1", 30, seq=1, ts=NOW + 6)), NOW + 6).status == "accepted"
    (m,) = agg.snapshot(NOW + 6)
    assert m.averages["gpu_util"] == pytest.approx((10 + 30 + 30) / 3)


def test_the_shells_path_says_what_it_did_as_a_status() -> None:
    """``ingest_batch`` (the service's path: no result object per batch) answers a status."""
    agg = Aggregator(WindowConfig(window_s=30.0))
    read = agg.reader.read
    first = read(encode_raw(one_pod_batch("a-1", 10, seq=900)), NOW)[0]
    restarted = read(encode_raw(one_pod_batch("a-1", 30, seq=0, ts=NOW + 5)), NOW + 5)[0]
    assert agg.ingest_batch(first, NOW, subject_node="node-b") == "node_mismatch"
    assert agg.ingest_batch(first, NOW) == "accepted"
    assert agg.ingest_batch(first, NOW + 0.1) == "duplicate"
    assert agg.ingest_batch(restarted, NOW + 5) == "seq_reset"
    assert agg.ingest_batch(first, NOW + 90) == "too_old"
    (m,) = agg.snapshot(NOW + 5)
    assert m.averages["gpu_util"] == pytest.approx(20.0)


REJECTS = {
    "not a map": ([1, 2, 3], "not_a_map"),
    "another version": ({**one_pod_batch("a-1", 1), "v": 2}, "wrong_version"),
    "no node": ({k: v for k, v in one_pod_batch("a-1", 1).items() if k != "node"}, "missing_field"),
    "seq negative": ({**one_pod_batch("a-1", 1), "seq": -1}, "out_of_range"),
    "ts far in the future": ({**one_pod_batch("a-1", 1), "ts": NOW + 3600}, "future_timestamp"),
    "ts NaN": ({**one_pod_batch("a-1", 1), "ts": math.nan}, "not_finite"),
    "gpus not a list": ({**one_pod_batch("a-1", 1), "gpus": "x"}, "wrong_type"),
}


@pytest.mark.parametrize(("payload", "reason"), list(REJECTS.values()), ids=list(REJECTS))
def test_bad_batches_are_rejected_with_a_reason(payload: Any, reason: str) -> None:
    agg = Aggregator()
    result = agg.ingest(encode_raw(payload), NOW, subject_node="node-a")
    assert (result.status, result.reason) == ("rejected", reason)
    assert agg.store.workload_count == 0


def test_node_must_match_the_subject() -> None:
    agg = Aggregator()
    result = agg.ingest(encode_raw(one_pod_batch("a-1", 10, node="node-a")), NOW, subject_node="node-b")
    assert (result.status, result.reason) == ("node_mismatch", "node_mismatch")
    assert agg.store.workload_count == 0


def test_one_bad_gpu_does_not_drop_the_rest_of_a_sound_batch() -> None:
    bad = gpu(1, owner("a-1"), util=150.0)
    agg = Aggregator()
    result = agg.ingest(encode_raw(batch(gpu(0, owner("a-1"), util=40.0), bad)), NOW, subject_node="node-a")
    assert result.status == "accepted"
    assert [(i, e.code) for i, e in result.rejected_gpus] == [(1, "out_of_range")]
    assert result.samples == 1
    (m,) = agg.snapshot(NOW)
    assert m.averages["gpu_util"] == 40.0


def test_split_by_workload_keeps_only_each_workloads_owners_and_their_engines() -> None:
    whole = batch(
        gpu(0, owner("a-1", sm_util=10.0), owner("b-1", "llama", sm_util=20.0)),
        gpu(1, owner("b-1", "llama")),
        seq=4,
    ) | {"engines": [{"pod_uid": "uid-b-1", "signals": engine(3.0, 8.0, 50.0)}]}
    b = decode(encode_raw(whole), SampleBatch, NOW)
    parts = split_by_workload(b)
    assert sorted(k.name for k in parts) == ["bert", "llama"]
    llama = next(v for k, v in parts.items() if k.name == "llama")
    bert = next(v for k, v in parts.items() if k.name == "bert")
    assert [g.index for g in llama.gpus] == [0, 1]
    assert {o.pod for g in llama.gpus for o in g.owners} == {"b-1"}
    assert [e.pod_uid for e in llama.engines or ()] == ["uid-b-1"]
    assert not bert.engines
    assert (llama.node, llama.seq, llama.ts) == (b.node, 4, b.ts)
    # Splitting loses nothing: the windows fed the parts publish what the whole gives.
    from_whole, from_parts = Aggregator(), Aggregator()
    assert from_whole.ingest(encode_raw(whole), NOW).status == "accepted"
    for key, part in parts.items():
        assert from_parts.ingest(encode(part), NOW, source=(part.node, key)).status == "accepted"
    assert from_parts.snapshot(NOW + 1) == from_whole.snapshot(NOW + 1)


def test_server_mapping_names_the_partition_function() -> None:
    text = aggregator_partition_mapping(3)
    assert "{{partition(3,1,2,3)}}" in text
    assert "gpuscale.v1.aggregator.wsamples.*.*.*" in text


# --- hostile batches (property) -----------------------------------------------------

_values = st.one_of(
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e3, max_value=1e3),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-10, max_value=2**64 - 1),
    st.booleans(),
    st.text(max_size=3),
    st.builds(dict),  # a new one each draw: one shared {} set inside itself made a cycle, not a batch
    st.builds(list),
)
_gpu_keys = [
    "uuid",
    "index",
    "model",
    "util",
    "mem_util",
    "fb_used_mib",
    "fb_free_mib",
    "temp_c",
    "power_w",
    "sm_active",
    "mig",
    "health",
    "owners",
    "newer_field",
]
_owner_keys = ["namespace", "pod", "container", "pod_uid", "workload", "sm_util", "fb_used_mib", "ready"]
_batch_keys = ["v", "node", "ts", "seq", "interval_s", "gpus", "newer_field"]


def _template() -> dict[str, Any]:
    return batch(
        gpu(0, owner("a-1", sm_util=20.0, fb_used_mib=100.0), owner("b-1", "llama"), sm_active=40.0),
        gpu(1, owner("a-2")),
        gpu(2, util=None, health="GPU is lost"),
    )


@st.composite
def mutated_batches(draw: st.DrawFn) -> dict[str, Any]:
    b = _template()
    for _ in range(draw(st.integers(0, 3))):
        where = draw(st.sampled_from(["batch", "gpu", "owner", "workload", "delete"]))
        value = draw(_values)
        gpus = b.get("gpus")
        g = gpus[draw(st.integers(0, 2))] if type(gpus) is list and len(gpus) == 3 else None
        if where == "batch":
            b[draw(st.sampled_from(_batch_keys))] = value
        elif where == "gpu" and type(g) is dict:
            g[draw(st.sampled_from(_gpu_keys))] = value
        elif where == "owner" and type(g) is dict and type(g.get("owners")) is list and g["owners"]:
            o = g["owners"][0]
            if type(o) is dict:
                o[draw(st.sampled_from(_owner_keys))] = value
        elif where == "workload" and type(g) is dict and type(g.get("owners")) is list and g["owners"]:
            o = g["owners"][0]
            if type(o) is dict and type(o.get("workload")) is dict:
                o["workload"][draw(st.sampled_from(["kind", "name"]))] = value
        elif where == "delete" and type(g) is dict:
            g.pop(draw(st.sampled_from(_gpu_keys)), None)
    return b


@settings(max_examples=300, deadline=None)
@given(mutated_batches())
def test_hostile_batches_are_rejected_with_a_code_or_publish_sound_metrics(obj: dict[str, Any]) -> None:
    agg = Aggregator()
    result = agg.ingest(encode_raw(obj), NOW)
    if result.status == "rejected":
        assert result.reason in ERROR_CODES
        assert agg.store.workload_count == 0
        return
    assert result.status in ("accepted", "too_old"), result  # ts may be mutated to before the window
    assert all(e.code in ERROR_CODES for _, e in result.rejected_gpus)
    # Whatever reached the window publishes messages any v1 consumer accepts.
    for m in agg.snapshot(NOW):
        assert decode(encode(m), WorkloadMetrics, NOW) == m


def test_the_template_batch_is_accepted_whole() -> None:
    """The property above would pass trivially if every batch were rejected."""
    result = Aggregator().ingest(encode_raw(_template()), NOW)
    assert (result.status, result.rejected_gpus, result.samples) == ("accepted", (), 3)


PARTITION_SPECS = {
    "0/3": (0, 3),
    "2/3": (2, 3),
    " 0/1 ": (0, 1),
    "none": None,
    "": None,
}


@pytest.mark.parametrize(("text", "expected"), list(PARTITION_SPECS.items()), ids=list(PARTITION_SPECS))
def test_partition_option_parses(text: str, expected: tuple[int, int] | None) -> None:
    assert partition_spec(text) == expected


@pytest.mark.parametrize("text", ["3/3", "-1/2", "1", "a/b", "1/0"])
def test_partition_option_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="i/N"):
        partition_spec(text)
