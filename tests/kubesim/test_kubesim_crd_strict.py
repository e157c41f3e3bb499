"""Custom resources are held to their CRD as the apiextensions API server holds them:
schema validation (422 with field paths), pruning with a Warning, fieldValidation,
defaults, CEL rules; on create, update, patch and /status. Through kubernetes-asyncio
and raw HTTP (to see the headers), never through kube-sim's own Python API."""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient, ApiException

from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpuscaler, keda_crd
from .conftest import causes, status_of

pytestmark = pytest.mark.integration

NS = "default"
GROUP, VERSION, PLURAL = "gpuscale.io", "v1alpha1", "gpuscalers"
BASE = f"/apis/{GROUP}/{VERSION}/namespaces/{NS}/{PLURAL}"
MERGE = "application/merge-patch+json"


@dataclass
class Answer:
    status: int
    body: Any
    warnings: list[str]


async def http(
    sim: KubeSim, method: str, path: str, body: Any = None, content_type: str = "application/json"
) -> Answer:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            sim.url + path,
            data=None if body is None else json.dumps(body),
            headers={"Content-Type": content_type},
        ) as response,
    ):
        return Answer(response.status, await response.json(), response.headers.getall("Warning", []))


# --- schema validation -----------------------------------------------------------


@dataclass(frozen=True)
class Violation:
    name: str
    spec: dict[str, Any]  # merged into a valid spec
    field: str
    reason: str
    message: str


VIOLATIONS = [
    Violation(
        "enum",
        {"scaleTargetRef": {"kind": "Job", "name": "x"}},
        "spec.scaleTargetRef.kind",
        "FieldValueNotSupported",
        'Unsupported value: "Job": supported values: "Deployment", "StatefulSet"',
    ),
    Violation(
        "minItems",
        {"metrics": []},
        "spec.metrics",
        "FieldValueInvalid",
        "Invalid value: []: spec.metrics in body should have at least 1 items",
    ),
    Violation(
        "type",
        {"maxReplicas": "ten"},
        "spec.maxReplicas",
        "FieldValueTypeInvalid",
        'Invalid value: "string": spec.maxReplicas in body must be of type integer: "string"',
    ),
    Violation(
        "exclusiveMinimum",
        {"metrics": [{"name": "gpu_util", "target": 0}]},
        "spec.metrics.0.target",
        "FieldValueInvalid",
        "Invalid value: 0: spec.metrics.0.target in body should be greater than 0",
    ),
    Violation(
        "minimum",
        {"behavior": {"scaleUp": {"cooldownSeconds": -1}}},
        "spec.behavior.scaleUp.cooldownSeconds",
        "FieldValueInvalid",
        "Invalid value: -1: spec.behavior.scaleUp.cooldownSeconds in body should be greater than or equal to 0",
    ),
    Violation(
        "maximum",
        {"behavior": {"scaleUp": {"stabilizationWindowSeconds": 3601}}},
        "spec.behavior.scaleUp.stabilizationWindowSeconds",
        "FieldValueInvalid",
        "Invalid value: 3601: spec.behavior.scaleUp.stabilizationWindowSeconds in body should be less than or equal to 3600",
    ),
    Violation(
        "required",
        {"fallback": {"afterSeconds": 10}},
        "spec.fallback.replicas",
        "FieldValueRequired",
        "Required value",
    ),
    Violation(
        "pattern",
        {"window": "half a minute"},
        "spec.window",
        "FieldValueInvalid",
        "Invalid value: \"half a minute\": spec.window in body should match '^[0-9]+(\\.[0-9]+)?(ms|s|m|h)?$'",
    ),
    Violation(
        "minLength",
        {"scaleTargetRef": {"kind": "Deployment", "name": ""}},
        "spec.scaleTargetRef.name",
        "FieldValueInvalid",
        'Invalid value: "": spec.scaleTargetRef.name in body should be at least 1 chars long',
    ),
]


