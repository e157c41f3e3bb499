"""NATS JWTs and nkeys as nats-server and nats-io/jwt (v2) write and read them. Pure."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import nacl.exceptions
import nacl.signing
import nkeys

HEADER: Final = {"typ": "JWT", "alg": "ed25519-nkey"}
REQUEST_AUDIENCE: Final = "nats-authorization-request"
REQUEST_TYPE: Final = "authorization_request"
RESPONSE_TYPE: Final = "authorization_response"
USER_TYPE: Final = "user"
LIBRARY_VERSION: Final = 2  # nats-io/jwt v2 claims
NO_LIMIT: Final = -1

PREFIX_SERVER: Final[int] = nkeys.PREFIX_BYTE_SERVER
PREFIX_ACCOUNT: Final[int] = nkeys.PREFIX_BYTE_ACCOUNT
PREFIX_USER: Final[int] = nkeys.PREFIX_BYTE_USER
_PREFIX_NAMES: Final = {PREFIX_SERVER: "server", PREFIX_ACCOUNT: "account", PREFIX_USER: "user"}
# The claims fields nats-io/jwt hashes into ``jti``, in its struct order (ClaimsData).
_CLAIMS_DATA_FIELDS: Final = ("aud", "exp", "jti", "iat", "iss", "name", "nbf", "sub")


class JwtError(ValueError):
    """A JWT we cannot accept. ``reason`` is a short, bounded key (a metrics label)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


# --- keys --------------------------------------------------------------------


def public_key_bytes(key: str, prefix: int) -> bytes:
    """The 32 raw bytes of an nkey public key of the given kind; ValueError if it is not one."""
    try:
        raw = base64.b32decode(key.encode("ascii") + b"=" * (-len(key) % 8))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        raise ValueError("not base32") from None
    if len(raw) != 35:
        raise ValueError("not an nkey public key (wrong length)")
    body, checksum = raw[:-2], raw[-2:]
    if nkeys.crc16_checksum(body) != checksum:
        raise ValueError("nkey checksum mismatch")
    if body[0] != prefix:
        raise ValueError(f"not a {_PREFIX_NAMES.get(prefix, 'known')} key")
    return bytes(body[1:])


def is_public_key(key: Any, prefix: int) -> bool:
    if not isinstance(key, str):
        return False
    try:
        public_key_bytes(key, prefix)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Signer:
    """An nkey that signs: the issuer account of auth callout answers (or a test's server key)."""

    public_key: str
    _pair: Any = field(repr=False, compare=False)

    @classmethod
    def from_seed(cls, seed: str | bytes, prefix: int = PREFIX_ACCOUNT) -> Signer:
        """From an ``S...`` seed; ValueError if it is not a seed of the given kind."""
        text = seed.strip() if isinstance(seed, str) else seed.decode("ascii", "replace").strip()
        try:
            kind, _ = nkeys.decode_seed(text.encode("ascii"))
            pair = nkeys.from_seed(text.encode("ascii"))
        except (nkeys.NkeysError, UnicodeEncodeError, ValueError):
            raise ValueError("not an nkey seed") from None
        if kind != prefix:
            raise ValueError(f"the seed is not an {_PREFIX_NAMES.get(prefix, 'expected')} seed")
        return cls(pair.public_key.decode("ascii"), pair)

    def sign(self, data: bytes) -> bytes:
        signature: bytes = self._pair.sign(data)
        return signature


def new_seed(prefix: int, entropy: bytes) -> str:
    """An nkey seed of the given kind from 32 random bytes (the caller owns the randomness)."""
    if len(entropy) != 32:
        raise ValueError("an nkey seed needs 32 bytes of entropy")
    seed: bytes = nkeys.encode_seed(entropy, prefix)
    return seed.decode("ascii")


# --- encoding ----------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except (binascii.Error, ValueError):
        raise JwtError("malformed", "a part is not base64url") from None


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def _jti(claims: Mapping[str, Any]) -> str:
    """nats-io/jwt's ``jti``: SHA-512/256 of the ClaimsData JSON (jti empty), base32 without padding."""
    data = {k: claims[k] for k in _CLAIMS_DATA_FIELDS if k != "jti" and claims.get(k) not in (None, "", 0)}
    digest = hashlib.new("sha512_256", _json(data)).digest()
    return base64.b32encode(digest).rstrip(b"=").decode("ascii")


def encode(claims: Mapping[str, Any], signer: Signer, now: int) -> str:
    """Sign ``claims`` as nats-io/jwt v2 does: sets ``iss``, ``iat``, ``jti`` and ``nats.version``."""
    body: dict[str, Any] = {**claims, "iss": signer.public_key, "iat": now}
    nats_part = dict(body.get("nats") or {})
    nats_part["version"] = LIBRARY_VERSION
    body["nats"] = nats_part
    body.pop("jti", None)
    body["jti"] = _jti(body)
    signing_input = f"{_b64(_json(HEADER))}.{_b64(_json(body))}"
    return f"{signing_input}.{_b64(signer.sign(signing_input.encode('ascii')))}"


