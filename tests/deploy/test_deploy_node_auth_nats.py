"""Node-bound collectors against a real nats-server running the node-auth component's configuration.

NATS' auth callout as documented (docs.nats.io, auth_callout; server/auth_callout.go):
every client that is not one of ``auth_users`` is held at CONNECT while the
server asks the callout service; the user JWT in the answer decides its
permissions; an error answer, or no answer within the auth timeout, is an
``Authorization Violation`` at connect. A publish outside the user's
permissions gets ``permissions violation`` asynchronously and is dropped.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg

from gpuscale import natsio, subjects
from gpuscale.natsio import declare_stream, headers_msg_id

from ..waiting import eventually
from .deploy_support import run_gpuscale_setup
from .node_auth_support import (
    NODES,
    NodeAuthWorld,
    RunningNatsAuth,
    Session,
    node_auth_world,
    running_nats_auth,
)

pytestmark = pytest.mark.integration

KEY = subjects.WorkloadKey("default", "Deployment", "bert-intent-detection")
NODE_A, NODE_B = NODES


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[NodeAuthWorld]:
    async with node_auth_world(tmp_path) as w:
        await w.pod("collector-a", NODE_A)
        await w.pod("collector-b", NODE_B)
        yield w


@pytest.fixture
async def auth(world: NodeAuthWorld) -> AsyncIterator[RunningNatsAuth]:
    async with running_nats_auth(world.settings()) as running:
        yield running


async def observe(world: NodeAuthWorld) -> tuple[Session, list[tuple[str, bytes]]]:
    observer = await world.login(role="observer")
    seen: list[tuple[str, bytes]] = []

    async def on_message(msg: Msg) -> None:
        seen.append((msg.subject, msg.data))

    await observer.nc.subscribe("gpuscale.v1.>", cb=on_message)
    await natsio.flush(observer.nc)
    return observer, seen


async def refused_at_connect(
    world: NodeAuthWorld, *, token: str | None = None, role: str | None = None
) -> str:
    with pytest.raises(nats.errors.Error) as refused:
        await world.login(token=token, role=role)
    return str(refused.value)


# --- a collector's token earns its own node's subject, nothing else ----------------------------------


async def test_a_collector_publishes_its_own_nodes_samples_and_nothing_else(
    world: NodeAuthWorld, auth: RunningNatsAuth
) -> None:
    observer, seen = await observe(world)
    collector = await world.login(token=world.token("collector-a"))
    forbidden = [
        subjects.samples(NODE_B),
        subjects.samples(NODE_A) + ".extra",
        subjects.metrics(KEY),
        subjects.decisions(KEY),
        subjects.actions(KEY),
        "$JS.API.STREAM.CREATE.GPUSCALE_SAMPLES",
    ]
    for subject in forbidden:
        await collector.nc.publish(subject, b"forged")
    await collector.nc.publish(subjects.samples(NODE_A), b"own")
    await natsio.flush(collector.nc)

    await eventually(lambda: (subjects.samples(NODE_A), b"own") in seen, what="its own sample delivered")
    await eventually(lambda: len(collector.violations()) >= len(forbidden), what="a violation per forgery")
    # One connection's messages arrive in order: the own sample came after every forgery.
    assert [s for s, data in seen if data == b"forged"] == []
    for subject in forbidden:  # nats-py lower-cases the server's error text
        assert any(f'"{subject.lower()}"' in v for v in collector.violations()), subject
    assert auth.metric("gpuscale_nats_auth_authorized_total") == 1
    await observer.nc.close()


async def test_a_collector_cannot_read_the_pipeline(world: NodeAuthWorld, auth: RunningNatsAuth) -> None:
    collector = await world.login(token=world.token("collector-a"))
    await collector.nc.subscribe(subjects.SAMPLES_ALL)
    await collector.nc.subscribe(subjects.DECISIONS_ALL)
    await natsio.flush(collector.nc)
    await eventually(lambda: len(collector.violations()) >= 2, what="two subscription violations")
    assert all("subscription" in v for v in collector.violations())


async def test_a_node_user_reads_no_inbox_not_even_its_own(
    world: NodeAuthWorld, auth: RunningNatsAuth
) -> None:
    """Without per-role inboxes a node's user could subscribe to _INBOX.> and read every login's replies
    (the actuator's decisions as it fetched them). A collector only publishes: it may
    subscribe to nothing."""
    collector = await world.login(token=world.token("collector-a"))
    for inbox in ("_INBOX.>", "_INBOX.actuator.>", "_INBOX.collector.>", ">"):
        await collector.nc.subscribe(inbox)
    await natsio.flush(collector.nc)
    await eventually(lambda: len(collector.violations()) >= 4, what="four subscription violations")
    assert all("subscription" in v for v in collector.violations())
    await collector.nc.publish(subjects.samples(NODE_A), b"still-publishes")
    await natsio.flush(collector.nc)
    assert len(collector.violations()) == 4


async def test_each_node_gets_its_own_user(world: NodeAuthWorld, auth: RunningNatsAuth) -> None:
    observer, seen = await observe(world)
    a = await world.login(token=world.token("collector-a"))
    b = await world.login(token=world.token("collector-b"))
    await a.nc.publish(subjects.samples(NODE_A), b"from-a")
    await b.nc.publish(subjects.samples(NODE_B), b"from-b")
    await b.nc.publish(subjects.samples(NODE_A), b"b-forging-a")
    await natsio.flush(a.nc)
    await natsio.flush(b.nc)
    await eventually(lambda: len([d for _, d in seen if d.startswith(b"from-")]) == 2, what="both samples")
    await eventually(lambda: b.violations(), what="b's forgery refused")
    assert (subjects.samples(NODE_A), b"b-forging-a") not in seen
    assert a.violations() == []
    await observer.nc.close()


async def test_the_node_comes_from_the_pod_where_tokens_do_not_name_it(tmp_path: Path) -> None:
    """Kubernetes before 1.30: the review names the pod only; nats-auth reads the pod's node."""
    async with node_auth_world(tmp_path, token_node_info=False) as world:
        await world.pod("collector-b", NODE_B)
        async with running_nats_auth(world.settings()) as auth:
            collector = await world.login(token=world.token("collector-b"))
            await collector.nc.publish(subjects.samples(NODE_A), b"x")
            await collector.nc.publish(subjects.samples(NODE_B), b"x")
            await natsio.flush(collector.nc)
            (violation,) = await eventually(collector.violations, what="the other node refused")
            assert subjects.samples(NODE_A) in violation.lower()
            assert auth.metric("gpuscale_nats_auth_authorized_total") == 1


# --- refused at connect ----------------------------------------------------------------------------------


async def test_tokens_that_are_not_a_live_collector_pods_are_refused_at_connect(
    world: NodeAuthWorld, auth: RunningNatsAuth
) -> None:
    await world.sim.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gpuscale-decider", "namespace": "gpuscale"}})  # fmt: skip
    await world.pod("decider-pod", NODE_A, service_account="gpuscale-decider")
    await world.pod("collector-gone", NODE_B)
    gone = world.token("collector-gone")
    world.sim.store.delete(world.sim.resource("v1", "Pod"), "gpuscale", "collector-gone", grace_period_s=0)
    cases = {
        "garbage": ("not-a-token", "token_malformed"),
        "expired": (
            world.token("collector-a", expiration_s=600, issued_at=time.time() - 3600),
            "token_expired",
        ),
        "for the API server": (world.token("collector-a", audiences=()), "wrong_audience"),
        "another service account": (
            world.token("decider-pod", service_account="gpuscale-decider"),
            "wrong_service_account",
        ),
        "bound to no pod": (world.token(None), "not_pod_bound"),
        "its pod was deleted": (gone, "token_rejected"),
    }
    for name, (token, reason) in cases.items():
        before = auth.metric("gpuscale_nats_auth_refused_total", reason=reason)
        assert "Authorization Violation" in await refused_at_connect(world, token=token), name
        assert auth.metric("gpuscale_nats_auth_refused_total", reason=reason) == before + 1, name
    assert auth.metric("gpuscale_nats_auth_authorized_total") == 0


async def test_the_shared_collector_password_no_longer_logs_in(
    world: NodeAuthWorld, auth: RunningNatsAuth
) -> None:
    assert "Authorization Violation" in await refused_at_connect(world, role="collector")
    assert "Authorization Violation" in await refused_at_connect(world, token=None)
    assert auth.metric("gpuscale_nats_auth_refused_total", reason="token_missing") == 2
    log = world.nats_log.read_text(errors="replace")
    assert "Auth callout service returned an error: token_missing" in log


# --- the other roles -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("role", "own"),
    [
        ("aggregator", subjects.metrics(KEY)),
        ("decider", subjects.decisions(KEY)),
        ("actuator", subjects.actions(KEY)),
    ],
)
async def test_the_other_roles_log_in_with_their_passwords_without_the_callout(
    world: NodeAuthWorld, role: str, own: str
) -> None:
    """No nats-auth runs here: these users are auth_users and never wait for it."""
    observer, seen = await observe(world)
    session = await world.login(role=role)
    await session.nc.publish(own, b"own")
    await session.nc.publish(subjects.samples(NODE_A), b"forged")
    await natsio.flush(session.nc)
    await eventually(lambda: (own, b"own") in seen, what=f"{role}'s own message")
    await eventually(session.violations, what=f"{role} may not publish samples")
    if (
        role == "decider"
    ):  # the setup user logs in without the callout too; then the decider's JetStream work goes through
        await run_gpuscale_setup(world.role_url("setup"), window_s=30.0)
        js = session.nc.jetstream(timeout=5)
        await declare_stream(js, subjects.DECISIONS)
        ack = await js.publish(own, b"decision", headers=headers_msg_id("decision-1"))
        assert ack.stream == subjects.DECISIONS_STREAM
    await observer.nc.close()


