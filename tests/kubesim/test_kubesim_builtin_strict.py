"""Built-in kinds are validated as the API server validates them (pkg/apis/*/validation):
the Go decoder's 400s, the validators' 422s with field paths, namespaces that must exist.
Through kubernetes-asyncio's typed APIs (and raw HTTP where a typed client cannot send
the bad body)."""

from __future__ import annotations

import copy
import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client import ApiClient, ApiException

from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload
from .conftest import causes, status_of

pytestmark = pytest.mark.integration

NS = "default"


async def raw(sim: KubeSim, method: str, path: str, body: Any) -> tuple[int, dict[str, Any], list[str]]:
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, sim.url + path, data=json.dumps(body), headers={"Content-Type": "application/json"}
        ) as response,
    ):
        return response.status, await response.json(), response.headers.getall("Warning", [])


# --- workloads ---------------------------------------------------------------------


async def test_deployment_selector_must_match_the_template(api: ApiClient) -> None:
    body = gpu_workload("bert")
    body["spec"]["selector"] = {"matchLabels": {"app": "other"}}
    with pytest.raises(ApiException) as raised:
        await client.AppsV1Api(api).create_namespaced_deployment(NS, body)
    assert raised.value.status == 422
    status = status_of(raised.value)
    assert status["message"] == (
        'Deployment.apps "bert" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"bert"}: `selector` does not match template `labels`'
    )
    assert (status["details"]["group"], status["details"]["kind"]) == ("apps", "Deployment")


@pytest.mark.parametrize(
    ("change", "field", "reason"),
    [
        (lambda d: d["spec"].pop("selector"), "spec.selector", "FieldValueRequired"),
        (lambda d: d["spec"].update(replicas=-1), "spec.replicas", "FieldValueInvalid"),
        (
            lambda d: d["spec"]["template"]["spec"].update(containers=[]),
            "spec.template.spec.containers",
            "FieldValueRequired",
        ),
        (
            lambda d: d["spec"]["template"]["spec"].update(restartPolicy="Never"),
            "spec.template.spec.restartPolicy",
            "FieldValueNotSupported",
        ),
        (lambda d: d["metadata"].update(name="Bert_1"), "metadata.name", "FieldValueInvalid"),
        (
            lambda d: d["spec"]["template"]["spec"]["containers"][0].update(name="Server"),
            "spec.template.spec.containers[0].name",
            "FieldValueInvalid",
        ),
        (lambda d: d["metadata"].update(labels={"app": "a b"}), "metadata.labels", "FieldValueInvalid"),
    ],
)
async def test_deployment_rules(api: ApiClient, change: Any, field: str, reason: str) -> None:
    body = gpu_workload("bert")
    change(body)
    with pytest.raises(ApiException) as raised:
        await client.AppsV1Api(api).create_namespaced_deployment(NS, body)
    assert raised.value.status == 422
    assert causes(raised.value)[field][0] == reason


async def test_dns_names_by_kind(api: ApiClient) -> None:
    name_msg = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters"
    with pytest.raises(ApiException) as raised:
        await client.AppsV1Api(api).create_namespaced_deployment(NS, gpu_workload("Bert"))
    assert name_msg in causes(raised.value)["metadata.name"][1]
    # A StatefulSet names its pods' hostnames: a DNS label, no dots.
    with pytest.raises(ApiException) as raised:
        await client.AppsV1Api(api).create_namespaced_stateful_set(
            NS, gpu_workload("llm.v2", kind="StatefulSet")
        )
    assert "RFC 1123 label" in causes(raised.value)["metadata.name"][1]
    # A Service name is a DNS-1035 label: it may not start with a digit.
    with pytest.raises(ApiException) as raised:
        await client.CoreV1Api(api).create_namespaced_service(
            NS, {"metadata": {"name": "1api"}, "spec": {"ports": [{"port": 80}]}}
        )
    assert "DNS-1035 label" in causes(raised.value)["metadata.name"][1]
    # A Namespace too is a label.
    with pytest.raises(ApiException) as raised:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": "team.a"}})
    assert "RFC 1123 label" in causes(raised.value)["metadata.name"][1]


async def test_statefulset_rules(api: ApiClient) -> None:
    body = gpu_workload("llm", kind="StatefulSet")
    body["spec"]["podManagementPolicy"] = "AllAtOnce"
    with pytest.raises(ApiException) as raised:
        await client.AppsV1Api(api).create_namespaced_stateful_set(NS, body)
    assert causes(raised.value)["spec.podManagementPolicy"] == (
        "FieldValueNotSupported",
        'Unsupported value: "AllAtOnce": supported values: "OrderedReady", "Parallel"',
    )


async def test_selector_is_immutable(api: ApiClient) -> None:
    apps = client.AppsV1Api(api)
    await apps.create_namespaced_deployment(NS, gpu_workload("bert"))
    changed = gpu_workload("bert")
    changed["spec"]["selector"]["matchLabels"]["tier"] = "gpu"
    changed["spec"]["template"]["metadata"]["labels"]["tier"] = "gpu"
    with pytest.raises(ApiException) as raised:
        await apps.replace_namespaced_deployment("bert", NS, changed)
    assert causes(raised.value)["spec.selector"][1].endswith("field is immutable")


