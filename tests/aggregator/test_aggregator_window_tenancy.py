"""One tenant cannot hurt another: a workload's window request costs
memory for that workload's own pods only (their rings grow to the length asked,
up to ``max_window_s``), the rings shrink back when the request lapses or
shortens, or when a pod leaves, keeping the newest samples, and no other
workload's pods are touched or averaged differently."""

from __future__ import annotations

from typing import Any

import pytest

from gpuscale.codec import encode_raw
from gpuscale.wire import WorkloadMetrics
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import WindowConfig

from .aggregator_builders import NOW, batch, engine, gpu, owner

TENANT = ("default", "Deployment", "tenant")
OTHER = ("default", "Deployment", "other")
SHARED = 31  # the shared rings' length for a 30 s window of 1 s buckets


def util_at(pod: str, t: int) -> float:
    """A different value every second and pod, so a mean over another span differs."""
    return float((t * 7 + sum(map(ord, pod))) % 97)


def tick(agg: Aggregator, t: int, pods: dict[str, str], *, with_engine: bool = False) -> None:
    """One batch per pod (each on a node of its own) at NOW + t: pods maps pod -> workload name."""
    for pod, workload in pods.items():
        node = f"node-{pod}"
        extra: dict[str, Any] | None = engine(waiting=util_at(pod, t) / 10) if with_engine else None
        b = batch(
            gpu(0, owner(pod, workload, engine=extra), util=util_at(pod, t), node=node),
            node=node,
            ts=NOW + t,
            seq=t,
        )
        assert agg.ingest(encode_raw(b), now=NOW + t, subject_node=node).status == "accepted"


def run(agg: Aggregator, seconds: range, pods: dict[str, str], **kw: Any) -> None:
    for t in seconds:
        tick(agg, t, pods, **kw)


def message(agg: Aggregator, now: float, name: str) -> WorkloadMetrics:
    (m,) = [m for m in agg.snapshot(now) if m.name == name]
    return m


def pod_means(m: WorkloadMetrics) -> dict[tuple[str, str], float]:
    return {(p.pod, metric): value for p in m.pods for metric, value in p.values.items()}


def pods_of(workload: str, count: int) -> dict[str, str]:
    return {f"{workload}-{i}": workload for i in range(count)}


FLEET = {**pods_of("tenant", 3), **pods_of("other", 5)}


def test_a_long_window_grows_only_its_own_workloads_pods() -> None:
    asked = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    control = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    run(asked, range(1, 11), FLEET)
    run(control, range(1, 11), FLEET)
    asked.store.request(TENANT, 300.0, None, NOW + 10.5, 600.0)
    run(asked, range(11, 200), FLEET)
    run(control, range(11, 200), FLEET)
    store = asked.store
    assert {store.ring_of(TENANT, p) for p in pods_of("tenant", 3)} == {301}
    assert {store.ring_of(OTHER, p) for p in pods_of("other", 5)} == {SHARED}
    # Memory: the tenant's three pods pay for the long window, nobody else.
    assert store.ring_slots_held() == 3 * 301 + 5 * SHARED
    assert control.store.ring_slots_held() == 8 * SHARED
    # The other workload's means are the same as in an aggregator nobody asked anything of.
    now = NOW + 199.5
    assert pod_means(message(asked, now, "other")) == pod_means(message(control, now, "other"))
    # And the tenant's cover everything since the start (below the 300 s asked).
    tenant = message(asked, now, "tenant")
    series = [util_at("tenant-0", t) for t in range(1, 200)]
    assert tenant.window_s == 300.0
    assert pod_means(tenant)[("tenant-0", "gpu_util")] == pytest.approx(sum(series) / len(series), rel=1e-5)


def test_a_request_past_max_window_grows_the_rings_no_further_than_max_window() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=120.0))
    agg.store.request(TENANT, 86_400.0, None, NOW, 600.0)
    run(agg, range(1, 5), FLEET)
    assert agg.store.ring_of(TENANT, "tenant-0") == 121
    assert agg.store.ring_of(OTHER, "other-0") == SHARED
    assert agg.store.span_s == 120.0


def test_a_lapsed_request_shrinks_its_pods_back_keeping_the_newest_samples() -> None:
    asked = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    control = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    asked.store.request(TENANT, 120.0, None, NOW, 100.0)  # lapses at NOW + 100 unless repeated
    run(asked, range(1, 100), FLEET, with_engine=True)
    run(control, range(1, 100), FLEET, with_engine=True)
    assert asked.store.ring_of(TENANT, "tenant-0") == 121
    asked.snapshot(NOW + 100.5)  # the cycle that sees the request lapse
    assert asked.store.span_s == 30.0
    run(asked, range(100, 103), FLEET, with_engine=True)
    run(control, range(100, 103), FLEET, with_engine=True)
    assert {asked.store.ring_of(TENANT, p) for p in pods_of("tenant", 3)} == {SHARED}
    assert asked.store.ring_slots_held() == control.store.ring_slots_held() == 8 * SHARED
    # What the 30 s window covers was kept: the means equal those of a store that never grew.
    now = NOW + 102.5
    for name in ("tenant", "other"):
        assert pod_means(message(asked, now, name)) == pytest.approx(pod_means(message(control, now, name)))
    # Each pod's ring of its own is gone, not kept aside.
    assert not asked.store._long


