"""kube-sim plays an inference server: pods annotated
``sim.gpuscale.io/engine: vllm`` queue requests (a fluid queue, virtual time
here) and serve vLLM's /metrics at their pod IP, on the port and path their
own annotations name, read here with prometheus_client's parser and over
real HTTP."""

from __future__ import annotations

import random
import socket
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from gpuscale_kubesim.apiserver.store import Store
from gpuscale_kubesim.cluster import ClusterPlayer, scenarios
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster.inference import Endpoint, EngineConfig, EnginePod, endpoint_of
from gpuscale_kubesim.sim import KubeSim

from ..k8s_objects import gpu_workload, vllm_annotations
from ..waiting import eventually

WALL = 1_800_000_000.0
CONFIG = EngineConfig()
CAPACITY = CONFIG.requests_per_gpu_s  # requests/s one GPU serves at 100 %


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def cluster(startup_delay_s: float = 20.0) -> tuple[Store, ClusterPlayer, Clock]:
    clock = Clock()
    store = Store(clock=lambda: WALL, rng=random.Random(1))
    for obj in scenarios.base_objects(nodes=2, gpus_per_node=8):
        rd = store.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rd is not None
        store.create(rd, (obj.get("metadata") or {}).get("namespace"), obj)
    player = ClusterPlayer(
        store,
        startup_delay_s=startup_delay_s,
        termination_delay_s=2.0,
        rng=random.Random(2),
        monotonic=clock,
        wall=lambda: WALL + clock.t,
    )
    return store, player, clock


def create(store: Store, obj: dict[str, Any]) -> None:
    rd = store.registry.by_kind(obj["apiVersion"], obj["kind"])
    assert rd is not None
    store.create(rd, "default", obj)


def run_for(player: ClusterPlayer, clock: Clock, seconds: float, step: float = 0.5) -> None:
    end = clock.t + seconds
    while clock.t < end:
        clock.t = min(end, clock.t + step)
        player.reconcile(player.now())


def gauges(text: str) -> dict[str, float]:
    """The exposition's gauges, summed over series, by the reference parser."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.type == "gauge":
            out[family.name] = sum(s.value for s in family.samples)
    return out


def engine_pods(player: ClusterPlayer) -> dict[str, EnginePod]:
    return player.load_model.inference.pods


def utils(player: ClusterPlayer) -> list[float]:
    """The engine pods' GPU utilization as the GPU feed shows it (noise included)."""
    out = []
    for node in ("gpu-node-1", "gpu-node-2"):
        for gpu in player.node_gpus(node).gpus:
            if gpu.owners:
                out.append(gpu.util)
    return out


def settle(player: ClusterPlayer, clock: Clock) -> None:
    player.settle(player.now())
    player.reconcile(player.now())


# --- the queue -------------------------------------------------------------------------


def test_below_capacity_the_queue_stays_empty_and_util_is_the_load_share() -> None:
    store, player, clock = cluster()
    create(store, gpu_workload("llm", 2, pod_annotations=vllm_annotations()))
    settle(player, clock)
    player.set_load("default", "llm", loadmod.constant(120.0))  # 1.2 GPUs of work on 2 pods
    run_for(player, clock, 30)
    pods = list(engine_pods(player).values())
    assert len(pods) == 2
    for pod in pods:
        assert pod.waiting == pytest.approx(0.0, abs=1e-6)
        # running → λ × service time = 0.6 × capacity × 2 s
        assert pod.running == pytest.approx(0.6 * CAPACITY * CONFIG.service_s, rel=0.02)
        assert pod.busy(CONFIG) == pytest.approx(0.6, rel=0.02)
    assert all(abs(u - 60.0) < 10.0 for u in utils(player))  # 60 % + noise (sd 2)


