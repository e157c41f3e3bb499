"""Wire contract v1: round trips, and every kind of bad payload rejected with its reason."""

from __future__ import annotations

import contextlib
import copy
import math
from collections.abc import Callable
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.codec import Reader, decode, encode, encode_raw
from gpuscale.wire import (
    ERROR_CODES,
    MAX_GPUS_PER_NODE,
    MAX_OWNERS_PER_GPU,
    MAX_PODS_PER_WORKLOAD,
    Action,
    Decision,
    SampleBatch,
    WindowRequest,
    WireError,
    WorkloadMetrics,
)

from .wire_factories import NOW, action, batch, decision, gpu, metrics, owner

MESSAGES = [
    pytest.param(batch(), SampleBatch, id="samples"),
    pytest.param(batch(gpus=()), SampleBatch, id="samples-empty-node"),
    pytest.param(
        batch(
            gpus=(
                gpu(
                    0,
                    health="NVMLError_GpuIsLost",
                    util=None,
                    mem_util=None,
                    fb_used_mib=None,
                    fb_free_mib=None,
                    temp_c=None,
                    power_w=None,
                    sm_active=None,
                ),
            )
        ),
        SampleBatch,
        id="samples-lost-gpu",
    ),
    pytest.param(batch(gpus=(gpu(0, mig="GPU-parent", sm_active=None),)), SampleBatch, id="samples-mig"),
    pytest.param(
        batch(gpus=(gpu(0, owners=(owner(ready=False),)),)), SampleBatch, id="samples-unready-owner"
    ),
    pytest.param(metrics(), WorkloadMetrics, id="metrics"),
    pytest.param(decision(), Decision, id="decisions"),
    pytest.param(action(), Action, id="actions"),
    pytest.param(
        action(outcome="failed", replicas_after=None, error="404 NotFound"), Action, id="actions-failed"
    ),
]


@pytest.mark.parametrize(("message", "cls"), MESSAGES)
def test_round_trip_is_lossless(message: Any, cls: Any) -> None:
    assert decode(encode(message), cls, NOW) == message


