"""NATS JWTs and auth callout claims, checked against nats-io/jwt v2's format.

What nats-server requires (server/auth_callout.go, nats-io/jwt v2): header
``{"typ":"JWT","alg":"ed25519-nkey"}``; base64url without padding; an
ed25519 signature by the ``iss`` nkey over ``header.claims``; ``jti`` the
base32 SHA-512/256 of the claims data; ``nats.type`` and ``nats.version``
2. A request is signed by a server key (``N...``), has ``aud``
"nats-authorization-request" and ``sub`` the configured issuer; a response
has ``sub`` the request's user nkey and ``aud`` the server id, and carries a
user JWT (``sub`` that user nkey, ``aud`` the account) or an error, never both.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import nacl.signing
import nkeys
import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale_natsauth.core.natsjwt import (
    PREFIX_ACCOUNT,
    PREFIX_SERVER,
    PREFIX_USER,
    AuthRequest,
    JwtError,
    Permissions,
    Signer,
    decode,
    encode,
    is_public_key,
    new_seed,
    parse_authorization_request,
    public_key_bytes,
    response_claims,
    user_claims,
)

from .natsauth_builders import CLIENT_TOKEN, NOW, request_claims, request_jwt, server_signer, signer, user_key


def parts(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes]:
    def unb64(text: str) -> bytes:
        assert not set(text) & set("=+/"), "base64url without padding"
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

    header, claims, signature = token.split(".")
    return json.loads(unb64(header)), json.loads(unb64(claims)), unb64(signature)


# --- keys -----------------------------------------------------------------------------------------


def test_an_account_seed_gives_the_public_key_nkeys_gives() -> None:
    seed = new_seed(PREFIX_ACCOUNT, bytes(range(32)))
    assert seed.startswith("SA")
    ours = Signer.from_seed(seed)
    theirs = nkeys.from_seed(seed.encode())
    assert ours.public_key == theirs.public_key.decode()
    assert ours.public_key.startswith("A")
    assert public_key_bytes(ours.public_key, PREFIX_ACCOUNT) == bytes(theirs._keys.verify_key)


def test_a_seed_of_another_kind_or_garbage_is_refused() -> None:
    with pytest.raises(ValueError, match="not an account seed"):
        Signer.from_seed(new_seed(PREFIX_USER, bytes(32)))
    for text in ("", "SAXYZ", "not a seed at all", "UAAAA"):
        with pytest.raises(ValueError, match="seed"):
            Signer.from_seed(text)


def test_public_keys_are_checked_for_kind_and_checksum() -> None:
    user = user_key()
    assert is_public_key(user, PREFIX_USER)
    assert not is_public_key(user, PREFIX_ACCOUNT)
    corrupted = user[:-1] + ("A" if user[-1] != "A" else "B")
    assert not is_public_key(corrupted, PREFIX_USER)
    assert not is_public_key(None, PREFIX_USER)
    assert not is_public_key("U" * 56, PREFIX_USER)


# --- the JWT format -----------------------------------------------------------------------------


def test_a_jwt_is_what_nats_io_jwt_v2_writes() -> None:
    issuer = signer()
    token = encode({"sub": user_key(), "aud": "GPUSCALE", "nats": {"type": "user"}}, issuer, NOW)
    header, claims, signature = parts(token)
    assert header == {"typ": "JWT", "alg": "ed25519-nkey"}
    assert claims["iss"] == issuer.public_key
    assert claims["iat"] == NOW
    assert claims["nats"] == {"type": "user", "version": 2}
    # jti: SHA-512/256 over the ClaimsData fields in nats-io/jwt's order, jti left out, base32 unpadded.
    data = {k: claims[k] for k in ("aud", "exp", "iat", "iss", "name", "nbf", "sub") if claims.get(k)}
    digest = hashlib.new("sha512_256", json.dumps(data, separators=(",", ":")).encode()).digest()
    assert claims["jti"] == base64.b32encode(digest).decode().rstrip("=")
    key = nacl.signing.VerifyKey(public_key_bytes(issuer.public_key, PREFIX_ACCOUNT))
    key.verify(token.rsplit(".", 1)[0].encode(), signature)  # raises if it does not verify


def test_decode_verifies_the_signature_and_the_issuers_kind() -> None:
    issuer = signer()
    token = encode({"sub": "x"}, issuer, NOW)
    assert decode(token, PREFIX_ACCOUNT)["sub"] == "x"
    with pytest.raises(JwtError) as wrong_kind:
        decode(token, PREFIX_SERVER)
    assert wrong_kind.value.reason == "wrong_issuer_kind"
    header, body, sig = token.split(".")
    forged_claims = base64.urlsafe_b64encode(b'{"sub":"y","iss":"' + issuer.public_key.encode() + b'"}')
    with pytest.raises(JwtError) as forged:
        decode(f"{header}.{forged_claims.decode().rstrip('=')}.{sig}", PREFIX_ACCOUNT)
    assert forged.value.reason == "bad_signature"
    other = encode({"sub": "x"}, signer(), NOW)
    with pytest.raises(JwtError) as swapped:  # another key's signature on our claims
        decode(f"{header}.{body}.{other.split('.')[2]}", PREFIX_ACCOUNT)
    assert swapped.value.reason == "bad_signature"


@given(st.text(max_size=300))
def test_no_text_makes_decode_fail_other_than_with_a_reason(text: str) -> None:
    with pytest.raises(JwtError) as refused:
        decode(text, PREFIX_SERVER)
    assert refused.value.reason in ("malformed", "wrong_issuer_kind", "bad_signature")


# --- the server's request -----------------------------------------------------------------------


def test_a_servers_request_is_read() -> None:
    server, issuer = server_signer(), signer()
    user = user_key()
    request = parse_authorization_request(
        request_jwt(server, issuer.public_key, token=CLIENT_TOKEN, user=user),
        issuer=issuer.public_key,
        now=NOW,
    )
    assert request == AuthRequest(
        server_id=server.public_key,
        server_name="nats-0",
        user_nkey=user,
        expires=NOW + 2,
        client_name="c",
        client_host="10.0.0.7",
        client_id=12,
        auth_token=CLIENT_TOKEN,
    )
    assert CLIENT_TOKEN not in repr(request), "the client's credential never reaches a log line"


def _mutated(change: Any) -> tuple[str, str]:
    server, issuer = server_signer(), signer()
    claims = request_claims(server, issuer.public_key)
    signing = change(claims) or server
    return encode(claims, signing, NOW), issuer.public_key


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda c: c.update(aud="someone-else"), "wrong_audience"),
        (lambda c: c.update(sub=signer().public_key), "wrong_issuer_account"),
        (lambda c: c.update(exp=NOW - 1), "expired"),
        (lambda c: c["nats"].update(type="user"), "wrong_type"),
        (lambda c: c["nats"].update(user_nkey=signer().public_key), "malformed"),
        (lambda c: c["nats"]["server_id"].update(id=server_signer().public_key), "malformed"),
        (lambda c: signer(), "wrong_issuer_kind"),  # signed by an account, not a server
    ],
    ids=["audience", "issuer", "expired", "type", "user-nkey", "server-id", "not-a-server"],
)
def test_a_request_that_is_not_the_servers_is_refused_with_a_reason(change: Any, reason: str) -> None:
    token, issuer = _mutated(change)
    with pytest.raises(JwtError) as refused:
        parse_authorization_request(token, issuer=issuer, now=NOW)
    assert refused.value.reason == reason


# --- the answer -----------------------------------------------------------------------------------


def test_a_user_jwt_places_the_user_in_the_account_with_only_its_permissions() -> None:
    issuer, user = signer(), user_key()
    claims = user_claims(
        user_nkey=user,
        account="GPUSCALE",
        name="collector:gpu-node-1/p",
        permissions=Permissions(("gpuscale.v1.samples.gpu-node-1",), ("_INBOX.>",)),
        expires=NOW + 600,
    )
    _, body, _ = parts(encode(claims, issuer, NOW))
    assert body["sub"] == user
    assert body["aud"] == "GPUSCALE"
    assert body["iss"] == issuer.public_key
    assert body["exp"] == NOW + 600
    assert body["name"] == "collector:gpu-node-1/p"
    nats = body["nats"]
    assert nats["type"] == "user"
    assert nats["version"] == 2
    assert nats["pub"] == {"allow": ["gpuscale.v1.samples.gpu-node-1"]}
    assert nats["sub"] == {"allow": ["_INBOX.>"]}
    assert (nats["subs"], nats["data"], nats["payload"]) == (-1, -1, -1)


def test_a_user_allowed_nothing_is_denied_everything_not_left_unrestricted() -> None:
    """To nats-server an empty allow list is no restriction at all."""
    claims = user_claims(
        user_nkey=user_key(),
        account="GPUSCALE",
        name="collector:gpu-node-1/p",
        permissions=Permissions(("gpuscale.v1.samples.gpu-node-1",), ()),
        expires=NOW + 600,
    )
    assert claims["nats"]["sub"] == {"deny": [">"]}
    assert claims["nats"]["pub"] == {"allow": ["gpuscale.v1.samples.gpu-node-1"]}


def test_a_response_carries_the_user_jwt_or_an_error_for_that_user_and_server() -> None:
    server, issuer = server_signer(), signer()
    request = parse_authorization_request(
        request_jwt(server, issuer.public_key), issuer=issuer.public_key, now=NOW
    )
    granted = decode(encode(response_claims(request, user_jwt="a.b.c"), issuer, NOW), PREFIX_ACCOUNT)
    assert granted["sub"] == request.user_nkey
    assert granted["aud"] == server.public_key
    assert granted["nats"] == {"type": "authorization_response", "jwt": "a.b.c", "version": 2}
    refused = decode(
        encode(response_claims(request, error="token_rejected: no"), issuer, NOW), PREFIX_ACCOUNT
    )
    assert refused["nats"] == {"type": "authorization_response", "error": "token_rejected: no", "version": 2}
    with pytest.raises(ValueError, match="not both"):
        response_claims(request, user_jwt="a.b.c", error="x")
    with pytest.raises(ValueError, match="neither"):
        response_claims(request)
