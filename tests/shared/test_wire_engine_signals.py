"""The additions to wire v1 for inference engines: the engine signals on a sample's owner and
the engine metrics in metric maps. Additive only (docs/UPGRADING.md): a reader
built before them decodes the same messages, values unchanged, and reports
exactly the new names as unknown; a new reader takes an old message as before."""

from __future__ import annotations

import functools
import operator
import types
import typing
from typing import Any

import msgpack
import msgspec
import pytest

from gpuscale import codec
from gpuscale.codec import Reader
from gpuscale.wire import (
    UNSET,
    EngineSignals,
    MetricValues,
    PodEngine,
    PodMetrics,
    SampleBatch,
    WireError,
    WorkloadMetrics,
    unknown_fields,
)

from .wire_factories import NOW, batch, gpu, metrics, owner

ENGINE_FIELDS = {"engine", "requests_waiting", "requests_running", "kv_cache_usage"}


def _before_issue_14(
    cls: Any, made: dict[Any, Any] | None = None, dropped: frozenset[str] = ENGINE_FIELDS
) -> Any:
    """A copy of a wire Struct as it was before the engine signals: the same fields and
    limits, nested shapes copied alike, minus the engine fields (or ``dropped``)."""
    made = {} if made is None else made
    if cls in made:
        return made[cls]
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    hints = msgspec.structs.fields(cls)
    fields: list[Any] = []
    for f in hints:
        if f.encode_name in dropped:
            continue
        annotation = _swap(f.type, made, dropped)
        if f.required:
            fields.append((f.name, annotation))
        else:
            default = f.default if f.default is not msgspec.NODEFAULT else UNSET
            fields.append((f.name, annotation, default))
    config = cls.__struct_config__
    old = msgspec.defstruct(
        f"Old{cls.__name__}",
        fields,
        kw_only=True,
        frozen=True,
        tag_field=config.tag_field,
        tag=config.tag,
    )
    made[cls] = old
    return old


def _swap(annotation: Any, made: dict[Any, Any], dropped: frozenset[str]) -> Any:
    """The annotation with every wire Struct in it replaced by its old copy."""
    if isinstance(annotation, type) and issubclass(annotation, msgspec.Struct):
        return _before_issue_14(annotation, made, dropped)
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Annotated:
        return typing.Annotated[(_swap(args[0], made, dropped), *annotation.__metadata__)]
    if origin in (typing.Union, types.UnionType):
        return functools.reduce(operator.or_, (_swap(a, made, dropped) for a in args))
    if origin is tuple:  # tuple[X, ...]
        return tuple[(_swap(args[0], made, dropped), ...)]  # type: ignore[misc]  # built at run time
    return annotation


def _engine_batch() -> SampleBatch:
    signals = EngineSignals("vllm", requests_waiting=7.0, requests_running=24.0, kv_cache_usage=63.5)
    return batch(gpus=(gpu(0, owners=(owner(engine=signals),)), gpu(1, owners=(owner(),))))


def _engine_metrics() -> WorkloadMetrics:
    values = MetricValues(gpu_util=83.0, requests_waiting=7.0, requests_running=24.0, kv_cache_usage=63.5)
    return metrics(pods=(PodMetrics("bert-7d9f-abcde", values, NOW - 1),), averages=values)


def test_a_reader_from_before_issue_14_reads_the_rest_and_names_only_the_new_fields() -> None:
    old_batch = _before_issue_14(SampleBatch)
    data = codec.encode(_engine_batch())
    decoded = msgspec.msgpack.decode(data, type=old_batch)
    assert [o.pod for g in decoded.gpus for o in g.owners] == ["bert-7d9f-abcde", "bert-7d9f-abcde"]
    assert decoded.gpus[0].util == 83.0
    assert unknown_fields(msgpack.unpackb(data), old_batch) == {"gpus.owners.engine"}

    old_metrics = _before_issue_14(WorkloadMetrics)
    data = codec.encode(_engine_metrics())
    m = msgspec.msgpack.decode(data, type=old_metrics)
    assert m.averages.gpu_util == 83.0
    assert unknown_fields(msgpack.unpackb(data), old_metrics) == {
        "averages.requests_waiting",
        "averages.requests_running",
        "averages.kv_cache_usage",
        "pods.values.requests_waiting",
        "pods.values.requests_running",
        "pods.values.kv_cache_usage",
    }