# apiextensions-apiserver's hasBlockingErr: these errors stop the CEL rules from running.
CEL_BLOCKING = {"FieldValueNotSupported", "FieldValueRequired", "FieldValueTypeInvalid"}
CEL_NOT_CHECKED = (
    'Invalid value: "null": some validation rules were not checked because the object was invalid; '
    "correct the existing errors to complete validation"
)


@pytest.mark.parametrize("case", VIOLATIONS, ids=lambda c: c.name)
async def test_a_schema_violation_is_422_with_its_field(api: ApiClient, case: Violation) -> None:
    body = gpuscaler("bert")
    body["spec"].update(case.spec)
    with pytest.raises(ApiException) as raised:
        await client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    assert raised.value.status == 422
    status = status_of(raised.value)
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422)
    assert status["details"]["group"] == GROUP
    assert status["details"]["kind"] == "GPUScaler"
    assert causes(raised.value)[case.field] == (case.reason, case.message)
    if case.reason in CEL_BLOCKING:
        # The API server skips the CRD's CEL rules after such an error, and says so.
        assert causes(raised.value)["<nil>"] == ("FieldValueInvalid", CEL_NOT_CHECKED)
        assert status["message"] == (
            f'GPUScaler.gpuscale.io "bert" is invalid: '
            f"[{case.field}: {case.message}, <nil>: {CEL_NOT_CHECKED}]"
        )
    else:
        assert status["message"] == f'GPUScaler.gpuscale.io "bert" is invalid: {case.field}: {case.message}'


async def test_every_violation_is_reported_at_once(api: ApiClient) -> None:
    body = gpuscaler("bert")
    body["spec"].update({"minReplicas": -1, "maxReplicas": 0, "window": "soon"})
    del body["spec"]["metrics"]
    with pytest.raises(ApiException) as raised:
        await client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    status = status_of(raised.value)
    assert set(causes(raised.value)) == {
        "spec.minReplicas",
        "spec.maxReplicas",
        "spec.window",
        "spec.metrics",
        "<nil>",  # the missing metrics (Required) stop the CEL rules, and that is said too
    }
    assert status["message"].startswith('GPUScaler.gpuscale.io "bert" is invalid: [')


@pytest.mark.parametrize(
    ("status_patch", "field", "message"),
    [
        (
            {"lastScaleTime": "yesterday"},
            "status.lastScaleTime",
            'Invalid value: "yesterday": status.lastScaleTime in body must be of type date-time: "yesterday"',
        ),
        (
            {"conditions": [{"type": "ScalingActive", "status": "Maybe"}]},
            "status.conditions.0.status",
            'Unsupported value: "Maybe": supported values: "True", "False", "Unknown"',
        ),
        (
            {"currentReplicas": 2.5},
            "status.currentReplicas",
            'Invalid value: "number": status.currentReplicas in body must be of type integer: "number"',
        ),
        ({"conditions": [{"status": "True"}]}, "status.conditions.0.type", "Required value"),
    ],
)
async def test_status_writes_are_validated_too(
    api: ApiClient, status_patch: dict[str, Any], field: str, message: str
) -> None:
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, gpuscaler("bert"))
    with pytest.raises(ApiException) as raised:
        await custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, NS, PLURAL, "bert", {"status": status_patch}, _content_type=MERGE
        )
    assert raised.value.status == 422
    assert causes(raised.value)[field][1] == message


async def test_updates_and_json_patches_are_validated(api: ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, gpuscaler("bert"))
    bad = copy.deepcopy(created)
    bad["spec"]["maxReplicas"] = 0
    with pytest.raises(ApiException) as raised:
        await custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "bert", bad)
    assert "spec.maxReplicas" in causes(raised.value)
    with pytest.raises(ApiException) as raised:
        await custom.patch_namespaced_custom_object(
            GROUP, VERSION, NS, PLURAL, "bert", [{"op": "replace", "path": "/spec/tolerance", "value": -1}]
        )
    assert raised.value.status == 422
    assert "spec.tolerance" in causes(raised.value)
    stored = await custom.get_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "bert")
    assert (stored["spec"]["maxReplicas"], stored["spec"]["tolerance"]) == (10, 0.1), "nothing was stored"


