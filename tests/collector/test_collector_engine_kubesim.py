"""The collector scrapes the inference-server pods of its node as in a cluster:
pod IP and annotations from its pod watch (kube-sim through kubernetes-asyncio),
/metrics over real HTTP from pods kube-sim plays as vLLM, the values in the
samples it publishes. Sampling never waits for a scrape."""

from __future__ import annotations

from typing import Any

import pytest
from structlog.testing import capture_logs

from gpuscale.wire import UNSET, EngineSignals, SampleBatch

from ..k8s_objects import gpu_workload, vllm_annotations

pytestmark = pytest.mark.integration

NODE = "gpu-node-1"


def owners(batch: SampleBatch | None, workload: str) -> list[Any]:
    return [o for g in (batch.gpus if batch else ()) for o in g.owners if o.workload.name == workload]


def signals(batch: SampleBatch | None, workload: str) -> dict[str, EngineSignals]:
    """Pod -> its engine signals in ``batch``: once per pod, beside the GPUs (never on an owner)."""
    if batch is None:
        return {}
    assert all(o.engine is UNSET for g in batch.gpus for o in g.owners), "engine signals ride once per pod"
    by_uid = {e.pod_uid: e.signals for e in batch.engines or ()}
    return {o.pod: by_uid[o.pod_uid] for o in owners(batch, workload) if o.pod_uid in by_uid}


def engines_of(collector: Any, workload: str) -> dict[str, EngineSignals]:
    found = signals(collector.last_batch, workload)
    assert found, f"no {workload} pod has engine signals yet"
    return found


async def test_engine_gauges_ride_on_the_samples_of_their_pods(kube_sim: Any, kit: Any) -> None:
    await kube_sim.create(gpu_workload("llm", 2, node=NODE, pod_annotations=vllm_annotations(18100)))
    await kube_sim.create(gpu_workload("bert", 1, node=NODE))
    kube_sim.set_load("default", "llm", 320)  # 1.6 × what two pods serve: queues grow
    settings = kit.settings(
        node_name=NODE, sim_source="kube-sim", kubeconfig=kube_sim.kubeconfig_path, interval_s="0.2"
    )
    async with kit.running(settings) as rc:

        def both_pods_queueing() -> dict[str, EngineSignals]:
            found = engines_of(rc.collector, "llm")
            assert len(found) == 2
            assert all((e.requests_waiting or 0) > 0 for e in found.values())
            return found

        found = await kit.wait_for(both_pods_queueing, 15, "both llm pods' queues in the samples")
        for engine in found.values():
            assert engine.name == "vllm"
            assert engine.requests_running == pytest.approx(16.0)  # 16 slots on its one GPU, full
            assert engine.kv_cache_usage is not None
            assert 85.0 <= engine.kv_cache_usage <= 100.0
        # A plain GPU workload carries none.
        assert owners(rc.collector.last_batch, "bert")
        assert not signals(rc.collector.last_batch, "bert")
        metrics = rc.ctx.metrics.registry
        assert (
            metrics.get_sample_value("gpuscale_collector_engine_scrapes_total", {"outcome": "ok"}) or 0
        ) >= 2
        assert metrics.get_sample_value("gpuscale_collector_engine_targets") == 2


async def test_engine_flows_ride_on_the_samples_too(kube_sim: Any, kit: Any) -> None:
    """Two vLLM pods asked for 1.6 times what they serve: each finishes what its
    16 slots allow (16 / 2 s = 8 requests/s) while 12.8 a second arrive. The
    rates come from successive scrapes of vllm:request_success_total and the
    gauges, over real HTTP; averaged over many batches (one scrape counts whole
    requests) they say both."""
    await kube_sim.create(gpu_workload("llm", 2, node=NODE, pod_annotations=vllm_annotations(18102)))
    kube_sim.set_load("default", "llm", 320)
    settings = kit.settings(
        node_name=NODE, sim_source="kube-sim", kubeconfig=kube_sim.kubeconfig_path, interval_s="0.5"
    )
    seen: dict[tuple[str, float], EngineSignals] = {}
    async with kit.running(settings) as rc:

        def enough_flows() -> list[EngineSignals]:
            batch = rc.collector.last_batch
            for pod, engine in signals(batch, "llm").items():
                if engine.request_completion_rate is not None:
                    seen[(pod, batch.ts)] = engine
            with_flows = [e for e in seen.values() if e.request_arrival_rate is not None]
            assert len(with_flows) >= 16, f"{len(with_flows)} pod samples with flows so far"
            return with_flows

        flows = await kit.wait_for(enough_flows, 30, "16 pod samples with flows")
    completion = sum(e.request_completion_rate or 0.0 for e in flows) / len(flows)
    arrival = sum(e.request_arrival_rate or 0.0 for e in flows) / len(flows)
    assert 5.0 <= completion <= 11.0, completion  # 8 a second, counted in whole requests
    assert arrival >= 1.2 * completion, (arrival, completion)  # 12.8 arrive: the queue grows


