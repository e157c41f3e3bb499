"""gpuscale nats-auth as a service: start-up checks, faults, logs, load.

Every refusal is counted by reason and logged once per reason; the client's
token never reaches a log line; a Kubernetes API that fails or forbids the
review refuses the connection (never lets it in) and the service recovers
with the API; a NATS restart does not end the service.
"""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest

from gpuscale.http import ServiceHttp
from gpuscale.kube import new_api_client
from gpuscale.logging import configure
from gpuscale.metrics import ServiceMetrics
from gpuscale.runtime import ServiceContext
from gpuscale_cli.main import main as gpuscale
from gpuscale_natsauth.app import Authorizer, read_issuer
from gpuscale_natsauth.core.natsjwt import PREFIX_ACCOUNT, PREFIX_USER, new_seed

from ..deploy.node_auth_support import (
    ADMIN_TOKEN,
    NODES,
    NodeAuthWorld,
    nats_environment,
    node_auth_world,
    running_nats_auth,
    start_with_environment,
)
from ..waiting import eventually, sample_value
from .natsauth_builders import request_jwt, server_signer, signer

pytestmark = pytest.mark.integration


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[NodeAuthWorld]:
    async with node_auth_world(tmp_path) as w:
        await w.pod("collector-a", NODES[0])
        yield w


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure("nats-auth", "debug", stream=stream)
    try:
        yield stream
    finally:
        configure("nats-auth", "info")


# --- start-up ------------------------------------------------------------------------------------


