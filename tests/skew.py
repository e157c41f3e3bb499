"""Messages from other v1 versions, for the rolling-upgrade tests (docs/UPGRADING.md).

- :func:`golden`: today's producers' bytes (tests/golden/v1, never regenerated),
  read with the ``msgpack`` package, the independent reference decoder;
- :func:`newer`: what a producer one step newer may send within v1: one more
  field on every map of the message and, in every metric map, metrics this
  version does not know (:data:`NEWER_METRICS`);
- :func:`older`: what a producer one step older sends: every optional field absent;
- :func:`restamp`: the same message sent now (consumers judge freshness).

Which fields are optional, and where maps nest, comes from the Structs of
gpuscale.wire (docs/asyncapi.yaml is held equal to them by its own test).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import msgpack
import msgspec

from gpuscale.wire import Action, Decision, MetricValues, SampleBatch, WindowRequest, WorkloadMetrics

GOLDEN = Path(__file__).resolve().parent / "golden" / "v1"
GOLDEN_TYPES: dict[str, type[Any]] = {
    "samples": SampleBatch,
    "aggregator-wsamples": SampleBatch,
    "metrics": WorkloadMetrics,
    "decisions": Decision,
    "actions": Action,
    "actions-failed": Action,
    "windows": WindowRequest,
}
# Metric names no v1 reader knows yet (the engine's requests_waiting & co. were
# this set until the contract learnt them).
NEWER_METRICS = {
    "time_to_first_token_p90_s": 0.42,
    "prefill_tokens_per_s": 1830.0,
    "prefix_cache_hit_ratio": 41.0,
}


def golden_bytes(name: str) -> bytes:
    return (GOLDEN / f"{name}.msgpack").read_bytes()


def golden(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = msgpack.unpackb(golden_bytes(name))
    return payload


def pack(payload: Any) -> bytes:
    """Bytes as any MessagePack producer writes them (the reference encoder)."""
    data: bytes = msgpack.packb(payload, use_bin_type=True)
    return data


def _walk(payload: Any, cls: type[Any], path: str, visit: Any) -> None:
    """Call ``visit(map, struct_info, path)`` for every map that is a Struct, depth first."""
    if not isinstance(payload, dict):
        return
    info = msgspec.inspect.type_info(cls)
    assert isinstance(info, msgspec.inspect.StructType)
    for f in info.fields:
        t: Any = f.type
        while isinstance(
            t, msgspec.inspect.UnionType | msgspec.inspect.ListType | msgspec.inspect.VarTupleType
        ):
            t = (
                next((x for x in t.types if isinstance(x, msgspec.inspect.StructType)), None)
                if isinstance(t, msgspec.inspect.UnionType)
                else t.item_type
            )
        value = payload.get(f.encode_name)
        if isinstance(t, msgspec.inspect.StructType) and value is not None:
            for item in value if isinstance(value, list) else [value]:
                _walk(item, t.cls, f"{path}{f.encode_name}.", visit)
    visit(payload, info, path)


def newer(payload: dict[str, Any], cls: type[Any]) -> dict[str, Any]:
    """A copy with a field this version does not know on every map, and
    metrics it does not know in every metric map."""
    out = copy.deepcopy(payload)

    def add(m: dict[str, Any], info: Any, path: str) -> None:
        if info.cls is MetricValues:
            m.update(NEWER_METRICS)
        else:
            m[f"newer_{info.cls.__name__.lower()}"] = {"added_in": "v1.x", "values": [1, 2.5, None]}

    _walk(out, cls, "", add)
    return out


def newer_names(payload: dict[str, Any], cls: type[Any]) -> set[str]:
    """The unknown names :func:`newer` adds, as a reader reports them."""
    names: set[str] = set()

    def note(m: dict[str, Any], info: Any, path: str) -> None:
        if info.cls is MetricValues:
            names.update(f"{path}{metric}" for metric in NEWER_METRICS)
        else:
            names.add(f"{path}newer_{info.cls.__name__.lower()}")

    _walk(payload, cls, "", note)
    return names


def older(payload: dict[str, Any], cls: type[Any]) -> dict[str, Any]:
    """A copy without any optional field (a metric map keeps what it has: its
    metrics are data, not optional fields)."""
    out = copy.deepcopy(payload)

    def strip(m: dict[str, Any], info: Any, path: str) -> None:
        if info.cls is MetricValues:
            return
        for f in info.fields:
            if not f.required:
                m.pop(f.encode_name, None)

    _walk(out, cls, "", strip)
    return out


def with_defaults(payload: dict[str, Any], cls: type[Any]) -> dict[str, Any]:
    """A copy with every absent optional field at the value the contract gives it."""
    out = copy.deepcopy(payload)

    def fill(m: dict[str, Any], info: Any, path: str) -> None:
        if info.cls is MetricValues:
            return
        for f in info.fields:
            if not f.required and f.encode_name not in m:
                if f.default is msgspec.NODEFAULT and f.default_factory is msgspec.NODEFAULT:
                    continue  # defaults to UNSET: absent, and written back absent
                default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
                m[f.encode_name] = default.value if hasattr(default, "value") else default

    _walk(out, cls, "", fill)
    return out


def restamp(payload: dict[str, Any], now: float) -> dict[str, Any]:
    """The same message as if sent at ``now``: every timestamp moves by the same amount."""
    out = copy.deepcopy(payload)
    shift = now - out["ts"]
    out["ts"] = now
    for pod in out.get("pods", ()):
        pod["last_seen"] += shift
    return out


def counted(running: Any, family: str) -> dict[str, float]:
    """A running service's non-zero counts of ``family`` (``gpuscale_messages_rejected``,
    ``gpuscale_messages_unknown_fields``), keyed by their ``field`` or ``reason`` label."""
    return {
        s.labels.get("field") or s.labels.get("reason", ""): s.value
        for metric in running.ctx.metrics.registry.collect()
        if metric.name == family
        for s in metric.samples
        if s.name.endswith("_total") and s.value
    }
