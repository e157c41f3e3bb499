"""ServiceAccount tokens as kube-apiserver issues and reviews them: TokenRequest and TokenReview.

The expectations are the API server's (pkg/serviceaccount/claims.go, the
serviceaccounts/token and tokenreviews REST storage, the TokenReview API
reference): a review is valid only while the token is unexpired (one minute
of leeway), shares an audience with the review, and the ServiceAccount, pod
and node it is bound to still exist with the same UIDs; a pod-bound token's
user carries the pod and (Kubernetes >= 1.30) node extras.
"""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio.client import ApiClient, ApiException, CoreV1Api

from gpuscale_kubesim import KubeSim

from ..k8s_objects import node_pod, service_account
from .conftest import Kubectl, status_of

pytestmark = pytest.mark.integration

NS = "gpuscale"
SA = "gpuscale-collector"
AUDIENCE = "nats.gpuscale.io"
API_AUDIENCE = "https://kubernetes.default.svc.cluster.local"
REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"


@pytest.fixture
async def collector_pod(kube_sim: KubeSim) -> dict[str, Any]:
    await kube_sim.create(service_account(SA, NS))
    return await kube_sim.create(node_pod("collector-a", "gpu-node-1", service_account=SA, namespace=NS))


async def review(
    sim: KubeSim, token: str, audiences: list[str] | None = None, **query: str
) -> dict[str, Any]:
    """POST a TokenReview over plain HTTP (the admin token): the answer's status, and its code."""
    spec: dict[str, Any] = {"token": token}
    if audiences is not None:
        spec["audiences"] = audiences
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{sim.url}{REVIEWS}", json=body, params=query) as resp,
    ):
        answer: dict[str, Any] = await resp.json()
        answer["_code"] = resp.status
        return answer


def bound_token(sim: KubeSim, *, pod: str = "collector-a", **kw: Any) -> str:
    return sim.create_token(NS, SA, pod=pod, audiences=kw.pop("audiences", (AUDIENCE,)), **kw)


# --- TokenReview of a pod-bound token ---------------------------------------------------------


async def test_a_pod_bound_token_reviews_as_its_service_account_pod_and_node(
    kube_sim: KubeSim, collector_pod: dict[str, Any]
) -> None:
    node = kube_sim.get("v1", "Node", "gpu-node-1", namespace=None)
    sa = kube_sim.get("v1", "ServiceAccount", SA, namespace=NS)
    answer = await review(kube_sim, bound_token(kube_sim), [AUDIENCE])
    assert answer["_code"] == 201
    status = answer["status"]
    assert status["authenticated"] is True
    assert status["audiences"] == [AUDIENCE]
    user = status["user"]
    assert user["username"] == f"system:serviceaccount:{NS}:{SA}"
    assert user["uid"] == sa["metadata"]["uid"]
    assert user["groups"] == [
        "system:serviceaccounts",
        f"system:serviceaccounts:{NS}",
        "system:authenticated",
    ]
    extra = user["extra"]
    assert extra["authentication.kubernetes.io/pod-name"] == ["collector-a"]
    assert extra["authentication.kubernetes.io/pod-uid"] == [collector_pod["metadata"]["uid"]]
    assert extra["authentication.kubernetes.io/node-name"] == ["gpu-node-1"]
    assert extra["authentication.kubernetes.io/node-uid"] == [node["metadata"]["uid"]]
    (credential,) = extra["authentication.kubernetes.io/credential-id"]
    assert credential.startswith("JTI=")


async def test_without_pod_node_info_the_review_names_no_node() -> None:
    """Clusters before 1.30 (ServiceAccountTokenPodNodeInfo off): pod extras only."""
    async with KubeSim(port=0, scenario="empty", token_node_info=False) as sim:
        await sim.create(service_account(SA, NS))
        await sim.create(node_pod("collector-a", "gpu-node-1", service_account=SA, namespace=NS))
        status = (await review(sim, bound_token(sim), [AUDIENCE]))["status"]
    assert status["authenticated"] is True
    assert "authentication.kubernetes.io/pod-name" in status["user"]["extra"]
    assert "authentication.kubernetes.io/node-name" not in status["user"]["extra"]


async def test_the_review_is_for_the_api_server_when_it_names_no_audience(
    kube_sim: KubeSim, collector_pod: dict[str, Any]
) -> None:
    plain = kube_sim.create_token(NS, SA, pod="collector-a")  # for the API server's audience
    assert (await review(kube_sim, plain))["status"]["audiences"] == [API_AUDIENCE]
    refused = (await review(kube_sim, plain, [AUDIENCE]))["status"]
    assert "authenticated" not in refused
    assert refused["user"] == {}
    assert refused["error"] == (
        f'[invalid bearer token, token audiences ["{API_AUDIENCE}"] is invalid for the target audiences '
        f'["{AUDIENCE}"]]'
    )