async def test_put_without_resource_version_is_refused(api: ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, gpuscaler("bert"))
    with pytest.raises(ApiException) as raised:
        await custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "bert", gpuscaler("bert"))
    assert raised.value.status == 422
    assert causes(raised.value)["metadata.resourceVersion"] == (
        "FieldValueInvalid",
        "Invalid value: 0x0: must be specified for an update",
    )


# --- unknown fields: pruning, Warning, fieldValidation ------------------------------


async def test_unknown_fields_are_pruned_with_a_warning(kube_sim: KubeSim) -> None:
    body = gpuscaler("bert")
    body["spec"]["fooBar"] = 1
    body["spec"]["metrics"][0]["weight"] = 2
    body["metadata"]["color"] = "blue"
    created = await http(kube_sim, "POST", BASE, body)
    assert created.status == 201
    assert sorted(created.warnings) == sorted(
        [
            '299 - "unknown field \\"metadata.color\\""',
            '299 - "unknown field \\"spec.fooBar\\""',
            '299 - "unknown field \\"spec.metrics[0].weight\\""',
        ]
    )
    stored = kube_sim.get("gpuscale.io/v1alpha1", "GPUScaler", "bert")
    assert "fooBar" not in stored["spec"]
    assert "weight" not in stored["spec"]["metrics"][0]
    assert "color" not in stored["metadata"]


async def test_status_fields_the_crd_does_not_declare_are_pruned(kube_sim: KubeSim) -> None:
    """What silently lost the decider's explanation on a real cluster before status.reason was declared."""
    await http(kube_sim, "POST", BASE, gpuscaler("bert"))
    patched = await http(
        kube_sim,
        "PATCH",
        f"{BASE}/bert/status",
        {"status": {"reason": "scaled up: gpu_util 83 over 70", "mood": "happy"}},
        MERGE,
    )
    assert patched.status == 200
    assert patched.warnings == ['299 - "unknown field \\"status.mood\\""']
    assert patched.body["status"] == {"reason": "scaled up: gpu_util 83 over 70"}


@pytest.mark.parametrize(
    ("mode", "status", "warned"), [("Strict", 400, False), ("Warn", 201, True), ("Ignore", 201, False)]
)
async def test_field_validation_modes(kube_sim: KubeSim, mode: str, status: int, warned: bool) -> None:
    body = gpuscaler("bert")
    body["spec"]["foo"] = "bar"
    answer = await http(kube_sim, "POST", f"{BASE}?fieldValidation={mode}", body)
    assert answer.status == status
    assert bool(answer.warnings) is warned
    if mode == "Strict":
        assert answer.body["reason"] == "BadRequest"
        assert answer.body["message"] == (
            'GPUScaler in version "v1alpha1" cannot be handled as a GPUScaler: '
            'strict decoding error: unknown field "spec.foo"'
        )
        assert kube_sim.list_objects("gpuscale.io/v1alpha1", "GPUScaler", NS) == []


async def test_strict_applies_to_patches_and_status(kube_sim: KubeSim) -> None:
    await http(kube_sim, "POST", BASE, gpuscaler("bert"))
    answer = await http(
        kube_sim, "PATCH", f"{BASE}/bert?fieldValidation=Strict", {"spec": {"maxPods": 3}}, MERGE
    )
    assert (answer.status, answer.body["reason"]) == (400, "BadRequest")
    assert 'unknown field "spec.maxPods"' in answer.body["message"]
    answer = await http(
        kube_sim, "PATCH", f"{BASE}/bert/status?fieldValidation=Strict", {"status": {"mood": "ok"}}, MERGE
    )
    assert answer.status == 400
    assert 'unknown field "status.mood"' in answer.body["message"]


