"""Who may connect as which node's collector. Pure: values in, values out.

A reviewed ServiceAccount token names the collector and its node; the grant may publish on
that node's samples subject only, for no longer than the token lives."""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from gpuscale import subjects
from gpuscale.names import is_dns1123_label, is_dns1123_subdomain

from .natsjwt import Permissions

NODE_NAME_KEY: Final = "authentication.kubernetes.io/node-name"
POD_NAME_KEY: Final = "authentication.kubernetes.io/pod-name"
POD_UID_KEY: Final = "authentication.kubernetes.io/pod-uid"
SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"
# A token is refused when it has less than this left: the user would expire on arrival.
MIN_REMAINING_S: Final = 5
# A pod-bound ServiceAccount token is 1-2 KiB; anything far longer is not one.
MAX_TOKEN_CHARS: Final = 8192
# The JWS algorithms a Kubernetes service-account key signs with (RSA or EC keys,
# external signers included): never "none", never a shared-secret HMAC.
TOKEN_ALGORITHMS: Final = frozenset(
    {"RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "PS384", "PS512"}
)
_BASE64URL: Final = re.compile(r"[A-Za-z0-9_-]+")
# The last second of year 9999 (as Go's time formats it): no Kubernetes token expires later. JSON
# as Python reads it also holds Infinity, NaN and numbers past float's range, none of them a time.
MAX_EXP: Final = 253_402_300_799

# Every reason a connection is refused for: the values of a metrics label, bounded.
TOKEN_MISSING: Final = "token_missing"  # noqa: S105 - a refusal reason, not a secret
TOKEN_REJECTED: Final = "token_rejected"  # noqa: S105 - a reason: the API server did not authenticate it
TOKEN_EXPIRED: Final = "token_expired"  # noqa: S105 - a refusal reason, not a secret
WRONG_AUDIENCE: Final = "wrong_audience"
NOT_A_SERVICE_ACCOUNT: Final = "not_a_service_account"
WRONG_SERVICE_ACCOUNT: Final = "wrong_service_account"
NOT_POD_BOUND: Final = "not_pod_bound"
POD_GONE: Final = "pod_gone"
POD_NOT_SCHEDULED: Final = "pod_not_scheduled"
BAD_NODE_NAME: Final = "bad_node_name"
REVIEW_FAILED: Final = "review_failed"  # the API server could not be asked (down, 403, timeout)
BAD_REQUEST: Final = "bad_request"  # the server's request itself was not one we answer
TOKEN_MALFORMED: Final = "token_malformed"  # noqa: S105 - a reason: not shaped like any ServiceAccount token
RATE_LIMITED: Final = "rate_limited"  # more reviews asked for than --review-rate allows
REASONS: Final = (
    TOKEN_MISSING,
    TOKEN_REJECTED,
    TOKEN_EXPIRED,
    WRONG_AUDIENCE,
    NOT_A_SERVICE_ACCOUNT,
    WRONG_SERVICE_ACCOUNT,
    NOT_POD_BOUND,
    POD_GONE,
    POD_NOT_SCHEDULED,
    BAD_NODE_NAME,
    REVIEW_FAILED,
    BAD_REQUEST,
    TOKEN_MALFORMED,
    RATE_LIMITED,
)


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


@dataclass(frozen=True)
class Policy:
    """Whose tokens are collectors, and what the NATS users we create look like."""

    namespace: str  # the collector DaemonSet's namespace
    service_account: str  # its ServiceAccount
    audience: str  # the audience of the projected token
    account: str  # the NATS account collectors are placed in
    max_ttl_s: int  # a NATS user lives no longer than this (and no longer than its token)

    @property
    def username(self) -> str:
        return f"{SERVICE_ACCOUNT_PREFIX}{self.namespace}:{self.service_account}"


@dataclass(frozen=True)
class Refusal:
    """A connection we refuse: ``reason`` (one of :data:`REASONS`) and words for the log."""

    reason: str
    detail: str


@dataclass(frozen=True)
class Review:
    """The parts of a TokenReview's ``status`` we decide on."""

    authenticated: bool
    error: str
    username: str
    audiences: tuple[str, ...]
    extra: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_status(cls, status: Any) -> Review:
        """Tolerant of any shape: what is missing or of the wrong type reads as absent."""
        status = _mapping(status)
        user = _mapping(status.get("user"))
        raw_extra = _mapping(user.get("extra"))
        extra = {
            str(k): tuple(str(v) for v in values)
            for k, values in raw_extra.items()
            if isinstance(values, list | tuple)
        }
        audiences = status.get("audiences")
        return cls(
            authenticated=status.get("authenticated") is True,
            error=str(status.get("error") or "")[:300],
            username=str(user.get("username") or ""),
            audiences=tuple(str(a) for a in audiences) if isinstance(audiences, list) else (),
            extra=extra,
        )

    def single(self, key: str) -> str | None:
        values = self.extra.get(key, ())
        return values[0] if len(values) == 1 and values[0] else None


@dataclass(frozen=True)
class Identity:
    """A collector pod the API server vouched for."""

    namespace: str
    pod: str
    pod_uid: str
    node: str | None  # from the token itself (Kubernetes >= 1.30); None: read it from the pod


@dataclass(frozen=True)
class Grant:
    """The NATS user a collector gets."""

    node: str
    name: str  # shown by nats-server for the connection (logs, monitoring)
    permissions: Permissions
    expires: int  # unix seconds


def token_review(token: str, policy: Policy) -> dict[str, Any]:
    """The TokenReview to create for ``token`` (audience-checked by the API server)."""
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenReview",
        "spec": {"token": token, "audiences": [policy.audience]},
    }


