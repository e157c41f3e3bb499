"""The whole pipeline on the engine's queue, as separate processes:
kube-sim's vLLM-like pods queue requests and serve /metrics at their pod IPs;
the sim collectors scrape them as in a cluster; the aggregator averages
``requests_waiting``; the decider scales on it; the actuator patches kube-sim.
Every message on the way is checked against the AsyncAPI contract."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuscale import codec
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain
from gpuscale_cli.demo.processes import ProcessGroup

from ..contract import message_name_for_subject, validate_payload
from ..k8s_objects import gpu_workload, gpuscaler, vllm_annotations
from ..waiting import eventually_while_running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAMESPACE, NAME = "default", "llm-queue"
WINDOW_S = 4

SCENARIO = [
    gpu_workload(
        NAME, namespace=NAMESPACE, image="vllm/vllm-openai:latest", pod_annotations=vllm_annotations(8000)
    ),
    gpuscaler(
        NAME,
        namespace=NAMESPACE,
        max_replicas=4,
        metrics=[{"name": "requests_waiting", "target": 4}],
        window=f"{WINDOW_S}s",
    ),
]


def _put_load(sim_url: str, load: float) -> None:
    req = urllib.request.Request(  # noqa: S310 - our own loopback kube-sim
        f"{sim_url}/sim/v1/workloads/{NAMESPACE}/{NAME}/load",
        data=json.dumps({"load": load}).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as resp:  # noqa: S310 - same
        assert resp.status == 200


def _replicas(sim_url: str) -> int:
    with urllib.request.urlopen(f"{sim_url}/sim/v1/workloads", timeout=5) as resp:  # noqa: S310 - loopback kube-sim
        body = json.loads(resp.read())
    return int(next(w["replicas"] for w in body["workloads"] if w["name"] == NAME))


@pytest.fixture
async def pipeline(nats_server: EmbeddedNats, tmp_path: Path) -> AsyncIterator[tuple[str, ProcessGroup]]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump_all(SCENARIO))
    group = ProcessGroup(tmp_path, env={"GPUSCALE_NATS_URL": nats_server.url, "GPUSCALE_LOG_LEVEL": "info"})
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    kubeconfig = tmp_path / "kubeconfig"
    group.start(
        "kube-sim", "kube-sim",
        "--port", str(sim_port), "--kubeconfig-out", str(kubeconfig), "--scenario", str(scenario),
        "--nodes", "1", "--gpus-per-node", "8", "--startup-delay", "1", "--termination-delay", "0.5",
    )  # fmt: skip
    try:
        await eventually_while_running(group, kubeconfig.exists, 30, "kube-sim's kubeconfig")
        kube = ("--kubeconfig", str(kubeconfig), "--http-port", "0")
        group.start("actuator", "actuator", *kube)
        group.start("decider", "decider", *kube)
        group.start(
            "aggregator",
            "aggregator",
            "--window",
            str(WINDOW_S),
            "--publish-interval",
            "1",
            "--http-port",
            "0",
        )
        group.start(
            "collector", "collector",
            "--backend", "sim", "--sim-source", "kube-sim", "--node-name", "gpu-node-1", "--interval", "0.5", *kube,
        )  # fmt: skip
        yield sim_url, group
    finally:
        codes = await asyncio.to_thread(group.stop_all)
        logs = "\n".join(f"--- {c.name}\n{c.tail(15)}" for c in group.children)
        assert all(code == 0 for code in codes.values()), f"{codes}\n{logs}"
        for child in group.children:
            assert "Traceback" not in child.log_path.read_text(errors="replace"), logs


async def test_a_growing_queue_scales_the_workload_up(
    nats_server: EmbeddedNats, pipeline: tuple[str, ProcessGroup]
) -> None:
    sim_url, group = pipeline
    captured: dict[str, list[dict[str, Any]]] = {}

    async def capture(msg: Any) -> None:
        captured.setdefault(message_name_for_subject(msg.subject), []).append(codec.decode_raw(msg.data))

    nc = await connect([nats_server.url], ServiceMetrics("e2e"), name="e2e")
    await nc.subscribe("gpuscale.v1.>", cb=capture)
    try:
        _put_load(sim_url, 40)  # well inside one pod: no queue

        def quiet_queue_measured() -> bool:
            return any(
                m["averages"].get("requests_waiting") == 0.0 and m["name"] == NAME
                for m in captured.get("WorkloadMetrics", [])
            )

        await eventually_while_running(
            group, quiet_queue_measured, 40, "a metrics message with an empty queue"
        )
        assert _replicas(sim_url) == 1

        _put_load(sim_url, 250)  # 2.5 pods' worth on one: its queue grows
        await eventually_while_running(group, lambda: _replicas(sim_url) >= 2, 40, "a scale-up on the queue")
        # The desired count reaches the actuator through its KV entry, the record on the decisions
        # subject: the scale can be seen before the record has arrived here.
        await eventually_while_running(group, lambda: "Decision" in captured, 20, "the scale-up's decision")
    finally:
        await drain(nc)

    samples = captured["SampleBatch"]
    engines = [e["signals"] for b in samples for e in b.get("engines", ())]
    assert engines, "no sample carried engine signals"
    assert not any("engine" in o for b in samples for g in b["gpus"] for o in g["owners"]), "once per pod"
    assert all(e["name"] == "vllm" for e in engines)
    assert all("requests_waiting" in e and "request_completion_rate" in e for e in engines)
    # Sized by what arrives at the pod's service rate, before or as its queue grows.
    up = next(d for d in captured["Decision"] if d["to_replicas"] > d["from_replicas"])
    assert up["reason"].startswith("requests_waiting: estimated demand"), up["reason"]
    for name, payloads in captured.items():
        for payload in payloads[:50]:
            validate_payload(name, payload)
