"""One team's scale selectors cost the decider a bounded amount of memory.

A Deployment's ``/scale`` ``status.selector`` is its ``spec.selector``, which the team
writes: thousands of ``matchLabels`` fit in one object (4,000 labels are ~340 KB of text,
~2.4 MiB once parsed). A team that re-creates its Deployment with a new selector in a loop
(a selector is immutable) hands the decider a new one on every scale read; kept, a few
dozen would fill the decider's 256 MiB and no team's workloads would scale. A selector
over ``MAX_SELECTOR_CHARS`` is not read (its GPUScaler says why), and those kept parsed are
bounded in text."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from gpuscale.kube import ScaleState, ScaleTargetRef, new_api_client
from gpuscale.metrics import ServiceMetrics
from gpuscale.wire import Decision
from gpuscale_decider import pods as pods_module
from gpuscale_decider.decider import Decider
from gpuscale_decider.pods import MAX_SELECTOR_CHARS, PodCache, PodIndex
from gpuscale_decider.sources import KubeScaleSource, MemoryStateStore
from gpuscale_kubesim import KubeSim

from ..waiting import sample_value
from .test_decider_isolation_in_process import NOW, policy
from .test_decider_workloads_in_process import ListStatus

LABELS = 4_000  # a Deployment's selector: 4,000 matchLabels of 63-character values
READ_LABELS = 350  # as many as fit under MAX_SELECTOR_CHARS (~30 KB of text)
RECREATIONS = 200  # the team re-creates its Deployment this often, each with a new label value
BUDGET = 32 * 2**20  # what the whole pod index may keep of selectors, whatever the teams do


def fat_selector(generation: int, labels: int = LABELS) -> str:
    value = f"g{generation:04d}" + "v" * 58  # 63 characters, the most a label value holds
    return ",".join(f"team.example.com/k{i}={value}" for i in range(labels))


class RecreatedDeployment:
    """The /scale of a Deployment its team deletes and creates again between reads."""

    def __init__(self, labels: int) -> None:
        self.labels = labels
        self.generation = 0

    async def read(self, ref: ScaleTargetRef, now: float) -> ScaleState:
        if ref.name != "poisoned":
            return ScaleState(2, "1", f"app={ref.name}", 2)
        self.generation += 1
        return ScaleState(1, str(self.generation), fat_selector(self.generation, self.labels), 1)

    def forget(self, ref: ScaleTargetRef) -> None:
        return None


def make(labels: int, status: ListStatus | None = None) -> Decider:
    async def publish(d: Decision) -> None:
        return None

    pods = PodCache(None)
    pods.synced.set()
    decider = Decider(
        ServiceMetrics("test-decider"),
        RecreatedDeployment(labels),
        pods,
        MemoryStateStore(),
        publish,
        status=status,
        clock=lambda: NOW,
    )
    decider.registry.set_policies([policy(n) for n in ("poisoned", "alpha")], [])
    return decider


async def test_a_selector_too_long_to_read_is_said_on_its_gpuscaler_and_costs_no_other() -> None:
    status = ListStatus()
    decider = make(LABELS, status)
    assert len(fat_selector(1)) > MAX_SELECTOR_CHARS
    for w in list(decider.workloads.values()):
        await decider.evaluate(w, NOW)
    able = {c["type"]: c for c in status.last("poisoned")["conditions"]}["AbleToScale"]
    assert (able["status"], able["reason"]) == ("False", "FailedGetScale")
    assert f"over the {MAX_SELECTOR_CHARS:,} gpuscale reads" in able["message"]
    failures = "gpuscale_decider_scale_read_failures_total"
    assert sample_value(decider.metrics.registry, failures, status="selector_too_long") == 1.0
    alpha = {c["type"]: c for c in status.last("alpha")["conditions"]}["AbleToScale"]
    assert alpha["status"] == "True"
    index = decider.pods.index
    assert (list(index._short.parsed), list(index._long.parsed)) == (["app=alpha"], [])  # not read: not kept


async def test_a_team_recreating_its_deployment_with_fat_selectors_keeps_the_decider_bounded() -> None:
    decider = make(READ_LABELS)
    assert len(fat_selector(1, READ_LABELS)) <= MAX_SELECTOR_CHARS
    poisoned = next(w for w in decider.workloads.values() if w.key.name == "poisoned")
    await decider.evaluate(poisoned, NOW)  # the first selector, and what loading state costs
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for _ in range(RECREATIONS):
            await decider.evaluate(poisoned, NOW)
            await asyncio.sleep(0)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert poisoned.last_evaluation is not None  # its evaluations go on
    assert poisoned.failed is None
    assert kept < BUDGET, f"the pod index kept {kept / 2**20:.0f} MiB of one team's old selectors"


@pytest.mark.integration
async def test_kube_sim_serves_such_a_deployment_and_its_fat_selector(kube_sim: KubeSim) -> None:
    """What the test above reads is what the API hands a team's Deployment back: the API
    accepts 4,000 matchLabels, and /scale's status.selector is all of them."""
    await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    labels = dict(item.split("=") for item in fat_selector(1).split(","))
    await kube_sim.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "poisoned", "namespace": "team-b"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        }
    )
    api = await new_api_client(Path(kube_sim.kubeconfig_path))
    try:
        scale = await KubeScaleSource(api, ttl_s=1.0).read(
            ScaleTargetRef("apps/v1", "Deployment", "poisoned", "team-b"), NOW
        )
    finally:
        await api.close()
    assert len(scale.selector) > 300_000
    assert dict(item.split("=") for item in scale.selector.split(",")) == labels


def test_a_team_s_many_long_selectors_clear_only_their_own() -> None:
    """Long selectors have a text budget of their own: a team whose live ones overflow it
    (100 of ~30 KB, every pass) makes only theirs be parsed again, never another team's."""
    index = PodIndex()
    others = [f"app=w{i},tier=serving" for i in range(2_000)]
    long_ones = [fat_selector(i, READ_LABELS) for i in range(100)]
    parsed: list[str] = []
    real_parse = pods_module.parse_selector

    def counting(text: str) -> Any:
        parsed.append(text)
        return real_parse(text)

    for text in [*others, *long_ones]:  # the first pass parses each once
        index.select("team-a" if text in others else "team-b", text)
    pods_module.parse_selector = counting
    try:
        for _ in range(3):
            for i, text in enumerate(long_ones):
                index.select("team-b", text)
                index.select("team-a", others[i * 20])
            for text in others:
                index.select("team-a", text)
    finally:
        pods_module.parse_selector = real_parse
    assert not [text for text in parsed if text in set(others)]
    assert parsed  # the long ones did overflow their budget, and only they were parsed again


def test_short_selectors_of_tiny_labels_are_bounded_in_text_too() -> None:
    """Under 1 KiB a selector of tiny labels (``u=1,k1=00001,...``, ~110 of them) costs ~50 KB
    parsed: bounded by count alone, 10,000 such would be ~500 MiB."""

    def tiny(i: int) -> str:
        labels = [f"u={i:05d}", *(f"k{k}={i:05d}" for k in range(1, 120))]
        return ",".join(labels)[:1000].rsplit(",", 1)[0]

    index = PodIndex()
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        for i in range(1_500):
            assert len(tiny(i)) <= pods_module.LONG_SELECTOR_CHARS
            index.select("team-b", tiny(i))
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 40 * 2**20, f"{kept / 2**20:.0f} MiB kept of one team's short selectors"