async def test_an_expired_token_is_invalid_after_a_minute_of_leeway(
    kube_sim: KubeSim, collector_pod: dict[str, Any]
) -> None:
    now = time.time()
    within_leeway = bound_token(kube_sim, expiration_s=600, issued_at=now - 630)
    assert (await review(kube_sim, within_leeway, [AUDIENCE]))["status"]["authenticated"] is True
    expired = bound_token(kube_sim, expiration_s=600, issued_at=now - 700)
    status = (await review(kube_sim, expired, [AUDIENCE]))["status"]
    assert status["error"] == "[invalid bearer token, service account token has expired]"


async def test_a_token_dies_with_its_pod_and_a_new_pod_of_the_same_name_does_not_revive_it(
    kube_sim: KubeSim, collector_pod: dict[str, Any]
) -> None:
    token = bound_token(kube_sim)
    kube_sim.store.delete(kube_sim.resource("v1", "Pod"), NS, "collector-a", grace_period_s=0)
    status = (await review(kube_sim, token, [AUDIENCE]))["status"]
    assert status["error"] == "[invalid bearer token, service account token has been invalidated]"

    await kube_sim.create(node_pod("collector-a", "gpu-node-2", service_account=SA, namespace=NS))
    status = (await review(kube_sim, token, [AUDIENCE]))["status"]
    assert "pod UID" in status["error"]
    assert "does not match service account pod ref claim" in status["error"]


async def test_a_node_bound_token_dies_with_its_node(
    kube_sim: KubeSim, collector_pod: dict[str, Any]
) -> None:
    token = bound_token(kube_sim)
    kube_sim.store.delete(kube_sim.resource("v1", "Node"), None, "gpu-node-1")
    status = (await review(kube_sim, token, [AUDIENCE]))["status"]
    assert status["error"] == "[invalid bearer token, service account token has been invalidated]"


async def test_a_token_dies_with_its_service_account(
    kube_sim: KubeSim, collector_pod: dict[str, Any]
) -> None:
    token = bound_token(kube_sim)
    kube_sim.store.delete(kube_sim.resource("v1", "ServiceAccount"), NS, SA)
    status = (await review(kube_sim, token, [AUDIENCE]))["status"]
    assert status["error"] == f'[invalid bearer token, serviceaccounts "{SA}" not found]'


@pytest.mark.parametrize(
    "token", ["not-a-jwt", "a.b.c", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"], ids=str
)
async def test_a_token_kube_sim_did_not_sign_is_invalid(kube_sim: KubeSim, token: str) -> None:
    status = (await review(kube_sim, token, [AUDIENCE]))["status"]
    assert status == {"user": {}, "error": "invalid bearer token"}


async def test_another_servers_token_is_invalid(collector_pod: dict[str, Any], kube_sim: KubeSim) -> None:
    async with KubeSim(port=0, scenario="empty") as other:
        await other.create(service_account(SA, NS))
        await other.create(node_pod("collector-a", "gpu-node-1", service_account=SA, namespace=NS))
        foreign = bound_token(other)
    assert (await review(kube_sim, foreign, [AUDIENCE]))["status"]["error"] == "invalid bearer token"


# --- the API's shape ------------------------------------------------------------------------------


async def test_tokenreviews_are_create_only_and_cluster_scoped(kube_sim: KubeSim) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{kube_sim.url}{REVIEWS}") as resp:
            assert (resp.status, (await resp.json())["reason"]) == (405, "MethodNotAllowed")
        path = "/apis/authentication.k8s.io/v1/namespaces/default/tokenreviews"
        async with http.post(f"{kube_sim.url}{path}", json={"spec": {"token": "x"}}) as resp:
            assert resp.status == 404
        async with http.get(f"{kube_sim.url}/apis/authentication.k8s.io/v1") as resp:
            resources = {r["name"]: r for r in (await resp.json())["resources"]}
    assert resources["tokenreviews"]["verbs"] == ["create"]
    assert resources["tokenreviews"]["namespaced"] is False


async def test_a_review_needs_a_token_and_strict_decoding_refuses_unknown_fields(kube_sim: KubeSim) -> None:
    empty = await review(kube_sim, "")
    assert (empty["_code"], empty["message"]) == (400, "token is required for TokenReview in authentication")
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "x", "tokn": 1},
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{kube_sim.url}{REVIEWS}", json=body, params={"fieldValidation": "Strict"}) as resp,
    ):
        assert resp.status == 400
        assert 'unknown field "spec.tokn"' in (await resp.json())["message"]


