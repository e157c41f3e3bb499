"""The NATS users and subject permissions of deploy/ (docs/ARCHITECTURE.md#security), enforced
by a real nats-server running the very auth.conf that the ConfigMap ships.

Collectors publish only ``gpuscale.v1.samples.<node>``, only the aggregator
metrics, only the decider decisions, only the actuator actions; the
JetStream work each role does (its consumer, KV, replay) still goes through
once ``gpuscale setup``, as the one user that may, has made the streams and
buckets. No role can create or re-shape a stream (a republish into the
decisions would forge them).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import shutil
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import nats
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy, RePublish, StreamConfig

from gpuscale import natsio, subjects
from gpuscale import settings as settings_mod
from gpuscale.embedded_nats import EmbeddedNats, find_binary
from gpuscale.natsio import (
    NotSetUp,
    apply_kv,
    apply_stream,
    declare_kv,
    declare_stream,
    headers_msg_id,
    inbox_prefix,
    stream_config,
)
from gpuscale_cli import setup as setup_app
from gpuscale_decider.sources import MARKER_KEEP_S, Retirement

from ..waiting import eventually, holds_for
from .deploy_support import NATS_AUTH_CONF, NATS_MAIN_CONF, command_options, nats_roles

pytestmark = pytest.mark.integration

ROLES = tuple(nats_roles())
PASSWORDS = {role: f"{role}-pw-0123abcd" for role in ROLES}
KEY = subjects.WorkloadKey("default", "Deployment", "bert-intent-detection")
FAMILY_SUBJECTS = {
    "samples": subjects.samples("gpu-node-1"),
    "metrics": subjects.metrics(KEY),
    "decisions": subjects.decisions(KEY),
    "actions": subjects.actions(KEY),
    "advice": subjects.advice(KEY),
    "windows": subjects.windows(KEY),
}
OWN_FAMILIES = {
    "collector": ("samples",),
    "aggregator": ("metrics",),
    "decider": ("decisions", "advice", "windows"),
    "actuator": ("actions",),
}


def _password_environment() -> dict[str, str]:
    return {f"NATS_{role.upper()}_PASSWORD": pw for role, pw in PASSWORDS.items()}


@pytest.fixture(scope="module")
def secured_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    store = tmp_path_factory.mktemp("nats-auth")
    shutil.copy(NATS_AUTH_CONF, store / "auth.conf")
    server = EmbeddedNats(store_dir=str(store), config_text="include auth.conf\n")
    with pytest.MonkeyPatch.context() as mp:  # nats-server reads the passwords from its environment
        for name, value in _password_environment().items():
            mp.setenv(name, value)
        server.start()
    try:
        yield server
    finally:
        server.close()


@dataclass
class Session:
    nc: Client
    errors: list[str] = field(default_factory=list)

    async def permission_errors(self, count: int, timeout_s: float = 10.0) -> list[str]:
        await eventually(
            lambda: sum("permissions violation" in e for e in self.errors) >= count,
            timeout_s,
            what=f"{count} permission violations",
        )
        return [e for e in self.errors if "permissions violation" in e]


# login(role, password=None) -> a connected Session for that NATS user
Login = Callable[..., Awaitable[Session]]


@pytest.fixture
async def login(secured_nats: EmbeddedNats) -> AsyncIterator[Login]:
    sessions: list[Session] = []

    async def connect(role: str, password: str | None = None, inbox: str | None = None) -> Session:
        errors: list[str] = []

        async def on_error(e: Exception) -> None:
            errors.append(str(e))

        # The manifests hand the credentials over inside GPUSCALE_NATS_URL; replies come in
        # under the role's own inbox, as gpuscale.natsio.connect sets it.
        url = f"nats://{role}:{password or PASSWORDS[role]}@127.0.0.1:{secured_nats.port}"
        nc = await nats.connect(
            url,
            name=role,
            error_cb=on_error,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            inbox_prefix=inbox or inbox_prefix(role),
        )
        session = Session(nc, errors)
        sessions.append(session)
        return session

    yield connect
    for s in sessions:
        await s.nc.close()


def test_the_shipped_cluster_config_parses(tmp_path: Path) -> None:
    work = tmp_path
    shutil.copy(NATS_MAIN_CONF, work / "nats.conf")
    shutil.copy(NATS_AUTH_CONF, work / "auth.conf")
    env = {**_password_environment(), "SERVER_NAME": "nats-0", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [find_binary(), "-t", "-c", str(work / "nats.conf")],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


async def test_a_wrong_password_is_refused(login: Login) -> None:
    with pytest.raises(nats.errors.Error, match="Authorization Violation"):
        await login("collector", password="guess")  # noqa: S106 - a deliberately wrong test password


@pytest.mark.parametrize("role", list(OWN_FAMILIES))
async def test_each_role_publishes_only_its_own_family(login: Login, role: str) -> None:
    observer: Session = await login("observer")
    seen: list[tuple[str, bytes]] = []
    sentinel = asyncio.Event()

    async def on_message(msg: Msg) -> None:
        seen.append((msg.subject, msg.data))
        if msg.data == b"sentinel":
            sentinel.set()

    await observer.nc.subscribe("gpuscale.v1.>", cb=on_message)
    await natsio.flush(observer.nc)

    publisher: Session = await login(role)
    for subject in FAMILY_SUBJECTS.values():
        await publisher.nc.publish(subject, b"probe")
    # One connection's messages arrive in order: once the sentinel is in, so is anything allowed before it.
    own = {FAMILY_SUBJECTS[family] for family in OWN_FAMILIES[role]}
    await publisher.nc.publish(FAMILY_SUBJECTS[OWN_FAMILIES[role][0]], b"sentinel")
    await natsio.flush(publisher.nc)
    await asyncio.wait_for(sentinel.wait(), 10)

    delivered = {subject for subject, data in seen if data == b"probe"}
    assert delivered == own
    denied = await publisher.permission_errors(len(FAMILY_SUBJECTS) - len(own))
    assert len(denied) == len(FAMILY_SUBJECTS) - len(own)


async def test_a_collector_cannot_publish_below_a_node_token(login: Login) -> None:
    collector: Session = await login("collector")
    await collector.nc.publish(FAMILY_SUBJECTS["samples"] + ".extra", b"probe")
    await natsio.flush(collector.nc)
    (error,) = await collector.permission_errors(1)
    assert "samples.gpu-node-1.extra" in error


async def test_the_observer_and_setup_publish_on_no_gpuscale_subject(login: Login) -> None:
    for role in ("observer", "setup"):
        session: Session = await login(role)
        for subject in FAMILY_SUBJECTS.values():
            await session.nc.publish(subject, b"probe")
        await natsio.flush(session.nc)
        assert len(await session.permission_errors(len(FAMILY_SUBJECTS))) == len(FAMILY_SUBJECTS)


async def test_the_observer_reads_everything_and_publishes_nothing(login: Login) -> None:
    observer: Session = await login("observer")
    for subject in FAMILY_SUBJECTS.values():
        await observer.nc.publish(subject, b"probe")
    await natsio.flush(observer.nc)
    assert len(await observer.permission_errors(len(FAMILY_SUBJECTS))) == len(FAMILY_SUBJECTS)


async def test_roles_cannot_subscribe_to_what_they_do_not_consume(login: Login) -> None:
    collector: Session = await login("collector")
    await collector.nc.subscribe(subjects.DECISIONS_ALL)
    await natsio.flush(collector.nc)
    (error,) = await collector.permission_errors(1)
    assert "subscription" in error


async def test_the_aggregator_hears_the_decider_s_windows(login: Login) -> None:
    aggregator: Session = await login("aggregator")
    got = asyncio.Event()

    async def on_window(msg: Msg) -> None:
        got.set()

    await aggregator.nc.subscribe(subjects.WINDOWS_ALL, cb=on_window)
    await natsio.flush(aggregator.nc)
    decider: Session = await login("decider")
    await decider.nc.publish(FAMILY_SUBJECTS["windows"], b"window")
    await natsio.flush(decider.nc)
    await asyncio.wait_for(got.wait(), 10)
    assert [e for e in aggregator.errors if "permissions violation" in e] == []


async def setup_as_deployed(login: Login, *, window_s: float = 60.0) -> None:
    """What the decider's init container does: ``gpuscale setup`` as user "setup"."""
    setup: Session = await login("setup")
    js = setup.nc.jetstream(timeout=5)
    built = settings_mod.build(command_options("setup").settings_class, {}, {})
    for spec in setup_app.declarations(dataclasses.replace(built, window_s=window_s)):
        if isinstance(spec, subjects.StreamSpec):
            assert await apply_stream(js, spec) in ("created", "unchanged")
        else:
            assert await apply_kv(js, spec) in ("created", "unchanged")
    assert [e for e in setup.errors if "permissions violation" in e] == []


