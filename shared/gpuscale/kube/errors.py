"""What a Kubernetes API call can go wrong with: one class per thing a caller does
differently (re-read on :class:`Conflict`, back off on :class:`Throttled`/
:class:`ServerError`/:class:`Unreachable`, report a missing RBAC permission on
:class:`Forbidden`)."""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Mapping


class KubeError(Exception):
    """An API call failed. ``retryable`` says whether backing off can help."""

    retryable: bool = False

    def __init__(self, status: int, message: str, *, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.message = message
        self.reason = reason


class Conflict(KubeError):
    """409: the object changed since we read it (resourceVersion), or exists."""


class NotFound(KubeError):
    """404: the object (or the API serving it) does not exist."""


class Gone(KubeError):
    """410: a watch's resourceVersion is older than the server keeps: list again."""


class Unauthorized(KubeError):
    """401: bad or expired credentials."""


class BadRequest(KubeError):
    """Another 4xx (400, 422, ...): the request itself is wrong; retrying won't help."""


class Forbidden(KubeError):
    """403: RBAC says no. ``verb``/``resource``/``group`` name the missing permission."""

    def __init__(self, status: int, message: str, *, reason: str = "") -> None:
        super().__init__(status, message, reason=reason)
        self.verb, self.resource, self.group = parse_forbidden(message)

    @property
    def missing_permission(self) -> str:
        """``patch deployments/scale in apps``: what to add to the Role."""
        group = self.group if self.group else "core"
        return f"{self.verb or '?'} {self.resource or '?'} in {group}"


class Throttled(KubeError):
    """429: the API server (or its priority-and-fairness) asks us to slow down."""

    retryable = True

    def __init__(self, status: int, message: str, *, reason: str = "", retry_after_s: float | None = None):
        super().__init__(status, message, reason=reason)
        self.retry_after_s = retry_after_s


class ServerError(KubeError):
    """5xx: the API server failed; it may work on the next try."""

    retryable = True


class FieldsDropped(KubeError):
    """The write succeeded but the server dropped fields it does not know (its ``Warning``
    said ``unknown field "..."``): only raised where warnings are strict. ``fields`` names them."""

    def __init__(self, status: int, warnings: list[str]) -> None:
        super().__init__(status, "; ".join(warnings), reason="FieldsDropped")
        self.fields = [w.removeprefix("unknown field ").strip('"') for w in warnings]


class Unreachable(KubeError):
    """No HTTP answer at all: refused, reset, DNS, TLS or timeout."""

    retryable = True

    def __init__(self, message: str) -> None:
        super().__init__(0, message, reason="Unreachable")


_FORBIDDEN = re.compile(
    r'cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"'
)


def parse_forbidden(message: str) -> tuple[str, str, str]:
    """(verb, resource, group) from an API server's 403 Status message, or empties.

    The message reads: ``deployments.apps "web" is forbidden: User "x" cannot
    patch resource "deployments/scale" in API group "apps" in the namespace "default"``.
    """
    m = _FORBIDDEN.search(message)
    if not m:
        return "", "", ""
    return m.group("verb"), m.group("resource"), m.group("group")


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for key, value in headers.items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return None  # an HTTP date: rare from API servers; our own backoff applies
    return None


def error_from_response(status: int, body: str, headers: Mapping[str, str]) -> KubeError:
    """The KubeError for a non-2xx answer (``body`` is usually a v1 Status)."""
    message, reason = body.strip()[:500], ""
    with contextlib.suppress(ValueError):
        doc = json.loads(body)
        if isinstance(doc, dict):
            message = str(doc.get("message") or message)
            reason = str(doc.get("reason") or "")
    if status == 409:
        return Conflict(status, message, reason=reason)
    if status == 404:
        return NotFound(status, message, reason=reason)
    if status == 410:
        return Gone(status, message, reason=reason)
    if status == 403:
        return Forbidden(status, message, reason=reason)
    if status == 401:
        return Unauthorized(status, message, reason=reason)
    if status == 429:
        return Throttled(status, message, reason=reason, retry_after_s=_retry_after(headers))
    if status >= 500:
        return ServerError(status, message, reason=reason)
    return BadRequest(status, message, reason=reason)
