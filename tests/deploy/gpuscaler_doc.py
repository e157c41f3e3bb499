"""The field tables of docs/GPUSCALER.md, made from the GPUScaler CRD's schema.

The CRD's descriptions are the reference (``kubectl explain`` shows the same
text); the document carries them as tables between marker comments, and
tests/deploy/test_deploy_gpuscaler_doc.py fails when they drift. To rewrite
the tables after changing the CRD:

    .venv/bin/python -m tests.deploy.gpuscaler_doc
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "deploy" / "cluster" / "crd-gpuscaler.yaml"
DOC = REPO / "docs" / "GPUSCALER.md"
MARKERS = {
    "spec": ("<!-- spec-fields:begin (generated from the CRD) -->", "<!-- spec-fields:end -->"),
    "status": ("<!-- status-fields:begin (generated from the CRD) -->", "<!-- status-fields:end -->"),
}


def crd_schema() -> dict[str, Any]:
    crd = yaml.safe_load(CRD_FILE.read_text())
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def fields(schema: dict[str, Any], path: str) -> list[tuple[str, dict[str, Any], bool]]:
    """(path, schema, required) of every field below ``schema``, depth first."""
    out: list[tuple[str, dict[str, Any], bool]] = []
    required = set(schema.get("required") or ())
    for name, sub in (schema.get("properties") or {}).items():
        here = f"{path}.{name}"
        out.append((here, sub, name in required))
        if sub.get("type") == "array" and isinstance(sub.get("items"), dict):
            out.extend(fields(sub["items"], f"{here}[]"))
        elif sub.get("type") == "object":
            out.extend(fields(sub, here))
    return out


def _type(schema: dict[str, Any]) -> str:
    kind = str(schema.get("type", "object"))
    if kind == "array":
        return f"list of {schema.get('items', {}).get('type', 'object')}"
    if schema.get("format") == "date-time":
        return "time (RFC 3339)"
    return kind + (", nullable" if schema.get("nullable") else "")


def _targeted_rules(schema: dict[str, Any], path: str) -> dict[str, list[str]]:
    """Rules declared on an object that name one of its fields (``fieldPath``), by that field's path."""
    out: dict[str, list[str]] = {}
    for where, sub in [(path, schema)] + [(p, s) for p, s, _ in fields(schema, path)]:
        for rule in sub.get("x-kubernetes-validations") or ():
            if rule.get("fieldPath") and rule.get("messageExpression"):
                text = re.sub(
                    r"'\s*\+\s*string\(self\.([A-Za-z.]+)\)\s*\+\s*'", r"<\1>", rule["messageExpression"]
                )
                out.setdefault(where + rule["fieldPath"], []).append(text.strip("'"))
    return out


def _rules(schema: dict[str, Any], targeted: list[str]) -> list[str]:
    out: list[str] = []
    if "enum" in schema:
        out.append("one of " + ", ".join(f"`{v}`" for v in schema["enum"]))
    low = schema.get("minimum")
    if low is not None:
        out.append(f"> {_number(low)}" if schema.get("exclusiveMinimum") else f"≥ {_number(low)}")
    if schema.get("maximum") is not None:
        out.append(f"≤ {_number(schema['maximum'])}")
    if schema.get("minLength"):
        out.append(f"at least {schema['minLength']} characters")
    if schema.get("maxLength"):
        out.append(f"at most {schema['maxLength']} characters")
    if schema.get("minItems"):
        out.append(f"at least {schema['minItems']} item(s)")
    if schema.get("maxItems"):
        out.append(f"at most {schema['maxItems']} items")
    if schema.get("pattern"):
        out.append(f"matches `{schema['pattern']}`")
    for rule in schema.get("x-kubernetes-validations") or ():
        if rule.get("message"):
            out.append(str(rule["message"]))
    return out + targeted


def _number(value: float) -> str:
    """A bound as written: whole numbers in full (2147483647), the rest short (1e+15)."""
    return str(value) if isinstance(value, int) else f"{value:g}"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def table(part: str) -> str:
    schema = crd_schema()["properties"][part]
    targeted = _targeted_rules(schema, f".{part}")
    rows = [
        "| field | type | default | rules | meaning |",
        "|---|---|---|---|---|",
    ]
    for path, sub, required in fields(schema, f".{part}"):
        default = sub.get("default")
        shown_default = (
            "required"
            if required
            else "—"
            if default is None
            else f"`{default if isinstance(default, str) else json.dumps(default)}`"
        )
        rows.append(
            f"| `{path.lstrip('.')}` | {_type(sub)} | {shown_default} | "
            f"{_cell('; '.join(_rules(sub, targeted.get(path, []))))} | {_cell(str(sub.get('description', '')))} |"
        )
    return "\n".join(rows)


def rewrite(text: str) -> str:
    for part, (begin, end) in MARKERS.items():
        start, stop = text.index(begin) + len(begin), text.index(end)
        text = text[:start] + "\n" + table(part) + "\n" + text[stop:]
    return text


def section(text: str, part: str) -> str:
    begin, end = MARKERS[part]
    return text[text.index(begin) + len(begin) : text.index(end)].strip()


if __name__ == "__main__":
    DOC.write_text(rewrite(DOC.read_text()))
