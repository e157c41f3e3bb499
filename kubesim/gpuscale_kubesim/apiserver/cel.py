"""CRD validation rules (``x-kubernetes-validations``) in CEL, as the API server runs them.

Each rule is evaluated with ``self`` bound to the value of the schema node
that declares it (and ``oldSelf`` to its previous value on an update: a rule
that mentions ``oldSelf`` is a transition rule and runs only when there is
an old value). A rule that is false gives ``<path>: Invalid value:
"<type>": <message>`` (or the rule's ``reason``); one that fails to compile
makes the CRD itself invalid. The CEL engine is the ``common-expression-
language`` package (Rust's cel-interpreter).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import cel as celengine

from gpuscale_kubesim.apiserver import fielderrors as fe
from gpuscale_kubesim.apiserver.fielderrors import FieldError
from gpuscale_kubesim.apiserver.structural import child_path

Obj = dict[str, Any]
RULES = "x-kubernetes-validations"
_REASONS = {
    "FieldValueInvalid": "FieldValueInvalid",
    "FieldValueForbidden": "FieldValueForbidden",
    "FieldValueRequired": "FieldValueRequired",
    "FieldValueDuplicate": "FieldValueDuplicate",
}


class _Absent:
    pass


ABSENT = _Absent()  # no old value: transition rules are skipped


@dataclass(frozen=True)
class CompileError:
    path: str  # where in the CRD schema the rule sits
    rule: str
    message: str


@lru_cache(maxsize=1024)
def _program(rule: str) -> Any:
    return celengine.compile(rule)


def compile_errors(schema: Obj, path: str) -> list[CompileError]:
    """Rules that do not compile, anywhere in ``schema`` (checked when a CRD is written)."""
    out: list[CompileError] = []
    for where, node in walk(schema, path):
        for i, rule in enumerate(node.get(RULES) or []):
            text = rule.get("rule") if isinstance(rule, dict) else None
            if not isinstance(text, str) or not text.strip():
                out.append(CompileError(f"{where}.{RULES}[{i}].rule", str(text), "Required value"))
                continue
            try:
                _program(text)
            except (ValueError, RuntimeError) as e:
                out.append(CompileError(f"{where}.{RULES}[{i}].rule", text, f"compilation failed: {e}"))
    return out


def walk(schema: Obj, path: str) -> Iterator[tuple[str, Obj]]:
    """Every schema node, with its path in the CRD (``properties[spec].properties[minReplicas]``)."""
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        if isinstance(sub, dict):
            yield from walk(sub, f"{path}.properties[{key}]")
    items = schema.get("items")
    if isinstance(items, dict):
        yield from walk(items, f"{path}.items")
    additional = schema.get("additionalProperties")
    if isinstance(additional, dict):
        yield from walk(additional, f"{path}.additionalProperties")


def validate(schema: Obj, value: Any, old: Any = ABSENT, path: str = "") -> list[FieldError]:
    """Every rule under ``schema`` that ``value`` breaks."""
    errors: list[FieldError] = []
    _validate(schema, value, old, path, errors)
    return errors


def _validate(schema: Obj, value: Any, old: Any, path: str, errors: list[FieldError]) -> None:
    if value is None:
        return
    rules = schema.get(RULES) or []
    if rules:
        self_value = to_cel(schema, value)
        old_value = ABSENT if old is ABSENT or old is None else to_cel(schema, old)
        # Validation ratcheting (KEP-4008, on by default since Kubernetes 1.30): on an
        # update, a value that did not change passes the rules it broke before (an
        # object stored before a CRD upgrade added a rule can still get its status written).
        unchanged = old is not ABSENT and old is not None and old == value
        for rule in rules:
            _check(rule, schema, self_value, old_value, path, errors, unchanged)
    if isinstance(value, dict):
        props: Obj = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        old_map = old if isinstance(old, dict) else {}
        for key, item in value.items():
            sub = props.get(key) or (additional if isinstance(additional, dict) else None)
            if isinstance(sub, dict):
                _validate(sub, item, old_map.get(key, ABSENT), child_path(path, key), errors)
    elif isinstance(value, list):
        items = schema.get("items")
        if isinstance(items, dict):
            # Old items are matched only for list-type map (by key); other lists have no old element.
            for i, item in enumerate(value):
                _validate(items, item, ABSENT, f"{path}[{i}]", errors)


def _check(
    rule: Any,
    schema: Obj,
    self_value: Any,
    old_value: Any,
    path: str,
    errors: list[FieldError],
    unchanged: bool = False,
) -> None:
    if not isinstance(rule, dict) or not isinstance(rule.get("rule"), str):
        return
    text = rule["rule"]
    transition = "oldSelf" in text
    if transition and old_value is ABSENT and not rule.get("optionalOldSelf"):
        return
    if unchanged and not transition:
        return
    variables: Obj = {"self": self_value}
    if transition:
        variables["oldSelf"] = None if old_value is ABSENT else old_value
    field_path = path
    if isinstance(rule.get("fieldPath"), str) and rule["fieldPath"]:
        field_path = (
            path + rule["fieldPath"]
            if rule["fieldPath"].startswith(("[", "."))
            else child_path(path, rule["fieldPath"])
        )
    kind = str(schema.get("type") or "object")
    try:
        ok = _program(text).execute(variables)
    except (ValueError, RuntimeError, TypeError, KeyError) as e:
        errors.append(fe.invalid(field_path, kind, f"rule evaluation error: {e}"))
        return
    if ok is True:
        return
    message = str(rule.get("message") or f"failed rule: {text}")
    if isinstance(rule.get("messageExpression"), str):
        try:
            custom = _program(rule["messageExpression"]).execute(variables)
        except (ValueError, RuntimeError, TypeError, KeyError):
            custom = None
        if isinstance(custom, str) and custom.strip():
            message = custom
    reason = _REASONS.get(str(rule.get("reason") or ""), "FieldValueInvalid")
    if reason == "FieldValueInvalid":
        errors.append(fe.invalid(field_path, kind, message))
    elif reason == "FieldValueDuplicate":
        errors.append(fe.FieldError(reason, field_path, kind, message))
    else:
        errors.append(fe.FieldError(reason, field_path, "", message))


def to_cel(schema: Obj, value: Any) -> Any:
    """A JSON value as CEL sees it under ``schema`` (``number`` fields are doubles)."""
    kind = schema.get("type")
    if kind == "number" and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dict):
        props: Obj = schema.get("properties") or {}
        additional = schema.get("additionalProperties")
        out: Obj = {}
        for key, item in value.items():
            sub = props.get(key) or (additional if isinstance(additional, dict) else {})
            out[key] = to_cel(sub, item)
        return out
    if isinstance(value, list):
        items = schema.get("items")
        sub_schema = items if isinstance(items, dict) else {}
        return [to_cel(sub_schema, item) for item in value]
    return value
