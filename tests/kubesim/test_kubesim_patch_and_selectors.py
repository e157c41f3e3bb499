"""Patches and selectors as the API server applies them: table-style scenarios."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gpuscale.labels import selector_string
from gpuscale_kubesim.apiserver.errors import ApiError
from gpuscale_kubesim.apiserver.patch import JSON_PATCH, MERGE_PATCH, STRATEGIC_MERGE_PATCH, apply_patch
from gpuscale_kubesim.apiserver.selectors import field_selector, label_selector


@dataclass(frozen=True)
class PatchCase:
    name: str
    content_type: str
    target: Any
    patch: Any
    want: Any


CONTAINERS = {"spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:1"}]}}

PATCH_CASES = [
    PatchCase(
        "merge sets a nested field",
        MERGE_PATCH,
        {"spec": {"replicas": 1, "x": 1}},
        {"spec": {"replicas": 3}},
        {"spec": {"replicas": 3, "x": 1}},
    ),
    PatchCase("merge null deletes", MERGE_PATCH, {"a": 1, "b": 2}, {"b": None}, {"a": 1}),
    PatchCase(
        # evanphx/json-patch (the API server's MergePatch) prunes null members of objects in a list it sets
        "merge drops null members inside a list's objects",
        MERGE_PATCH,
        {"status": {"m": [{"name": "a", "current": 1}]}},
        {"status": {"m": [{"name": "a", "current": None}], "n": [{"x": None, "y": 1}]}},
        {"status": {"m": [{"name": "a"}], "n": [{"y": 1}]}},
    ),
    PatchCase(
        "merge replaces lists",
        MERGE_PATCH,
        CONTAINERS,
        {"spec": {"containers": [{"name": "b", "image": "y:2"}]}},
        {"spec": {"containers": [{"name": "b", "image": "y:2"}]}},
    ),
    PatchCase(
        "strategic merges containers by name",
        STRATEGIC_MERGE_PATCH,
        CONTAINERS,
        {"spec": {"containers": [{"name": "b", "image": "y:2"}]}},
        {"spec": {"containers": [{"name": "a", "image": "x:1"}, {"name": "b", "image": "y:2"}]}},
    ),
    PatchCase(
        "strategic $patch: delete removes a list item",
        STRATEGIC_MERGE_PATCH,
        CONTAINERS,
        {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}},
        {"spec": {"containers": [{"name": "b", "image": "y:1"}]}},
    ),
    PatchCase(
        "strategic ignores ordering directives",
        STRATEGIC_MERGE_PATCH,
        {"spec": {"replicas": 1}},
        {"$setElementOrder/containers": [{"name": "a"}], "spec": {"replicas": 2}},
        {"spec": {"replicas": 2}},
    ),
    PatchCase(
        "json patch replace, add, remove",
        JSON_PATCH,
        {"spec": {"replicas": 1, "paused": True}, "metadata": {}},
        [
            {"op": "replace", "path": "/spec/replicas", "value": 4},
            {"op": "add", "path": "/metadata/labels", "value": {"a/b": "c"}},
            {"op": "remove", "path": "/spec/paused"},
        ],
        {"spec": {"replicas": 4}, "metadata": {"labels": {"a/b": "c"}}},
    ),
    PatchCase(
        "json patch appends with -",
        JSON_PATCH,
        {"l": [1]},
        [{"op": "add", "path": "/l/-", "value": 2}],
        {"l": [1, 2]},
    ),
    PatchCase(
        "json patch escapes ~1",
        JSON_PATCH,
        {"a": {"x/y": 1}},
        [{"op": "replace", "path": "/a/x~1y", "value": 2}],
        {"a": {"x/y": 2}},
    ),
    PatchCase(
        "content type parameters are ignored", MERGE_PATCH + "; charset=utf-8", {"a": 1}, {"a": 2}, {"a": 2}
    ),
]


@pytest.mark.parametrize("case", PATCH_CASES, ids=lambda c: c.name)
def test_patch(case: PatchCase) -> None:
    assert apply_patch(case.target, case.patch, case.content_type) == case.want


@pytest.mark.parametrize(
    ("content_type", "patch", "code"),
    [
        ("application/json", {"a": 1}, 415),
        (JSON_PATCH, {"a": 1}, 400),
        (JSON_PATCH, [{"op": "test", "path": "/a", "value": 9}], 422),
        (JSON_PATCH, [{"op": "replace", "path": "/missing", "value": 1}], 422),
    ],
)
def test_bad_patches_are_refused_with_the_server_codes(content_type: str, patch: Any, code: int) -> None:
    with pytest.raises(ApiError) as error:
        apply_patch({"a": 1}, patch, content_type)
    assert error.value.code == code


POD = {
    "metadata": {"name": "p", "namespace": "default", "labels": {"app": "bert", "tier": "gpu"}},
    "spec": {"nodeName": "gpu-node-1"},
    "status": {"phase": "Running"},
}


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("app=bert", True),
        ("app==bert", True),
        ("app!=bert", False),
        ("app=bert,tier=gpu", True),
        ("app in (bert, llama)", True),
        ("app notin (bert)", False),
        ("tier", True),
        ("!tier", False),
        ("!canary", True),
        ("app in (a,b),tier", False),
        ("", True),
    ],
)
def test_label_selector(selector: str, matches: bool) -> None:
    assert label_selector(selector)(POD) is matches


@pytest.mark.parametrize(
    ("selector", "matches"),
    [
        ("spec.nodeName=gpu-node-1", True),
        ("spec.nodeName=gpu-node-2", False),
        ("spec.nodeName!=gpu-node-2", True),
        ("metadata.name=p,status.phase=Running", True),
        ("status.phase!=Running", False),
        ("spec.missing=", True),
    ],
)
def test_field_selector(selector: str, matches: bool) -> None:
    assert field_selector(selector)(POD) is matches


def test_bad_selectors_are_400() -> None:
    for parse, text in ((label_selector, "a in (b"), (field_selector, "nonsense")):
        with pytest.raises(ApiError) as error:
            parse(text)
        assert error.value.code == 400


def test_scale_selector_string() -> None:
    selector = {
        "matchLabels": {"app": "bert", "a": "b"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]},
            {"key": "x", "operator": "Exists"},
        ],
    }
    assert selector_string(selector) == "a=b,app=bert,env in (dev,prod),x"