def test_above_capacity_the_queue_grows_util_pins_at_100_and_kv_fills() -> None:
    store, player, clock = cluster()
    create(store, gpu_workload("llm", 1, pod_annotations=vllm_annotations()))
    settle(player, clock)
    player.set_load("default", "llm", loadmod.constant(200.0))  # twice what one GPU serves
    run_for(player, clock, 10)
    (pod,) = engine_pods(player).values()
    excess = CAPACITY  # arrivals 2 × capacity, service 1 × capacity
    # ~10 s of excess, less a little patience and the first service time's ramp.
    assert 0.7 * excess * 10 < pod.waiting < excess * 10
    assert pod.running == pytest.approx(pod.slots(CONFIG))
    assert utils(player) == [100.0]
    assert pod.kv_cache(CONFIG) > 0.85
    waiting_at_10 = pod.waiting
    run_for(player, clock, 300, step=2.0)
    # Bounded by patience: the steady queue is excess × patience.
    assert waiting_at_10 < pod.waiting == pytest.approx(excess * CONFIG.patience_s, rel=0.05)


def test_a_new_pod_takes_its_share_while_the_old_one_drains_its_backlog() -> None:
    store, player, clock = cluster(startup_delay_s=20.0)
    create(store, gpu_workload("llm", 1, pod_annotations=vllm_annotations()))
    settle(player, clock)
    player.set_load("default", "llm", loadmod.constant(150.0))
    run_for(player, clock, 20)
    (old_uid,) = engine_pods(player)
    backlog = engine_pods(player)[old_uid].waiting
    assert backlog > 0.3 * CAPACITY * 20
    rd = store.registry.get("apps", "v1", "deployments")
    assert rd is not None
    deploy = store.get(rd, "default", "llm")
    deploy["spec"]["replicas"] = 2
    store.put(rd, deploy)
    run_for(player, clock, 10)
    assert len(engine_pods(player)) == 1, "the new pod loads its model: it serves nothing yet"
    while len(engine_pods(player)) == 1:
        run_for(player, clock, 0.5)
    pods = engine_pods(player)
    backlog = pods[old_uid].waiting  # the old pod's queue when the new one turns Ready
    run_for(player, clock, 10)
    (new_uid,) = set(pods) - {old_uid}
    # 0.75 of capacity each: the new pod is not saturated, the old one drains.
    assert pods[new_uid].waiting == pytest.approx(0.0, abs=1e-6)
    assert pods[old_uid].waiting < backlog
    run_for(player, clock, 120, step=2.0)
    assert pods[old_uid].waiting < 1.0
    assert pods[old_uid].busy(CONFIG) == pytest.approx(0.75, rel=0.03)


def test_plain_gpu_workloads_keep_their_load_model() -> None:
    store, player, clock = cluster()
    create(store, gpu_workload("bert", 2))
    settle(player, clock)
    player.set_load("default", "bert", loadmod.constant(90.0))
    run_for(player, clock, 5)
    assert engine_pods(player) == {}
    assert all(abs(u - 45.0) < 10.0 for u in utils(player))
    assert "requests_waiting" not in player.workloads()[0]