async def test_kubectl_creates_a_review(
    kube_sim: KubeSim, kubectl: Kubectl, collector_pod: dict[str, Any]
) -> None:
    if shutil.which("kubectl") is None:
        pytest.skip("kubectl is not installed on this machine")
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": bound_token(kube_sim), "audiences": [AUDIENCE]},
    }
    answer = json.loads(await kubectl("create", "-o", "json", "-f", "-", stdin=json.dumps(body)))
    assert answer["status"]["user"]["username"] == f"system:serviceaccount:{NS}:{SA}"
    assert "MethodNotAllowed" in await kubectl("get", "tokenreviews", check=False)


async def test_rbac_decides_who_may_review_tokens(collector_pod: dict[str, Any], kube_sim: KubeSim) -> None:
    reviewer = {"user": "system:serviceaccount:gpuscale:reviewer", "rules": [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]}
    ]}  # fmt: skip
    async with KubeSim(port=0, scenario="empty", tokens={"admin": None, "rev": reviewer, "none": []}) as sim:
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "x"}}
        async with aiohttp.ClientSession() as http:
            for token, code in (("rev", 201), ("none", 403), ("", 401)):
                headers = {"Authorization": f"Bearer {token}"} if token else {}
                async with http.post(f"{sim.url}{REVIEWS}", json=body, headers=headers) as resp:
                    assert resp.status == code, token
                    if code == 403:
                        assert (await resp.json())["message"] == (
                            'tokenreviews.authentication.k8s.io is forbidden: User "kube-sim:token:none" '
                            'cannot create resource "tokenreviews" in API group "authentication.k8s.io" '
                            "at the cluster scope"
                        )


# --- TokenRequest (serviceaccounts/token) through a real client ------------------------------------


@pytest.fixture
async def core(api: ApiClient) -> CoreV1Api:
    return CoreV1Api(api)


async def test_a_real_client_requests_a_pod_bound_token(
    kube_sim: KubeSim, core: CoreV1Api, collector_pod: dict[str, Any]
) -> None:
    body = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [AUDIENCE],
            "expirationSeconds": 900,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "collector-a"},
        },
    }
    before = time.time()
    answer = await core.create_namespaced_service_account_token(SA, NS, body)
    assert answer.spec.expiration_seconds == 900
    assert answer.spec.audiences == [AUDIENCE]
    expires = answer.status.expiration_timestamp.timestamp()
    assert before + 900 - 2 <= expires <= time.time() + 900 + 1
    status = (await review(kube_sim, answer.status.token, [AUDIENCE]))["status"]
    assert status["user"]["extra"]["authentication.kubernetes.io/pod-name"] == ["collector-a"]


async def test_a_token_request_defaults_to_an_hour_for_the_api_server(
    kube_sim: KubeSim, core: CoreV1Api, collector_pod: dict[str, Any]
) -> None:
    answer = await core.create_namespaced_service_account_token(SA, NS, {"spec": {}})
    assert answer.spec.expiration_seconds == 3600
    assert answer.spec.audiences == [API_AUDIENCE]
    status = (await review(kube_sim, answer.status.token))["status"]
    assert status["authenticated"] is True
    assert "authentication.kubernetes.io/pod-name" not in status["user"]["extra"], "bound to nothing"


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        (
            {"expirationSeconds": 60},
            422,
            'TokenRequest.authentication.k8s.io "gpuscale-collector" is invalid: spec.expirationSeconds: '
            "Invalid value: 60: may not specify a duration less than 10 minutes",
        ),
        (
            {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "nope"}},
            404,
            'pods "nope" not found',
        ),
        (
            {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "other-sa-pod"}},
            400,
            'cannot bind token for serviceaccount "gpuscale-collector" to pod running with different '
            "serviceaccount name.",
        ),
        (
            {"boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "collector-a", "uid": "0000"}},
            409,
            "the UID in the bound object reference (0000) does not match the UID in record",
        ),
    ],
    ids=["too-short", "no-such-pod", "pod-of-another-account", "stale-pod-uid"],
)
async def test_token_requests_the_api_server_refuses(
    kube_sim: KubeSim,
    core: CoreV1Api,
    collector_pod: dict[str, Any],
    spec: dict[str, Any],
    code: int,
    message: str,
) -> None:
    await kube_sim.create(node_pod("other-sa-pod", "gpu-node-2", service_account="default", namespace=NS))
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_service_account_token(SA, NS, {"spec": spec})
    assert refused.value.status == code
    assert message in status_of(refused.value)["message"]


async def test_a_token_for_a_missing_service_account_is_not_found(kube_sim: KubeSim, core: CoreV1Api) -> None:
    with pytest.raises(ApiException) as refused:
        await core.create_namespaced_service_account_token("ghost", "default", {"spec": {}})
    assert refused.value.status == 404
    assert status_of(refused.value)["message"] == 'serviceaccounts "ghost" not found'
