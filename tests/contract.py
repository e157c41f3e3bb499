"""Validate payloads against docs/asyncapi.yaml; any test that captures real traffic can use it."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

ASYNCAPI = Path(__file__).resolve().parents[1] / "docs" / "asyncapi.yaml"


@cache
def _document() -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load(ASYNCAPI.read_text())
    return doc


def validate_payload(message_name: str, payload: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError unless ``payload`` matches the named message."""
    doc = _document()
    schema = {"$ref": f"#/components/schemas/{message_name}", "components": doc["components"]}
    jsonschema.validate(payload, schema, cls=jsonschema.Draft202012Validator)


def message_name_for_subject(subject: str) -> str:
    family = subject.split(".")[2]
    return {
        "samples": "SampleBatch",
        "metrics": "WorkloadMetrics",
        "decisions": "Decision",
        "actions": "Action",
    }[family]