def test_the_exposition_is_vllm_v1_as_the_reference_parser_reads_it() -> None:
    store, player, clock = cluster()
    create(store, gpu_workload("llm", 1, pod_annotations=vllm_annotations()))
    settle(player, clock)
    player.set_load("default", "llm", loadmod.constant(200.0))
    run_for(player, clock, 5)
    (uid,) = engine_pods(player)
    text = player.engine_metrics(uid)
    assert text is not None
    families = {f.name: f for f in text_string_to_metric_families(text)}
    pod = engine_pods(player)[uid]
    g = gauges(text)
    assert g["vllm:num_requests_waiting"] == round(pod.waiting)
    assert g["vllm:num_requests_running"] == round(pod.running)
    assert 0.0 < g["vllm:kv_cache_usage_perc"] <= 1.0  # a fraction, as vLLM reports it
    sample = families["vllm:num_requests_waiting"].samples[0]
    assert sample.labels == {"engine": "0", "model_name": "meta-llama/Llama-3.1-8B-Instruct"}
    # Mostly histograms, like a real server's page.
    assert families["vllm:time_to_first_token_seconds"].type == "histogram"
    assert families["vllm:request_success"].type == "counter"
    assert len(text) > 10_000
    workload = next(w for w in player.workloads() if w["name"] == "llm")
    assert workload["requests_waiting"] == pytest.approx(pod.waiting, abs=0.01)


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        (vllm_annotations(), Endpoint("vllm", 8000, "/metrics", "meta-llama/Llama-3.1-8B-Instruct")),
        (
            {**vllm_annotations(9100, "/stats"), "sim.gpuscale.io/model": "m"},
            Endpoint("vllm", 9100, "/stats", "m"),
        ),
        (
            {"sim.gpuscale.io/engine": "vllm", "prometheus.io/port": "9000", "prometheus.io/path": "/p"},
            Endpoint("vllm", 9000, "/p", "meta-llama/Llama-3.1-8B-Instruct"),
        ),
        (
            {"sim.gpuscale.io/engine": "vllm"},
            Endpoint("vllm", 8000, "/metrics", "meta-llama/Llama-3.1-8B-Instruct"),
        ),
        ({"gpuscale.io/metrics-port": "8000"}, None),  # no engine to play
        ({"sim.gpuscale.io/engine": "tensorflow-serving"}, None),
        ({"sim.gpuscale.io/engine": "vllm", "gpuscale.io/metrics-port": "x"}, None),
    ],
)
def test_endpoint_of_a_pod(annotations: dict[str, str], expected: Endpoint | None) -> None:
    assert endpoint_of({"metadata": {"annotations": annotations}}) == expected


# --- over HTTP, at the pod's IP ----------------------------------------------------------


async def _get(url: str) -> tuple[int, str]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http, http.get(url) as resp:
        return resp.status, await resp.text()


async def serving(url: str) -> str:
    """The page at ``url``; "not yet" (an AssertionError) while nothing answers there."""
    try:
        status, text = await _get(url)
    except aiohttp.ClientConnectionError as e:
        raise AssertionError(f"{url}: {type(e).__name__}") from None
    assert status == 200, f"{url}: HTTP {status}"
    return text


async def refused(url: str) -> bool:
    try:
        await _get(url)
    except aiohttp.ClientConnectionError:
        return True
    raise AssertionError(f"{url} still answers")


async def test_a_pod_loading_its_model_does_not_answer_yet() -> None:
    async with KubeSim(port=0, scenario="empty", startup_delay_s=60.0) as sim:
        await sim.create(gpu_workload("llm", 1, pod_annotations=vllm_annotations(18002)))

        def ip() -> str:
            pods = sim.pods()
            assert len(pods) == 1
            pod = pods[0]
            assert pod.get("status", {}).get("podIP")
            return str(pod["status"]["podIP"])

        address = await eventually(ip, 10, "the pod's IP")
        # Its address is taken (bound) but nothing listens until it is Ready, 60 s away.
        assert await refused(f"http://{address}:18002/metrics")