async def test_no_role_but_setup_creates_or_reshapes_a_stream(login: Login) -> None:
    """The aggregator's finding: a stream that republishes into the decisions.
    Every service role is refused creating it and re-shaping the real ones."""
    await setup_as_deployed(login)
    forged = StreamConfig(
        name="FORGE",
        subjects=["gpuscale.v1.metrics.forge"],
        republish=RePublish(src=">", dest="gpuscale.v1.decisions.default.Deployment.victim"),
    )
    for role in ("collector", "aggregator", "decider", "actuator", "observer"):
        session: Session = await login(role)
        # A denied request is never answered, so each one costs this timeout; the server's
        # permission errors below, not the timeouts, show the denial.
        js = session.nc.jetstream(timeout=0.5)
        with pytest.raises(nats.errors.TimeoutError):  # denied: the server never answers
            await js.add_stream(forged)
        samples = stream_config(subjects.samples_stream(60.0))  # the real one, re-shaped
        samples.republish = forged.republish
        with pytest.raises(nats.errors.TimeoutError):
            await js.update_stream(samples)
        with pytest.raises(nats.errors.TimeoutError):
            await js.delete_stream(subjects.DECISIONS_STREAM)
        assert len(await session.permission_errors(3)) >= 3, role
    admin = (await login("setup")).nc.jetstream(timeout=5)
    assert (await admin.stream_info(subjects.SAMPLES_STREAM)).config.republish is None
    names = {info.config.name for info in await admin.streams_info()}
    assert "FORGE" not in names


