"""Which NATS user a collector's reviewed token earns: named scenarios, values in and out.

From the TokenReview API reference: a review is trusted only when
``status.authenticated`` and ``status.audiences`` names the audience we asked
for; the user of a pod-bound ServiceAccount token is
``system:serviceaccount:<ns>:<name>`` with the ``authentication.kubernetes.io/
pod-name``/``pod-uid`` extras, and ``node-name`` from Kubernetes 1.30.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale import subjects
from gpuscale.names import is_dns1123_subdomain
from gpuscale_natsauth.core import decide
from gpuscale_natsauth.core.decide import Grant, Identity, Policy, Refusal, Review

from .natsauth_builders import ACCOUNT, AUDIENCE, NOW, NS, SA, jwt_shaped, pod, review_status

POLICY = Policy(namespace=NS, service_account=SA, audience=AUDIENCE, account=ACCOUNT, max_ttl_s=3600)


def identify(**status: Any) -> Identity | Refusal:
    return decide.identify(Review.from_status(review_status(**status)), POLICY)


def refused_for(outcome: object) -> str:
    assert isinstance(outcome, Refusal), f"expected a refusal, got {outcome!r}"
    return outcome.reason


# --- who the token belongs to --------------------------------------------------------------------


def test_a_collector_token_with_its_node_names_pod_and_node() -> None:
    assert identify() == Identity(NS, "gpuscale-collector-x7k2p", "pod-uid-1", "gpu-node-1")


def test_a_token_without_node_name_leaves_the_node_to_the_pod() -> None:
    identity = identify(node=None)
    assert isinstance(identity, Identity)
    assert identity.node is None


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        ({"authenticated": False}, decide.TOKEN_REJECTED),
        (
            {"authenticated": False, "error": "[invalid bearer token, service account token has expired]"},
            decide.TOKEN_EXPIRED,
        ),
        (
            {
                "authenticated": False,
                "error": '[invalid bearer token, token audiences ["api"] is invalid for the target audiences '
                '["nats.gpuscale.io"]]',
            },
            decide.WRONG_AUDIENCE,
        ),
        ({"audiences": ()}, decide.WRONG_AUDIENCE),  # an API server that ignored spec.audiences
        ({"audiences": ("https://kubernetes.default.svc",)}, decide.WRONG_AUDIENCE),
        ({"username": "alice"}, decide.NOT_A_SERVICE_ACCOUNT),
        ({"username": "system:node:gpu-node-1"}, decide.NOT_A_SERVICE_ACCOUNT),
        ({"username": f"system:serviceaccount:{NS}:gpuscale-decider"}, decide.WRONG_SERVICE_ACCOUNT),
        ({"username": f"system:serviceaccount:default:{SA}"}, decide.WRONG_SERVICE_ACCOUNT),
        ({"pod": None, "pod_uid": None, "node": None}, decide.NOT_POD_BOUND),  # kubectl create token
        ({"pod_uid": None}, decide.NOT_POD_BOUND),
        ({"node": "gpu-node-1.*"}, decide.BAD_NODE_NAME),
        ({"node": "GPU-NODE-1"}, decide.BAD_NODE_NAME),
        ({"node": "a" * 254}, decide.BAD_NODE_NAME),
    ],
    ids=[
        "unauthenticated",
        "expired",
        "audience-refused",
        "no-audience-in-status",
        "api-audience",
        "a-person",
        "a-node",
        "another-role",
        "same-name-other-namespace",
        "unbound-token",
        "no-pod-uid",
        "wildcard-node",
        "uppercase-node",
        "over-long-node",
    ],
)
def test_tokens_that_are_not_a_collector_pods_are_refused(status: dict[str, Any], reason: str) -> None:
    assert refused_for(identify(**status)) == reason


def test_two_values_for_one_extra_are_not_a_binding() -> None:
    status = review_status()
    status["user"]["extra"]["authentication.kubernetes.io/pod-name"] = ["a", "b"]
    assert refused_for(decide.identify(Review.from_status(status), POLICY)) == decide.NOT_POD_BOUND


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20))  # fmt: skip
def test_any_review_shape_reads_without_error_and_is_never_a_grant_by_accident(status: Any) -> None:
    outcome = decide.identify(Review.from_status(status), POLICY)
    assert isinstance(outcome, Refusal)


# --- where the pod runs (tokens without the node) --------------------------------------------------


IDENTITY = Identity(NS, "gpuscale-collector-x7k2p", "pod-uid-1", None)


def test_the_pod_says_where_it_runs() -> None:
    assert decide.node_from_pod(IDENTITY, pod(node="gpu-node-7"), POLICY) == "gpu-node-7"


@pytest.mark.parametrize(
    ("found", "reason"),
    [
        (None, decide.POD_GONE),
        (pod(uid="pod-uid-2"), decide.POD_GONE),  # deleted and recreated with the same name
        (pod(deleting=True), decide.POD_GONE),
        (pod(node=None), decide.POD_NOT_SCHEDULED),
        (pod(service_account="default"), decide.WRONG_SERVICE_ACCOUNT),
        (pod(node="Node_1"), decide.BAD_NODE_NAME),
    ],
    ids=["missing", "recreated", "deleting", "unscheduled", "other-account", "bad-node"],
)
def test_a_pod_that_cannot_vouch_for_a_node_is_refused(found: dict[str, Any] | None, reason: str) -> None:
    assert refused_for(decide.node_from_pod(IDENTITY, found, POLICY)) == reason


# --- the grant -----------------------------------------------------------------------------------


def test_the_grant_publishes_only_that_nodes_samples_and_reads_no_inbox() -> None:
    grant = decide.grant("gpu-node-1", "p", NOW + 1800, NOW, POLICY)
    assert grant == Grant(
        node="gpu-node-1",
        name="collector:gpu-node-1/p",
        permissions=decide.Permissions(publish=("gpuscale.v1.samples.gpu-node-1",), subscribe=()),
        expires=NOW + 1800,
    )


def test_a_node_name_with_dots_gets_its_escaped_subject() -> None:
    grant = decide.grant("ip-10-0-0-7.ec2.internal", "p", None, NOW, POLICY)
    assert isinstance(grant, Grant)
    assert grant.permissions.publish == (subjects.samples("ip-10-0-0-7.ec2.internal"),)
    assert grant.permissions.publish == ("gpuscale.v1.samples.ip-10-0-0-7~2Eec2~2Einternal",)


@pytest.mark.parametrize(
    ("token_expires", "expires"),
    [(NOW + 600, NOW + 600), (NOW + 7200, NOW + 3600), (None, NOW + 3600)],
    ids=["token-first", "cap-first", "no-exp-claim"],
)
def test_the_user_expires_with_its_token_or_the_cap(token_expires: int | None, expires: int) -> None:
    grant = decide.grant("gpu-node-1", "p", token_expires, NOW, POLICY)
    assert isinstance(grant, Grant)
    assert grant.expires == expires


def test_a_token_about_to_expire_earns_nothing() -> None:
    assert refused_for(decide.grant("gpu-node-1", "p", NOW + 2, NOW, POLICY)) == decide.TOKEN_EXPIRED


@given(st.from_regex(r"[a-z0-9]([-a-z0-9.]{0,60}[a-z0-9])?", fullmatch=True))
def test_every_valid_node_name_is_one_literal_subject_token(node: str) -> None:
    if not is_dns1123_subdomain(node):
        return
    (subject,) = decide.permissions(node).publish
    tokens = subject.split(".")
    assert tokens[:3] == ["gpuscale", "v1", "samples"]
    assert len(tokens) == 4
    assert "*" not in subject
    assert ">" not in subject
    assert subjects.parse_samples(subject) == node


# --- small pieces ---------------------------------------------------------------------------------


def test_the_review_asks_the_api_server_for_our_audience() -> None:
    assert decide.token_review("tok", POLICY) == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": "tok", "audiences": [AUDIENCE]},
    }


def test_a_connection_without_a_token_is_refused_before_asking() -> None:
    assert refused_for(decide.check_token("")) == decide.TOKEN_MISSING
    assert refused_for(decide.check_token("  \n")) == decide.TOKEN_MISSING
    assert decide.check_token("a.b.c") is None


@pytest.mark.parametrize(
    ("token", "expiry"),
    [
        (jwt_shaped({"exp": NOW + 5}), NOW + 5),
        (jwt_shaped({"exp": 1.8e9}), 1_800_000_000),
        (jwt_shaped({"exp": True}), None),
        (jwt_shaped({"exp": -3}), None),
        (jwt_shaped({}), None),
        ("opaque-token", None),
        ("a.!!!.c", None),
    ],
)
def test_the_token_expiry_is_read_from_a_jwt_shaped_token(token: str, expiry: int | None) -> None:
    assert decide.token_expiry(token) == expiry


def test_a_policy_that_cannot_work_is_explained() -> None:
    assert decide.policy_problems(POLICY) == []
    bad = Policy(namespace="Gpu Scale", service_account="", audience=AUDIENCE, account=ACCOUNT, max_ttl_s=1)
    assert len(decide.policy_problems(bad)) == 3


# --- the shape of a token, before any review -------------------------------------------------------


def sa_claims(**overrides: Any) -> dict[str, Any]:
    """The claims of a collector pod's projected token, as kube-apiserver writes them."""
    claims: dict[str, Any] = {
        "aud": [AUDIENCE],
        "exp": NOW + 3600,
        "iat": NOW,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "sub": f"system:serviceaccount:{NS}:{SA}",
        "kubernetes.io": {"namespace": NS, "pod": {"name": "p", "uid": "u"}},
    }
    claims.update(overrides)
    return {k: v for k, v in claims.items() if v is not None}