async def test_a_hanging_endpoint_does_not_delay_sampling(kube_sim: Any, kit: Any) -> None:
    """Every engine pod's endpoint stalls for longer than a tick: batches keep
    coming at the interval, the pods' samples carry no engine values, and the
    stall is counted as timeouts."""
    await kube_sim.create(gpu_workload("llm", 2, node=NODE, pod_annotations=vllm_annotations(18101)))
    settings = kit.settings(
        node_name=NODE,
        sim_source="kube-sim",
        kubeconfig=kube_sim.kubeconfig_path,
        interval_s="0.2",
        engine_timeout_s="0.1",
    )

    async with kit.running(settings) as rc:
        await kit.wait_for(lambda: engines_of(rc.collector, "llm"), 15, "the pods read once")
        kube_sim.pod_servers.stall_s = 5.0  # every pod's server now answers 5 s late
        registry = rc.ctx.metrics.registry

        def timeouts() -> float:
            return (
                registry.get_sample_value("gpuscale_collector_engine_scrapes_total", {"outcome": "timeout"})
                or 0
            )

        await kit.wait_for(lambda: timeouts() >= 2, 15, "scrapes timing out")
        ticks = registry.get_sample_value("gpuscale_collector_ticks_total") or 0
        await kit.wait_for(
            lambda: not signals(rc.collector.last_batch, "llm"),
            15,
            "stale values dropped",
        )
        # Ticks kept their pace meanwhile (0.2 s each; a blocked tick would be 5 s).
        await kit.wait_for(
            lambda: (registry.get_sample_value("gpuscale_collector_ticks_total") or 0) >= ticks + 5,
            5,
            "ticks",
        )
        assert (registry.get_sample_value("gpuscale_collector_ticks_skipped_total") or 0) <= 2


async def test_no_kube_access_means_no_scraping_and_no_error(kit: Any) -> None:
    settings = kit.settings(sim_source="constant:40")
    async with kit.running(settings) as rc:
        await kit.wait_for(lambda: rc.collector.last_batch is not None, what="a batch")
        assert rc.collector.engines is None
        assert rc.collector.node_pods is None  # the sim backend needs no pod watch then


async def test_engine_scraping_can_be_turned_off(kube_sim: Any, kit: Any) -> None:
    await kube_sim.create(gpu_workload("llm", 1, node=NODE, pod_annotations=vllm_annotations(18102)))
    settings = kit.settings(
        node_name=NODE,
        sim_source="kube-sim",
        kubeconfig=kube_sim.kubeconfig_path,
        interval_s="0.2",
        engine_metrics="false",
    )
    async with kit.running(settings) as rc:
        await kit.wait_for(lambda: owners(rc.collector.last_batch, "llm"), 15, "the llm pod in a batch")
        assert rc.collector.engines is None
        assert rc.collector.node_pods is None  # the sim backend brings owners: no watch needed


async def test_a_tenants_huge_scrape_annotations_are_refused_and_kept_short(kube_sim: Any, kit: Any) -> None:
    """Team b's pods name a 5000-digit port and a 200 KiB path. int() refused the digits with
    ValueError, which ended every round: no pod on the node was scraped, team a's neither. The
    values were kept whole (up to 256 KiB a pod). Now kept cut, refused as bad annotations."""
    await kube_sim.create(gpu_workload("llm", 1, node=NODE, pod_annotations=vllm_annotations(18103)))
    digits = {"gpuscale.io/metrics-port": "1" * 5000}
    long_path = {"gpuscale.io/metrics-port": "8000", "gpuscale.io/metrics-path": "/" + "x" * 200_000}
    await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})
    await kube_sim.create(gpu_workload("digits", namespace="team-b", node=NODE, pod_annotations=digits))
    await kube_sim.create(gpu_workload("long", namespace="team-b", node=NODE, pod_annotations=long_path))
    settings = kit.settings(
        node_name=NODE, sim_source="kube-sim", kubeconfig=kube_sim.kubeconfig_path, interval_s="0.2"
    )
    with capture_logs() as logs:
        async with kit.running(settings) as rc:
            await kit.wait_for(lambda: engines_of(rc.collector, "llm"), 15, "team a's pod scraped")
            pods = rc.collector.node_pods.pods_by_uid.values()
            assert len(pods) == 3
            kept = [sum(map(len, (p.annotations or {}).values())) for p in pods]
            assert max(kept) <= 2 * 1025
            skipped = rc.ctx.metrics.registry.get_sample_value(
                "gpuscale_collector_engine_scrapes_skipped_total", {"reason": "bad_annotation"}
            )
            assert (skipped or 0) >= 2
    assert [e for e in logs if e["event"] == "engine_round_failed"] == []
    refused = {e["detail"][:30] for e in logs if e["event"] == "engine_scrape_target_invalid"}
    assert len(refused) == 2
    assert all(len(e["detail"]) < 200 for e in logs if e["event"] == "engine_scrape_target_invalid")