async def test_pod_needs_containers_with_images(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_pod(NS, {"metadata": {"name": "p"}, "spec": {"containers": []}})
    assert raised.value.status == 422
    assert status_of(raised.value)["message"] == 'Pod "p" is invalid: spec.containers: Required value'
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_pod(
            NS, {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
        )
    assert causes(raised.value) == {"spec.containers[0].image": ("FieldValueRequired", "Required value")}


async def test_wrong_types_are_400_from_the_decoder(kube_sim: KubeSim) -> None:
    body = gpu_workload("bert")
    body["spec"]["replicas"] = "two"
    status, answer, _ = await raw(kube_sim, "POST", f"/apis/apps/v1/namespaces/{NS}/deployments", body)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert answer["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: json: cannot unmarshal string '
        "into Go struct field DeploymentSpec.spec.replicas of type int32"
    )


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity", "1e400"])
async def test_nan_and_infinity_are_no_json_to_the_decoder(kube_sim: KubeSim, constant: str) -> None:
    """Go's decoder refuses them; Python's reader takes them as numbers."""
    body = json.dumps(gpu_workload("bert")).replace('"replicas": 1', f'"replicas": {constant}', 1)
    assert constant in body
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            kube_sim.url + f"/apis/apps/v1/namespaces/{NS}/deployments",
            data=body,
            headers={"Content-Type": "application/json"},
        ) as response,
    ):
        answer = await response.json()
    assert (response.status, answer["reason"]) == (400, "BadRequest")


async def test_unknown_fields_of_built_in_kinds(kube_sim: KubeSim) -> None:
    body = gpu_workload("bert")
    body["spec"]["template"]["spec"]["containers"][0]["gpus"] = 1
    path = f"/apis/apps/v1/namespaces/{NS}/deployments"
    status, answer, _ = await raw(kube_sim, "POST", path + "?fieldValidation=Strict", body)
    assert status == 400
    assert answer["message"].endswith(
        'strict decoding error: unknown field "spec.template.spec.containers[0].gpus"'
    )
    status, answer, warnings = await raw(kube_sim, "POST", path, body)
    assert status == 201
    assert warnings == ['299 - "unknown field \\"spec.template.spec.containers[0].gpus\\""']
    assert "gpus" not in answer["spec"]["template"]["spec"]["containers"][0]


async def test_objects_need_an_existing_namespace(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    with pytest.raises(ApiException) as raised:
        await client.AppsV1Api(api).create_namespaced_deployment(
            "team-a", gpu_workload("bert", namespace="team-a")
        )
    assert raised.value.status == 404
    assert status_of(raised.value)["message"] == 'namespaces "team-a" not found'
    await core.create_namespace({"metadata": {"name": "team-a"}})
    created = await client.AppsV1Api(api).create_namespaced_deployment(
        "team-a", gpu_workload("bert", namespace="team-a")
    )
    assert created.metadata.namespace == "team-a"


# --- Leases ------------------------------------------------------------------------

LEASE = {
    "apiVersion": "coordination.k8s.io/v1",
    "kind": "Lease",
    "metadata": {"name": "leader"},
    "spec": {
        "holderIdentity": "a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2026-01-01T00:00:00.000000Z",
        "renewTime": "2026-01-01T00:00:05.123456Z",
        "leaseTransitions": 0,
    },
}


async def test_lease_times_are_micro_times(kube_sim: KubeSim) -> None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
    body = copy.deepcopy(LEASE)
    body["spec"]["renewTime"] = "2026-01-01T00:00:05Z"  # no fractional seconds
    status, answer, _ = await raw(kube_sim, "POST", path, body)
    assert (status, answer["reason"]) == (400, "BadRequest")
    assert 'parsing time "2026-01-01T00:00:05Z" as "2006-01-02T15:04:05.000000Z07:00"' in answer["message"]
    status, answer, _ = await raw(kube_sim, "POST", path, LEASE)
    assert status == 201
    assert answer["spec"]["renewTime"] == "2026-01-01T00:00:05.123456Z"


async def test_lease_rules(api: ApiClient) -> None:
    coordination = client.CoordinationV1Api(api)
    bad = copy.deepcopy(LEASE)
    bad["spec"]["leaseDurationSeconds"] = 0
    with pytest.raises(ApiException) as raised:
        await coordination.create_namespaced_lease(NS, bad)
    assert causes(raised.value)["spec.leaseDurationSeconds"] == (
        "FieldValueInvalid",
        "Invalid value: 0: must be greater than 0",
    )
    created = await coordination.create_namespaced_lease(NS, LEASE)
    # A Lease takes no unconditional update: a PUT must say which version it replaces.
    with pytest.raises(ApiException) as raised:
        await coordination.replace_namespaced_lease("leader", NS, LEASE)
    assert raised.value.status == 422
    assert (
        causes(raised.value)["metadata.resourceVersion"][1]
        == "Invalid value: 0x0: must be specified for an update"
    )
    renewed = copy.deepcopy(LEASE)
    renewed["metadata"]["resourceVersion"] = created.metadata.resource_version
    renewed["spec"]["holderIdentity"] = "b"
    replaced = await coordination.replace_namespaced_lease("leader", NS, renewed)
    assert replaced.spec.holder_identity == "b"


# --- Events ------------------------------------------------------------------------


def new_event(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "bert.1", "namespace": NS},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "gpuscale.io/actuator",
        "reportingInstance": "actuator-0",
        "action": "Scale",
        "reason": "GPUScaled",
        "note": "scaled from 1 to 3",
        "type": "Normal",
        "regarding": {"kind": "Deployment", "name": "bert", "namespace": NS},
    }
    for key, value in overrides.items():
        if value is None:
            event.pop(key, None)
        else:
            event[key] = value
    return event