def test_it_will_not_start_without_a_usable_issuer_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpuscale(["nats-auth"]) == 2
    assert "--issuer-seed-file" in capsys.readouterr().err

    user_seed = new_seed(PREFIX_USER, bytes(range(32)))
    wrong_kind = tmp_path / "user-seed"
    wrong_kind.write_text(user_seed)
    assert gpuscale(["nats-auth", "--issuer-seed-file", str(wrong_kind)]) == 2
    err = capsys.readouterr().err
    assert "does not hold an account nkey seed" in err
    assert user_seed not in err, "a seed is never printed"

    assert gpuscale(["nats-auth", "--issuer-seed-file", str(tmp_path / "missing")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_seed_files_newline_and_spaces_do_not_matter(tmp_path: Path) -> None:
    seed = new_seed(PREFIX_ACCOUNT, bytes(range(32)))
    path = tmp_path / "seed"
    path.write_text(f"  {seed}\n")
    assert read_issuer(path).public_key.startswith("A")


# --- requests that are not the server's ---------------------------------------------------------------


async def test_a_request_it_cannot_verify_gets_an_empty_answer_and_is_counted(world: NodeAuthWorld) -> None:
    settings = world.settings()
    metrics = ServiceMetrics("nats-auth")
    ctx = ServiceContext("nats-auth", settings, metrics, ServiceHttp(metrics, port=0))
    api = await new_api_client(world.kubeconfig)
    try:
        authorizer = Authorizer(ctx, world.issuer, api)
        other_issuer = signer().public_key
        for request in (
            b"garbage",
            request_jwt(signer(), world.issuer.public_key).encode(),  # signed by an account, not a server
            request_jwt(server_signer(), other_issuer).encode(),  # for another issuer
            request_jwt(
                server_signer(), world.issuer.public_key, exp=int(time.time()) - 10
            ).encode(),  # expired
        ):
            assert await authorizer.authorize(request, int(time.time())) == b""
        assert sample_value(metrics.registry, "gpuscale_nats_auth_refused_total", reason="bad_request") == 4
    finally:
        await api.close()


# --- logs --------------------------------------------------------------------------------------------


async def test_refusals_are_logged_once_per_reason_and_no_token_is_ever_logged(
    world: NodeAuthWorld, log_lines: io.StringIO
) -> None:
    good = world.token("collector-a")
    unbound = world.token(None)
    async with running_nats_auth(world.settings()) as auth:
        for _ in range(3):
            with pytest.raises(nats.errors.Error):
                await world.login(token=unbound)
        await world.login(token=good)
        assert auth.metric("gpuscale_nats_auth_refused_total", reason="not_pod_bound") == 3
    text = log_lines.getvalue()
    assert text.count("connection_refused") == 1
    assert "not_pod_bound" in text
    assert text.count("collector_authorized") == 1
    for token in (good, unbound):
        assert token not in text
        assert token.split(".")[1] not in text


# --- the Kubernetes API ------------------------------------------------------------------------------


async def test_a_failing_review_refuses_and_a_login_after_the_backoff_succeeds(world: NodeAuthWorld) -> None:
    token = world.token("collector-a")
    async with running_nats_auth(world.settings()) as auth:
        world.sim.faults.add("POST", r"/tokenreviews$", status=500, count=1)
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await world.login(token=token)
        assert auth.metric("gpuscale_nats_auth_refused_total", reason="review_failed") == 1

        async def logged_in() -> bool:
            try:
                session = await world.login(token=token)  # the same token: the API's fault is not its
            except nats.errors.Error:
                return False
            return session.nc.is_connected

        await eventually(logged_in, what="a login once the API answers again")


async def test_a_retried_bad_token_costs_one_review_and_a_failing_api_is_not_hammered(
    world: NodeAuthWorld,
) -> None:
    unbound = world.token(None)
    async with running_nats_auth(world.settings()) as auth:
        before = world.sim.api.requests
        for _ in range(5):
            with pytest.raises(nats.errors.Error):
                await world.login(token=unbound)
        assert world.sim.api.requests - before == 1, "refusals of a token are remembered"
        assert auth.metric("gpuscale_nats_auth_refused_total", reason="not_pod_bound") == 5

        world.sim.faults.add("POST", r"/tokenreviews$", status=503, count=None)  # the API server is down
        before = world.sim.api.requests
        tokens = [world.token("collector-a") for _ in range(6)]
        for token in tokens:  # six logins in a row, within the backoff's first pauses
            with pytest.raises(nats.errors.Error):
                await world.login(token=token)
        asked = world.sim.api.requests - before
        assert 1 <= asked < len(tokens), f"{asked} reviews for {len(tokens)} logins while it fails"
        world.sim.faults.clear()


async def test_without_the_rbac_to_review_tokens_every_login_is_refused(
    world: NodeAuthWorld, tmp_path: Path, log_lines: io.StringIO
) -> None:
    unprivileged = world.sim.write_kubeconfig(tmp_path / "nobody.kubeconfig", ADMIN_TOKEN + "-unknown")
    async with running_nats_auth(world.settings(kubeconfig=unprivileged)) as auth:
        with pytest.raises(nats.errors.Error, match="Authorization Violation"):
            await world.login(token=world.token("collector-a"))
        assert auth.metric("gpuscale_nats_auth_refused_total", reason="review_failed") == 1
    assert "Unauthorized" in log_lines.getvalue()


async def test_a_slow_api_server_does_not_hold_the_answer_past_the_servers_deadline(
    world: NodeAuthWorld,
) -> None:
    async with running_nats_auth(world.settings()) as auth:
        world.sim.faults.add("POST", r"/tokenreviews$", delay_s=8, count=1)
        started = time.monotonic()
        with pytest.raises(nats.errors.Error):
            await world.login(token=world.token("collector-a"))
        assert time.monotonic() - started < 7
        await eventually(
            lambda: auth.metric("gpuscale_nats_auth_refused_total", reason="review_failed") == 1,
            what="the review given up at the deadline",
        )


# --- NATS and load ----------------------------------------------------------------------------------


async def test_it_serves_again_after_nats_restarts(world: NodeAuthWorld) -> None:
    async with running_nats_auth(world.settings()) as auth:
        await asyncio.to_thread(world.nats.stop)
        await eventually(lambda: auth.metric("gpuscale_nats_connected") == 0, what="the outage noticed")
        await asyncio.to_thread(start_with_environment, world.nats, nats_environment(world.issuer.public_key))
        await eventually(auth.ready, 20, "subscribed again after the restart")
        session = await world.login(token=world.token("collector-a"))
        assert session.nc.is_connected
        await eventually(
            lambda: auth.metric("gpuscale_nats_reconnects_total") >= 1, 20, "the reconnect counted"
        )


async def test_a_reconnect_storm_is_answered_with_bounded_concurrency(world: NodeAuthWorld) -> None:
    pods = [f"collector-{i}" for i in range(24)]
    for i, pod in enumerate(pods):
        await world.pod(pod, NODES[i % 2])
    tokens = [world.token(pod) for pod in pods]
    async with running_nats_auth(world.settings(max_concurrent=3)) as auth:
        sessions = await asyncio.gather(*(world.login(token=t) for t in tokens))
        assert all(s.nc.is_connected for s in sessions)
        assert auth.metric("gpuscale_nats_auth_authorized_total") == len(pods)
