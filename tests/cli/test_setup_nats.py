"""`gpuscale setup` against a real nats-server: it makes every stream and
bucket, is idempotent, sizes them, and is the only one that reshapes them (a
service uses what it finds and says what differs). Each stream's own byte
budget keeps a flood of samples from starving the decisions."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from gpuscale import natsio, subjects
from gpuscale import settings as settings_mod
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import (
    NATS,
    apply_kv,
    apply_stream,
    connect,
    declare_stream,
    drain,
    headers_msg_id,
    jetstream,
)
from gpuscale_cli import setup
from gpuscale_cli.setup import SetupSettings

pytestmark = pytest.mark.integration


def outcomes(out: str) -> list[str]:
    """What setup printed per stream and bucket (its log lines aside)."""
    return [line.rsplit(": ", 1)[1] for line in out.splitlines() if line.startswith(("stream ", "bucket "))]


def settings_for(url: str, **env: str) -> SetupSettings:
    built: SetupSettings = settings_mod.build(SetupSettings, {}, {"GPUSCALE_NATS_URL": url, **env})
    return built


async def test_setup_makes_every_stream_and_bucket_once(
    nats_server: EmbeddedNats, nats_client: NATS, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await setup.run(settings_for(nats_server.url)) == 0
    assert outcomes(capsys.readouterr().out) == ["created"] * 5
    js = jetstream(nats_client)
    samples = (await js.stream_info(subjects.SAMPLES_STREAM)).config
    assert (samples.max_age, samples.max_bytes) == (30.0, subjects.SAMPLES_MAX_BYTES)
    decisions = (await js.stream_info(subjects.DECISIONS_STREAM)).config
    assert decisions.max_bytes == subjects.DECISIONS_MAX_BYTES
    assert (await js.key_value(subjects.DECIDER_STATE_BUCKET)) is not None
    assert (await js.key_value(subjects.DESIRED_BUCKET)) is not None

    assert await setup.run(settings_for(nats_server.url)) == 0
    assert outcomes(capsys.readouterr().out) == ["unchanged"] * 5

    resized = settings_for(nats_server.url, GPUSCALE_WINDOW="60", GPUSCALE_SAMPLES_MAX_BYTES="512MiB")
    assert await setup.run(resized) == 0
    out = capsys.readouterr().out
    assert "stream GPUSCALE_SAMPLES: kept 60 s, 512 MiB, file, 1 replica(s): updated" in out
    samples = (await js.stream_info(subjects.SAMPLES_STREAM)).config
    assert (samples.max_age, samples.max_bytes) == (60.0, 512 * 1024**2)


async def test_a_service_uses_a_stream_as_it_finds_it_and_says_what_differs(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    assert await setup.run(settings_for(nats_server.url, GPUSCALE_WINDOW="60")) == 0
    js = jetstream(nats_client)
    with capture_logs() as logs:
        await declare_stream(js, subjects.samples_stream(30.0))  # an aggregator run with --window 30
    (line,) = [e for e in logs if e["event"] == "stream_config_differs"]
    assert line["differences"] == [
        "max_age_s is 60.0, this version declares 30.0",
        "duplicate_window_s is 60.0, this version declares 30.0",
    ]
    assert (await js.stream_info(subjects.SAMPLES_STREAM)).config.max_age == 60.0  # left alone
    with capture_logs() as logs:
        await declare_stream(js, dataclasses.replace(subjects.DECISIONS, replicas=3, max_bytes=1))
    assert logs == []  # sizing is setup's: a service does not argue about it


def test_the_declarations_follow_the_options() -> None:
    built = settings_for("nats://127.0.0.1:4222", GPUSCALE_NATS_REPLICAS="3", GPUSCALE_SCALE_OUT="true")
    specs = setup.declarations(built)
    assert {s.replicas for s in specs} == {3}
    names = [getattr(s, "name", None) or getattr(s, "bucket", None) for s in specs]
    assert names == [
        subjects.SAMPLES_STREAM,
        subjects.DECISIONS_STREAM,
        subjects.ADVICE_STREAM,
        subjects.DECIDER_STATE_BUCKET,
        subjects.DESIRED_BUCKET,
        subjects.AGGREGATOR_PARTS_STREAM,
    ]
    with pytest.raises(settings_mod.SettingsError, match="at most 5"):
        settings_for("nats://127.0.0.1:4222", GPUSCALE_NATS_REPLICAS="7")


@pytest.fixture
def small_store(tmp_path: Path) -> Iterator[EmbeddedNats]:
    """JetStream with 32 MiB of file storage in all."""
    (tmp_path / "js").mkdir()
    server = EmbeddedNats(store_dir=str(tmp_path / "js"), config_text="jetstream { max_file_store: 32MB }\n")
    server.start()
    try:
        yield server
    finally:
        server.close()


async def test_a_flood_of_samples_leaves_the_decisions_their_storage(small_store: EmbeddedNats) -> None:
    """Budgets shrunk to fit a 32 MiB store (samples, decisions, advice 6 each, buckets 4 + 4):
    60 MB of samples push old samples out, and a decision still finds room."""
    nc = await connect([small_store.url], ServiceMetrics("test"), name="flood")
    try:
        js = jetstream(nc)
        mib = 1024**2
        for spec in setup.declarations(settings_for(small_store.url)):
            if isinstance(spec, subjects.StreamSpec):
                await apply_stream(js, dataclasses.replace(spec, max_bytes=6 * mib))
            else:
                await apply_kv(js, dataclasses.replace(spec, max_bytes=4 * mib))
        batch = b"x" * 60_000
        for i in range(1000):
            await nc.publish(subjects.samples(f"node-{i % 50}"), batch)
            if i % 100 == 0:
                await natsio.flush(nc)
        await natsio.flush(nc)
        deadline = time.monotonic() + 10
        while (await js.stream_info(subjects.SAMPLES_STREAM)).state.last_seq < 1000:
            assert time.monotonic() < deadline, "the samples stream did not take the flood"
        state = (await js.stream_info(subjects.SAMPLES_STREAM)).state
        assert state.bytes <= 6 * mib  # old samples went first
        assert state.first_seq > 1
        key = subjects.WorkloadKey("default", "Deployment", "bert")
        ack = await js.publish(subjects.decisions(key), b"decision", headers=headers_msg_id("after-flood"))
        assert ack.stream == subjects.DECISIONS_STREAM
    finally:
        await drain(nc)
