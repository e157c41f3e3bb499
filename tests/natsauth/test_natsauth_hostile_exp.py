"""A made-up token's ``exp`` that is no time at all (Infinity, NaN, 1e400, a 309-digit number).

Python's JSON reader accepts ``Infinity``, ``NaN`` and numbers past float's range. Such a
token passed the free shape checks; reading its expiry then raised OverflowError inside the
request's task: no answer (the client waited out nats-server's auth timeout), no count in
``gpuscale_nats_auth_refused_total``, a traceback in the log for every try, and (NaN, a huge
whole number) a TokenReview spent on a token no API server issues. Now each is refused for
free as ``token_malformed``, as any other token not shaped like a ServiceAccount token.
"""

from __future__ import annotations

import base64
import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from gpuscale.http import ServiceHttp
from gpuscale.kube import new_api_client
from gpuscale.metrics import ServiceMetrics
from gpuscale.runtime import ServiceContext
from gpuscale_natsauth.app import Authorizer
from gpuscale_natsauth.core import decide
from gpuscale_natsauth.core.decide import Policy, Refusal
from gpuscale_natsauth.core.natsjwt import PREFIX_ACCOUNT, decode

from ..deploy.node_auth_support import NODES, NodeAuthWorld, node_auth_world
from ..waiting import sample_value
from .natsauth_builders import ACCOUNT, AUDIENCE, COLLECTOR, NOW, NS, SA, request_jwt, server_signer

POLICY = Policy(namespace=NS, service_account=SA, audience=AUDIENCE, account=ACCOUNT, max_ttl_s=3600)

# Written into the claims' JSON as they are: not one of them is a time.
NOT_A_TIME = ["Infinity", "-Infinity", "NaN", "1e400", "1" + "0" * 308]


def token_with_exp(exp_json: str) -> str:
    def part(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode()

    claims = f'{{"aud":["{AUDIENCE}"],"exp":{exp_json},"sub":"{COLLECTOR}"}}'
    header = '{"alg":"RS256","kid":"k"}'
    return f"{part(header)}.{part(claims)}.c2ln"


@pytest.mark.parametrize("exp", NOT_A_TIME)
def test_an_exp_that_is_no_time_is_refused_for_free_and_reads_as_no_expiry(exp: str) -> None:
    token = token_with_exp(exp)
    refusal = decide.check_shape(token, POLICY, NOW)
    assert isinstance(refusal, Refusal), "it must be refused before any TokenReview"
    assert refusal.reason in (decide.TOKEN_MALFORMED, decide.TOKEN_EXPIRED)
    assert decide.token_expiry(token) is None  # never raises


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[NodeAuthWorld]:
    async with node_auth_world(tmp_path) as w:
        await w.pod("collector-a", NODES[0])
        yield w


@pytest.mark.integration
async def test_a_login_whose_exp_is_no_time_is_answered_counted_and_costs_no_review(
    world: NodeAuthWorld,
) -> None:
    settings = world.settings()
    metrics = ServiceMetrics("nats-auth")
    ctx = ServiceContext("nats-auth", settings, metrics, ServiceHttp(metrics, port=0))
    api = await new_api_client(world.kubeconfig)
    try:
        authorizer = Authorizer(ctx, world.issuer, api)
        server = server_signer()
        for exp in NOT_A_TIME:
            now = int(time.time())
            request = request_jwt(server, world.issuer.public_key, token=token_with_exp(exp), exp=now + 2)
            answer = await authorizer.authorize(request.encode(), now)  # raised OverflowError
            claims = decode(answer.decode(), PREFIX_ACCOUNT)  # signed by the issuer account
            error = claims["nats"].get("error", "")
            assert error.startswith(("token_malformed:", "token_expired:")), error
        refused = sum(
            sample_value(metrics.registry, "gpuscale_nats_auth_refused_total", reason=reason)
            for reason in ("token_malformed", "token_expired")
        )
        assert refused == len(NOT_A_TIME)
        assert (sample_value(metrics.registry, "gpuscale_nats_auth_token_reviews_total")) == 0
    finally:
        await api.close()
