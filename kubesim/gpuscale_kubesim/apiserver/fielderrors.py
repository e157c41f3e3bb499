"""Field-level validation errors, worded as apimachinery's ``field.Error``. Pure.

A validator returns a list of :class:`FieldError`; :func:`invalid_error`
turns them into the 422 ``Invalid`` Status the API server answers with
(``Deployment.apps "web" is invalid: spec.selector: Required value``, one
``cause`` per error with its ``field`` and ``reason``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Final

from gpuscale_kubesim.apiserver.errors import ApiError


class _Omit:
    def __repr__(self) -> str:
        return "<omitted>"


OMIT: Final = _Omit()  # a bad value that is not shown (field.omitValue)


@dataclass(frozen=True)
class GoLiteral:
    """A bad value Go prints with ``%#v`` (``0x0``, ``map[string]string{"app":"x"}``), shown as is."""

    text: str

    @classmethod
    def string_map(cls, value: dict[str, str]) -> GoLiteral:
        inner = ", ".join(f"{json.dumps(k)}:{json.dumps(v)}" for k, v in sorted(value.items()))
        return cls(f"map[string]string{{{inner}}}")


# ErrorType -> its canonical words (field.ErrorType.String()).
_WORDS: Final = {
    "FieldValueNotFound": "Not found",
    "FieldValueRequired": "Required value",
    "FieldValueDuplicate": "Duplicate value",
    "FieldValueInvalid": "Invalid value",
    "FieldValueNotSupported": "Unsupported value",
    "FieldValueForbidden": "Forbidden",
    "FieldValueTooLong": "Too long",
    "FieldValueTooMany": "Too many",
    "InternalError": "Internal error",
    "FieldValueTypeInvalid": "Invalid value",
}
# Types whose body never shows the value.
_NO_VALUE: Final = frozenset(
    {"FieldValueRequired", "FieldValueForbidden", "FieldValueTooLong", "InternalError"}
)


def go_value(value: Any) -> str:
    """A value as Go's ``%v``/``%q`` prints it in a field error."""
    if value is None:
        return "null"
    if isinstance(value, GoLiteral):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value) and abs(value) < 1e21:
            return str(int(value))
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)


@dataclass(frozen=True)
class FieldError:
    type: str
    field: str
    bad_value: Any = OMIT
    detail: str = ""

    def body(self) -> str:
        """The message without the field (a Status cause's ``message``)."""
        words = _WORDS[self.type]
        text = (
            words
            if self.type in _NO_VALUE or self.bad_value is OMIT
            else f"{words}: {go_value(self.bad_value)}"
        )
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"

    def cause(self) -> dict[str, str]:
        return {"reason": self.type, "message": self.body(), "field": self.field}


def required(field: str, detail: str = "") -> FieldError:
    return FieldError("FieldValueRequired", field, "", detail)


def invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueInvalid", field, value, detail)


def type_invalid(field: str, value: Any, detail: str) -> FieldError:
    return FieldError("FieldValueTypeInvalid", field, value, detail)


def not_supported(field: str, value: Any, valid: list[str]) -> FieldError:
    detail = "supported values: " + ", ".join(json.dumps(v) for v in valid) if valid else ""
    return FieldError("FieldValueNotSupported", field, value, detail)


def forbidden(field: str, detail: str) -> FieldError:
    return FieldError("FieldValueForbidden", field, "", detail)


def duplicate(field: str, value: Any) -> FieldError:
    return FieldError("FieldValueDuplicate", field, value)


def too_long(field: str, value: Any, max_length: int) -> FieldError:
    return FieldError("FieldValueTooLong", field, value, f"may not be more than {max_length} bytes")


def too_long_schema(field: str, value: Any, max_length: int) -> FieldError:
    """A schema's maxLength (field.TooLongMaxLength)."""
    return FieldError("FieldValueTooLong", field, value, f"may not be longer than {max_length}")


def too_many(field: str, actual: int, max_items: int) -> FieldError:
    return FieldError("FieldValueTooMany", field, actual, f"must have at most {max_items} items")


def aggregate(errors: list[FieldError]) -> str:
    """utilerrors.NewAggregate(...).Error(): one message, or ``[a, b]``, duplicates dropped."""
    seen: list[str] = []
    for err in errors:
        text = str(err)
        if text not in seen:
            seen.append(text)
    return seen[0] if len(seen) == 1 else "[" + ", ".join(seen) + "]"


def qualified_kind(kind: str, group: str) -> str:
    """schema.GroupKind.String(): ``Deployment.apps``, ``Pod``."""
    return f"{kind}.{group}" if group else kind


def invalid_error(kind: str, group: str, name: str, errors: list[FieldError]) -> ApiError:
    """errors.NewInvalid: 422 with every error as a cause."""
    details: dict[str, Any] = {"name": name, "kind": kind, "causes": [e.cause() for e in errors]}
    if group:
        details["group"] = group
    who = f'{qualified_kind(kind, group)} "{name}" is invalid'
    message = f"{who}: {aggregate(errors)}" if errors else who
    return ApiError(422, message, "Invalid", details)
