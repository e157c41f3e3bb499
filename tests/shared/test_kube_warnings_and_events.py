"""The API server's Warning header reaches us (counted, logged, an error where strict),
and Event notes fit the server's byte limit. Against kube-sim, through the real client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes_asyncio.client import ApiClient

from gpuscale.apiwarnings import API_WARNINGS, parse_warning_header
from gpuscale.kube import (
    EVENT_NOTE_MAX_BYTES,
    FieldsDropped,
    ScaleTargetRef,
    event_note,
    new_api_client,
    record_event,
    request_json,
)
from gpuscale.metrics import ServiceMetrics
from gpuscale_decider.kubeio import StatusWriter
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload, gpuscaler

pytestmark = pytest.mark.integration

STATUS = "/apis/gpuscale.io/v1alpha1/namespaces/default/gpuscalers/bert/status"
MERGE = "application/merge-patch+json"


@pytest.fixture
async def api(kube_sim: KubeSim) -> AsyncIterator[ApiClient]:
    await kube_sim.create(gpuscaler("bert"))
    api = await new_api_client(Path(kube_sim.kubeconfig_path))
    try:
        yield api
    finally:
        await api.close()


@pytest.fixture
def lenient() -> Iterator[None]:
    """Production's setting: warnings are logged and counted, not raised."""
    API_WARNINGS.strict = False
    try:
        yield
    finally:
        API_WARNINGS.strict = True
        API_WARNINGS.take_dropped()  # seen on purpose here


def test_warning_headers_are_unquoted() -> None:
    assert (
        parse_warning_header('299 - "unknown field \\"status.reason\\""') == 'unknown field "status.reason"'
    )
    assert parse_warning_header("garbage") == "garbage"


async def test_a_dropped_field_is_an_error_where_warnings_are_strict(api: ApiClient) -> None:
    with pytest.raises(FieldsDropped) as raised:
        await request_json(api, "PATCH", STATUS, {"status": {"mood": "fine"}}, content_type=MERGE)
    assert raised.value.fields == ["status.mood"]
    assert raised.value.status == 200, "the write itself succeeded"
    API_WARNINGS.take_dropped()  # seen on purpose


async def test_in_production_a_dropped_field_is_logged_and_counted(api: ApiClient, lenient: None) -> None:
    metrics = ServiceMetrics("decider")
    before = (
        metrics.registry.get_sample_value("gpuscale_kube_api_warnings_total", {"kind": "dropped_field"}) or 0
    )
    answer = await request_json(api, "PATCH", STATUS, {"status": {"mood": "fine"}}, content_type=MERGE)
    assert "mood" not in (answer.get("status") or {})
    after = metrics.registry.get_sample_value("gpuscale_kube_api_warnings_total", {"kind": "dropped_field"})
    assert after == before + 1
    assert [w.text for w in API_WARNINGS.take_dropped()] == ['unknown field "status.mood"']


async def test_declared_status_fields_raise_no_warning(api: ApiClient) -> None:
    answer = await request_json(
        api,
        "PATCH",
        STATUS,
        {"status": {"reason": "scaled from 1 to 2", "desiredReplicas": 2}},
        content_type=MERGE,
    )
    assert answer["status"]["reason"] == "scaled from 1 to 2"
    assert API_WARNINGS.take_dropped() == []


async def test_the_status_writer_reports_a_dropped_field_and_does_not_retry(
    api: ApiClient, kube_sim: KubeSim
) -> None:
    writer = StatusWriter(api)
    ok = await writer._write("default", "bert", {"reason": "why", "desiredReplicas": 3})
    assert ok
    assert kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", "bert")["status"]["reason"] == "why"
    assert API_WARNINGS.take_dropped() == [], "every status key the decider writes is declared in the CRD"


# --- Event notes -------------------------------------------------------------------


@given(st.text(alphabet=st.sampled_from("ab×→🙂 "), max_size=1500))
def test_event_notes_fit_1024_bytes_and_never_split_a_character(message: str) -> None:
    note = event_note(message)
    assert len(note.encode()) <= EVENT_NOTE_MAX_BYTES
    if len(message.encode()) <= EVENT_NOTE_MAX_BYTES:
        assert note == message
    else:
        assert note.endswith("…")
        assert message.startswith(note[:-1])


async def test_a_long_reason_with_multiplication_signs_is_recorded(api: ApiClient, kube_sim: KubeSim) -> None:
    await kube_sim.create(gpu_workload("bert"))
    reason = "desired = ceil(2 × 91/70) = 3; " * 60  # about 1,900 characters, more bytes
    ref = ScaleTargetRef("apps/v1", "Deployment", "bert", "default")
    event = await record_event(api, ref, "GPUScaled", reason, now=1_700_000_000.0)
    assert len(event["note"].encode()) <= 1024
    assert event["note"].startswith("desired = ceil(2 × 91/70) = 3;")


# --- Event names -------------------------------------------------------------------


@pytest.mark.parametrize("length", [236, 245, 251, 252, 253])
async def test_events_on_a_long_named_object_are_valid_and_distinct(
    api: ApiClient, kube_sim: KubeSim, length: int
) -> None:
    """events.k8s.io/v1 names are DNS-1123 subdomains (ValidateEventCreate's strict
    ValidateObjectMeta): a 252-character target must not leave ``<name>.`` and a long one
    must keep the timestamp suffix, or the second Event is 409 AlreadyExists."""
    ref = ScaleTargetRef("apps/v1", "Deployment", "a" * length, "default")
    first = await record_event(api, ref, "GPUScaled", "one", uid="u1", now=1_700_000_000.0)
    second = await record_event(api, ref, "GPUScaled", "two", uid="u1", now=1_700_000_001.0)
    names = {first["metadata"]["name"], second["metadata"]["name"]}
    assert len(names) == 2
    assert all(len(n) <= 253 for n in names)
