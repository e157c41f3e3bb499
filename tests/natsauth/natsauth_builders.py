"""Small builders for the auth callout tests: keys, a server's request, a TokenReview's answer."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

from gpuscale_natsauth.core.natsjwt import (
    PREFIX_ACCOUNT,
    PREFIX_SERVER,
    PREFIX_USER,
    REQUEST_AUDIENCE,
    REQUEST_TYPE,
    Signer,
    encode,
    new_seed,
)

NOW = 1_800_000_000
CLIENT_TOKEN = "client-token-1"  # noqa: S105 - a test's stand-in, not a credential
NS, SA, AUDIENCE, ACCOUNT = "gpuscale", "gpuscale-collector", "nats.gpuscale.io", "GPUSCALE"
COLLECTOR = f"system:serviceaccount:{NS}:{SA}"


def signer(prefix: int = PREFIX_ACCOUNT) -> Signer:
    return Signer.from_seed(new_seed(prefix, os.urandom(32)), prefix)


def user_key() -> str:
    return signer(PREFIX_USER).public_key


def request_claims(
    server: Signer, issuer: str, *, token: str = CLIENT_TOKEN, user: str | None = None, exp: int = NOW + 2
) -> dict[str, Any]:
    """An ``authorization_request`` as nats-server's processClientOrLeafCallout fills it in."""
    return {
        "aud": REQUEST_AUDIENCE,
        "exp": exp,
        "sub": issuer,
        "nats": {
            "server_id": {"name": "nats-0", "host": "10.0.0.2", "id": server.public_key, "version": "2.15.1"},
            "user_nkey": user or user_key(),
            "client_info": {"host": "10.0.0.7", "id": 12, "kind": "Client", "type": "nats", "name": "c"},
            "connect_opts": {"auth_token": token, "lang": "python3", "version": "2.16.0", "protocol": 1},
            "type": REQUEST_TYPE,
        },
    }


def request_jwt(server: Signer, issuer: str, **kw: Any) -> str:
    return encode(request_claims(server, issuer, **kw), server, NOW)


def server_signer() -> Signer:
    return signer(PREFIX_SERVER)


def review_status(
    *,
    username: str = COLLECTOR,
    pod: str | None = "gpuscale-collector-x7k2p",
    pod_uid: str | None = "pod-uid-1",
    node: str | None = "gpu-node-1",
    audiences: tuple[str, ...] = (AUDIENCE,),
    authenticated: bool = True,
    error: str = "",
) -> dict[str, Any]:
    """A TokenReview ``status`` as kube-apiserver writes it for a pod-bound token."""
    if not authenticated:
        return {"user": {}, "error": error or "invalid bearer token"}
    extra: dict[str, list[str]] = {"authentication.kubernetes.io/credential-id": ["JTI=1"]}
    if pod is not None:
        extra["authentication.kubernetes.io/pod-name"] = [pod]
    if pod_uid is not None:
        extra["authentication.kubernetes.io/pod-uid"] = [pod_uid]
    if node is not None:
        extra["authentication.kubernetes.io/node-name"] = [node]
        extra["authentication.kubernetes.io/node-uid"] = ["node-uid-1"]
    return {
        "authenticated": True,
        "user": {"username": username, "uid": "sa-uid", "groups": ["system:authenticated"], "extra": extra},
        "audiences": list(audiences),
    }


def pod(
    *,
    name: str = "gpuscale-collector-x7k2p",
    uid: str = "pod-uid-1",
    node: str | None = "gpu-node-1",
    service_account: str = SA,
    deleting: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "uid": uid}
    if deleting:
        meta["deletionTimestamp"] = "2027-01-01T00:00:00Z"
    spec: dict[str, Any] = {
        "serviceAccountName": service_account,
        "containers": [{"name": "c", "image": "i"}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def jwt_shaped(claims: dict[str, Any], header: dict[str, Any] | None = None) -> str:
    """A token shaped like the API server's (only its claims are read, never its signature)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    head = {k: v for k, v in (header or {"alg": "RS256"}).items() if v is not None}
    return f"{part(head)}.{part(claims)}.c2ln"
