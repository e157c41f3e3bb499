"""The aggregator's own clock stepping back (chrony's makestep, a VM resumed,
``date -s``): the window is placed and expired on a steady clock, the wall
clock at start plus monotonic seconds, so a step neither freezes the averages
nor keeps a pod fresh; the step is shown (gauge) and logged once."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from gpuscale.codec import encode_raw
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.steadyclock import SteadyClock
from gpuscale_aggregator.core.ingest import ACCEPTED, Aggregator
from gpuscale_aggregator.core.window import WindowConfig

from .aggregator_builders import NOW, batch, gpu, owner
from .aggregator_harness import counter, running_aggregator

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