async def test_a_pod_turns_ready_only_once_its_server_listens() -> None:
    """As a readiness probe passes only once the server answers. kube-sim wrote Ready and
    started the pod's server at its next sync, up to 0.2 s later: the collector, scraping a
    pod as soon as it is Ready, was refused once for every new pod (engine_scrape_failed
    connect_error at each scale-up of the llm demo). At the very write that says Ready,
    a connection to the pod's address must be taken."""
    at_ready: dict[str, bool] = {}

    def on_write(change: Any) -> None:
        pod = change.obj
        if pod.get("kind") != "Pod" or change.type != "MODIFIED":
            return
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or ()
        )
        name = pod["metadata"]["name"]
        if ready and name not in at_ready:
            try:
                socket.create_connection((pod["status"]["podIP"], 18003), timeout=1).close()
                at_ready[name] = True
            except OSError:
                at_ready[name] = False

    async with KubeSim(port=0, scenario="empty", startup_delay_s=0.3) as sim:
        sim.store.listeners.append(on_write)
        await sim.create(gpu_workload("llm", 3, pod_annotations=vllm_annotations(18003)))
        await eventually(lambda: len(at_ready) == 3, 10, "the 3 pods Ready")
        assert at_ready == dict.fromkeys(at_ready, True)
        # A pod that plays no inference server turns Ready as before.
        await sim.create(gpu_workload("bert", 1))
        await eventually(
            lambda: any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for p in sim.pods()
                if p["metadata"]["labels"]["app"] == "bert"
                for c in (p.get("status") or {}).get("conditions") or ()
            ),
            10,
            "the plain GPU pod Ready",
        )


async def test_a_ready_pod_serves_its_metrics_at_its_ip_and_annotated_port() -> None:
    async with KubeSim(port=0, scenario="empty", startup_delay_s=0.5) as sim:
        await sim.create(gpu_workload("llm", 1, pod_annotations=vllm_annotations(18000, "/m")))
        await sim.create(gpu_workload("bert", 1))
        sim.set_load("default", "llm", 250)

        def ips() -> dict[str, str]:
            found = {p["metadata"]["labels"]["app"]: p.get("status", {}).get("podIP") for p in sim.pods()}
            assert all(found.values())
            assert len(found) == 2
            return found  # type: ignore[return-value]  # checked above

        addresses = await eventually(ips, 10, "pod IPs")
        llm = addresses["llm"]
        url = f"http://{llm}:18000/m"
        assert llm.startswith("127.")
        text = await eventually(lambda: serving(url), 10, "the pod to serve its metrics once Ready")
        assert "vllm:num_requests_waiting" in text
        assert (await _get(f"http://{llm}:18000/metrics"))[0] == 404  # only the annotated path
        assert await refused(f"http://{addresses['bert']}:18000/m")  # not an inference server

        async def queue_grows() -> bool:
            return gauges(await serving(url))["vllm:num_requests_waiting"] > 5

        await eventually(queue_grows, 10, "the queue of a pod at 2.5 × its capacity")

        # Scaled to zero: the pod terminates and its address stops answering.
        deploy = sim.get("apps/v1", "Deployment", "llm")
        deploy["spec"]["replicas"] = 0
        sim.store.put(sim.resource("apps/v1", "Deployment"), deploy)
        await eventually(lambda: refused(url), 10, "the terminating pod to stop serving")


async def test_two_simulators_never_answer_for_each_others_pods() -> None:
    """Each kube-sim binds its pods' addresses as it hands them out; with the
    same seed they would pick the same block: the second skips what is taken."""
    async with (
        KubeSim(port=0, scenario="empty", startup_delay_s=0.0, seed=7) as a,
        KubeSim(port=0, scenario="empty", startup_delay_s=0.0, seed=7) as b,
    ):
        assert a.network.prefix == b.network.prefix
        for sim in (a, b):
            await sim.create(gpu_workload("llm", 2, pod_annotations=vllm_annotations(18001)))

        def ips(sim: KubeSim) -> set[str]:
            found = {p.get("status", {}).get("podIP") for p in sim.pods()}
            assert None not in found
            assert len(found) == 2
            return found  # type: ignore[return-value]  # checked above

        ips_a = await eventually(lambda: ips(a), 10, "a's pod IPs")
        ips_b = await eventually(lambda: ips(b), 10, "b's pod IPs")
        assert ips_a.isdisjoint(ips_b)
        for ip in sorted(ips_a | ips_b):
            await eventually(lambda ip=ip: serving(f"http://{ip}:18001/metrics"), 10, f"{ip} serving")  # type: ignore[misc]  # binds the loop variable
