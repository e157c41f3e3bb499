"""gpuscale.kube's pure parts: error translation, 403 parsing, backoff."""

from __future__ import annotations

import asyncio
import json

import pytest

from gpuscale.kube import (
    BadRequest,
    Conflict,
    Forbidden,
    KubeError,
    NotFound,
    ScaleTargetRef,
    ServerError,
    Throttled,
    Unauthorized,
    Unreachable,
    backoff_delay,
    error_from_response,
    format_micro_time,
    parse_forbidden,
    parse_time,
    retry_with_backoff,
)

FORBIDDEN_MESSAGE = (
    'deployments.apps "web" is forbidden: User "system:serviceaccount:gpuscale:actuator" '
    'cannot patch resource "deployments/scale" in API group "apps" in the namespace "default"'
)


def status_body(code: int, message: str, reason: str = "") -> str:
    status = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message}
    return json.dumps({**status, "reason": reason, "code": code})


@pytest.mark.parametrize(
    ("status", "cls", "retryable"),
    [
        (409, Conflict, False),
        (404, NotFound, False),
        (403, Forbidden, False),
        (401, Unauthorized, False),
        (422, BadRequest, False),
        (400, BadRequest, False),
        (429, Throttled, True),
        (500, ServerError, True),
        (503, ServerError, True),
    ],
)
def test_status_codes_map_to_error_classes(status: int, cls: type[KubeError], retryable: bool) -> None:
    err = error_from_response(status, status_body(status, "nope", "Reason"), {})
    assert type(err) is cls
    assert err.retryable is retryable
    assert err.status == status
    assert err.message == "nope"


def test_a_non_json_body_still_gives_a_message() -> None:
    err = error_from_response(502, "<html>bad gateway</html>", {})
    assert isinstance(err, ServerError)
    assert "bad gateway" in err.message


@pytest.mark.parametrize(
    ("headers", "expected"),
    [({"Retry-After": "3"}, 3.0), ({"retry-after": "0.5"}, 0.5), ({}, None), ({"Retry-After": "soon"}, None)],
)
def test_throttled_reads_retry_after(headers: dict[str, str], expected: float | None) -> None:
    err = error_from_response(429, status_body(429, "slow down"), headers)
    assert isinstance(err, Throttled)
    assert err.retry_after_s == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (FORBIDDEN_MESSAGE, ("patch", "deployments/scale", "apps")),
        (
            'leases.coordination.k8s.io is forbidden: User "x" cannot create resource "leases" in API group '
            '"coordination.k8s.io" in the namespace "default"',
            ("create", "leases", "coordination.k8s.io"),
        ),
        (
            'events is forbidden: User "x" cannot create resource "events" in API group "" in the namespace "a"',
            ("create", "events", ""),
        ),
        ("forbidden for some other reason", ("", "", "")),
    ],
)
def test_parse_forbidden(message: str, expected: tuple[str, str, str]) -> None:
    assert parse_forbidden(message) == expected


def test_forbidden_names_the_missing_permission() -> None:
    err = error_from_response(403, status_body(403, FORBIDDEN_MESSAGE, "Forbidden"), {})
    assert isinstance(err, Forbidden)
    assert err.missing_permission == "patch deployments/scale in apps"
    core = Forbidden(403, 'cannot get resource "pods" in API group "" in the namespace "a"')
    assert core.missing_permission == "get pods in core"


@pytest.mark.parametrize(
    ("attempt", "rand", "expected"),
    [(0, 0.999, 0.2 * 0.999), (0, 0.0, 0.0), (1, 0.5, 0.2), (3, 1.0, 1.6), (10, 1.0, 5.0), (1000, 0.5, 2.5)],
)
def test_backoff_is_full_jitter_capped(attempt: int, rand: float, expected: float) -> None:
    assert backoff_delay(attempt, 0.2, 5.0, rand) == pytest.approx(expected)


async def test_retry_with_backoff_retries_only_retryable_errors() -> None:
    calls: list[int] = []
    waits: list[float] = []

    async def flaky() -> str:
        calls.append(1)
        if len(calls) <= 3:
            raise Throttled(429, "slow down", retry_after_s=0.01)
        return "ok"

    result = await retry_with_backoff(
        flaky, attempts=5, base_s=0.001, cap_s=0.01, on_retry=lambda _e, _n, d: waits.append(d)
    )
    assert result == "ok"
    assert len(calls) == 4
    assert len(waits) == 3
    assert all(w >= 0.01 for w in waits)

    async def conflict() -> str:
        calls.append(1)
        raise Conflict(409, "changed")

    calls.clear()
    with pytest.raises(Conflict):
        await retry_with_backoff(conflict, attempts=5, base_s=0.001)
    assert len(calls) == 1


async def test_retry_with_backoff_gives_up_after_attempts_and_on_stop() -> None:
    calls: list[int] = []

    async def down() -> None:
        calls.append(1)
        raise Unreachable("connection refused")

    with pytest.raises(Unreachable):
        await retry_with_backoff(down, attempts=3, base_s=0.001, cap_s=0.002)
    assert len(calls) == 3

    calls.clear()
    stop = asyncio.Event()
    stop.set()
    with pytest.raises(Unreachable):
        await retry_with_backoff(down, attempts=100, base_s=10.0, cap_s=10.0, stop=stop)
    assert len(calls) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T11:30:44.123456Z", 1795260644.123456),
        ("2026-11-21T11:30:44Z", 1795260644.0),
        ("2026-11-21T12:30:44+01:00", 1795260644.0),
        ("", None),
        (None, None),
        ("yesterday", None),
    ],
)
def test_parse_time(text: str | None, expected: float | None) -> None:
    got = parse_time(text)
    if expected is None:
        assert got is None
    else:
        assert got == pytest.approx(expected)


def test_micro_time_round_trips() -> None:
    assert format_micro_time(1795260644.5) == "2026-11-21T11:30:44.500000Z"
    assert parse_time(format_micro_time(1795260644.25)) == pytest.approx(1795260644.25)


def test_scale_target_ref_splits_group_and_version() -> None:
    assert ScaleTargetRef("apps/v1", "Deployment", "a", "ns").group == "apps"
    core = ScaleTargetRef("v1", "ReplicationController", "a", "ns")
    assert (core.group, core.version) == ("", "v1")
