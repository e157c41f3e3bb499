"""Kubernetes ``Status`` error bodies, as the API server writes them."""

from __future__ import annotations

from typing import Any

_REASONS = {
    400: "BadRequest",
    401: "Unauthorized",
    403: "Forbidden",
    404: "NotFound",
    405: "MethodNotAllowed",
    406: "NotAcceptable",
    409: "Conflict",
    410: "Expired",
    415: "UnsupportedMediaType",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


def reason_for(code: int) -> str:
    return _REASONS.get(code, "Unknown")


class ApiError(Exception):
    """An API failure carried to the HTTP layer as a Status body."""

    def __init__(
        self, code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.reason = reason or reason_for(code)
        self.details = details

    def status(self) -> dict[str, Any]:
        return status_body(self.code, self.message, self.reason, self.details)


def status_body(
    code: int, message: str, reason: str | None = None, details: dict[str, Any] | None = None
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason or reason_for(code),
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


def _details(group_resource: str, name: str) -> dict[str, Any]:
    plural, _, group = group_resource.partition(".")
    details: dict[str, Any] = {"name": name, "kind": plural}
    if group:
        details["group"] = group
    return details


def not_found(group_resource: str, name: str) -> ApiError:
    return ApiError(404, f'{group_resource} "{name}" not found', "NotFound", _details(group_resource, name))


def already_exists(group_resource: str, name: str) -> ApiError:
    return ApiError(
        409, f'{group_resource} "{name}" already exists', "AlreadyExists", _details(group_resource, name)
    )


def conflict(group_resource: str, name: str) -> ApiError:
    return ApiError(
        409,
        f'Operation cannot be fulfilled on {group_resource} "{name}": the object has been modified; '
        "please apply your changes to the latest version and try again",
        "Conflict",
        _details(group_resource, name),
    )


def invalid(kind: str, group: str, name: str, field: str, detail: str) -> ApiError:
    details: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "causes": [{"reason": "FieldValueInvalid", "message": f"Invalid value: {detail}", "field": field}],
    }
    if group:
        details["group"] = group
    return ApiError(422, f'{kind} "{name}" is invalid: {field}: Invalid value: {detail}', "Invalid", details)


def bad_request(message: str) -> ApiError:
    return ApiError(400, message, "BadRequest")


def gone(message: str) -> ApiError:
    return ApiError(410, message, "Expired")
