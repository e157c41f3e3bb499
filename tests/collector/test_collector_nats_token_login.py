"""The collector logs in to NATS with its pod's projected token (``--nats-token-file``).

The kubelet rewrites a projected token before it expires, so the file is
read at every (re)connect; nats-auth's users expire with their token, and
the server then closes the connection: the collector logs in again with the
current token and keeps its buffered batches. The token never reaches a log.
"""

from __future__ import annotations

import io
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from nats.aio.msg import Msg

from gpuscale import codec, natsio, subjects
from gpuscale.logging import configure
from gpuscale.settings import SettingsError
from gpuscale.wire import SampleBatch

from ..deploy.node_auth_support import (
    NODES,
    NodeAuthWorld,
    RunningNatsAuth,
    node_auth_world,
    running_nats_auth,
)
from ..waiting import sample_value

pytestmark = pytest.mark.integration

NODE = NODES[0]


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[NodeAuthWorld]:
    async with node_auth_world(tmp_path) as w:
        await w.pod("collector-a", NODE)
        yield w


@pytest.fixture
async def auth(world: NodeAuthWorld) -> AsyncIterator[RunningNatsAuth]:
    async with running_nats_auth(world.settings()) as running:
        yield running


@pytest.fixture
def log_lines() -> Any:
    """Everything the service logs, as text."""
    stream = io.StringIO()
    configure("collector", "debug", stream=stream)
    try:
        yield stream
    finally:
        configure("collector", "info")


async def batches_of(world: NodeAuthWorld, node: str) -> list[SampleBatch]:
    observer = await world.login(role="observer")
    got: list[SampleBatch] = []

    async def on_msg(msg: Msg) -> None:
        got.append(codec.decode(msg.data, SampleBatch, now=time.time()))

    await observer.nc.subscribe(subjects.samples(node), cb=on_msg)
    await natsio.flush(observer.nc)
    return got


async def test_the_collector_publishes_with_its_pods_token(
    world: NodeAuthWorld, auth: RunningNatsAuth, kit: Any, tmp_path: Path, log_lines: io.StringIO
) -> None:
    token_file = tmp_path / "token"
    token = world.token("collector-a")
    token_file.write_text(token + "\n")  # the kubelet's file, newline or not
    got = await batches_of(world, NODE)
    settings = kit.settings(nats_url=world.url, nats_token_file=token_file, node_name=NODE, sim_gpus=1)
    async with kit.running(settings) as rc:
        await kit.wait_for(lambda: len(got) >= 3, what="three batches through the callout")
        assert rc.collector.publisher.nc.is_connected
    assert {b.node for b in got} == {NODE}
    assert auth.metric("gpuscale_nats_auth_authorized_total") == 1
    assert token not in log_lines.getvalue()
    assert token.split(".")[1] not in log_lines.getvalue()


async def test_a_collector_on_another_node_than_its_token_is_refused_every_sample(
    world: NodeAuthWorld, auth: RunningNatsAuth, kit: Any, tmp_path: Path
) -> None:
    """A collector told it runs on gpu-node-2 while its pod is on gpu-node-1 (a thief's copy)."""
    token_file = tmp_path / "token"
    token_file.write_text(world.token("collector-a"))
    got = await batches_of(world, NODES[1])
    settings = kit.settings(nats_url=world.url, nats_token_file=token_file, node_name=NODES[1], sim_gpus=1)
    async with kit.running(settings) as rc:
        await kit.wait_for(
            lambda: sample_value(rc.ctx.metrics.registry, "gpuscale_nats_errors_total", error="Error") >= 1,
            what="the server refusing the forged node's batches",
        )
    assert got == []


async def test_expired_user_logs_in_again_with_the_rotated_token_and_keeps_its_batches(
    world: NodeAuthWorld, auth: RunningNatsAuth, kit: Any, tmp_path: Path
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(world.token("collector-a", expiration_s=8))  # the user lives 8 s
    got = await batches_of(world, NODE)
    settings = kit.settings(nats_url=world.url, nats_token_file=token_file, node_name=NODE, sim_gpus=1)
    async with kit.running(settings) as rc:
        await kit.wait_for(lambda: len(got) >= 2, what="batches with the first token")
        first = rc.collector.publisher.nc
        token_file.write_text(world.token("collector-a"))  # the kubelet rotates the file
        await kit.wait_for(
            lambda: rc.collector.publisher.nc is not first and rc.collector.publisher.nc.is_connected,
            timeout_s=25,
            what="a new login after the first user expired",
        )
        seen = len(got)
        await kit.wait_for(lambda: len(got) >= seen + 3, what="batches with the rotated token")
        assert not rc.ctx.reopened, "a new login, not a restart of the service"
    # At least once: a batch the server took just before it closed the expired user's connection
    # is sent again (its flush failed); the aggregator drops the copy by its seq.
    seqs = [b.seq for b in got]
    assert seqs == sorted(seqs), "in order"
    assert sorted(set(seqs)) == list(range(seqs[0], seqs[-1] + 1)), "nothing lost across the new login"
    assert max(seqs.count(seq) for seq in seqs) <= 2, "sent again once, after the one failed flush"
    assert auth.metric("gpuscale_nats_auth_authorized_total") == 2


async def test_a_stale_token_is_refused_until_the_file_is_rotated(
    world: NodeAuthWorld, auth: RunningNatsAuth, kit: Any, tmp_path: Path, log_lines: io.StringIO
) -> None:
    token_file = tmp_path / "token"
    stale = world.token("collector-a", expiration_s=600, issued_at=time.time() - 3600)
    token_file.write_text(stale)
    got = await batches_of(world, NODE)
    settings = kit.settings(nats_url=world.url, nats_token_file=token_file, node_name=NODE, sim_gpus=1)
    async with kit.running(settings):
        await kit.wait_for(
            lambda: auth.metric("gpuscale_nats_auth_refused_total", reason="token_expired") >= 1,
            what="the stale token refused",
        )
        token_file.write_text(world.token("collector-a"))
        await kit.wait_for(lambda: len(got) >= 2, timeout_s=25, what="batches once the file is fresh")
    assert stale not in log_lines.getvalue()


async def test_an_empty_token_file_is_an_error_that_names_the_file(
    world: NodeAuthWorld, kit: Any, tmp_path: Path, log_lines: io.StringIO
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("\n")
    settings = kit.settings(nats_url=world.url, nats_token_file=token_file)
    async with kit.running(settings):
        await kit.wait_for(lambda: "is empty" in log_lines.getvalue(), what="the empty file reported")
    assert str(token_file) in log_lines.getvalue()


def test_a_token_file_and_a_password_in_the_url_are_one_credential_too_many(kit: Any, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("t")
    with pytest.raises(SettingsError, match="give one of them"):
        kit.settings(nats_url="nats://collector:pw@127.0.0.1:4222", nats_token_file=token_file)
    with pytest.raises(SettingsError, match="no such file"):
        kit.settings(nats_token_file=tmp_path / "missing")