def test_the_old_copy_really_lacks_the_new_fields() -> None:
    """The test above must be able to fail: its old reader is not today's."""
    made: dict[Any, Any] = {}
    _before_issue_14(SampleBatch, made)
    old_owner = next(old for new, old in made.items() if new.__name__ == "GpuOwner")
    assert "engine" not in old_owner.__struct_fields__
    assert "ready" in old_owner.__struct_fields__
    assert unknown_fields(msgpack.unpackb(codec.encode(_engine_batch())), SampleBatch) == set()


def test_a_reader_of_the_previous_release_names_only_the_per_pod_engines_unknown() -> None:
    """Signals once per pod (``engines``) are additive: the previous release's aggregator
    reads the rest of the batch, and a new one reads the previous collectors' owners."""
    previous = _before_issue_14(SampleBatch, dropped=frozenset({"engines"}))
    signals = EngineSignals("vllm", requests_waiting=7.0)
    per_pod = batch(gpus=(gpu(0, owners=(owner(),)),), engines=(PodEngine(owner().pod_uid, signals),))
    data = codec.encode(per_pod)
    decoded = msgspec.msgpack.decode(data, type=previous)
    assert [o.pod for g in decoded.gpus for o in g.owners] == ["bert-7d9f-abcde"]
    assert unknown_fields(msgpack.unpackb(data), previous) == {"engines"}
    assert Reader(SampleBatch).decode(data, NOW).engines == (PodEngine(owner().pod_uid, signals),)
    assert "engines" not in msgpack.unpackb(codec.encode(batch()))  # none: not written


def test_an_engine_entry_without_its_pods_uid_is_refused() -> None:
    payload = msgpack.unpackb(codec.encode(batch(engines=(PodEngine("uid-1", EngineSignals("vllm")),))))
    payload["engines"][0]["pod_uid"] = ""
    with pytest.raises(WireError) as caught:
        Reader(SampleBatch).decode(msgpack.packb(payload), NOW)
    assert caught.value.path == "$.engines[0].pod_uid"


def test_a_pod_named_twice_in_engines_is_refused() -> None:
    twice = (PodEngine("uid-1", EngineSignals("vllm")), PodEngine("uid-1", EngineSignals("sglang")))
    with pytest.raises(WireError) as caught:
        Reader(SampleBatch).decode(codec.encode(batch(engines=twice)), NOW)
    assert (caught.value.code, caught.value.path) == ("invalid", "$.engines[1].pod_uid")


def test_no_engine_is_not_written_and_absent_or_null_read_as_none() -> None:
    payload = msgpack.unpackb(codec.encode(batch()))
    assert "engine" not in payload["gpus"][0]["owners"][0]
    payload["gpus"][0]["owners"][0]["engine"] = None
    decoded = Reader(SampleBatch).decode(msgpack.packb(payload), NOW)
    assert not decoded.gpus[0].owners[0].engine


def test_engine_signals_round_trip() -> None:
    sent = _engine_batch()
    got = Reader(SampleBatch).decode(codec.encode(sent), NOW)
    assert got == sent
    assert got.gpus[0].owners[0].engine == EngineSignals("vllm", 7.0, 24.0, 63.5)
    m = Reader(WorkloadMetrics).decode(codec.encode(_engine_metrics()), NOW)
    assert (m.averages["requests_waiting"], m.averages["kv_cache_usage"]) == (7.0, 63.5)


@pytest.mark.parametrize(
    ("field", "value", "code"),
    [
        ("kv_cache_usage", 100.5, "out_of_range"),  # a % (a 0-1 fraction must be scaled by the collector)
        ("requests_waiting", -1.0, "out_of_range"),
        ("requests_running", float("nan"), "not_finite"),
        ("name", "", "out_of_range"),
    ],
)
def test_impossible_engine_values_are_rejected_with_their_path(field: str, value: Any, code: str) -> None:
    payload = msgpack.unpackb(codec.encode(_engine_batch()))
    payload["gpus"][0]["owners"][0]["engine"][field] = value
    batch_, rejected = Reader(SampleBatch).read(msgpack.packb(payload), NOW)
    # One bad owner costs its GPU entry, never the node's batch.
    assert [g.index for g in batch_.gpus] == [1]
    ((index, error),) = rejected
    assert index == 0
    assert isinstance(error, WireError)
    assert (error.code, error.path) == (code, f"$.gpus[0].owners[0].engine.{field}")