def decode(token: str, issuer_prefix: int) -> dict[str, Any]:
    """The claims of a JWT whose signature verifies with the ``iss`` key, of the given kind."""
    parts = token.split(".")
    if len(parts) != 3 or not all(parts):
        raise JwtError("malformed", "expected three dot-separated parts")
    try:
        header = json.loads(_unb64(parts[0]))
        claims = json.loads(_unb64(parts[1]))
    except (ValueError, UnicodeDecodeError):
        raise JwtError("malformed", "header or claims are not JSON") from None
    if not isinstance(header, dict) or not isinstance(claims, dict):
        raise JwtError("malformed", "header and claims must be JSON objects")
    if str(header.get("typ", "")).upper() != "JWT" or header.get("alg") != HEADER["alg"]:
        raise JwtError("malformed", f"unsupported header {header!r}")
    issuer = claims.get("iss")
    try:
        key = public_key_bytes(issuer if isinstance(issuer, str) else "", issuer_prefix)
    except ValueError as e:
        raise JwtError("wrong_issuer_kind", f"iss {issuer!r}: {e}") from None
    try:
        nacl.signing.VerifyKey(key).verify(f"{parts[0]}.{parts[1]}".encode("ascii"), _unb64(parts[2]))
    except nacl.exceptions.BadSignatureError:
        raise JwtError("bad_signature", "the signature does not verify with the issuer's key") from None
    return claims


# --- auth callout --------------------------------------------------------------


@dataclass(frozen=True)
class AuthRequest:
    """What an ``authorization_request`` tells us about a connecting client."""

    server_id: str
    server_name: str
    user_nkey: str
    expires: int  # the server stops waiting for our answer then (its auth timeout)
    client_name: str
    client_host: str
    client_id: int
    auth_token: str = field(repr=False)  # the client's credential: never log it


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _text(value: Any, limit: int = 256) -> str:
    return value[:limit] if isinstance(value, str) else ""


def parse_authorization_request(token: str, *, issuer: str, now: int) -> AuthRequest:
    """Verify and read the server's request; JwtError (with a reason) when it is not one we answer."""
    claims = decode(token, PREFIX_SERVER)
    nats_part = claims.get("nats")
    if not isinstance(nats_part, dict) or nats_part.get("type") != REQUEST_TYPE:
        raise JwtError("wrong_type", f"not an {REQUEST_TYPE}")
    if claims.get("aud") != REQUEST_AUDIENCE:
        raise JwtError("wrong_audience", f"aud is {claims.get('aud')!r}, not {REQUEST_AUDIENCE!r}")
    if claims.get("sub") != issuer:
        # The server's auth_callout.issuer is another key: it would refuse whatever we sign.
        raise JwtError("wrong_issuer_account", f"the server expects issuer {claims.get('sub')!r}")
    server = nats_part.get("server_id")
    if not isinstance(server, dict) or server.get("id") != claims.get("iss"):
        raise JwtError("malformed", "server_id.id is not the signing server's key")
    expires = claims.get("exp")
    if isinstance(expires, int) and not isinstance(expires, bool) and 0 < expires < now:
        raise JwtError("expired", f"the request expired at {expires} (now {now})")
    user_nkey = nats_part.get("user_nkey")
    if not is_public_key(user_nkey, PREFIX_USER):
        raise JwtError("malformed", "user_nkey is not a user public key")
    client = _mapping(nats_part.get("client_info"))
    connect = _mapping(nats_part.get("connect_opts"))
    auth_token = connect.get("auth_token")
    client_id = client.get("id")
    return AuthRequest(
        server_id=str(server["id"]),
        server_name=_text(server.get("name")),
        user_nkey=str(user_nkey),
        expires=expires if isinstance(expires, int) and not isinstance(expires, bool) else 0,
        client_name=_text(client.get("name")),
        client_host=_text(client.get("host")),
        client_id=client_id if isinstance(client_id, int) and not isinstance(client_id, bool) else 0,
        auth_token=auth_token if isinstance(auth_token, str) else "",
    )


@dataclass(frozen=True)
class Permissions:
    """A NATS user's subject permissions (allow lists; everything else is denied, an empty list
    included)."""

    publish: tuple[str, ...]
    subscribe: tuple[str, ...]


def _only(allowed: tuple[str, ...]) -> dict[str, list[str]]:
    # To nats-server an empty allow list means no restriction: nothing allowed is a deny of all.
    return {"allow": list(allowed)} if allowed else {"deny": [">"]}


def user_claims(
    *, user_nkey: str, account: str, name: str, permissions: Permissions, expires: int
) -> dict[str, Any]:
    """A user JWT's claims: the user the server will create for this connection only."""
    return {
        "aud": account,  # config mode: the account the user is placed in
        "exp": expires,
        "name": name,
        "sub": user_nkey,
        "nats": {
            "pub": _only(permissions.publish),
            "sub": _only(permissions.subscribe),
            "subs": NO_LIMIT,
            "data": NO_LIMIT,
            "payload": NO_LIMIT,
            "type": USER_TYPE,
        },
    }


def response_claims(
    request: AuthRequest, *, user_jwt: str | None = None, error: str | None = None
) -> dict[str, Any]:
    """An ``authorization_response``: a user JWT, or an error (exactly one of them)."""
    if (user_jwt is None) == (error is None):
        raise ValueError("an authorization response carries a user JWT or an error, not both or neither")
    nats_part: dict[str, Any] = {"type": RESPONSE_TYPE}
    if user_jwt is not None:
        nats_part["jwt"] = user_jwt
    else:
        nats_part["error"] = error
    claims: dict[str, Any] = {"aud": request.server_id, "sub": request.user_nkey, "nats": nats_part}
    if request.expires:
        claims["exp"] = request.expires
    return claims