def _wire(message: Any) -> dict[str, Any]:
    """The message as a plain map, read back by the reference decoder."""
    payload: dict[str, Any] = msgpack.unpackb(encode(message))
    return copy.deepcopy(payload)


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set (or delete, with value=DELETE) a dotted path; list indexes are numbers."""

    def mutate(m: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = m
        for key in parents:
            node = node[int(key)] if key.isdigit() else node[key]
        if value is DELETE:
            del node[last]
        else:
            node[int(last) if last.isdigit() else last] = value

    return mutate


DELETE = object()

# (message factory, mutation, expected code) — each row one way to be wrong.
INVALID = [
    pytest.param(batch, _set("v", 2), "wrong_version", id="version-2"),
    pytest.param(batch, _set("v", "1"), "wrong_version", id="version-as-string"),
    pytest.param(batch, _set("v", DELETE), "missing_field", id="version-missing"),
    pytest.param(batch, _set("node", DELETE), "missing_field", id="node-missing"),
    pytest.param(batch, _set("node", 42), "wrong_type", id="node-not-string"),
    pytest.param(batch, _set("node", ""), "out_of_range", id="node-empty"),
    pytest.param(batch, _set("seq", -1), "out_of_range", id="seq-negative"),
    pytest.param(batch, _set("seq", 1.5), "wrong_type", id="seq-float"),
    pytest.param(batch, _set("ts", float("nan")), "not_finite", id="ts-nan"),
    pytest.param(batch, _set("ts", NOW + 61), "future_timestamp", id="ts-61s-ahead"),
    pytest.param(batch, _set("interval_s", 0), "out_of_range", id="interval-zero"),
    pytest.param(batch, _set("gpus", {}), "wrong_type", id="gpus-not-list"),
    pytest.param(
        lambda: batch(gpus=tuple(gpu(i) for i in range(MAX_GPUS_PER_NODE + 1))),
        lambda m: None,
        "out_of_range",
        id="gpus-more-than-a-node-has",
    ),
    pytest.param(
        lambda: metrics(pods=metrics().pods * (MAX_PODS_PER_WORKLOAD + 1)),
        lambda m: None,
        "out_of_range",
        id="metrics-more-pods-than-allowed",
    ),
    pytest.param(metrics, _set("averages.gpu_util", 101.0), "out_of_range", id="metrics-util-over-100"),
    pytest.param(metrics, _set("averages.gpu_util", float("inf")), "not_finite", id="metrics-util-inf"),
    pytest.param(metrics, _set("averages.gpu_util", None), "wrong_type", id="metrics-known-metric-null"),
    pytest.param(metrics, _set("averages.gpu_util", "83"), "wrong_type", id="metrics-known-metric-string"),
    pytest.param(
        metrics, _set("pods.0.values.sm_util", -0.5), "out_of_range", id="metrics-pod-value-negative"
    ),
    pytest.param(metrics, _set("pods_fresh", "1"), "wrong_type", id="metrics-pods-fresh-string"),
    pytest.param(metrics, _set("pods.0.last_seen", NOW + 3600), "future_timestamp", id="metrics-pod-future"),
    pytest.param(decision, _set("to_replicas", -1), "out_of_range", id="decision-negative-replicas"),
    pytest.param(decision, _set("id", DELETE), "missing_field", id="decision-no-id"),
    pytest.param(decision, _set("inputs", []), "wrong_type", id="decision-inputs-list"),
    pytest.param(action, _set("outcome", "maybe"), "out_of_range", id="action-unknown-outcome"),
    pytest.param(action, _set("replicas_before", "2"), "wrong_type", id="action-before-string"),
    pytest.param(action, _set("namespace", 7), "wrong_type", id="action-namespace-number"),
]


@pytest.mark.parametrize(("factory", "mutate", "code"), INVALID)
def test_invalid_payload_is_rejected_with_its_reason(
    factory: Callable[[], Any], mutate: Callable[[dict[str, Any]], None], code: str
) -> None:
    message = factory()
    payload = _wire(message)
    mutate(payload)
    with pytest.raises(WireError) as caught:
        decode(encode_raw(payload), type(message), NOW)
    assert caught.value.code == code
    assert caught.value.detail  # a human reason, not just a code
    assert caught.value.code in ERROR_CODES


def test_not_msgpack_is_undecodable() -> None:
    with pytest.raises(WireError) as caught:
        decode(b"\xc1garbage", SampleBatch, NOW)
    assert caught.value.code == "undecodable"


def test_a_map_is_required() -> None:
    with pytest.raises(WireError) as caught:
        decode(encode_raw([1, 2, 3]), SampleBatch, NOW)
    assert caught.value.code == "not_a_map"


# GPU-entry faults: the batch is sound, so only the bad entry is left out.
BAD_GPU_ENTRIES = [
    pytest.param(_set("gpus.0.util", 140.0), "out_of_range", id="util-over-100"),
    pytest.param(_set("gpus.0.util", -3.0), "out_of_range", id="util-negative"),
    pytest.param(_set("gpus.0.mem_util", float("nan")), "not_finite", id="mem-util-nan"),
    pytest.param(_set("gpus.0.fb_used_mib", -1.0), "out_of_range", id="fb-negative"),
    pytest.param(_set("gpus.0.power_w", float("-inf")), "not_finite", id="power-minus-inf"),
    pytest.param(_set("gpus.0.uuid", DELETE), "missing_field", id="uuid-missing"),
    pytest.param(_set("gpus.0.util", None), "missing_field", id="util-null-on-healthy-gpu"),
    pytest.param(_set("gpus.0.owners.0.sm_util", 100.5), "out_of_range", id="owner-sm-util-over-100"),
    pytest.param(
        _set("gpus.0.owners.0.workload", "Deployment/bert"), "wrong_type", id="owner-workload-string"
    ),
    pytest.param(_set("gpus.0", "not a gpu"), "wrong_type", id="entry-not-a-map"),
    pytest.param(_set("gpus.0.owners.0.ready", "yes"), "wrong_type", id="owner-ready-not-bool"),
    pytest.param(
        lambda m: m["gpus"][0].__setitem__("owners", m["gpus"][0]["owners"] * (MAX_OWNERS_PER_GPU + 1)),
        "out_of_range",
        id="more-owners-than-a-gpu-serves",
    ),
]


@pytest.mark.parametrize(("mutate", "code"), BAD_GPU_ENTRIES)
def test_one_bad_gpu_entry_does_not_drop_the_batch(
    mutate: Callable[[dict[str, Any]], None], code: str
) -> None:
    payload = _wire(batch())
    mutate(payload)
    parsed, rejected = Reader(SampleBatch).read(encode_raw(payload), NOW)
    assert [g.index for g in parsed.gpus] == [1]
    assert [(i, e.code) for i, e in rejected] == [(0, code)]
    assert rejected[0][1].path.startswith("$.gpus[0]")


def test_owner_without_ready_field_is_accepted_as_unknown() -> None:
    payload = _wire(batch())
    del payload["gpus"][0]["owners"][0]["ready"]  # a producer from before the field
    assert decode(encode_raw(payload), SampleBatch, NOW).gpus[0].owners[0].ready is None


def test_timestamp_within_skew_is_accepted() -> None:
    assert decode(encode(batch(ts=NOW + 59)), SampleBatch, NOW).ts == NOW + 59


# --- the decoder never raises anything but WireError --------------------------------

msgpack_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=6)
    ),
    max_leaves=30,
)

MESSAGE_TYPES = (SampleBatch, WorkloadMetrics, Decision, Action, WindowRequest)


@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=200), cls=st.sampled_from(MESSAGE_TYPES))
def test_arbitrary_bytes_decode_or_are_rejected(data: bytes, cls: Any) -> None:
    with contextlib.suppress(WireError):
        decode(data, cls, NOW)


@settings(max_examples=300, deadline=None)
@given(
    value=st.dictionaries(st.text(max_size=12), msgpack_values, max_size=8),
    cls=st.sampled_from(MESSAGE_TYPES),
)
def test_arbitrary_maps_decode_or_are_rejected(value: dict[str, Any], cls: Any) -> None:
    value.setdefault("v", 1)
    with contextlib.suppress(WireError):
        decode(encode_raw(value), cls, NOW)


def _mutations(message: Any) -> st.SearchStrategy[dict[str, Any]]:
    """A valid payload with one field replaced by an arbitrary value: the near misses."""
    payload = _wire(message)
    return st.tuples(st.sampled_from(sorted(payload)), msgpack_values).map(
        lambda kv: {**payload, kv[0]: kv[1]}
    )


NEAR_MISSES = st.one_of(
    _mutations(batch()).map(lambda p: (p, SampleBatch)),
    _mutations(metrics()).map(lambda p: (p, WorkloadMetrics)),
    _mutations(decision()).map(lambda p: (p, Decision)),
    _mutations(action()).map(lambda p: (p, Action)),
)


@settings(max_examples=300, deadline=None)
@given(case=NEAR_MISSES)
def test_near_miss_payloads_decode_or_are_rejected(case: tuple[dict[str, Any], Any]) -> None:
    payload, cls = case
    try:
        parsed = decode(encode_raw(payload), cls, NOW)
    except WireError:
        return
    # Whatever got through is a sound message: numbers finite, re-encodable.
    for value in _wire(parsed).values():
        if isinstance(value, float):
            assert math.isfinite(value)
    # Re-encodes to what it reads back as (bytes: a free-form decision input may hold NaN).
    assert encode(decode(encode(parsed), cls, NOW)) == encode(parsed)


@settings(max_examples=200, deadline=None)
@given(case=NEAR_MISSES, extra=st.dictionaries(st.text(max_size=8), msgpack_values, max_size=3))
def test_a_reader_looking_for_unknown_names_never_raises_anything_else(
    case: tuple[dict[str, Any], Any], extra: dict[str, Any]
) -> None:
    payload, cls = case
    seen: list[str] = []
    reader = Reader(cls, on_unknown=lambda _kind, field: seen.append(field), look_first=10)
    with contextlib.suppress(WireError):
        reader.read(encode_raw({**extra, **payload}), NOW)
    assert all(isinstance(name, str) and len(name) <= 100 for name in seen)
