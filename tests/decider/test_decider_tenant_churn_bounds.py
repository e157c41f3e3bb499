"""What one team's GPUScaler churn costs the decider, counted rather than timed.

A team edits and deletes its own GPUScalers as often as it likes; neither the decider's
Prometheus series (its memory and the page every team's dashboards and alerts scrape) nor
the work of one deletion may grow with what the team (or the cluster) did before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gpuscale.catalog import CATALOG
from gpuscale.kube import ScaleState, ScaleTargetRef
from gpuscale.metrics import ServiceMetrics
from gpuscale.policy import GPUScaler, parse_gpuscaler
from gpuscale.wire import Decision
from gpuscale_decider import registry as registry_module
from gpuscale_decider.advice import Publish
from gpuscale_decider.decider import Decider
from gpuscale_decider.registry import StatusSink
from gpuscale_decider.sources import MemoryStateStore, StaticPods, StaticScaleSource

NOW = 1_800_000_000.0
ALL_METRICS = [{"name": m.name, "target": 50} for m in CATALOG]


def scaler(
    name: str, target: str, metrics: list[dict[str, Any]], namespace: str = "evil", **spec: Any
) -> GPUScaler:
    body = {"scaleTargetRef": {"kind": "Deployment", "name": target}, "maxReplicas": 10, "metrics": metrics}
    return parse_gpuscaler({"metadata": {"name": name, "namespace": namespace}, "spec": body | spec})


async def nowhere(d: Decision) -> None:
    return None


def make(
    scales: StaticScaleSource | None = None,
    *,
    publish: Publish = nowhere,
    publish_advice: Publish | None = None,
    status: StatusSink | None = None,
    clock: Callable[[], float] = lambda: NOW,
) -> Decider:
    """A decider over our own adapters: two replicas on every target unless ``scales`` says."""
    scales = scales or StaticScaleSource(default=2)
    return Decider(
        ServiceMetrics("test-decider"),
        scales,
        StaticPods(scales),
        MemoryStateStore(),
        publish,
        status=status,
        publish_advice=publish_advice,
        clock=clock,
    )


def workload_series(decider: Decider, name: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (s.name, s.labels)
        for family in decider.metrics.registry.collect()
        if family.name.startswith("gpuscale_workload")
        for s in family.samples
        if s.labels.get("name") == name
    ]


async def test_a_gpuscaler_edited_to_fewer_metrics_then_deleted_leaves_no_series() -> None:
    decider = make()
    for i in range(50):  # each cycle a new Deployment name: 0-replica Deployments cost the team nothing
        decider.registry.upsert_policy(scaler("churn", f"t{i}", ALL_METRICS))
        await decider.tick(interval_s=0.0)
        decider.registry.upsert_policy(scaler("churn", f"t{i}", ALL_METRICS[:1]))
        await decider.tick(interval_s=0.0)
        # While it lives, only the metrics its policy names have a target series.
        targets = {
            labels["metric"] for n, labels in workload_series(decider, f"t{i}") if "metric_target" in n
        }
        assert targets == {ALL_METRICS[0]["name"]}
        decider.registry.remove_policy("evil", "churn")
    left = [s for i in range(50) for s in workload_series(decider, f"t{i}")]
    assert left == []  # before: 10 series per cycle, ~7.7 KB each cycle, forever


async def test_a_metric_value_dropped_with_its_metric_is_not_kept_stale() -> None:
    decider = make()
    decider.registry.upsert_policy(scaler("s", "web", ALL_METRICS[:2]))
    await decider.tick(interval_s=0.0)
    m = decider.m
    key = next(iter(decider.workloads))
    m.observe(key, {"gpu_util": 50, "sm_active": 50}, {"gpu_util": 1.0, "sm_active": 2.0}, 2, 2, (1, 10))
    m.observe(key, {"gpu_util": 50}, {"gpu_util": 1.0}, 2, 2, (1, 10))
    metrics = {labels["metric"] for n, labels in workload_series(decider, "web") if "metric" in labels}
    assert metrics == {"gpu_util"}
    m.observe(key, {"gpu_util": 50}, {"gpu_util": 1.0}, 2, 2, (1, 20))  # new bounds: a new series object
    m.observe(key, {"gpu_util": 50}, None, 2, 2, (1, 20))  # no fresh value: no value series
    assert [n for n, _ in workload_series(decider, "web") if "metric_value" in n] == []


def test_deleting_a_gpuscaler_does_not_walk_every_duplicate_of_the_cluster(monkeypatch: Any) -> None:
    decider = make()
    reg = decider.registry
    reg.upsert_policy(scaler("owner", "x", ALL_METRICS[:1]))
    for i in range(2_000):  # waiting for target x (their own team's or any other's)
        reg.upsert_policy(scaler(f"dup{i}", "x", ALL_METRICS[:1]))
    calls = 0
    real = registry_module.target_key

    def counted(s: GPUScaler) -> Any:
        nonlocal calls
        calls += 1
        return real(s)

    monkeypatch.setattr(registry_module, "target_key", counted)
    for _ in range(20):  # another target's GPUScaler created and deleted
        reg.upsert_policy(scaler("churn", "y", ALL_METRICS[:1]))
        reg.remove_policy("evil", "churn")
    assert calls <= 20 * 4  # before: 2,000 a deletion (40,000), 20 ms each at 10,000 duplicates
    # The duplicate still takes over when the owner goes, oldest first.
    reg.remove_policy("evil", "owner")
    assert next(iter(reg.workloads.values())).scaler.name == "dup0"
    assert "evil/dup0" not in {f"{ns}/{n}" for ns, n in reg.duplicates}
    assert len(reg.duplicates) == 1_999


async def test_a_gpuscaler_deleted_while_its_evaluation_reads_leaves_nothing_behind() -> None:
    """Its first evaluation awaits a scale read; deleted meanwhile, what the evaluation then
    makes (series, a decision) would belong to no GPUScaler, and nothing would forget it."""
    published: list[Decision] = []

    async def publish(d: Decision) -> None:
        published.append(d)

    class GatedScales(StaticScaleSource):
        def __init__(self) -> None:
            super().__init__(default=2)
            self.gate = asyncio.Event()
            self.waiting = asyncio.Event()

        async def read(self, ref: ScaleTargetRef, now: float) -> ScaleState:
            self.waiting.set()
            await self.gate.wait()
            return await super().read(ref, now)

    scales = GatedScales()
    decider = make(scales, publish=publish)
    decider.registry.upsert_policy(scaler("gone", "web", ALL_METRICS))
    evaluation = asyncio.create_task(decider.tick(interval_s=0.0))
    await asyncio.wait_for(scales.waiting.wait(), 5)
    decider.registry.remove_policy("evil", "gone")
    scales.gate.set()
    await asyncio.wait_for(evaluation, 5)
    await decider.idle()
    assert workload_series(decider, "web") == []
    assert published == []


async def test_a_shadow_gpuscaler_deleted_while_its_advice_is_published_leaves_nothing_behind() -> None:
    """Advice is published (a JetStream ack awaited) before the status is written: a deletion
    meanwhile forgot the GPUScaler's condition series, which the status would make again."""
    gate, waiting = asyncio.Event(), asyncio.Event()
    statuses: list[tuple[str, str]] = []

    async def advice(d: Decision) -> None:
        waiting.set()
        await gate.wait()

    class Statuses:
        def submit(self, namespace: str, name: str, status: dict[str, Any]) -> None:
            statuses.append((namespace, name))

    decider = make(status=Statuses(), publish_advice=advice)
    decider.registry.upsert_policy(scaler("gone", "web", ALL_METRICS[:1], mode="Shadow"))
    evaluation = asyncio.create_task(decider.tick(interval_s=0.0))
    await asyncio.wait_for(waiting.wait(), 5)
    decider.registry.remove_policy("evil", "gone")
    gate.set()
    await asyncio.wait_for(evaluation, 5)
    conditions = [
        s
        for family in decider.metrics.registry.collect()
        for s in family.samples
        if s.labels.get("gpuscaler") == "gone"
    ]
    assert conditions == []
    assert ("evil", "gone") not in statuses
