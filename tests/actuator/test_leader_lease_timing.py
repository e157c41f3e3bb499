"""gpuscale.leader's pure timing: who may take a lease, and what to write."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from gpuscale.kube import parse_time
from gpuscale.leader import LeaseRecord, lease_body, lease_from_object, may_acquire, release_body


def record(holder: str = "a", duration: float = 15.0, rv: str = "7", transitions: int = 2) -> LeaseRecord:
    return LeaseRecord(holder, duration, 1000.0, 1010.0, transitions, rv)


@dataclass(frozen=True)
class Case:
    name: str
    holder: str
    observed_at: float
    now: float
    may: bool


CASES = [
    Case("we hold it", "me", 0.0, 1.0, True),
    Case("free (released)", "", 0.0, 0.0, True),
    Case("other holder, fresh", "other", 100.0, 110.0, False),
    Case("other holder, just before expiry", "other", 100.0, 114.999, False),
    Case("other holder, expired on our clock", "other", 100.0, 115.0, True),
    Case("other holder, long gone", "other", 100.0, 1000.0, True),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_may_acquire(case: Case) -> None:
    assert may_acquire(record(holder=case.holder), "me", case.observed_at, case.now) is case.may


def test_lease_from_object_reads_the_spec() -> None:
    obj = {
        "metadata": {"name": "l", "resourceVersion": "42"},
        "spec": {
            "holderIdentity": "pod-1",
            "leaseDurationSeconds": 15,
            "acquireTime": "2026-11-21T11:30:44.000000Z",
            "renewTime": "2026-11-21T11:30:54.500000Z",
            "leaseTransitions": 3,
        },
    }
    rec = lease_from_object(obj)
    assert rec.holder == "pod-1"
    assert rec.lease_duration_s == 15.0
    assert rec.renew_time is not None
    assert rec.acquire_time is not None
    assert rec.renew_time - rec.acquire_time == pytest.approx(10.5)
    assert (rec.transitions, rec.resource_version) == (3, "42")
    empty = lease_from_object({"metadata": {}, "spec": {}})
    assert (empty.holder, empty.lease_duration_s, empty.renew_time) == ("", 0.0, None)


def test_new_lease_body() -> None:
    body = lease_body("l", "ns", None, "me", 2000.0, 15.0)
    assert "resourceVersion" not in body["metadata"]
    spec = body["spec"]
    assert spec["holderIdentity"] == "me"
    assert spec["leaseDurationSeconds"] == 15
    assert spec["leaseTransitions"] == 0
    assert parse_time(spec["renewTime"]) == pytest.approx(2000.0)


def test_renewal_keeps_acquire_time_and_transitions() -> None:
    body = lease_body("l", "ns", record(holder="me"), "me", 2000.0, 15.0)
    assert body["metadata"]["resourceVersion"] == "7"  # conditional write
    assert parse_time(body["spec"]["acquireTime"]) == pytest.approx(1000.0)
    assert parse_time(body["spec"]["renewTime"]) == pytest.approx(2000.0)
    assert body["spec"]["leaseTransitions"] == 2


def test_takeover_counts_a_transition_and_resets_acquire_time() -> None:
    body = lease_body("l", "ns", record(holder="other"), "me", 2000.0, 15.0)
    assert body["spec"]["holderIdentity"] == "me"
    assert body["spec"]["leaseTransitions"] == 3
    assert parse_time(body["spec"]["acquireTime"]) == pytest.approx(2000.0)


def test_release_empties_the_holder_with_a_short_duration() -> None:
    body = release_body("l", "ns", record(holder="me"), 2000.0)
    assert body["spec"]["holderIdentity"] == ""
    assert body["spec"]["leaseDurationSeconds"] == 1
    assert body["metadata"]["resourceVersion"] == "7"
