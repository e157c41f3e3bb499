"""docs/asyncapi.yaml and gpuscale.wire say the same thing, field by field and
limit by limit; what the code sends and the golden v1 messages match the document."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import jsonschema
import msgpack
import msgspec
import pytest

from gpuscale import codec
from gpuscale.wire import ACTION_OUTCOMES, MESSAGE_TYPES, WIRE_VERSION, GpuSample, MetricValues

from ..contract import _document, validate_payload
from .wire_factories import action, batch, decision, gpu, metrics, window_request

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "v1"
_FINITE = sys.float_info.max

PRODUCED = [
    pytest.param("SampleBatch", batch(), id="samples"),
    pytest.param(
        "SampleBatch",
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
                    owners=(),
                ),
            )
        ),
        id="samples-lost-gpu",
    ),
    pytest.param("WorkloadMetrics", metrics(), id="metrics"),
    pytest.param("Decision", decision(), id="decisions"),
    pytest.param("Action", action(), id="actions"),
    pytest.param("Action", action(outcome="failed", replicas_after=None, error="boom"), id="actions-failed"),
    pytest.param("WindowRequest", window_request(), id="windows"),
    pytest.param("WindowRequest", window_request(recent_s=msgspec.UNSET), id="windows-no-recent"),
]


@pytest.mark.parametrize(("name", "message"), PRODUCED)
def test_encoded_messages_validate_against_asyncapi(name: str, message: Any) -> None:
    # Through the codec, as it goes on the wire; read back by the reference decoder.
    validate_payload(name, msgpack.unpackb(codec.encode(message)))


GOLDEN_FILES = {
    "samples.msgpack": "SampleBatch",
    "aggregator-wsamples.msgpack": "SampleBatch",
    "metrics.msgpack": "WorkloadMetrics",
    "decisions.msgpack": "Decision",
    "actions.msgpack": "Action",
    "actions-failed.msgpack": "Action",
    "windows.msgpack": "WindowRequest",
}


@pytest.mark.parametrize(("file", "name"), list(GOLDEN_FILES.items()), ids=list(GOLDEN_FILES))
def test_golden_messages_validate_against_asyncapi(file: str, name: str) -> None:
    validate_payload(name, msgpack.unpackb((GOLDEN / file).read_bytes()))


def test_schema_rejects_what_the_decoder_rejects() -> None:
    bad = msgpack.unpackb(codec.encode(batch()))
    bad["gpus"][0]["util"] = 140.0
    with pytest.raises(jsonschema.ValidationError):
        validate_payload("SampleBatch", bad)


def test_schema_accepts_what_a_newer_producer_may_add() -> None:
    newer = msgpack.unpackb(codec.encode(metrics()))
    newer["averages"]["time_to_first_token_p90_s"] = 0.42
    newer["queue_model"] = {"kind": "fifo"}
    validate_payload("WorkloadMetrics", newer)


def test_outcomes_are_the_documented_enumeration() -> None:
    schemas = _document()["components"]["schemas"]
    assert tuple(schemas["Action"]["properties"]["outcome"]["enum"]) == ACTION_OUTCOMES


# --- the document against the Structs ------------------------------------------------


def _resolve(prop: dict[str, Any], schemas: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """A property with a scalar $ref merged in; the name when it refers to an object schema."""
    ref = prop.get("$ref")
    if ref is None:
        return prop, None
    name = ref.rsplit("/", 1)[-1]
    target = schemas[name]
    if "properties" in target:
        return prop, name
    return {**target, **{k: v for k, v in prop.items() if k != "$ref"}}, None


def _expected(t: Any) -> dict[str, Any]:
    """What the JSON Schema of a msgspec type must say (the keys it must carry)."""
    insp = msgspec.inspect
    if isinstance(t, insp.Metadata):  # a description beside the limits
        return _expected(t.type)
    if isinstance(t, insp.UnionType):
        structs = [m for m in t.types if isinstance(m, insp.StructType)]
        if structs:  # an optional nested shape: documented as oneOf [its schema, null]
            return {"ref": structs[0].cls.__name__, "nullable": True}
        out: dict[str, Any] = {"type": set()}
        for member in t.types:
            part = _expected(member)
            out["type"] |= part.pop("type")
            out.update(part)
        return out
    if isinstance(t, insp.NoneType):
        return {"type": {"null"}}
    if isinstance(t, insp.FloatType):
        out = {"type": {"number"}, "minimum": t.ge}
        if t.le is not None and t.le != _FINITE:  # the largest double: "finite", no bound to write
            out["maximum"] = t.le
        return out
    if isinstance(t, insp.IntType):
        return {"type": {"integer"}, "minimum": t.ge}
    if isinstance(t, insp.StrType):
        return {"type": {"string"}, "minLength": t.min_length, "maxLength": t.max_length}
    if isinstance(t, insp.BoolType):
        return {"type": {"boolean"}}
    if isinstance(t, insp.EnumType):
        return {"type": {"string"}, "enum": [e.value for e in t.cls]}
    if isinstance(t, insp.StructType):
        return {"ref": t.cls.__name__}
    if isinstance(t, insp.ListType | insp.VarTupleType):
        out = {"type": {"array"}, "items": _expected(t.item_type).get("ref")}
        if t.max_length is not None:
            out["maxItems"] = t.max_length
        return out
    if isinstance(t, insp.DictType):
        return {"type": {"object"}}
    raise AssertionError(f"no schema rule for {t!r}")


def _documented(prop: dict[str, Any], schemas: dict[str, Any]) -> dict[str, Any]:
    choices = prop.get("oneOf")
    if choices is not None:
        refs = [_resolve(c, schemas)[1] for c in choices if "$ref" in c]
        nulls = [c for c in choices if c.get("type") == "null"]
        if len(refs) == 1 and len(nulls) == 1 and len(choices) == 2:
            return {"ref": refs[0], "nullable": True}
        return {"oneOf": choices}
    resolved, ref = _resolve(prop, schemas)
    if ref is not None:
        return {"ref": ref}
    types = resolved.get("type")
    out: dict[str, Any] = {"type": set(types) if isinstance(types, list) else {types}}
    for key in ("minimum", "maximum", "minLength", "maxLength", "maxItems", "enum"):
        if key in resolved:
            out[key] = resolved[key]
    if "items" in resolved:
        out["items"] = _resolve(resolved["items"], schemas)[1]
    return out


def _structs() -> list[type[msgspec.Struct]]:
    seen: list[type[msgspec.Struct]] = []
    todo: list[Any] = [msgspec.inspect.type_info(cls) for cls in MESSAGE_TYPES]
    while todo:
        info = todo.pop()
        if isinstance(info, msgspec.inspect.StructType):
            if info.cls in seen:
                continue
            seen.append(info.cls)
            todo.extend(f.type for f in info.fields)
        elif isinstance(info, msgspec.inspect.UnionType):
            todo.extend(info.types)
        elif isinstance(info, msgspec.inspect.ListType | msgspec.inspect.VarTupleType):
            todo.append(info.item_type)
    return seen


def test_every_struct_is_documented_exactly() -> None:
    schemas = _document()["components"]["schemas"]
    structs = _structs()
    assert {GpuSample, MetricValues} <= set(structs)  # the walk reaches the nested shapes
    problems: list[str] = []
    for cls in structs:
        info = msgspec.inspect.type_info(cls)
        assert isinstance(info, msgspec.inspect.StructType)
        schema = schemas.get(cls.__name__)
        if schema is None:
            problems.append(f"{cls.__name__}: not in docs/asyncapi.yaml")
            continue
        fields = {f.encode_name: f for f in info.fields}
        tag = {info.tag_field} if info.tag_field else set()
        documented = set(schema["properties"])
        if documented != set(fields) | tag:
            problems.append(
                f"{cls.__name__}: fields {sorted(set(fields) | tag)}, documented {sorted(documented)}"
            )
        required = {name for name, f in fields.items() if f.required} | tag
        if set(schema.get("required", ())) != required:
            problems.append(
                f"{cls.__name__}: required {sorted(required)}, documented {sorted(schema.get('required', ()))}"
            )
        if tag:
            version = _resolve(schema["properties"][info.tag_field], schemas)[0]
            if version.get("const") != WIRE_VERSION or info.tag != WIRE_VERSION:
                problems.append(f"{cls.__name__}: v is not the constant {WIRE_VERSION}")
        for name, f in fields.items():
            if name not in schema["properties"]:
                continue
            want = {k: v for k, v in _expected(f.type).items() if v is not None}
            got = _documented(schema["properties"][name], schemas)
            if want != got:
                problems.append(f"{cls.__name__}.{name}: code says {want}, document says {got}")
    assert problems == []


def test_the_comparison_notices_a_drift() -> None:
    """The test above must be able to fail: a changed limit is a difference."""
    schemas = _document()["components"]["schemas"]
    prop = {**schemas["GpuSample"]["properties"]["index"], "minimum": 1}
    util = next(f for f in msgspec.inspect.type_info(GpuSample).fields if f.name == "index")  # type: ignore[union-attr]
    assert _documented(prop, schemas) != {k: v for k, v in _expected(util.type).items() if v is not None}


def test_every_subject_the_code_builds_is_a_documented_channel() -> None:
    """subjects.py builds the names; the document lists the same channels, each
    with the payload the code sends on it."""
    from gpuscale import subjects

    key = subjects.WorkloadKey("{namespace}", "{kind}", "{name}")
    built = {
        subjects.samples("{node}"): "SampleBatch",
        subjects.metrics(key): "WorkloadMetrics",
        subjects.decisions(key): "Decision",
        subjects.actions(key): "Action",
        subjects.advice(key): "Decision",
        subjects.windows(key): "WindowRequest",
        f"$KV.{subjects.DESIRED_BUCKET}.{subjects.desired_key(key)}": "Decision",
    }
    channels = _document()["channels"]
    messages = _document()["components"]["messages"]

    def payload(channel: dict[str, Any]) -> str:
        # The channel's message (advice has its own, with a Decision's payload) names the schema.
        message = messages[str(channel["publish"]["message"]["$ref"]).rsplit("/", 1)[-1]]
        return str(message["payload"]["$ref"]).rsplit("/", 1)[-1]

    documented = {name: payload(channel) for name, channel in channels.items()}
    unescaped = {
        name.replace("~7B", "{").replace("~7D", "}").replace("=7B", "{").replace("=7D", "}"): kind
        for name, kind in built.items()
    }
    assert unescaped == documented