async def test_services_refuse_to_start_on_streams_nobody_set_up(login: Login) -> None:
    """Without the setup step a role's declare fails with what to do, not a hang."""
    admin = (await login("setup")).nc.jetstream(timeout=5)
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await admin.delete_stream(subjects.DECISIONS_STREAM)
    decider: Session = await login("decider")
    with pytest.raises(NotSetUp, match="run gpuscale setup"):
        await declare_stream(decider.nc.jetstream(timeout=1), subjects.DECISIONS)


async def test_each_roles_jetstream_work_goes_through(login: Login) -> None:
    await setup_as_deployed(login)
    decider: Session = await login("decider")
    actuator: Session = await login("actuator")
    aggregator: Session = await login("aggregator")
    collector: Session = await login("collector")

    # decider: its stream, a de-duplicated decision, its state bucket
    decider_js = decider.nc.jetstream(timeout=5)
    await declare_stream(decider_js, subjects.DECISIONS)
    ack = await decider_js.publish(
        FAMILY_SUBJECTS["decisions"], b"decision-1", headers=headers_msg_id("decision-1")
    )
    assert ack.stream == subjects.DECISIONS_STREAM
    bucket = settings_mod.build(command_options("decider").settings_class, {}, {}).state_bucket
    state = await declare_kv(decider_js, subjects.decider_state(bucket))
    await state.put("default.Deployment.bert-intent-detection", b"history")
    assert (await state.get("default.Deployment.bert-intent-detection")).value == b"history"
    # ... and shadow mode's advice: a plain publish the advice stream keeps, read by the observer
    await declare_stream(decider_js, subjects.ADVICE)
    await decider.nc.publish(FAMILY_SUBJECTS["advice"], b"advice-1")
    await natsio.flush(decider.nc)
    observer_js = (await login("observer")).nc.jetstream(timeout=5)

    async def advice_kept() -> bool:
        return (await observer_js.stream_info(subjects.ADVICE_STREAM)).state.messages >= 1

    await eventually(advice_kept, 10, what="the advice in its stream")
    kept = await observer_js.get_msg(subjects.ADVICE_STREAM, subject=subjects.ADVICE_ALL, next=True, seq=1)
    assert kept.data == b"advice-1"

    # ... and each workload's desired count, which the actuator watches and converges to
    desired = await declare_kv(decider_js, subjects.DESIRED)
    await desired.put(subjects.desired_key(KEY), b"desired-1")

    # actuator: watches the desired counts (reads only), reports
    actuator_js = actuator.nc.jetstream(timeout=5)
    watched = await (await declare_kv(actuator_js, subjects.DESIRED)).watchall()
    entry = await watched.updates(timeout=5)
    assert entry is not None
    assert entry.value == b"desired-1"
    await watched.stop()
    await actuator.nc.publish(FAMILY_SUBJECTS["actions"], b"applied")
    # ... and the decider removes a retired workload's entries, their purge markers after them
    retirement = Retirement(decider_js, subjects.DESIRED_BUCKET, bucket)
    await retirement.retire(KEY, 0.0)
    await retirement.sweep(MARKER_KEEP_S)
    for stream in (subjects.DESIRED.stream, subjects.decider_state(bucket).stream):
        assert (await decider_js.stream_info(stream)).state.messages == 0

    # aggregator: the samples replay stream, filled by plain collector publishes
    aggregator_js = aggregator.nc.jetstream(timeout=5)
    await declare_stream(aggregator_js, subjects.samples_stream(60.0))
    for i in range(3):
        await collector.nc.publish(FAMILY_SUBJECTS["samples"], f"batch-{i}".encode())
    await natsio.flush(collector.nc)
    replay = await aggregator_js.subscribe(
        subjects.SAMPLES_ALL, stream=subjects.SAMPLES_STREAM, ordered_consumer=True
    )
    replayed = [(await replay.next_msg(timeout=5)).data for _ in range(3)]
    assert replayed == [b"batch-0", b"batch-1", b"batch-2"]
    await replay.unsubscribe()
    # ... and the aggregator's own replay: an ephemeral, unacked pull consumer
    pull_replay = await aggregator_js.pull_subscribe(
        subjects.SAMPLES_ALL,
        stream=subjects.SAMPLES_STREAM,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        ),
    )
    assert len(await pull_replay.fetch(3, timeout=5)) == 3

    for session in (decider, actuator, aggregator, collector):
        assert [e for e in session.errors if "permissions violation" in e] == []


