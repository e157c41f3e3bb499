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
