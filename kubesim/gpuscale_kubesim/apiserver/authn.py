"""ServiceAccount tokens: TokenRequest (``serviceaccounts/token``) and TokenReview.

What kube-apiserver does (pkg/registry/core/serviceaccount/storage/token.go,
pkg/registry/authentication/tokenreview, pkg/serviceaccount/claims.go):

- a TokenRequest mints a JWT for a ServiceAccount, for ``spec.audiences``
  (default: the API server's own), valid ``spec.expirationSeconds`` (default
  3600, at least 600), optionally bound to a Pod (``spec.boundObjectRef``)
  that must run as that ServiceAccount; a pod-bound token also names the
  pod's node (the ServiceAccountTokenPodNodeInfo feature, on by default
  since 1.30);
- a TokenReview says whether a token is valid *now*: signature, ``nbf`` and
  ``exp`` (with go-jose's one minute of leeway), an audience in common with
  ``spec.audiences``, and the ServiceAccount, bound pod and node still
  existing with the UIDs in the token. A valid token's user is
  ``system:serviceaccount:<ns>:<name>`` with the ServiceAccount's groups and
  ``authentication.kubernetes.io/{credential-id,pod-name,pod-uid,node-name,node-uid}``
  extras.

kube-sim signs with ES256 (ECDSA P-256), as an API server whose service-account
key is an EC key does, with a key derived from its own secret; nobody but
kube-sim verifies them.
"""

from __future__ import annotations

import base64
import binascii
import copy
import functools
import hashlib
import json
import uuid
from dataclasses import dataclass
from typing import Any, Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature, encode_dss_signature

from gpuscale_kubesim.apiserver import fielderrors as fe
from gpuscale_kubesim.apiserver import typed
from gpuscale_kubesim.apiserver.checks import WriteOptions, report_unknown
from gpuscale_kubesim.apiserver.errors import ApiError, bad_request
from gpuscale_kubesim.apiserver.resources import ResourceDef, format_time
from gpuscale_kubesim.apiserver.store import Store

Obj = dict[str, Any]

GROUP: Final = "authentication.k8s.io"
API_VERSION: Final = f"{GROUP}/v1"
# The API server's own audience and issuer (--api-audiences, --service-account-issuer).
API_AUDIENCE: Final = "https://kubernetes.default.svc.cluster.local"
MIN_EXPIRATION_S: Final = 600
MAX_EXPIRATION_S: Final = 1 << 32
DEFAULT_EXPIRATION_S: Final = 3600
LEEWAY_S: Final = 60  # go-jose's jwt.DefaultLeeway, which the validator uses
CREDENTIAL_ID_KEY: Final = "authentication.kubernetes.io/credential-id"
POD_NAME_KEY: Final = "authentication.kubernetes.io/pod-name"
POD_UID_KEY: Final = "authentication.kubernetes.io/pod-uid"
NODE_NAME_KEY: Final = "authentication.kubernetes.io/node-name"
NODE_UID_KEY: Final = "authentication.kubernetes.io/node-uid"
INVALID: Final = "invalid bearer token"
_P256_ORDER: Final = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551

# For decoding and error messages only: neither kind is stored.
TOKEN_REQUEST: Final = ResourceDef(GROUP, "v1", "tokenrequests", "tokenrequest", "TokenRequest")
TOKEN_REVIEW: Final = ResourceDef(
    GROUP, "v1", "tokenreviews", "tokenreview", "TokenReview", namespaced=False, verbs=("create",)
)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)


@dataclass(frozen=True)
class TokenSigner:
    """Signs and verifies this kube-sim's ServiceAccount JWTs."""

    key: bytes

    @functools.cached_property
    def _private(self) -> ec.EllipticCurvePrivateKey:
        scalar = int.from_bytes(hashlib.sha256(self.key).digest(), "big") % _P256_ORDER or 1
        return ec.derive_private_key(scalar, ec.SECP256R1())

    @functools.cached_property
    def kid(self) -> str:
        """The key id in every token's header, as kube-apiserver names its signing key."""
        x = self._private.public_key().public_numbers().x
        return hashlib.sha256(x.to_bytes(32, "big")).hexdigest()[:43]

    def sign(self, claims: Obj) -> str:
        header = _b64(json.dumps({"alg": "ES256", "kid": self.kid}, separators=(",", ":")).encode())
        body = _b64(json.dumps(claims, separators=(",", ":")).encode())
        der = self._private.sign(f"{header}.{body}".encode("ascii"), ec.ECDSA(hashes.SHA256()))
        r, s = decode_dss_signature(der)
        return f"{header}.{body}.{_b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"

    def verify(self, token: str) -> Obj | None:
        """The claims of a token this signer made, else None."""
        parts = token.split(".")
        if len(parts) != 3:
            return None
        try:
            raw = _unb64(parts[2])
            if len(raw) != 64:
                return None
            der = encode_dss_signature(int.from_bytes(raw[:32], "big"), int.from_bytes(raw[32:], "big"))
            self._private.public_key().verify(
                der, f"{parts[0]}.{parts[1]}".encode("ascii", "replace"), ec.ECDSA(hashes.SHA256())
            )
            claims = json.loads(_unb64(parts[1]))
        except (binascii.Error, ValueError, UnicodeDecodeError, InvalidSignature):
            return None
        return claims if isinstance(claims, dict) else None


