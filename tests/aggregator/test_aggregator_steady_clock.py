"""The aggregator's own clock stepping (chrony's makestep, a VM resumed,
``date -s``): the window is placed and expired on a steady clock, the wall
clock at start plus monotonic seconds, so a step neither freezes the averages
nor keeps a pod fresh; the timestamps it checks and publishes stay on the wall
clock, so a step leaves it hearing its nodes and heard by its receivers; the
step is shown (gauge) and logged once."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from structlog.testing import capture_logs

from gpuscale import codec, subjects
from gpuscale.codec import encode_raw
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.steadyclock import SteadyClock
from gpuscale.subjects import WorkloadKey
from gpuscale.wire import WindowRequest
from gpuscale_aggregator.core.ingest import ACCEPTED, Aggregator
from gpuscale_aggregator.core.window import WindowConfig

from ..waiting import eventually
from .aggregator_builders import NOW, batch, gpu, owner
from .aggregator_harness import MetricsInbox, counter, publish_batch, running_aggregator

HOUR = 3600.0


class Host:
    """A host's two clocks: the wall one steps when told, the monotonic one never does."""

    def __init__(self, wall_ahead_s: float = 0.0) -> None:
        self.true = NOW
        self.wall_ahead_s = wall_ahead_s

    def wall(self) -> float:
        return self.true + self.wall_ahead_s

    def monotonic(self) -> float:
        return self.true - NOW + 12_345.0  # its own origin: only differences count


def test_the_steady_clock_reads_like_the_wall_at_start_and_ignores_its_steps() -> None:
    host = Host()
    clock = SteadyClock(host.wall, host.monotonic)
    assert clock() == pytest.approx(NOW)
    host.true += 10
    host.wall_ahead_s = -HOUR  # set back an hour
    assert clock() == pytest.approx(NOW + 10)
    assert clock.step_s() == pytest.approx(-HOUR)


def _util_seen_after_a_step_back(arrival_clock: str) -> list[float]:
    """An aggregator whose host clock was an hour ahead and is set right at second 30; the
    node's load goes 30 -> 80 at second 40. The window's mean, seconds 70 to 120 (30 s after)."""
    host = Host(wall_ahead_s=HOUR)
    steady = SteadyClock(host.wall, host.monotonic)
    clock = steady if arrival_clock == "steady" else host.wall
    agg = Aggregator(WindowConfig(window_s=30.0))
    seen = []
    for second in range(120):
        host.true = NOW + second
        if second == 30:
            host.wall_ahead_s = 0.0
        util = 80.0 if second >= 40 else 30.0
        pod = owner("bert-0")
        data = encode_raw(batch(gpu(0, pod, util=util, node="n1"), node="n1", ts=host.true, seq=second + 1))
        assert agg.ingest(data, clock(), subject_node="n1").status == ACCEPTED
        if second >= 70:
            (message,) = agg.snapshot(clock() + 0.5)
            assert (message.pods_fresh, message.pods_stale) == (1, 0)
            seen.append(message.averages.to_dict()["gpu_util"])
    return seen


def test_a_wall_clock_set_back_an_hour_leaves_the_window_following_the_load() -> None:
    assert _util_seen_after_a_step_back("steady") == pytest.approx([80.0] * 50)


def test_on_the_wall_clock_itself_the_same_step_froze_the_old_load() -> None:
    """The control for the test above (without it, that one could pass on a scenario that
    steps nothing): placed by the stepping wall clock, the buckets from before the step sit
    in the window's future and the new load never shows. Should the core come to handle a
    `now` that goes back by itself, this fails, and the steady clock is then a choice."""
    assert max(_util_seen_after_a_step_back("wall")) < 40.0


async def test_the_service_shows_the_step_and_logs_it_once(nats_server: EmbeddedNats) -> None:
    host = Host()
    clock = SteadyClock(host.wall, host.monotonic)
    with capture_logs() as logs:
        async with running_aggregator(nats_server.url, clock=clock) as service:
            host.wall_ahead_s = -HOUR
            for _ in range(2):
                service._next_clock_check = 0.0  # check now, not in 10 s
                await service.publish_once()
    steps = [e for e in logs if e["event"] == "wall_clock_stepped"]
    assert [e["step_s"] for e in steps] == [-HOUR]
    assert counter(service, "gpuscale_aggregator_wall_clock_step_seconds") == -HOUR


class MisSetWall:
    """A host's wall clock off by ``error_s`` until set right; its monotonic clock is the real one."""

    def __init__(self, error_s: float) -> None:
        self.error_s = error_s

    def __call__(self) -> float:
        return time.time() + self.error_s


@pytest.mark.parametrize(
    "error_s", [-120.0, HOUR], ids=["two-minutes-behind-set-forward", "an-hour-ahead-set-back"]
)
async def test_a_host_clock_set_right_after_start_leaves_the_aggregator_hearing_and_heard(
    nats_server: EmbeddedNats, nats_client: NATS, error_s: float
) -> None:
    """The window keeps its steady time, but what crosses the process boundary is on the
    wall clock, as every other component's is. Nodes, deciders and this receiver are on time;
    the aggregator's host clock is set right (chrony's makestep at boot, a VM resumed) after
    it started. On the steady clock alone, set forward, every node batch and window request
    read 120 s ahead (refused: future_timestamp) and the aggregator went blind; set back, its
    messages read an hour ahead and every receiver refused them, until a restart."""
    wall = MisSetWall(error_s)
    inbox = await MetricsInbox().start(nats_client)  # a receiver on time
    with capture_logs() as logs:
        async with running_aggregator(nats_server.url, clock=SteadyClock(wall, time.monotonic)) as service:
            await eventually(lambda: service.replay_done, what="replay")
            wall.error_s = 0.0  # set right
            step = "gpuscale_aggregator_wall_clock_step_seconds"
            await eventually(lambda: abs(counter(service, step) + error_s) < 1.0, what="the step seen")
            request = WindowRequest(
                ts=time.time(),
                namespace="default",
                kind="Deployment",
                name="bert",
                window_s=10.0,
                recent_s=3.0,
            )
            key = WorkloadKey("default", "Deployment", "bert")
            await nats_client.publish(subjects.windows(key), codec.encode(request))
            for seq in range(1, 4):
                pod = owner("bert-0")
                data = batch(gpu(0, pod, util=40.0, node="n1"), node="n1", ts=time.time(), seq=seq)
                await publish_batch(nats_client, data)
                await asyncio.sleep(0.2)
            await eventually(
                lambda: (m := inbox.latest("bert")) is not None and m.pods_fresh == 1 and m.window_s == 10.0,
                what="fresh metrics on the asked window, taken by a receiver on time",
            )
            service._next_clock_check = 0.0
            await service.publish_once()
            offset = counter(service, "gpuscale_aggregator_node_clock_offset_seconds", node="n1")
    message: Any = inbox.latest("bert")
    assert message.averages.to_dict()["gpu_util"] == pytest.approx(40.0)
    assert abs(message.ts - time.time()) < 5.0
    assert message.pods[0].last_seen <= message.ts
    assert (
        counter(service, "gpuscale_messages_rejected_total", kind="samples", reason="future_timestamp") == 0
    )
    assert abs(offset) < 2.0  # the node's offset from the wall clock, not from the steady one
    assert [e["step_s"] for e in logs if e["event"] == "wall_clock_stepped"] == [
        pytest.approx(-error_s, abs=1.0)
    ]
