"""Today's v1 messages stay readable, and the bytes stay MessagePack v1 both ways.

The golden files are what main's producers wrote before the wire contract was
rewritten (tests/golden/v1/README.md); a change that makes one of them
unreadable, or reads it differently, fails here. Newer and older producers'
variants of each decode too: unknown fields and metric names are skipped and
reported once per name, absent optional fields take their defaults.
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from gpuscale import codec
from gpuscale.codec import MAX_UNKNOWN_NAMES, OTHER_NAMES, Reader
from gpuscale.wire import (
    ACTION_OUTCOMES,
    DEFAULT_API_VERSION,
    HEALTH_OK,
    Action,
    Decision,
    SampleBatch,
    WireError,
    WorkloadMetrics,
)

from ..skew import GOLDEN, GOLDEN_TYPES, golden, golden_bytes, newer, newer_names, older, pack, with_defaults
from .wire_factories import NOW, action, batch, decision, gpu, metrics, owner, window_request

GOLDEN_NAMES = sorted(GOLDEN_TYPES)


def _now(name: str) -> float:
    return float(golden(name)["ts"]) + 1.0


def test_every_golden_file_is_covered() -> None:
    assert {p.stem for p in GOLDEN.glob("*.msgpack")} == set(GOLDEN_TYPES)


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_messages_decode(name: str) -> None:
    cls = GOLDEN_TYPES[name]
    message, rejected = Reader(cls).read(golden_bytes(name), _now(name))
    assert type(message) is cls
    assert rejected == []


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_messages_encode_back_to_the_same_bytes(name: str) -> None:
    message = codec.decode(golden_bytes(name), GOLDEN_TYPES[name], _now(name))
    assert codec.encode(message) == golden_bytes(name)


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_golden_messages_read_as_the_reference_decoder_reads_them(name: str) -> None:
    message = codec.decode(golden_bytes(name), GOLDEN_TYPES[name], _now(name))
    assert msgpack.unpackb(codec.encode(message)) == golden(name)
    assert message.to_wire() == golden(name)


def test_golden_values_are_read_as_written() -> None:
    """Spot checks of meaning, not only of shape."""
    samples = codec.decode(golden_bytes("samples"), SampleBatch, _now("samples"))
    assert (samples.node, samples.seq, len(samples.gpus)) == ("gpu-node-1.example", 42, 5)
    shared = samples.gpus[1]
    assert [(o.pod, o.workload.kind, o.sm_util, o.ready) for o in shared.owners] == [
        ("bert-7d9f8c6b5-abcde", "Deployment", 12.0, True),
        ("llama-0", "StatefulSet", 47.0, True),
    ]
    assert samples.gpus[3].mig == "GPU-4a5b6c7d-0000-0000-0000-000000000003"
    assert samples.gpus[4].health != HEALTH_OK
    assert samples.gpus[4].util is None
    m = codec.decode(golden_bytes("metrics"), WorkloadMetrics, _now("metrics"))
    assert (m.pods_fresh, m.pods_stale, m.averages["gpu_util"]) == (1, 1, 43.5)
    d = codec.decode(golden_bytes("decisions"), Decision, _now("decisions"))
    assert (d.from_replicas, d.to_replicas, d.target.reference()) == (1, 3, "Deployment/bert")
    a = codec.decode(golden_bytes("actions-failed"), Action, _now("actions-failed"))
    assert (a.outcome, a.replicas_after, a.decision_id) == ("failed", None, d.id)


# --- MessagePack both ways: the msgpack package writes what we read, reads what we write ----

MESSAGES = [
    pytest.param(batch(), id="samples"),
    pytest.param(
        batch(gpus=(gpu(0, owners=(owner(ready=False), owner("other", sm_util=3.5))),)), id="samples-owners"
    ),
    pytest.param(metrics(), id="metrics"),
    pytest.param(decision(), id="decisions"),
    pytest.param(action(), id="actions"),
    pytest.param(action(outcome="failed", replicas_after=None, error="boom"), id="actions-failed"),
    pytest.param(window_request(), id="windows"),
]


@pytest.mark.parametrize("message", MESSAGES)
def test_the_msgpack_package_reads_what_the_codec_writes(message: Any) -> None:
    data = codec.encode(message)
    assert msgpack.unpackb(data) == message.to_wire()
    # And writes it back to the same bytes: the encoding is plain MessagePack.
    assert msgpack.packb(msgpack.unpackb(data), use_bin_type=True) == data


@pytest.mark.parametrize("message", MESSAGES)
def test_the_codec_reads_what_the_msgpack_package_writes(message: Any) -> None:
    written = msgpack.packb(message.to_wire(), use_bin_type=True)
    assert codec.decode(written, type(message), NOW) == message


def test_an_integer_where_a_float_is_expected_is_read_as_the_float() -> None:
    """Other MessagePack writers pack 30.0 as the integer 30; that is the same number."""
    payload = msgpack.unpackb(codec.encode(metrics()))
    payload["window_s"] = 30
    payload["averages"]["gpu_util"] = 83
    m = codec.decode(pack(payload), WorkloadMetrics, NOW)
    assert (m.window_s, m.averages["gpu_util"]) == (30.0, 83.0)


# --- a newer producer: unknown fields and metric names -----------------------------------


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_a_newer_producers_message_reads_as_todays(name: str) -> None:
    cls = GOLDEN_TYPES[name]
    seen: list[tuple[str, str]] = []
    reader = Reader(cls, on_unknown=lambda kind, field: seen.append((kind, field)))
    payload = newer(golden(name), cls)
    message, rejected = reader.read(pack(payload), _now(name))
    assert message == codec.decode(golden_bytes(name), cls, _now(name))
    assert rejected == []
    assert {field for _, field in seen} == newer_names(golden(name), cls)
    assert len(seen) == len(set(seen))
    assert {kind for kind, _ in seen} == {cls.KIND}


def test_unknown_names_are_reported_once_per_name() -> None:
    seen: list[str] = []
    reader = Reader(WorkloadMetrics, on_unknown=lambda _kind, field: seen.append(field))
    data = pack(newer(golden("metrics"), WorkloadMetrics))
    for _ in range(5):
        reader.decode(data, _now("metrics"))
    assert sorted(seen) == sorted(newer_names(golden("metrics"), WorkloadMetrics))


def test_a_flood_of_new_names_is_reported_under_one_bounded_label() -> None:
    seen: list[str] = []
    reader = Reader(Action, on_unknown=lambda _kind, field: seen.append(field), look_first=1000)
    base = golden("actions")
    for i in range(MAX_UNKNOWN_NAMES + 40):
        reader.decode(pack({**base, f"field_{i}": i}), _now("actions"))
    assert len(seen) == MAX_UNKNOWN_NAMES + 1
    assert seen[-1] == OTHER_NAMES


def test_after_its_first_messages_a_reader_looks_once_per_interval() -> None:
    """Looking for unknown names costs a second decode: a busy reader samples."""
    seen: list[str] = []
    reader = Reader(
        Action, on_unknown=lambda _kind, field: seen.append(field), look_first=2, look_every_s=10.0
    )
    base = golden("actions")
    now = _now("actions")
    reader.decode(pack(base), now)
    reader.decode(pack(base), now)  # the first two are looked at, and have nothing new
    reader.decode(pack({**base, "one": 1}), now + 1)  # within the interval: not looked at
    assert seen == []
    reader.decode(pack({**base, "two": 2}), now + 10)
    assert seen == ["two"]


def test_a_known_metric_out_of_range_still_rejects_beside_unknown_ones() -> None:
    payload = newer(golden("metrics"), WorkloadMetrics)
    payload["averages"]["gpu_util"] = 140.0
    with pytest.raises(WireError) as caught:
        codec.decode(pack(payload), WorkloadMetrics, _now("metrics"))
    assert (caught.value.code, caught.value.path) == ("out_of_range", "$.averages.gpu_util")


def test_a_message_of_another_major_version_is_rejected() -> None:
    for v in (2, 0, "1", 1.0, True):
        payload = {**golden("decisions"), "v": v}
        with pytest.raises(WireError) as caught:
            codec.decode(pack(payload), Decision, _now("decisions"))
        assert caught.value.code == "wrong_version", v


# --- an older producer: optional fields absent ---------------------------------------------


@pytest.mark.parametrize("name", GOLDEN_NAMES)
def test_an_older_producers_message_reads_with_the_defaults(name: str) -> None:
    cls = GOLDEN_TYPES[name]
    payload = older(golden(name), cls)
    message = codec.decode(pack(payload), cls, _now(name))
    assert msgpack.unpackb(codec.encode(message)) == with_defaults(payload, cls)


def test_the_defaults_are_the_contracts() -> None:
    d = codec.decode(pack(older(golden("decisions"), Decision)), Decision, _now("decisions"))
    assert d.api_version == DEFAULT_API_VERSION
    a = codec.decode(pack(older(golden("actions"), Action)), Action, _now("actions"))
    assert (a.namespace, a.kind, a.name, a.error) == ("", "", "", None)
    b = codec.decode(pack(older(golden("samples"), SampleBatch)), SampleBatch, _now("samples"))
    assert {(o.ready, o.sm_util, o.fb_used_mib) for g in b.gpus for o in g.owners} == {(None, None, None)}
    assert {g.mig for g in b.gpus} == {None}


def test_older_fixtures_really_lack_the_optional_fields() -> None:
    """The tests above would prove nothing if older() stripped nothing."""
    samples = older(golden("samples"), SampleBatch)
    owner_fields = set(samples["gpus"][0]["owners"][0])
    assert {"ready", "sm_util", "fb_used_mib"}.isdisjoint(owner_fields)
    assert "api_version" not in older(golden("decisions"), Decision)
    assert {"namespace", "kind", "name", "error"}.isdisjoint(older(golden("actions"), Action))


def test_outcomes_are_the_contract_vocabulary() -> None:
    assert ACTION_OUTCOMES == (
        "applied",
        "skipped_stale",
        "skipped_dry_run",
        "conflict_retried",
        "failed",
        "refused",
    )
