"""Subjects: names cannot break a subject's shape, and parse back exactly."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale import subjects
from gpuscale.subjects import SubjectError, WorkloadKey


def test_plain_names_are_unchanged() -> None:
    key = WorkloadKey("default", "Deployment", "bert-intent-detection")
    assert subjects.metrics(key) == "gpuscale.v1.metrics.default.Deployment.bert-intent-detection"
    assert subjects.samples("gpu-node-1") == "gpuscale.v1.samples.gpu-node-1"


@pytest.mark.parametrize(
    "hostile",
    ["node.with.dots", "wild*card", "tail>", "space name", "tab\tname", "~tilde", "ünïcode", ">", "*"],
)
def test_hostile_names_stay_one_token_and_round_trip(hostile: str) -> None:
    subject = subjects.samples(hostile)
    assert len(subject.split(".")) == 4
    assert not {"*", ">", " ", "\t"} & set(subject)
    assert subjects.parse_samples(subject) == hostile


def test_empty_name_is_rejected() -> None:
    with pytest.raises(SubjectError):
        subjects.samples("")


@pytest.mark.parametrize(
    "subject",
    [
        "gpuscale.v1.samples.a.b",
        "gpuscale.v2.samples.a",
        "gpuscale.v1.samples.*",
        "gpuscale.v1.samples.bad~ZZ",
        "gpuscale.v1.samples.~FF",  # escapes to invalid UTF-8
    ],
)
def test_malformed_samples_subjects_are_rejected(subject: str) -> None:
    with pytest.raises(SubjectError):
        subjects.parse_samples(subject)


def test_workload_subjects_parse_back() -> None:
    key = WorkloadKey("team.a", "StatefulSet", "llm.v2")
    for family, build in (
        ("metrics", subjects.metrics),
        ("decisions", subjects.decisions),
        ("actions", subjects.actions),
    ):
        assert subjects.parse_workload(build(key), family) == key
    with pytest.raises(SubjectError):
        subjects.parse_workload(subjects.metrics(key), "decisions")


@given(st.text(min_size=1, max_size=40))
def test_any_text_round_trips_as_one_token(name: str) -> None:
    token = subjects.escape_token(name)
    assert not {".", "*", ">"} & set(token)
    assert subjects.unescape_token(token) == name