def test_a_shorter_request_shrinks_the_rings_to_it_keeping_the_newest_samples() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    agg.store.request(TENANT, 300.0, None, NOW, 600.0)
    run(agg, range(1, 150), pods_of("tenant", 2), with_engine=True)
    agg.store.request(TENANT, 60.0, None, NOW + 149.5, 600.0)
    run(agg, range(150, 152), pods_of("tenant", 2), with_engine=True)
    assert agg.store.ring_of(TENANT, "tenant-1") == 61
    (pod, _) = message(agg, NOW + 151.5, "tenant").pods
    kept = [t for t in range(1, 152) if t > 151.5 - 60]
    expected = [util_at(pod.pod, t) for t in kept]
    assert pod.values["gpu_util"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)
    assert pod.values["requests_waiting"] == pytest.approx(sum(expected) / len(expected) / 10, rel=1e-5)


def test_a_pod_that_moves_to_a_workload_without_a_long_request_leaves_its_long_ring() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    agg.store.request(TENANT, 300.0, None, NOW, 100.0)
    run(agg, range(1, 60), {"mover": "tenant"})
    assert agg.store.ring_of(TENANT, "mover") == 301
    # Relabelled into another workload (its request lapses meanwhile): a pod of the
    # shared length there; its old self leaves with its last sample in the window.
    run(agg, range(60, 135), {"mover": "other"})
    agg.snapshot(NOW + 134.5)
    assert TENANT not in agg.store.workloads
    assert agg.store.ring_of(OTHER, "mover") == SHARED
    assert not agg.store._long


def test_a_request_touches_no_pod_and_each_of_its_pods_is_relaid_once() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    fleet = {**pods_of("tenant", 3), **pods_of("other", 200)}
    run(agg, range(1, 5), fleet)
    relaid: list[int] = []
    reshape = agg.store._reshape
    agg.store._reshape = lambda pid, slots: (relaid.append(pid), reshape(pid, slots))[1]  # type: ignore[method-assign]
    agg.store.request(TENANT, 300.0, None, NOW + 4.5, 600.0)
    assert relaid == []  # the request itself costs nothing per pod
    run(agg, range(5, 40), fleet)
    tenant_pids = set(agg.store.workloads[TENANT].values())
    assert sorted(relaid) == sorted(tenant_pids)  # only its pods, each once
    # Repeating the same request (the decider does, before its ttl) re-lays nothing.
    agg.store.request(TENANT, 300.0, None, NOW + 39.5, 600.0)
    run(agg, range(40, 45), fleet)
    assert len(relaid) == 3


def test_a_window_flipping_every_second_relays_each_pod_at_most_once_a_bucket() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    control = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    relaid: list[int] = []
    reshape = agg.store._reshape
    agg.store._reshape = lambda pid, slots: (relaid.append(pid), reshape(pid, slots))[1]  # type: ignore[method-assign]
    for t in range(1, 80):
        agg.store.request(TENANT, 300.0 if t % 2 else 30.0, None, NOW + t - 0.5, 600.0)
        tick(agg, t, FLEET)
        tick(control, t, FLEET)
    assert len(relaid) <= 3 * 79
    assert {agg.store.ring_of(OTHER, p) for p in pods_of("other", 5)} == {SHARED}
    # The flipping never cost the other workload a sample.
    now = NOW + 79.5
    assert pod_means(message(agg, now, "other")) == pod_means(message(control, now, "other"))


def test_late_samples_into_a_grown_ring_keep_its_totals_exact() -> None:
    """A batch late by seconds lands in its bucket whatever ring the pod has now."""
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    agg.store.request(TENANT, 90.0, None, NOW, 600.0)
    node = "node-tenant-0"
    run(agg, range(1, 3), pods_of("other", 1))
    for t in [t for t in range(1, 120) if t % 10] + list(range(10, 120, 10)):  # every tenth late
        b = batch(
            gpu(0, owner("tenant-0", "tenant"), util=util_at("tenant-0", t), node=node), node=node, ts=NOW + t
        )
        agg.store.add_batch(agg.reader.read(encode_raw(b), NOW + t)[0])
    assert agg.store.ring_of(TENANT, "tenant-0") == 91
    assert agg.store.ring_of(OTHER, "other-0") == SHARED
    (pod,) = message(agg, NOW + 119.5, "tenant").pods
    # The late ones older than the pod's 91 buckets were dropped; they are out of the window too.
    expected = [util_at("tenant-0", t) for t in range(1, 120) if t > 119.5 - 90]
    assert pod.values["gpu_util"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)
