"""Nodes whose clocks disagree with the aggregator's: one clock judges.

A fleet simulated second by second with per-node clocks (the aggregator's
clock is the simulation's): every pod is fresh with its true value whatever
its node's clock says, a clock that steps by 30 s costs at most one sample
and never a stale pod, and a batch delayed in transit is late.
"""

from __future__ import annotations

import pytest

from gpuscale.codec import encode_raw
from gpuscale.wire import WorkloadMetrics
from gpuscale_aggregator.core.ingest import ACCEPTED, TOO_OLD, Aggregator
from gpuscale_aggregator.core.window import WindowConfig

from .aggregator_builders import NOW, batch, gpu, owner

W = 30.0


class Node:
    """A collector on its own clock: ``skew`` seconds ahead of the aggregator's."""

    def __init__(self, name: str, skew: float, util: float) -> None:
        self.name, self.skew, self.util, self.seq = name, skew, util, 0

    def batch_at(self, true_time: float) -> bytes:
        self.seq += 1
        pod = owner(f"{self.name}-pod", workload=self.name)
        return encode_raw(
            batch(
                gpu(0, pod, util=self.util, node=self.name),
                node=self.name,
                ts=true_time + self.skew,
                seq=self.seq,
            )
        )


def by_name(agg: Aggregator, now: float) -> dict[str, WorkloadMetrics]:
    return {m.name: m for m in agg.snapshot(now)}


def test_nodes_behind_and_ahead_all_read_fresh_with_their_true_values() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    nodes = [Node("behind-2s5", -2.5, 20.0), Node("behind-10s", -10.0, 40.0), Node("ahead-10s", 10.0, 60.0)]
    for second in range(60):
        now = NOW + second
        for node in nodes:
            assert agg.ingest(node.batch_at(now), now + 0.01, subject_node=node.name).status == ACCEPTED
        seen = by_name(agg, now + 0.5)
        for node in nodes:
            m = seen[node.name]
            assert (m.pods_fresh, m.pods_stale) == (1, 0), (second, node.name)
            assert m.averages["gpu_util"] == pytest.approx(node.util)
            assert m.pods[0].last_seen <= now + 0.5  # never dated after it arrived
    assert agg.clocks.offset("behind-10s") == pytest.approx(10.01)
    assert agg.clocks.offset("ahead-10s") == pytest.approx(-9.99)


@pytest.mark.parametrize("step", [30.0, -30.0], ids=["steps-ahead", "steps-back"])
def test_a_30s_clock_step_costs_at_most_one_sample_and_no_stale_pod(step: float) -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    node = Node("stepping", 0.0, 30.0)
    statuses = []
    for second in range(3 * int(W)):
        now = NOW + second
        if second == 20:
            node.skew += step  # chrony corrects the clock
        if second == 25:
            node.util = 80.0  # the load changes after the step: the window must follow
        statuses.append(agg.ingest(node.batch_at(now), now + 0.01, subject_node=node.name).status)
        (m,) = agg.snapshot(now + 0.5)
        assert (m.pods_fresh, m.pods_stale) == (1, 0), second
    assert statuses.count(ACCEPTED) >= len(statuses) - 1
    assert set(statuses) <= {ACCEPTED, TOO_OLD}
    # Nothing pinned: one window after the load changed, the mean is the new load alone.
    (m,) = agg.snapshot(NOW + 3 * W - 1 + 0.5)
    assert m.averages["gpu_util"] == pytest.approx(80.0)
    assert agg.clocks.offset("stepping") == pytest.approx(0.01 - step)


def test_a_batch_delayed_in_transit_beyond_the_bound_is_stale() -> None:
    """The same ``arrival - ts`` of 4 s: late from a node whose clock is right,
    on time from a node whose clock is 4 s behind."""
    agg = Aggregator(WindowConfig(window_s=W, stale_intervals=3.0))
    synced, behind = Node("synced", 0.0, 10.0), Node("behind", -4.0, 10.0)
    for second in range(10):
        now = NOW + second
        for node in (synced, behind):
            agg.ingest(node.batch_at(now), now + 0.01, subject_node=node.name)
    # Both fall silent for 5 s (their pods go stale), then one batch each arrives
    # 4 s after it was taken (by the true clock) for the synced node, on time for
    # the one that is 4 s behind.
    arrival = NOW + 15
    synced.util = behind.util = 90.0
    agg.ingest(synced.batch_at(arrival - 4.0), arrival, subject_node="synced")
    agg.ingest(behind.batch_at(arrival), arrival, subject_node="behind")
    seen = by_name(agg, arrival + 0.1)
    assert (seen["synced"].pods_fresh, seen["synced"].pods_stale) == (0, 1)
    assert seen["synced"].pods[0].last_seen == pytest.approx(arrival - 4.0 + 0.01)
    assert (seen["behind"].pods_fresh, seen["behind"].pods_stale) == (1, 0)
    assert seen["behind"].pods[0].last_seen == pytest.approx(arrival)


def test_a_node_clock_far_ahead_pins_nothing() -> None:
    """A batch dated 55 s ahead (within the contract's skew allowance) is placed
    at its arrival; when the node's clock comes back, its pods stay fresh."""
    agg = Aggregator(WindowConfig(window_s=W))
    node = Node("jumpy", 0.0, 50.0)
    for second in range(5):
        agg.ingest(node.batch_at(NOW + second), NOW + second, subject_node="jumpy")
    node.skew = 55.0
    agg.ingest(node.batch_at(NOW + 5), NOW + 5, subject_node="jumpy")
    node.skew = 0.0
    for second in range(6, 12):
        assert agg.ingest(node.batch_at(NOW + second), NOW + second, subject_node="jumpy").status == ACCEPTED
        (m,) = agg.snapshot(NOW + second)
        assert m.pods[0].last_seen == pytest.approx(NOW + second)
        assert m.pods_fresh == 1
