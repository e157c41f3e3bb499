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


def test_an_old_pod_s_first_sample_after_a_change_goes_once_it_has_one_wholly_after() -> None:
    """A sample describes the interval before it: the old pods' first after a-3 joined still
    covers part of the load they carried alone (90 here, 67 since)."""
    agg = Aggregator(WindowConfig(window_s=W))
    feed(agg, {NOW + t: {"a-1": 100.0, "a-2": 100.0} for t in range(20)})
    feed(agg, {NOW + 20: {"a-1": 90.0, "a-2": 90.0, "a-3": 66.0}})
    told_at_once = bert(agg, NOW + 20)
    assert {p.pod: p.values.gpu_util for p in told_at_once.pods} == {"a-1": 90.0, "a-2": 90.0, "a-3": 66.0}
    feed(agg, {NOW + t: {"a-1": 67.0, "a-2": 67.0, "a-3": 66.0} for t in (21, 22)})
    m = bert(agg, NOW + 22)
    assert {p.pod: p.values.gpu_util for p in m.pods} == {"a-1": 67.0, "a-2": 67.0, "a-3": 66.0}
    assert m.since == NOW + 20
