"""A flood of logins costs the Kubernetes API at most --review-rate TokenReviews.

Anyone who reaches the NATS port may ask for a login as often as it likes, with any token:
before, each one cost a TokenReview (about 450 a second). Now a token not shaped like a
collector's ServiceAccount token costs none, a repeated token costs one per memory TTL, and
the rest no more than the rate; a collector already connected never notices. Played against
a real nats-server with deploy/'s callout configuration, the real nats-auth and kube-sim.
"""

from __future__ import annotations

import base64
import json
import os
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import nats
import pytest

from gpuscale import natsio, subjects

from ..deploy.node_auth_support import (
    AUDIENCE,
    COLLECTOR_SA,
    NAMESPACE,
    NODES,
    NodeAuthWorld,
    node_auth_world,
    running_nats_auth,
)
from ..waiting import eventually

pytestmark = pytest.mark.integration

RATE, BURST = 2.0, 5


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[NodeAuthWorld]:
    async with node_auth_world(tmp_path) as w:
        await w.pod("collector-a", NODES[0])
        yield w


def _part(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def forged_token() -> str:
    """Shaped like a collector pod's token in every way but the signature, which only the API knows."""
    claims = {
        "aud": [AUDIENCE],
        "exp": int(time.time()) + 3600,
        "sub": f"system:serviceaccount:{NAMESPACE}:{COLLECTOR_SA}",
        "jti": os.urandom(8).hex(),
    }
    signature = base64.urlsafe_b64encode(os.urandom(64)).rstrip(b"=").decode()
    return f"{_part({'alg': 'ES256', 'kid': 'made-up'})}.{_part(claims)}.{signature}"


MADE_UP = [
    "x",
    "not.a.token",
    "a" * 3000,  # longer ones the server refuses itself (max_control_line)
    f"{_part({'alg': 'none'})}.{_part({'sub': 'x'})}.",
    f"{_part({'alg': 'HS256', 'kid': 'k'})}.{_part({'exp': 4102444800})}.c2ln",
]


async def refused(world: NodeAuthWorld, token: str) -> str:
    with pytest.raises(nats.errors.Error) as caught:
        await world.login(token=token)
    return str(caught.value)


async def test_made_up_repeated_and_forged_tokens_cost_at_most_the_rate(world: NodeAuthWorld) -> None:
    reviews = world.sim.faults.add("POST", r"/tokenreviews$", delay_s=0.0, count=None)  # counts them
    bystander = world.token("collector-a")
    async with running_nats_auth(world.settings(review_rate=RATE, review_burst=BURST)) as auth:
        connected = await world.login(token=bystander)  # another node's collector, logged in before
        assert reviews.hits == 1

        # Made-up tokens: refused on their shape, no review at all.
        for i in range(60):
            assert "Authorization Violation" in await refused(world, MADE_UP[i % len(MADE_UP)])
        assert reviews.hits == 1
        assert auth.metric("gpuscale_nats_auth_refused_total", reason="token_malformed") == 60

        # The same valid token again and again: its grant is remembered, one review in all.
        for _ in range(20):
            again = await world.login(token=bystander)
            await again.nc.close()
        assert reviews.hits == 1
        assert auth.metric("gpuscale_nats_auth_remembered_total", outcome="granted") == 20

        # Well-forged tokens, each new: reviewed at the rate, the rest refused until it allows.
        started = time.monotonic()
        for _ in range(40):
            await refused(world, forged_token())
        elapsed = time.monotonic() - started
        forged_reviews = reviews.hits - 1
        assert forged_reviews <= BURST + RATE * elapsed + 1, (forged_reviews, elapsed)
        assert auth.metric("gpuscale_nats_auth_refused_total", reason="rate_limited") >= 40 - forged_reviews
        assert auth.metric("gpuscale_nats_auth_token_reviews_total") == reviews.hits

        # The collector logged in before all this never noticed.
        await connected.nc.publish(subjects.samples(NODES[0]), b"still-here")
        await natsio.flush(connected.nc)
        assert connected.nc.is_connected
        assert connected.violations() == []

        # ... and once the flood stops, a new collector is let in within the rate.
        await world.pod("collector-b", NODES[1])
        newcomer = world.token("collector-b")

        async def logged_in() -> bool:
            try:
                session = await world.login(token=newcomer)
            except nats.errors.Error:
                return False
            return session.nc.is_connected

        await eventually(logged_in, 20, "the newcomer let in after the flood")
