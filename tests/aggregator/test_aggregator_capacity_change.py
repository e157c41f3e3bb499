"""Warm-up awareness: once a new pod becomes ready, a workload's
averages use only what was measured since. Before it, two saturated pods read
100 %; after it, three share the same load. A 30 s mean of both would ask for a
fourth pod the load never needed (the demo's 3 -> 4 overshoot)."""

from __future__ import annotations

import pytest

from gpuscale.codec import encode_raw
from gpuscale.wire import UNSET, WorkloadMetrics
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import WindowConfig

from .aggregator_builders import NOW, batch, gpu, owner

W = 30.0


def feed(agg: Aggregator, ticks: dict[float, dict[str, float]]) -> None:
    """At each time, one batch per pod (each on its own node): pod -> gpu_util."""
    seq: dict[str, int] = {}
    for ts, pods in sorted(ticks.items()):
        for pod, util in pods.items():
            node = f"node-{pod}"
            seq[node] = seq.get(node, -1) + 1
            b = batch(gpu(0, owner(pod), util=util, node=node), node=node, ts=ts, seq=seq[node])
            assert agg.ingest(encode_raw(b), now=ts, subject_node=node).status == "accepted"


def bert(agg: Aggregator, now: float) -> WorkloadMetrics:
    (m,) = [m for m in agg.snapshot(now) if m.name == "bert"]
    return m


def test_a_pod_ready_within_the_window_restarts_the_averages_at_its_first_sample() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    saturated = {NOW + t: {"a-1": 100.0, "a-2": 100.0} for t in range(20)}
    shared = {NOW + t: {"a-1": 67.0, "a-2": 67.0, "a-3": 66.0} for t in range(20, 24)}
    feed(agg, {**saturated, **shared})
    m = bert(agg, NOW + 23)
    assert m.averages.gpu_util == pytest.approx((67 + 67 + 66) / 3)  # not (16×100 + 4×67)/20 per old pod
    assert m.since == NOW + 20
    assert m.window_s == W  # the window asked for; since says where this one starts
    assert m.pods_fresh == 3


def test_once_the_window_has_passed_the_change_the_averages_are_plain_again() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    feed(agg, {NOW + t: {"a-1": 50.0} for t in range(10)})
    feed(agg, {NOW + t: {"a-1": 50.0, "a-2": 70.0} for t in range(10, 45)})
    assert bert(agg, NOW + 20).since == NOW + 10
    m = bert(agg, NOW + 44)
    assert m.since is UNSET
    assert m.averages.gpu_util == pytest.approx(60.0)


def test_pods_starting_together_are_one_capacity_not_a_change() -> None:
    """An aggregator start, or one scale-up's pods seen on several nodes a tick apart."""
    agg = Aggregator(WindowConfig(window_s=W))
    feed(agg, {NOW: {"a-1": 90.0}, NOW + 1: {"a-1": 50.0, "a-2": 50.0}, NOW + 2: {"a-1": 50.0, "a-2": 50.0}})
    m = bert(agg, NOW + 2)
    assert m.since is UNSET
    assert m.averages.gpu_util == pytest.approx(((90 + 50 + 50) / 3 + 50) / 2)


def test_a_stale_pod_keeps_its_window_and_stays_listed() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    feed(agg, {NOW + t: {"a-1": 20.0} for t in range(3)})
    feed(agg, {NOW + t: {"a-2": 80.0} for t in range(10, 12)})
    m = bert(agg, NOW + 11)
    assert m.since == NOW + 10
    assert {p.pod: p.values.gpu_util for p in m.pods} == {"a-1": 20.0, "a-2": 80.0}
    assert (m.pods_fresh, m.pods_stale) == (1, 1)


# --- told at once: a capacity change is news the decider should not wait a cycle for ---
# A scale-up's next step rests on the first message after its pods became ready (the
# demo's 2 -> 3 while both pods are pinned). The aggregator marks a workload "settled"
# as soon as every fresh pod has a sample from after the change (the edge its averages
# start at: the joining pod's first sample, less half a bucket); the shell publishes
# that workload then instead of at its next tick.


class Feeder:
    """One batch per pod, each pod on its own node, in the order called."""

    def __init__(self, agg: Aggregator) -> None:
        self.agg = agg
        self.seq: dict[str, int] = {}

    def __call__(
        self, t: float, pod: str, util: float = 90.0, workload: str = "bert"
    ) -> list[tuple[str, str, str]]:
        node = f"node-{pod}"
        self.seq[node] = self.seq.get(node, -1) + 1
        b = batch(
            gpu(0, owner(pod, workload), util=util, node=node), node=node, ts=NOW + t, seq=self.seq[node]
        )
        assert self.agg.ingest(encode_raw(b), now=NOW + t, subject_node=node).status == "accepted"
        return self.agg.take_settled()


