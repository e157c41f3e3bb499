"""What the code sends matches the published AsyncAPI document, and the document stays honest."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest

from gpuscale import codec
from gpuscale.wire import ACTION_OUTCOMES, METRIC_NAMES

from ..contract import _document, validate_payload
from .wire_factories import action, batch, decision, gpu, metrics

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
]


@pytest.mark.parametrize(("name", "message"), PRODUCED)
def test_encoded_messages_validate_against_asyncapi(name: str, message: Any) -> None:
    # Through the codec, as it goes on the wire.
    validate_payload(name, codec.decode_raw(codec.encode(message)))


def test_schema_rejects_what_the_decoder_rejects() -> None:
    bad = batch().to_wire()
    bad["gpus"][0]["util"] = 140.0
    with pytest.raises(jsonschema.ValidationError):
        validate_payload("SampleBatch", bad)


def test_enumerations_match_the_code() -> None:
    schemas = _document()["components"]["schemas"]
    assert tuple(schemas["MetricName"]["enum"]) == METRIC_NAMES
    assert tuple(schemas["Action"]["properties"]["outcome"]["enum"]) == ACTION_OUTCOMES


def test_every_wire_field_is_documented() -> None:
    schemas = _document()["components"]["schemas"]
    for name, message in (
        ("SampleBatch", batch()),
        ("WorkloadMetrics", metrics()),
        ("Decision", decision()),
        ("Action", action()),
    ):
        assert set(message.to_wire()) <= set(schemas[name]["properties"]), name
