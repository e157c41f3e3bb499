"""One clock per judge: where a sender's messages belong on the receiver's clock.

Scenarios: senders 2.5 s and 10 s behind and 10 s ahead, a 30 s
step either way, a single message delayed in transit, a collector's buffer
flushed after an outage, a future timestamp."""

from __future__ import annotations

import pytest

from gpuscale.clocks import MAX_SENDERS, SenderClocks, due

T0 = 1_800_000_000.0


def run(
    clocks: SenderClocks, skew: float, seconds: int, start: float = T0, transit: float = 0.003
) -> list[float]:
    """A sender with a clock ``skew`` s off, one message a second: where each lands."""
    return [
        clocks.place("node", start + i + skew, start + i + transit, interval_s=1.0).at - (start + i)
        for i in range(seconds)
    ]


@pytest.mark.parametrize("skew", [-2.5, -10.0, 10.0, 0.0])
def test_a_sender_off_by_seconds_is_placed_where_its_samples_belong(skew: float) -> None:
    landed = run(SenderClocks(), skew, 20)
    assert all(abs(x) < 0.01 for x in landed), landed  # on arrival, give or take transit


@pytest.mark.parametrize("step", [-30.0, 30.0])
def test_a_clock_step_costs_at_most_one_sample(step: float) -> None:
    clocks = SenderClocks()
    run(clocks, 0.0, 20)
    after = run(clocks, step, 20, start=T0 + 20)
    # The first message off by the step could be a late one: believed from the second.
    assert all(abs(x) < 0.01 for x in after[1:]), after
    assert clocks.offset("node") == pytest.approx(-step, abs=0.01)


def test_a_message_delayed_in_transit_lands_in_the_past() -> None:
    clocks = SenderClocks()
    run(clocks, 0.0, 20)
    # Sent at T0+20 (on time by its clock), stuck 10 s, nothing else meanwhile.
    late = clocks.place("node", T0 + 20, T0 + 30, interval_s=1.0)
    assert late.at == pytest.approx(T0 + 20, abs=0.01)
    assert late.delay_s == pytest.approx(10, abs=0.01)
    # ... and the sender's next message is on time again.
    assert clocks.place("node", T0 + 31, T0 + 31.003, interval_s=1.0).at == pytest.approx(T0 + 31, abs=0.01)


def test_a_buffer_flushed_after_an_outage_is_not_a_clock_step() -> None:
    clocks = SenderClocks()
    run(clocks, 0.0, 20)
    # 8 batches taken during an outage, delivered together when NATS is back.
    flushed = [clocks.place("node", T0 + 20 + i, T0 + 40.0 + 0.001 * i, interval_s=1.0) for i in range(8)]
    assert [round(p.at - (T0 + 20 + i), 2) for i, p in enumerate(flushed)] == [0.0] * 8
    assert clocks.offset("node") == pytest.approx(0.003, abs=0.01)


def test_a_future_timestamp_pins_nothing() -> None:
    clocks = SenderClocks()
    run(clocks, 0.0, 20)
    forged = clocks.place("node", T0 + 20 + 55, T0 + 20.01, interval_s=1.0)
    assert forged.at <= T0 + 20.01  # never after its own arrival
    assert clocks.offset("node") == pytest.approx(0.003, abs=0.01)  # one message moves no median


def test_senders_are_bounded() -> None:
    clocks = SenderClocks()
    for i in range(MAX_SENDERS + 10):
        clocks.place(f"node-{i}", T0, T0)
    assert len(clocks) == MAX_SENDERS


@pytest.mark.parametrize(
    ("elapsed", "is_due"),
    [(0.0, False), (14.9, False), (15.0, True), (600.0, True), (-0.001, True), (-3600.0, True)],
    ids=["just-done", "not-yet", "on-time", "long-ago", "clock-back-a-little", "clock-back-an-hour"],
)
def test_due_after_the_period_or_at_once_on_a_clock_set_back(elapsed: float, is_due: bool) -> None:
    assert due(1_000.0, 1_000.0 + elapsed, 15.0) is is_due


def test_at_is_where_place_puts_a_message() -> None:
    """``at`` (the aggregator's path: no object per message) and ``place`` judge alike."""
    by_place, by_at = SenderClocks(), SenderClocks()
    for i, (skew, transit) in enumerate(
        [(0.0, 0.01), (5.0, 0.02), (5.0, 9.0), (35.0, 0.0), (35.0, 0.01)] * 4
    ):
        ts, arrival = T0 + i + skew, T0 + i + transit
        assert by_place.place("node", ts, arrival, interval_s=1.0).at == by_at.at("node", ts, arrival, 1.0)
        assert by_place.offset("node") == by_at.offset("node")