# --- defaults --------------------------------------------------------------------


async def test_schema_defaults_are_applied_on_create_update_and_patch(api: ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    body = gpuscaler("bert")
    del body["spec"]["minReplicas"]
    del body["spec"]["scaleTargetRef"]["apiVersion"]
    created = await custom.create_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, body)
    spec = created["spec"]
    assert (spec["minReplicas"], spec["window"], spec["tolerance"], spec["paused"]) == (1, "30s", 0.1, False)
    assert spec["scaleTargetRef"]["apiVersion"] == "apps/v1"

    # A merge patch that removes a defaulted field gets the default back.
    patched = await custom.patch_namespaced_custom_object(
        GROUP, VERSION, NS, PLURAL, "bert", {"spec": {"window": None, "tolerance": 0.2}}, _content_type=MERGE
    )
    assert (patched["spec"]["window"], patched["spec"]["tolerance"]) == ("30s", 0.2)

    # So does a PUT that leaves it out.
    replaced = copy.deepcopy(patched)
    del replaced["spec"]["paused"]
    updated = await custom.replace_namespaced_custom_object(GROUP, VERSION, NS, PLURAL, "bert", replaced)
    assert updated["spec"]["paused"] is False


async def test_strategic_merge_patch_is_unsupported_for_custom_resources(kube_sim: KubeSim) -> None:
    await http(kube_sim, "POST", BASE, gpuscaler("bert"))
    answer = await http(
        kube_sim,
        "PATCH",
        f"{BASE}/bert",
        {"spec": {"maxReplicas": 3}},
        "application/strategic-merge-patch+json",
    )
    assert (answer.status, answer.body["reason"]) == (415, "UnsupportedMediaType")
    assert "application/strategic-merge-patch+json" not in answer.body["message"]
    assert "application/merge-patch+json" in answer.body["message"]


# --- CEL rules (x-kubernetes-validations) ------------------------------------------

CEL_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "ranges.example.io"},
    "spec": {
        "group": "example.io",
        "scope": "Namespaced",
        "names": {"plural": "ranges", "singular": "range", "kind": "Range"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {
                                "type": "object",
                                "x-kubernetes-validations": [
                                    {
                                        "rule": "self.minReplicas <= self.maxReplicas",
                                        "message": "minReplicas must not exceed maxReplicas",
                                    },
                                    {
                                        "rule": "!has(self.target) || self.target > 0.5",
                                        "messageExpression": "'target ' + string(self.target) + ' is too low'",
                                        "fieldPath": ".target",
                                    },
                                ],
                                "properties": {
                                    "minReplicas": {
                                        "type": "integer",
                                        "x-kubernetes-validations": [
                                            {"rule": "self >= 1", "message": "minReplicas must be at least 1"}
                                        ],
                                    },
                                    "maxReplicas": {"type": "integer"},
                                    "target": {"type": "number"},
                                    "owner": {
                                        "type": "string",
                                        "x-kubernetes-validations": [
                                            {
                                                "rule": "self == oldSelf",
                                                "message": "owner is immutable",
                                                "reason": "FieldValueForbidden",
                                            }
                                        ],
                                    },
                                },
                            }
                        },
                    }
                },
            }
        ],
    },
}


def a_range(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "example.io/v1", "kind": "Range", "metadata": {"name": name}, "spec": spec}