# --- when nats-auth is away ---------------------------------------------------------------------------


async def test_without_nats_auth_new_collectors_are_refused_and_connected_ones_stay(
    world: NodeAuthWorld,
) -> None:
    observer, seen = await observe(world)
    async with running_nats_auth(world.settings()):
        connected = await world.login(token=world.token("collector-a"))
    # nats-auth is gone: the server gets no answer within its auth timeout.
    started = time.monotonic()
    assert "Authorization Violation" in await refused_at_connect(world, token=world.token("collector-b"))
    assert time.monotonic() - started < 10
    await connected.nc.publish(subjects.samples(NODE_A), b"still-here")
    await natsio.flush(connected.nc)
    await eventually(
        lambda: (subjects.samples(NODE_A), b"still-here") in seen, what="the old login still works"
    )

    async with running_nats_auth(world.settings()):  # back: new logins work again
        again = await world.login(token=world.token("collector-b"))
        assert again.nc.is_connected
    await observer.nc.close()


async def test_a_user_lives_no_longer_than_its_token(world: NodeAuthWorld) -> None:
    """The server ends the connection when the user JWT expires: the collector must log in anew."""
    async with running_nats_auth(world.settings()):
        token = world.token("collector-a", expiration_s=8)
        closed = asyncio.Event()

        async def on_closed() -> None:
            closed.set()

        nc = await nats.connect(world.url, token=token, allow_reconnect=False, closed_cb=on_closed)
        assert nc.is_connected
        await asyncio.wait_for(closed.wait(), 20)
        assert "authentication expired" in str(nc.last_error).lower()