BERT = ("default", "Deployment", "bert")


def test_a_new_pod_s_change_is_settled_when_the_other_pods_are_heard_after_it() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    for t in range(21):
        assert send(t, "a-1", 100.0) == []
    assert send(20.6, "a-2", 100.0) == []  # a-1 last heard at 20.0, before 20.6 - 0.5
    assert send(21.0, "a-1", 98.0) == [BERT]  # now every pod was measured after the change
    m = agg.message_of(BERT, NOW + 21.0)
    assert m is not None
    assert m.since == NOW + 20.6
    assert m.pods_fresh == 2
    assert m.averages.gpu_util == pytest.approx((98.0 + 100.0) / 2)  # only what came after
    assert send(22.0, "a-1") == []  # told once
    assert send(22.6, "a-2") == []


def test_other_pods_heard_within_half_a_bucket_before_settle_it_with_the_new_pod() -> None:
    """One tick seen from several nodes: the demo's old pod sampled 0.13 s before the
    new pod's first sample, both after it became ready."""
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    for t in range(21):
        send(t, "a-1", 100.0)
    assert send(20.3, "a-2", 100.0) == [BERT]


def test_pods_joining_together_settle_nothing() -> None:
    """An aggregator start, or pods a tick apart: one capacity, no change to tell."""
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    assert send(0.0, "a-1") == []
    assert send(1.0, "a-2") == []
    assert send(1.2, "a-1") == []
    assert agg.store.changes == {}


def test_a_stale_pod_does_not_hold_a_change_back() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    for t in range(3):
        send(t, "a-1")  # then silent: stale after 3 intervals
    for t in range(12):
        send(t + 0.1, "a-3")
    assert send(11.7, "a-2") == []
    assert send(12.1, "a-3") == [BERT]  # a-1, silent since 2 s, is not waited for


def test_a_tick_tells_every_workload_so_nothing_settled_is_left_for_after_it() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    for t in range(21):
        send(t, "a-1")
    send(20.3, "a-2")  # settled: not taken before the tick
    agg.snapshot(NOW + 20.5)
    assert agg.take_settled() == []


def test_a_change_never_settled_is_forgotten_once_the_window_has_passed_it() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    for t in range(21):
        send(t, "a-1")
    send(20.6, "a-2")
    assert BERT in agg.store.changes
    agg.snapshot(NOW + 20.6 + W)
    assert agg.store.changes == {}


def test_changes_followed_at_once_are_bounded() -> None:
    """Pods that churn in many workloads (a hostile collector) cost each batch at most
    a bounded check: beyond MAX_PENDING_CHANGES a change waits for the tick."""
    from gpuscale_aggregator.core.window import MAX_PENDING_CHANGES

    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    for i in range(MAX_PENDING_CHANGES + 40):
        for t in range(3):
            send(t, f"w{i}-1", workload=f"w{i}")
        send(2.9, f"w{i}-2", workload=f"w{i}")  # w{i}-1 last heard at 2.0: not settled
    assert len(agg.store.changes) == MAX_PENDING_CHANGES


def test_a_pod_already_heard_since_the_change_does_not_make_it_checked_again() -> None:
    """A collector's credential could send batch after batch for a pending workload:
    only a pod not yet heard since the change makes the core look at its pods again."""
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    for t in range(21):
        send(t, "a-1")
        send(t + 0.1, "a-3")
    checks = []
    settle = agg.store._settle
    agg.store._settle = lambda workload, now: (checks.append(now), settle(workload, now))[1]  # type: ignore[method-assign]
    assert send(20.6, "a-2") == []  # the joining pod: checked; a-1 and a-3 not heard since
    assert send(21.0, "a-1") == []  # a-1 heard now: checked; a-3 still not
    for k in range(20):
        assert send(21.05 + k * 0.001, "a-1") == []  # heard already: never checked again
    assert len(checks) == 2
    assert send(21.1, "a-3") == [BERT]
    assert len(checks) == 3


def test_a_workload_of_more_pods_than_followed_waits_for_the_tick() -> None:
    from gpuscale_aggregator.core.window import MAX_FOLLOWED_PODS

    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    pods = [f"a-{i}" for i in range(MAX_FOLLOWED_PODS)]
    for t in range(3):
        for pod in pods:
            send(t, pod)
    assert send(3.0, "a-new") == []
    assert BERT not in agg.store.changes
    for pod in pods:
        assert send(3.2, pod) == []
    assert (m := agg.message_of(BERT, NOW + 3.2)) is not None
    assert m.since == NOW + 3.0  # the averages still start at the change; only the timing waits