@pytest.mark.parametrize(
    ("overrides", "field", "message"),
    [
        ({"eventTime": None}, "eventTime", "Required value"),
        ({"reportingController": None}, "reportingController", "Required value"),
        ({"reportingInstance": None}, "reportingInstance", "Required value"),
        ({"action": None}, "action", "Required value"),
        ({"reason": None}, "reason", "Required value"),
        ({"type": "Info"}, "type", 'Invalid value: "": has invalid value: Info'),
        # 600 × signs are 600 characters but 1,200 bytes: the limit is in bytes.
        ({"note": "×" * 600}, "message", 'Invalid value: "": can have at most 1024 characters'),
        ({"deprecatedCount": 3}, "count", 'Invalid value: "": needs to be unset'),
        ({"deprecatedSource": {"component": "actuator"}}, "source", 'Invalid value: "": needs to be unset'),
        ({"reportingController": "not a name!"}, "reportingController", None),
    ],
)
async def test_events_api_rules(
    api: ApiClient, overrides: dict[str, Any], field: str, message: str | None
) -> None:
    with pytest.raises(ApiException) as raised:
        await client.EventsV1Api(api).create_namespaced_event(NS, new_event(**overrides))
    assert raised.value.status == 422
    found = [(c["field"], c["message"]) for c in status_of(raised.value)["details"]["causes"]]
    assert field in {f for f, _ in found}, found
    if message is not None:
        assert (field, message) in found


async def test_a_note_of_exactly_1024_bytes_is_accepted(api: ApiClient) -> None:
    note = "×" * 512  # 1,024 bytes
    created = await client.EventsV1Api(api).create_namespaced_event(NS, new_event(note=note))
    assert created.note == note


async def test_core_events_follow_the_legacy_rules(api: ApiClient) -> None:
    core = client.CoreV1Api(api)
    legacy = {
        "metadata": {"name": "bert.2"},
        "involvedObject": {"kind": "Deployment", "name": "bert", "namespace": NS},
        "reason": "ScaledDown",
        "message": "x" * 2000,  # no eventTime: the old rules, which do not limit the message
        "type": "Normal",
        "source": {"component": "someone"},
    }
    await core.create_namespaced_event(NS, legacy)
    new_style = dict(
        legacy, metadata={"name": "bert.3"}, eventTime="2026-01-01T00:00:00.000000Z", message="ok"
    )
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_event(NS, new_style)
    assert set(causes(raised.value)) == {"reportingComponent", "reportingInstance", "action"}
    wrong_ns = dict(
        legacy,
        metadata={"name": "bert.4"},
        involvedObject={"kind": "Pod", "name": "p", "namespace": "kube-system"},
    )
    with pytest.raises(ApiException) as raised:
        await core.create_namespaced_event(NS, wrong_ns)
    assert (
        causes(raised.value)["involvedObject.namespace"][1]
        == 'Invalid value: "kube-system": does not match event.namespace'
    )


# --- network policies ----------------------------------------------------------------


async def test_network_policy_types_and_protocols_are_checked(api: ApiClient) -> None:
    body = {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": "only-keda"},
        "spec": {
            "podSelector": {"matchLabels": {"app": "scaler"}},
            "policyTypes": ["Ingress", "Sideways"],
            "ingress": [{"ports": [{"port": 9500, "protocol": "ICMP"}]}],
        },
    }
    with pytest.raises(ApiException) as raised:
        await client.NetworkingV1Api(api).create_namespaced_network_policy(NS, body)
    assert raised.value.status == 422
    assert {field: reason for field, (reason, _) in causes(raised.value).items()} == {
        "spec.policyTypes[1]": "FieldValueNotSupported",
        "spec.ingress[0].ports[0].protocol": "FieldValueNotSupported",
    }
    body["spec"]["policyTypes"] = ["Ingress"]
    body["spec"]["ingress"] = [{"ports": [{"port": 9500, "protocol": "TCP"}]}]
    created = await client.NetworkingV1Api(api).create_namespaced_network_policy(NS, body)
    assert created.spec.pod_selector.match_labels == {"app": "scaler"}