def _decode_body(rd: ResourceDef, body: Any, opts: WriteOptions) -> Obj:
    """The request body as the API server's decoder takes it: typed, unknown fields per fieldValidation."""
    if not isinstance(body, dict):
        raise bad_request(f"the body of a {rd.kind} must be a JSON object")
    given: Obj = copy.deepcopy(body)
    api_version, kind = given.get("apiVersion"), given.get("kind")
    if api_version not in (None, "", rd.api_version) or kind not in (None, "", rd.kind):
        raise bad_request(
            f"the API version in the data ({api_version}) does not match the expected API version "
            f"({rd.api_version}) or kind {kind!r} is not {rd.kind!r}"
        )
    report_unknown(rd, typed.decode(rd.group, rd.version, rd.kind, given), opts)
    return given


def _resource(store: Store, plural: str) -> ResourceDef:
    rd = store.registry.get("", "v1", plural)
    if rd is None:  # the built-in kinds are always served
        raise ApiError(500, f"kube-sim serves no {plural}")
    return rd


def _find(store: Store, plural: str, namespace: str | None, name: str) -> Obj | None:
    try:
        return store.get(_resource(store, plural), namespace, name)
    except ApiError as e:
        if e.code == 404:
            return None
        raise


# --- TokenRequest ------------------------------------------------------------------