async def test_the_actuator_cannot_touch_the_samples_stream(login: Login) -> None:
    actuator: Session = await login("actuator")
    await actuator.nc.publish(f"$JS.API.STREAM.DELETE.{subjects.DECISIONS_STREAM}", b"")
    await actuator.nc.publish(f"$JS.API.CONSUMER.CREATE.{subjects.SAMPLES_STREAM}", b"{}")
    await natsio.flush(actuator.nc)
    assert len(await actuator.permission_errors(2)) == 2


# --- replies: each role's inbox is its own -------------------------------------------------


@pytest.mark.parametrize("role", ROLES)
async def test_no_role_may_read_another_roles_replies(login: Login, role: str) -> None:
    session: Session = await login(role)
    others = [other for other in ROLES if other != role]
    for other in others:
        await session.nc.subscribe(f"{inbox_prefix(other)}.>")
    await session.nc.subscribe("_INBOX.>")
    await natsio.flush(session.nc)
    denied = await session.permission_errors(len(others) + 1)
    assert len(denied) == len(others) + 1
    # ... and its own inbox is where its JetStream API answers arrive.
    await session.nc.subscribe(f"{inbox_prefix(role)}.>")
    await natsio.flush(session.nc)
    assert len(await session.permission_errors(len(others) + 1)) == len(others) + 1


async def test_the_collector_cannot_read_the_desired_counts_the_actuator_watches(login: Login) -> None:
    """Finding: every login could subscribe to _INBOX.>, where the actuator's consumer
    delivers, and so read every tenant's decisions as they were delivered."""
    await setup_as_deployed(login)
    collector: Session = await login("collector")
    overheard: list[bytes] = []

    async def on_reply(msg: Msg) -> None:
        overheard.append(msg.data)

    await collector.nc.subscribe("_INBOX.>", cb=on_reply)
    await collector.nc.subscribe(f"{inbox_prefix('actuator')}.>", cb=on_reply)
    await natsio.flush(collector.nc)
    assert len(await collector.permission_errors(2)) == 2

    decider: Session = await login("decider")
    await (await declare_kv(decider.nc.jetstream(timeout=5), subjects.DESIRED)).put(
        subjects.desired_key(KEY), b"tenant-a-desired"
    )
    actuator: Session = await login("actuator")
    watched = await (await declare_kv(actuator.nc.jetstream(timeout=5), subjects.DESIRED)).watchall()
    entry = await watched.updates(timeout=5)
    assert entry is not None
    assert entry.value == b"tenant-a-desired"
    await watched.stop()
    await natsio.flush(collector.nc)  # anything routed to the collector is in before its PONG
    assert overheard == []


async def test_only_the_decider_writes_a_desired_count(login: Login) -> None:
    """The actuator converges every target to what the bucket says: no other role may write it."""
    await setup_as_deployed(login)
    for role in ("collector", "aggregator", "actuator", "observer", "setup"):
        session: Session = await login(role)
        await session.nc.publish(f"$KV.{subjects.DESIRED_BUCKET}.{subjects.desired_key(KEY)}", b"10")
        await natsio.flush(session.nc)
        assert len(await session.permission_errors(1)) == 1, role


async def test_no_role_may_publish_into_the_actuators_inbox(login: Login) -> None:
    actuator: Session = await login("actuator")
    arrived: list[bytes] = []

    async def on_msg(msg: Msg) -> None:
        arrived.append(msg.data)

    inbox = f"{inbox_prefix('actuator')}.pull"
    await actuator.nc.subscribe(inbox, cb=on_msg)
    await natsio.flush(actuator.nc)
    for role in ROLES:
        if role == "actuator":
            continue
        session: Session = await login(role)
        await session.nc.publish(inbox, b"junk")
        await natsio.flush(session.nc)
        (denied,) = await session.permission_errors(1)
        assert inbox.lower() in denied, role
    await natsio.flush(actuator.nc)
    # The server refused every publish before the errors above came back: nothing is on its way.
    await holds_for(lambda: arrived == [], 0.2, "nothing arrived in the actuator's inbox")
