"""High availability as deployed: a 3-node nats-server cluster (routes, JetStream
on each, as deploy/base/nats runs it), `gpuscale setup --replicas 3`, then one
node stopped. Decisions keep flowing to the actuator's durable consumer and none
is lost or doubled; the decider's state survives. The node chosen is the
decisions stream's leader, the worst case.

Setup runs as a Job beside the cluster, so it may find the cluster still forming:
JetStream then refuses three replicas (no suitable peers for placement) until the
last server joins, and setup waits for it."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from nats.errors import TimeoutError as NatsTimeout
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.errors import APIError, NoStreamResponseError, ServiceUnavailableError

from gpuscale import settings as settings_mod
from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, drain, headers_msg_id, jetstream
from gpuscale_cli import setup

from ..waiting import eventually

pytestmark = pytest.mark.integration
NODES = 3
KEY = subjects.WorkloadKey("default", "Deployment", "bert")
# JetStream may be electing a leader for a while after a node goes: what the decider's
# publish (5 s timeout, retried on the next metrics message) rides out.
TRANSIENT = (NatsTimeout, NoStreamResponseError, ServiceUnavailableError, asyncio.TimeoutError)


def route_port() -> int:
    """A free port below the kernel's ephemeral range. A route port waits unbound while the
    other servers dial it: one from that range could become any connection's local port in the
    meantime, and a server that cannot listen on its route port exits (after it said ready)."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.exists() else 32768
    for _ in range(100 if low > 10_000 else 0):
        port = random.randrange(10_000, low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    return free_port()


@pytest.fixture
def unstarted(tmp_path: Path) -> Iterator[list[EmbeddedNats]]:
    """The cluster's servers, each routed to the others, none started yet."""
    routes: list[int] = []
    while len(routes) < NODES:  # distinct: three picks from one range may meet
        if (port := route_port()) not in routes:
            routes.append(port)
    servers: list[EmbeddedNats] = []
    for i in range(NODES):
        store = tmp_path / f"n{i}"
        store.mkdir()
        peers = ", ".join(f"nats-route://127.0.0.1:{p}" for j, p in enumerate(routes) if j != i)
        # JetStream and its store come from the command line (EmbeddedNats' -js -sd).
        config = (
            f"server_name: n{i}\n"
            f"cluster {{ name: gpuscale, listen: 127.0.0.1:{routes[i]}, routes: [{peers}] }}\n"
        )
        servers.append(EmbeddedNats(store_dir=str(store), config_text=config))
    try:
        yield servers
    finally:
        for server in servers:
            server.close()


@pytest.fixture
def cluster(unstarted: list[EmbeddedNats]) -> list[EmbeddedNats]:
    for server in unstarted:
        server.start(timeout_s=20)
    return unstarted


def setup_settings(servers: list[EmbeddedNats], wait_s: float) -> setup.SetupSettings:
    built: setup.SetupSettings = settings_mod.build(
        setup.SetupSettings,
        {},
        {
            "GPUSCALE_NATS_URL": ",".join(s.url for s in servers),
            "GPUSCALE_NATS_REPLICAS": str(NODES),
            "GPUSCALE_SETUP_WAIT": f"{wait_s:g}",
        },
    )
    return built


async def publish_decision(nc: NATS, decision_id: str, timeout_s: float = 60.0) -> None:
    """Publish until acknowledged, as the decider does across a leader election;
    the message id makes a retry of an accepted publish a duplicate the stream drops."""
    js = jetstream(nc, timeout_s=5.0)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            ack = await js.publish(
                subjects.decisions(KEY), decision_id.encode(), headers=headers_msg_id(decision_id)
            )
            assert ack.stream == subjects.DECISIONS_STREAM
            return
        except TRANSIENT:
            assert time.monotonic() < deadline, f"{decision_id} not accepted within {timeout_s:g} s"
            await asyncio.sleep(0.5)


async def test_setup_beside_a_forming_cluster_waits_for_its_last_server(
    unstarted: list[EmbeddedNats], capsys: pytest.CaptureFixture[str]
) -> None:
    first, last = unstarted[:-1], unstarted[-1]
    for server in first:
        server.start(timeout_s=20)
    nc = await connect(tuple(s.url for s in first), ServiceMetrics("test"), name="forming")
    try:
        js = jetstream(nc, timeout_s=5.0)

        async def refuses_three_replicas() -> bool:
            # Two of three servers: a meta leader (a quorum) but not three peers to place on.
            try:
                await js.add_stream(StreamConfig(name="PROBE", subjects=["probe"], num_replicas=NODES))
            except APIError as e:
                return e.err_code == setup.NO_PEERS_FOR_PLACEMENT
            except TRANSIENT:
                return False  # still electing the meta leader
            raise AssertionError("three replicas placed on two servers")

        await eventually(refuses_three_replicas, 60, what="JetStream refusing 3 replicas on 2 servers")
    finally:
        await drain(nc)

    # A cluster that stays too small: setup gives up after --wait and says why.
    assert await setup.run(setup_settings(first, wait_s=1)) == 1
    err = capsys.readouterr().err
    assert err.count(f"fewer than {NODES} JetStream servers joined the cluster within 1 s") == 5, err

    # The last server joins while setup waits: every stream and bucket is made with 3 replicas.
    task = asyncio.create_task(setup.run(setup_settings(first, wait_s=60)))
    out: list[str] = []

    def waiting() -> bool:
        out.append(capsys.readouterr().out)
        return task.done() or f"waiting for {NODES} JetStream servers to join" in "".join(out)

    await eventually(waiting, 60, what="setup waiting for the last server")
    last.start(timeout_s=20)
    assert await asyncio.wait_for(task, 90) == 0
    out.append(capsys.readouterr().out)
    created = [line for line in "".join(out).splitlines() if line.endswith(f"{NODES} replica(s): created")]
    assert len(created) == 5, out


async def test_one_node_down_decisions_still_flow_and_none_is_lost(cluster: list[EmbeddedNats]) -> None:
    settings = setup_settings(cluster, wait_s=60)
    assert await setup.run(settings) == 0

    nc = await connect(tuple(s.url for s in cluster), ServiceMetrics("test"), name="ha-test")
    try:
        js = jetstream(nc, timeout_s=5.0)
        info = await js.stream_info(subjects.DECISIONS_STREAM)
        assert info.config.num_replicas == 3
        assert info.cluster is not None
        state = await js.key_value(subjects.decider_state(settings.state_bucket).bucket)
        await state.put("default.Deployment.bert", b"history")

        # A durable reader of the decisions (a user's subscriber of the record).
        actuator = await js.pull_subscribe(
            subjects.DECISIONS_ALL,
            durable="ha-reader",
            stream=subjects.DECISIONS_STREAM,
            config=ConsumerConfig(
                durable_name="ha-reader",
                ack_policy=AckPolicy.EXPLICIT,
                deliver_policy=DeliverPolicy.ALL,
                ack_wait=60.0,
                filter_subject=subjects.DECISIONS_ALL,
            ),
        )
        received: list[str] = []

        async def take(count: int) -> None:
            while len(received) < count:
                try:
                    for msg in await actuator.fetch(count - len(received), timeout=2):
                        received.append(msg.data.decode())
                        await msg.ack_sync(timeout=5)
                except TRANSIENT:
                    continue

        for i in range(10):
            await publish_decision(nc, f"before-{i}")
        await asyncio.wait_for(take(10), 30)

        leader = (await js.stream_info(subjects.DECISIONS_STREAM)).cluster
        assert leader is not None
        victim = next(
            s
            for s, name in zip(cluster, (f"n{i}" for i in range(NODES)), strict=True)
            if name == leader.leader
        )
        victim.stop()

        for i in range(10):
            await publish_decision(nc, f"after-{i}")
            await publish_decision(nc, f"after-{i}")  # a retry after a lost ack: dropped as a duplicate

        await asyncio.wait_for(take(20), 60)
        assert sorted(received) == sorted(
            [f"before-{i}" for i in range(10)] + [f"after-{i}" for i in range(10)]
        )

        async def new_leader() -> bool:
            c = (await js.stream_info(subjects.DECISIONS_STREAM)).cluster
            return c is not None and c.leader not in (None, leader.leader)

        await eventually(new_leader, 30, what="a new decisions-stream leader")
        assert (await state.get("default.Deployment.bert")).value == b"history"
        with pytest.raises(NatsTimeout):
            await actuator.fetch(1, timeout=1)  # nothing more: no decision was delivered twice after its ack
    finally:
        await drain(nc)