async def test_cel_rules_of_a_crd_are_enforced(api: ApiClient) -> None:
    await client.ApiextensionsV1Api(api).create_custom_resource_definition(CEL_CRD)
    custom = client.CustomObjectsApi(api)
    args = ("example.io", "v1", NS, "ranges")
    await custom.create_namespaced_custom_object(
        *args, a_range("ok", minReplicas=1, maxReplicas=3, target=0.7)
    )

    with pytest.raises(ApiException) as raised:
        await custom.create_namespaced_custom_object(
            *args, a_range("bad", minReplicas=0, maxReplicas=-1, target=0.5)
        )
    assert raised.value.status == 422
    assert causes(raised.value) == {
        "spec": ("FieldValueInvalid", 'Invalid value: "object": minReplicas must not exceed maxReplicas'),
        "spec.target": ("FieldValueInvalid", 'Invalid value: "object": target 0.5 is too low'),
        "spec.minReplicas": ("FieldValueInvalid", 'Invalid value: "integer": minReplicas must be at least 1'),
    }

    # A transition rule: checked on update only, against the old value.
    await custom.create_namespaced_custom_object(
        *args, a_range("owned", minReplicas=1, maxReplicas=2, owner="team-a")
    )
    with pytest.raises(ApiException) as raised:
        await custom.patch_namespaced_custom_object(
            "example.io", "v1", NS, "ranges", "owned", {"spec": {"owner": "team-b"}}, _content_type=MERGE
        )
    assert causes(raised.value)["spec.owner"] == (
        "FieldValueForbidden",
        "Forbidden: owner is immutable",
    )
    # Rules hold on patches that break them too.
    with pytest.raises(ApiException) as raised:
        await custom.patch_namespaced_custom_object(
            "example.io", "v1", NS, "ranges", "owned", {"spec": {"maxReplicas": 0}}, _content_type=MERGE
        )
    assert "spec" in causes(raised.value)


async def test_a_crd_whose_rule_does_not_compile_is_refused(api: ApiClient) -> None:
    crd = copy.deepcopy(CEL_CRD)
    spec_schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_schema["x-kubernetes-validations"] = [{"rule": "self.minReplicas <="}]
    with pytest.raises(ApiException) as raised:
        await client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    assert raised.value.status == 422
    (field,) = causes(raised.value)
    assert (
        field == "spec.versions[0].schema.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule"
    )
    assert "compilation failed" in causes(raised.value)[field][1]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda crd: crd["spec"]["versions"][0].pop("schema"), "spec.versions[0].schema.openAPIV3Schema"),
        (lambda crd: crd["metadata"].update(name="ranges"), "metadata.name"),
        (lambda crd: crd["spec"].update(scope="Everywhere"), "spec.scope"),
        (
            lambda crd: crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"][
                "properties"
            ].update(untyped={"description": "no type"}),
            "spec.versions[0].schema.openAPIV3Schema.properties[spec].properties[untyped].type",
        ),
    ],
)
async def test_crds_are_validated(api: ApiClient, change: Any, field: str) -> None:
    crd = copy.deepcopy(CEL_CRD)
    change(crd)
    with pytest.raises(ApiException) as raised:
        await client.ApiextensionsV1Api(api).create_custom_resource_definition(crd)
    assert raised.value.status == 422
    assert field in causes(raised.value)


async def test_preserve_unknown_fields_keeps_what_the_schema_leaves_open(kube_sim: KubeSim) -> None:
    await kube_sim.create(keda_crd())
    body = {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "llm"},
        "spec": {
            "scaleTargetRef": {"name": "llm", "color": "red"},  # a declared object: pruned inside
            "triggers": [
                {"type": "prometheus", "metadata": {"threshold": "5"}, "authenticationRef": {"name": "a"}}
            ],
            "advanced": {"restoreToOriginalReplicaCount": True},  # spec preserves unknown fields
        },
    }
    answer = await http(kube_sim, "POST", f"/apis/keda.sh/v1alpha1/namespaces/{NS}/scaledobjects", body)
    assert answer.status == 201
    assert answer.warnings == ['299 - "unknown field \\"spec.scaleTargetRef.color\\""']
    spec = answer.body["spec"]
    assert spec["advanced"] == {"restoreToOriginalReplicaCount": True}
    assert spec["triggers"][0]["authenticationRef"] == {"name": "a"}
    assert "color" not in spec["scaleTargetRef"]
