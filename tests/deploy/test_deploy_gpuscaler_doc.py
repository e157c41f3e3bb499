"""docs/GPUSCALER.md and the GPUScaler CRD say the same thing, and the CRD
refuses exactly what the decider refuses.

The field tables are made from the CRD (tests/deploy/gpuscaler_doc.py); every
condition reason the decider can write has its "what to do" section; every
metric has its unit; every example in the document is accepted by the real
API-server rules (kube-sim, CEL included) and by the decider.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import ApiException, CustomObjectsApi

from gpuscale.kube import new_api_client
from gpuscale.policy import PolicyError, parse_gpuscaler
from gpuscale.wire import METRIC_NAMES
from gpuscale_decider.core.conditions import ConditionType, Reason
from gpuscale_kubesim import KubeSim

from . import gpuscaler_doc
from .gpuscaler_doc import DOC, crd_schema, fields, section, table

UNIT_WORDS = re.compile(
    r"\b(count|seconds|Seconds|MiB|W|fraction|percent|replicas|generation|metric's unit)\b|%"
)


def _doc() -> str:
    return DOC.read_text()


@pytest.mark.parametrize("part", ["spec", "status"])
def test_the_field_tables_are_the_crds(part: str) -> None:
    assert section(_doc(), part) == table(part), (
        f"docs/GPUSCALER.md's {part} table is out of date: run .venv/bin/python -m tests.deploy.gpuscaler_doc"
    )


def test_the_table_check_sees_a_changed_description() -> None:
    schema = crd_schema()
    schema["properties"]["spec"]["properties"]["maxReplicas"]["description"] = "changed"
    original = gpuscaler_doc.crd_schema
    try:
        gpuscaler_doc.crd_schema = lambda: schema
        assert section(_doc(), "spec") != table("spec")
    finally:
        gpuscaler_doc.crd_schema = original


def test_every_field_is_described_and_every_number_has_its_unit() -> None:
    schema = crd_schema()
    for part in ("spec", "status"):
        for path, sub, _ in fields(schema["properties"][part], part):
            description = str(sub.get("description") or "")
            assert description, f"{path} has no description"
            if sub.get("type") in ("integer", "number"):
                assert UNIT_WORDS.search(description), f"{path}: say its unit: {description!r}"


def test_every_metric_has_its_unit_in_the_crd_and_the_doc() -> None:
    metric = crd_schema()["properties"]["spec"]["properties"]["metrics"]["items"]["properties"]["name"]
    assert tuple(metric["enum"]) == METRIC_NAMES, "the CRD's metric names are the wire contract's"
    described = metric["description"]
    assert "DCGM_FI_PROF_SM_ACTIVE" in described
    assert "ratio 0-1" in described  # sm_active is a % here, a ratio in DCGM
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", _doc(), re.MULTILINE)
    units = dict(rows)
    for name in METRIC_NAMES:
        assert name in units, f"docs/GPUSCALER.md: no unit row for {name}"
        assert name in described, f"the CRD's metric description does not mention {name}"


def _anchors(text: str) -> set[str]:
    return {
        re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", text, re.M)
    }


def test_every_condition_reason_says_what_to_do() -> None:
    text = _doc()
    anchors = _anchors(text)
    missing = [r.value for r in Reason if r.value.lower() not in anchors]
    assert missing == [], f"docs/GPUSCALER.md needs a section for each of {missing}"
    for condition in ConditionType:
        assert f"| `{condition.value}` |" in text
    for link in re.findall(r"\]\(#([a-z0-9_-]+)\)", text):
        assert link in anchors, f"broken link #{link}"


def test_the_crd_points_at_the_doc_in_the_repository() -> None:
    crd_text = gpuscaler_doc.CRD_FILE.read_text()
    assert "docs/GPUSCALER.md" in crd_text
    assert "DESIGN.md" not in crd_text


# --- the CRD refuses what the decider refuses --------------------------------------


def _examples() -> list[dict[str, Any]]:
    blocks = re.findall(r"```yaml\n(.*?)```", _doc(), re.S)
    return [
        doc for block in blocks for doc in yaml.safe_load_all(block) if doc and doc.get("kind") == "GPUScaler"
    ]


BASE: dict[str, Any] = {
    "apiVersion": "gpuscale.io/v1alpha1",
    "kind": "GPUScaler",
    "metadata": {"name": "g", "namespace": "default"},
    "spec": {
        "scaleTargetRef": {"kind": "Deployment", "name": "bert"},
        "maxReplicas": 5,
        "metrics": [{"name": "gpu_util", "target": 70}],
    },
}

SPECS = [
    pytest.param({}, True, id="minimal"),
    pytest.param({"minReplicas": 0}, False, id="min-zero"),
    pytest.param({"minReplicas": 6}, False, id="min-above-max"),
    pytest.param({"minReplicas": 5}, True, id="min-equals-max"),
    pytest.param({"window": "0s"}, False, id="window-zero"),
    pytest.param({"window": "0.5s"}, True, id="window-half-second"),
    pytest.param({"window": "90"}, True, id="window-bare-seconds"),
    pytest.param(
        {"metrics": [{"name": "gpu_util", "target": 70}, {"name": "gpu_util", "target": 80}]},
        False,
        id="metric-twice",
    ),
    pytest.param({"fallback": {"afterSeconds": 60, "replicas": 6}}, False, id="fallback-above-max"),
    pytest.param({"fallback": {"afterSeconds": 60, "replicas": 5}}, True, id="fallback-at-max"),
    pytest.param({"behavior": {"scaleUp": {"policies": []}}}, False, id="empty-policies"),
    pytest.param({"tolerance": 2.0}, True, id="large-tolerance"),
    pytest.param({"metrics": [{"name": "sm_active", "target": 0.7}]}, True, id="sm-active-ratio-by-mistake"),
    # Bounds that CEL rules hold (the schema's minimum/maximum ones: the test below).
    pytest.param({"metrics": [{"name": "gpu_util", "target": 0.001}]}, True, id="target-one-milli"),
    pytest.param({"metrics": [{"name": "gpu_util", "target": 0.0009}]}, False, id="target-below-a-milli"),
    pytest.param({"metrics": [{"name": "gpu_util", "target": 5e-10}]}, False, id="target-rounding-to-zero"),
    pytest.param({"window": "1ms"}, True, id="window-one-ms"),
    pytest.param({"window": "0.001"}, True, id="window-one-ms-bare"),
    pytest.param({"window": "0.0009s"}, False, id="window-below-a-ms"),
    pytest.param({"window": "24h"}, True, id="window-a-day"),
    pytest.param({"window": "86400"}, True, id="window-a-day-bare"),
    pytest.param({"window": "1440.001m"}, False, id="window-past-a-day"),
    pytest.param({"window": "86401"}, False, id="window-past-a-day-bare"),
    pytest.param({"window": "99999999999999999999h"}, False, id="window-overflowing"),
    pytest.param({"window": "0" * 29 + "30s"}, True, id="window-32-characters"),
    pytest.param({"window": "0" * 30 + "30s"}, False, id="window-33-characters"),
    pytest.param({"scaleTargetRef": {"kind": "Deployment", "name": "b" * 253}}, True, id="name-253"),
    pytest.param({"scaleTargetRef": {"kind": "Deployment", "name": "b" * 254}}, False, id="name-254"),
    pytest.param(
        {"behavior": {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}] * 16}}},
        True,
        id="sixteen-rate-policies",
    ),
    pytest.param(
        {"behavior": {"scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 15}] * 17}}},
        False,
        id="seventeen-rate-policies",
    ),
]


@pytest.mark.parametrize(("change", "valid"), SPECS)
async def test_the_api_server_and_the_decider_agree(
    kube_sim: KubeSim, change: dict[str, Any], valid: bool
) -> None:
    body = copy.deepcopy(BASE)
    body["spec"].update(change)
    try:
        parse_gpuscaler(body)
        decider_accepts = True
    except PolicyError:
        decider_accepts = False
    api = await new_api_client(kube_sim.kubeconfig_path)
    refused: ApiException | None = None
    try:
        await CustomObjectsApi(api).create_namespaced_custom_object(
            "gpuscale.io", "v1alpha1", "default", "gpuscalers", body
        )
    except ApiException as e:
        refused = e
    finally:
        await api.close()
    if refused is not None:
        assert refused.status == 422, refused.body
    assert (refused is None, decider_accepts) == (valid, valid)


@pytest.mark.parametrize("example", _examples(), ids=lambda e: e["metadata"]["name"])
async def test_every_example_in_the_doc_is_accepted(kube_sim: KubeSim, example: dict[str, Any]) -> None:
    parse_gpuscaler(example)
    namespace = example["metadata"]["namespace"]
    if namespace != "default":
        await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    await kube_sim.create(copy.deepcopy(example))


# --- every numeric bound, in the CRD and in the decider --------------------------------

# Every field present, at values that leave room at both ends of every other field's bounds.
FULL_SPEC: dict[str, Any] = {
    "scaleTargetRef": {"kind": "Deployment", "name": "bert"},
    "minReplicas": 1,
    "maxReplicas": 2147483647,
    "metrics": [{"name": "gpu_util", "target": 70}],
    "window": "30s",
    "tolerance": 0.1,
    "behavior": {
        direction: {
            "stabilizationWindowSeconds": 0,
            "cooldownSeconds": 0,
            "tolerance": 0.1,
            "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15}],
        }
        for direction in ("scaleUp", "scaleDown")
    },
    "fallback": {"afterSeconds": 60, "replicas": 1},
}
# Any tolerance >= 0 is Kubernetes' own rule (KEP-4951): nothing in the maths needs a ceiling.
NO_MAXIMUM = {".spec.tolerance", ".spec.behavior.scaleUp.tolerance", ".spec.behavior.scaleDown.tolerance"}
# A CEL rule on the field itself raises the schema's minimum (the SPECS above check the rule's bound).
RAISED_MINIMUM = {".spec.minReplicas", ".spec.metrics[].target"}


def _with(path: str, value: float) -> dict[str, Any]:
    body = copy.deepcopy(BASE)
    body["spec"] = copy.deepcopy(FULL_SPEC)
    node: Any = body
    keys = path.lstrip(".").replace("[]", ".0").split(".")
    for key in keys[:-1]:
        node = node[int(key)] if key.isdigit() else node[key]
    node[keys[-1]] = value
    return body


def _past(bound: float, integer: bool, direction: int) -> float:
    return bound + direction if integer else bound + direction * max(abs(bound) * 1e-9, 1e-9)


def numeric_bound_cases() -> list[tuple[str, float, bool | None]]:
    """(field, value, whether the bound allows it: None where a CEL rule decides) for every
    numeric field of the spec: at each bound and one step past it; a huge value where there
    is no maximum."""
    cases: list[tuple[str, float, bool | None]] = []
    for path, sub, _ in fields(crd_schema()["properties"]["spec"], ".spec"):
        kind = sub.get("type")
        if kind not in ("integer", "number"):
            continue
        integer = kind == "integer"
        low, high = sub.get("minimum"), sub.get("maximum")
        assert low is not None, f"{path}: no minimum"
        assert (high is None) == (path in NO_MAXIMUM), f"{path}: a maximum is what bounds it"
        at_low = None if path in RAISED_MINIMUM else not sub.get("exclusiveMinimum")
        cases += [(path, low, at_low), (path, _past(low, integer, -1), False)]
        if high is None:
            cases.append((path, 1e300, True))
        else:
            cases += [(path, high, True), (path, _past(high, integer, 1), False)]
    return cases


def test_every_numeric_field_is_bounded_and_the_cases_cover_them() -> None:
    paths = {path for path, _, _ in numeric_bound_cases()}
    assert ".spec.metrics[].target" in paths
    assert ".spec.fallback.afterSeconds" in paths
    assert ".spec.behavior.scaleDown.policies[].value" in paths
    assert len(paths) == 16


async def test_the_api_server_and_the_decider_agree_on_every_numeric_bound(kube_sim: KubeSim) -> None:
    """At each bound and one step past it, both ways: what the CRD allows the decider
    takes, and what the decider refuses the CRD refuses."""
    api = await new_api_client(kube_sim.kubeconfig_path)
    custom = CustomObjectsApi(api)
    disagreements: list[str] = []
    try:
        for i, (path, value, allowed) in enumerate(numeric_bound_cases()):
            body = _with(path, value)
            body["metadata"]["name"] = f"bound-{i}"
            try:
                parse_gpuscaler(body)
                decider_accepts = True
            except PolicyError:
                decider_accepts = False
            refused: ApiException | None = None
            try:
                await custom.create_namespaced_custom_object(
                    "gpuscale.io", "v1alpha1", "default", "gpuscalers", body
                )
            except ApiException as e:
                refused = e
            assert refused is None or refused.status == 422, refused.body
            server_accepts = refused is None
            if server_accepts != decider_accepts or (allowed is not None and server_accepts != allowed):
                disagreements.append(
                    f"{path}={value!r}: API server {server_accepts}, decider {decider_accepts}, bound {allowed}"
                )
    finally:
        await api.close()
    assert disagreements == []