def check_token(token: str) -> Refusal | None:
    """Before asking the API server: a connection without a token is refused at once."""
    if not token.strip():
        return Refusal(TOKEN_MISSING, "the client sent no auth_token (is --nats-token-file set?)")
    return None


def _json_part(part: str) -> Any:
    try:
        return json.loads(base64.urlsafe_b64decode(part + "=" * (-len(part) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):  # nested arrays, 8 KiB deep
        return None


def _exp(claims: Mapping[str, Any]) -> int | None:
    """The claims' ``exp`` as whole seconds, or None when it is no time (missing, not a
    number, NaN, infinite, not after 1970, past :data:`MAX_EXP`)."""
    exp = claims.get("exp")
    if isinstance(exp, bool) or not isinstance(exp, int | float):
        return None
    if not 0 < exp <= MAX_EXP:  # NaN and both infinities too
        return None
    return int(exp)


def _malformed(detail: str) -> Refusal:
    return Refusal(TOKEN_MALFORMED, detail)


def check_shape(token: str, policy: Policy, now: int) -> Refusal | None:
    """Before asking the API server: refuse, for free, what no review could accept. The claims
    are read unverified, so this only ever refuses: a token the API server issued to a
    collector pod for our audience always passes (its review then decides)."""
    if len(token) > MAX_TOKEN_CHARS:
        return _malformed(f"{len(token)} characters, more than any ServiceAccount token ({MAX_TOKEN_CHARS})")
    parts = token.split(".")
    if len(parts) != 3 or not all(_BASE64URL.fullmatch(part) for part in parts):
        return _malformed("not a JWT (three base64url parts)")
    header, claims = _json_part(parts[0]), _json_part(parts[1])
    if not isinstance(header, dict) or not isinstance(claims, dict):
        return _malformed("the JWT's header or claims are not JSON objects")
    alg, kid = header.get("alg"), header.get("kid")
    if not isinstance(alg, str) or alg not in TOKEN_ALGORITHMS:
        return _malformed(f"alg {str(alg)[:20]!r} is not a ServiceAccount key's")
    if not isinstance(kid, str) or not kid:
        return _malformed("the JWT names no signing key (kid)")
    exp = _exp(claims)
    if exp is None:
        return _malformed("the JWT has no exp, or one that is no time")
    if exp <= now:
        return Refusal(TOKEN_EXPIRED, f"the token's exp {exp} is past (now {now})")
    sub, aud = claims.get("sub"), claims.get("aud")
    if not isinstance(sub, str):
        return _malformed("the JWT has no sub")
    if not sub.startswith(SERVICE_ACCOUNT_PREFIX):
        return Refusal(NOT_A_SERVICE_ACCOUNT, f"{sub[:120]!r} is not a ServiceAccount")
    if sub != policy.username:
        return Refusal(WRONG_SERVICE_ACCOUNT, f"{sub[:120]!r} is not the collector's ({policy.username})")
    audiences = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
    if policy.audience not in audiences:
        return Refusal(WRONG_AUDIENCE, f"the token is not for audience {policy.audience!r}")
    return None


def identify(review: Review, policy: Policy) -> Identity | Refusal:
    """The collector pod behind a reviewed token, or why it is none."""
    if not review.authenticated:
        error = review.error or "not authenticated"
        if "expired" in error:
            return Refusal(TOKEN_EXPIRED, error)
        if "audience" in error:
            return Refusal(WRONG_AUDIENCE, error)
        return Refusal(TOKEN_REJECTED, error)
    if policy.audience not in review.audiences:
        # The TokenReview API: a client that sets spec.audiences checks that status.audiences names
        # one of them; none means the token is only good for the API server itself.
        return Refusal(
            WRONG_AUDIENCE, f"the review names audiences {list(review.audiences)}, not {policy.audience!r}"
        )
    if not review.username.startswith(SERVICE_ACCOUNT_PREFIX):
        return Refusal(NOT_A_SERVICE_ACCOUNT, f"{review.username[:120]!r} is not a ServiceAccount")
    if review.username != policy.username:
        return Refusal(
            WRONG_SERVICE_ACCOUNT, f"{review.username[:120]!r} is not the collector's ({policy.username})"
        )
    pod, pod_uid = review.single(POD_NAME_KEY), review.single(POD_UID_KEY)
    if pod is None or pod_uid is None:
        return Refusal(
            NOT_POD_BOUND,
            "the token is not bound to a pod (use the pod's projected serviceAccountToken volume)",
        )
    if not is_dns1123_subdomain(pod):
        return Refusal(NOT_POD_BOUND, f"the bound pod name {pod[:120]!r} is not a pod name")
    node = review.single(NODE_NAME_KEY)
    if node is not None and not is_dns1123_subdomain(node):
        return Refusal(BAD_NODE_NAME, f"node name {node[:120]!r} is not a DNS-1123 subdomain")
    return Identity(policy.namespace, pod, pod_uid, node)


def node_from_pod(identity: Identity, pod: Mapping[str, Any] | None, policy: Policy) -> str | Refusal:
    """Where the token's pod runs (clusters whose tokens carry no node name)."""
    if pod is None:
        return Refusal(POD_GONE, f"pod {identity.namespace}/{identity.pod} does not exist")
    meta, spec = _mapping(pod.get("metadata")), _mapping(pod.get("spec"))
    if meta.get("uid") != identity.pod_uid:
        return Refusal(POD_GONE, f"pod {identity.namespace}/{identity.pod} is another pod now (UID changed)")
    if meta.get("deletionTimestamp"):
        return Refusal(POD_GONE, f"pod {identity.namespace}/{identity.pod} is being deleted")
    if spec.get("serviceAccountName", "default") != policy.service_account:
        return Refusal(WRONG_SERVICE_ACCOUNT, f"pod {identity.pod} runs as another ServiceAccount")
    node = spec.get("nodeName")
    if not isinstance(node, str) or not node:
        return Refusal(POD_NOT_SCHEDULED, f"pod {identity.namespace}/{identity.pod} is not on a node yet")
    if not is_dns1123_subdomain(node):
        return Refusal(BAD_NODE_NAME, f"node name {node[:120]!r} is not a DNS-1123 subdomain")
    return node


def token_expiry(token: str) -> int | None:
    """The ``exp`` of a JWT-shaped token, read without verifying (the API server did), or None."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (binascii.Error, ValueError, UnicodeDecodeError, RecursionError):
        return None
    return _exp(claims) if isinstance(claims, dict) else None


def permissions(node: str) -> Permissions:
    """Publish this node's samples, nothing else. A collector only publishes (its flush is a
    PING): it subscribes to nothing, so it reads no other login's replies."""
    return Permissions(publish=(subjects.samples(node),), subscribe=())


def grant(node: str, pod: str, token_expires: int | None, now: int, policy: Policy) -> Grant | Refusal:
    """The user for a collector on ``node``: expires with its token, and within ``max_ttl_s``."""
    limit = now + policy.max_ttl_s
    expires = limit if token_expires is None else min(token_expires, limit)
    if expires - now < MIN_REMAINING_S:
        return Refusal(TOKEN_EXPIRED, f"the token expires in {expires - now} s")
    return Grant(node, f"collector:{node}/{pod}", permissions(node), expires)


def policy_problems(policy: Policy) -> list[str]:
    """Why a policy cannot work ([] if it can): checked once at start-up."""
    problems = []
    if not is_dns1123_label(policy.namespace):
        problems.append(f"namespace {policy.namespace!r} is not a DNS-1123 label")
    if not is_dns1123_subdomain(policy.service_account):
        problems.append(f"service account {policy.service_account!r} is not a DNS-1123 subdomain")
    if policy.max_ttl_s < MIN_REMAINING_S * 2:
        problems.append(f"max user lifetime {policy.max_ttl_s} s is too short")
    return problems