def token_request(
    store: Store,
    signer: TokenSigner,
    namespace: str,
    service_account: str,
    body: Any,
    now: float,
    *,
    node_info: bool = True,
    opts: WriteOptions | None = None,
    min_expiration_s: int = MIN_EXPIRATION_S,
) -> Obj:
    """``POST .../serviceaccounts/<name>/token``: the TokenRequest with ``status.token``.

    ``min_expiration_s`` is for tests that need a token about to expire (the API keeps 600)."""
    request = _decode_body(TOKEN_REQUEST, body, opts or WriteOptions())
    sa = store.get(_resource(store, "serviceaccounts"), namespace, service_account)
    spec = request.get("spec") or {}
    audiences = [str(a) for a in spec.get("audiences") or []] or [API_AUDIENCE]
    expiration = spec.get("expirationSeconds")
    expiration = DEFAULT_EXPIRATION_S if expiration is None else int(expiration)
    errors = []
    if expiration < min_expiration_s:
        errors.append(
            fe.invalid(
                "spec.expirationSeconds", expiration, "may not specify a duration less than 10 minutes"
            )
        )
    if expiration > MAX_EXPIRATION_S:
        errors.append(
            fe.invalid(
                "spec.expirationSeconds", expiration, "may not specify a duration larger than 2^32 seconds"
            )
        )
    if errors:
        raise fe.invalid_error("TokenRequest", GROUP, service_account, errors)
    pod, node = None, None
    ref = spec.get("boundObjectRef")
    if ref is not None:
        pod, node = _bound_pod(store, namespace, service_account, ref, node_info)
    issued = int(now)
    claims: Obj = {
        "aud": audiences,
        "exp": issued + expiration,
        "iat": issued,
        "iss": API_AUDIENCE,
        "jti": str(uuid.uuid4()),
        "nbf": issued,
        "sub": f"system:serviceaccount:{namespace}:{service_account}",
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": service_account, "uid": sa["metadata"]["uid"]},
        },
    }
    if pod is not None:
        claims["kubernetes.io"]["pod"] = {"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
    if node is not None:
        claims["kubernetes.io"]["node"] = {"name": node["metadata"]["name"], "uid": node["metadata"]["uid"]}
    out_spec: Obj = {"audiences": audiences, "expirationSeconds": expiration}
    if ref is not None:
        out_spec["boundObjectRef"] = ref
    return {
        "kind": "TokenRequest",
        "apiVersion": API_VERSION,
        "metadata": {"name": service_account, "namespace": namespace, "creationTimestamp": None},
        "spec": out_spec,
        "status": {"token": signer.sign(claims), "expirationTimestamp": format_time(issued + expiration)},
    }


def _bound_pod(
    store: Store, namespace: str, service_account: str, ref: Any, node_info: bool
) -> tuple[Obj, Obj | None]:
    if not isinstance(ref, dict):
        raise bad_request("spec.boundObjectRef must be an object")
    kind, api_version = ref.get("kind"), ref.get("apiVersion") or "v1"
    if kind != "Pod" or api_version != "v1":
        # kube-sim binds tokens to pods only (the API server also takes Secrets and Nodes).
        raise bad_request(f"cannot bind token to object of type {kind}, Kind={api_version}")
    name = str(ref.get("name") or "")
    pod = store.get(_resource(store, "pods"), namespace, name)
    if pod.get("spec", {}).get("serviceAccountName", "default") != service_account:
        raise bad_request(
            f'cannot bind token for serviceaccount "{service_account}" to pod running with '
            "different serviceaccount name."
        )
    uid = ref.get("uid")
    if uid and uid != pod["metadata"]["uid"]:
        raise ApiError(
            409,
            f'Operation cannot be fulfilled on Pod "{name}": the UID in the bound object reference '
            f"({uid}) does not match the UID in record. The object might have been deleted and then "
            "recreated",
            "Conflict",
            {"name": name, "kind": "Pod"},
        )
    node = None
    node_name = pod.get("spec", {}).get("nodeName")
    if node_info and node_name:
        node = _find(store, "nodes", None, str(node_name))  # a missing node: no node info, as upstream
    return pod, node


# --- TokenReview --------------------------------------------------------------------


def token_review(
    store: Store, signer: TokenSigner, body: Any, now: float, opts: WriteOptions | None = None
) -> Obj:
    """``POST /apis/authentication.k8s.io/v1/tokenreviews``: the review, with its status filled in."""
    review = _decode_body(TOKEN_REVIEW, body, opts or WriteOptions())
    spec = review.get("spec") or {}
    token = spec.get("token") or ""
    if not token:
        raise bad_request("token is required for TokenReview in authentication")
    wanted = [str(a) for a in spec.get("audiences") or []] or [API_AUDIENCE]
    out_spec: Obj = {"token": token}
    if spec.get("audiences"):
        out_spec["audiences"] = spec["audiences"]
    return {
        "kind": "TokenReview",
        "apiVersion": API_VERSION,
        "metadata": {"creationTimestamp": None},
        "spec": out_spec,
        "status": _review_status(store, signer, str(token), wanted, now),
    }


def _review_status(store: Store, signer: TokenSigner, token: str, wanted: list[str], now: float) -> Obj:
    claims = signer.verify(token)
    if claims is None:
        return {"user": {}, "error": INVALID}
    try:
        return _authenticated(store, claims, wanted, now)
    except _Invalid as e:
        return {"user": {}, "error": f"[{INVALID}, {e}]"}


class _Invalid(Exception):
    pass


def _authenticated(store: Store, claims: Obj, wanted: list[str], now: float) -> Obj:
    if now > float(claims.get("exp", 0)) + LEEWAY_S:
        raise _Invalid("service account token has expired")
    if now < float(claims.get("nbf", 0)) - LEEWAY_S:
        raise _Invalid("service account token is not valid yet")
    token_audiences = [str(a) for a in claims.get("aud") or []]
    common = [a for a in token_audiences if a in wanted]
    if not common:
        raise _Invalid(
            f"token audiences {json.dumps(token_audiences)} is invalid for the target audiences "
            f"{json.dumps(wanted)}"
        )
    private = claims.get("kubernetes.io") or {}
    namespace = str(private.get("namespace") or "")
    sa_ref = private.get("serviceaccount") or {}
    sa = _find(store, "serviceaccounts", namespace, str(sa_ref.get("name") or ""))
    if sa is None:
        raise _Invalid(f'serviceaccounts "{sa_ref.get("name")}" not found')
    if sa["metadata"].get("deletionTimestamp"):
        raise _Invalid(f"service account {namespace}/{sa_ref.get('name')} has been deleted")
    if sa["metadata"]["uid"] != sa_ref.get("uid"):
        raise _Invalid(
            f"service account UID ({sa['metadata']['uid']}) does not match claim ({sa_ref.get('uid')})"
        )
    extra: Obj = {CREDENTIAL_ID_KEY: [f"JTI={claims.get('jti')}"]}
    for kind, plural, ref_namespace, name_key, uid_key in (
        ("pod", "pods", namespace, POD_NAME_KEY, POD_UID_KEY),
        ("node", "nodes", None, NODE_NAME_KEY, NODE_UID_KEY),
    ):
        ref = private.get(kind)
        if ref is None:
            continue
        bound = _find(store, plural, ref_namespace, str(ref.get("name") or ""))
        if bound is None or bound["metadata"].get("deletionTimestamp"):
            raise _Invalid("service account token has been invalidated")
        if bound["metadata"]["uid"] != ref.get("uid"):
            raise _Invalid(
                f"{kind} UID ({bound['metadata']['uid']}) does not match service account {kind} ref claim "
                f"({ref.get('uid')})"
            )
        extra[name_key] = [ref["name"]]
        extra[uid_key] = [ref["uid"]]
    return {
        "authenticated": True,
        "user": {
            "username": str(claims.get("sub")),
            "uid": sa["metadata"]["uid"],
            "groups": [
                "system:serviceaccounts",
                f"system:serviceaccounts:{namespace}",
                "system:authenticated",
            ],
            "extra": extra,
        },
        "audiences": common,
    }