def sa_token(claims: dict[str, Any] | None = None, **header: Any) -> str:
    return jwt_shaped(
        sa_claims() if claims is None else claims, header={"alg": "RS256", "kid": "k1", **header}
    )


def test_a_collector_pods_token_passes_the_shape_check() -> None:
    assert decide.check_shape(sa_token(), POLICY, NOW) is None
    assert decide.check_shape(sa_token(alg="ES256"), POLICY, NOW) is None
    assert decide.check_shape(sa_token(sa_claims(aud=AUDIENCE)), POLICY, NOW) is None


UNREVIEWABLE = {
    "no-dots": ("not-a-token", decide.TOKEN_MALFORMED),
    "two-parts": ("a.b", decide.TOKEN_MALFORMED),
    "four-parts": ("a.b.c.d", decide.TOKEN_MALFORMED),
    "a-space": ("a b.c.d", decide.TOKEN_MALFORMED),
    "padding": ("e30.e30.=", decide.TOKEN_MALFORMED),
    "too-long": ("x" * 9000 + ".e30.c2ln", decide.TOKEN_MALFORMED),
    "header-not-object": ("W10.e30.c2ln", decide.TOKEN_MALFORMED),
    "alg-none": (sa_token(alg="none"), decide.TOKEN_MALFORMED),
    "alg-hmac": (sa_token(alg="HS256"), decide.TOKEN_MALFORMED),
    "empty-kid": (sa_token(kid=""), decide.TOKEN_MALFORMED),
    "no-kid": (sa_token(kid=None), decide.TOKEN_MALFORMED),
    "no-exp": (sa_token(sa_claims(exp=None)), decide.TOKEN_MALFORMED),
    "exp-text": (sa_token(sa_claims(exp="soon")), decide.TOKEN_MALFORMED),
    "no-sub": (sa_token(sa_claims(sub=None)), decide.TOKEN_MALFORMED),
    "expired": (sa_token(sa_claims(exp=NOW)), decide.TOKEN_EXPIRED),
    "not-a-service-account": (sa_token(sa_claims(sub="alice")), decide.NOT_A_SERVICE_ACCOUNT),
    "another-service-account": (
        sa_token(sa_claims(sub=f"system:serviceaccount:{NS}:default")),
        decide.WRONG_SERVICE_ACCOUNT,
    ),
    "the-api-servers-audience": (
        sa_token(sa_claims(aud=["https://kubernetes.default.svc"])),
        decide.WRONG_AUDIENCE,
    ),
    "no-audience": (sa_token(sa_claims(aud=None)), decide.WRONG_AUDIENCE),
}


@pytest.mark.parametrize(("token", "reason"), list(UNREVIEWABLE.values()), ids=list(UNREVIEWABLE))
def test_what_no_review_could_accept_is_refused_without_one(token: str, reason: str) -> None:
    assert refused_for(decide.check_shape(token, POLICY, NOW)) == reason


def test_a_deeply_nested_header_is_refused_not_a_crash() -> None:
    nested = base64.urlsafe_b64encode(b"[" * 6000).rstrip(b"=").decode()
    assert refused_for(decide.check_shape(f"{nested}.e30.c2ln", POLICY, NOW)) == decide.TOKEN_MALFORMED


@given(st.text(max_size=300))
def test_the_shape_check_never_raises(token: str) -> None:
    outcome = decide.check_shape(token, POLICY, NOW)
    assert outcome is None or outcome.reason in decide.REASONS
