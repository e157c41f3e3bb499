"""The whole pipeline as separate processes: kube-sim load up -> replicas up; load down -> replicas down.

sim collectors -> aggregator -> decider -> actuator -> kube-sim, with short
windows so the loop closes in seconds. All NATS traffic is captured and
checked against the AsyncAPI contract on the way.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client import AppsV1Api, CustomObjectsApi

from gpuscale import codec
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.kube import new_api_client
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain
from gpuscale_cli.demo.processes import ProcessGroup

from ..contract import message_name_for_subject, validate_payload
from ..k8s_objects import gpu_workload, gpuscaler
from ..waiting import eventually_while_running

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAMESPACE, NAME = "default", "llm-chat"
WINDOW_S = 4
STABILIZATION_S = 3  # the test shows the scale-down, not how long it is held

SCENARIO = [
    gpu_workload(NAME, namespace=NAMESPACE, image="vllm/vllm-openai:latest"),
    gpuscaler(
        NAME,
        namespace=NAMESPACE,
        max_replicas=6,
        metrics=[{"name": "gpu_util", "target": 60}],
        window=f"{WINDOW_S}s",
        tolerance=0.1,
        behavior={"scaleDown": {"stabilizationWindowSeconds": STABILIZATION_S}},
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


@pytest.fixture
async def pipeline(
    nats_server: EmbeddedNats, tmp_path: Path
) -> AsyncIterator[tuple[str, Path, ProcessGroup]]:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump_all(SCENARIO))
    group = ProcessGroup(tmp_path, env={"GPUSCALE_NATS_URL": nats_server.url, "GPUSCALE_LOG_LEVEL": "debug"})
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    kubeconfig = tmp_path / "kubeconfig"
    group.start(
        "kube-sim", "kube-sim",
        "--port", str(sim_port), "--kubeconfig-out", str(kubeconfig), "--scenario", str(scenario),
        "--nodes", "2", "--gpus-per-node", "8", "--startup-delay", "1", "--termination-delay", "0.5",
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
        for node in ("gpu-node-1", "gpu-node-2"):
            group.start(
                f"collector-{node}",
                "collector",
                "--backend",
                "sim",
                "--sim-source",
                "kube-sim",
                "--node-name",
                node,
                "--interval",
                "0.5",
                *kube,
            )
        yield sim_url, kubeconfig, group
    finally:
        codes = await asyncio.to_thread(group.stop_all)
        logs = "\n".join(f"--- {c.name}\n{c.tail(15)}" for c in group.children)
        # Every part stops cleanly on SIGTERM: exit 0 and no traceback.
        assert all(code == 0 for code in codes.values()), f"{codes}\n{logs}"
        for child in group.children:
            text = child.log_path.read_text(errors="replace")
            assert "Traceback" not in text, logs
            # kube-sim stops last, so the parts leave as in a cluster: the leases are released,
            # not left to expire, and the pod watches hang up without a failure.
            assert "leader_release_failed" not in text, f"{child.name}\n{logs}"
            assert "watch_failed" not in text, f"{child.name}\n{logs}"


async def test_replicas_follow_the_load_up_and_back_down(
    nats_server: EmbeddedNats, pipeline: tuple[str, Path, ProcessGroup]
) -> None:
    sim_url, kubeconfig, group = pipeline
    captured: dict[str, list[dict[str, Any]]] = {}

    async def capture(msg: Any) -> None:
        captured.setdefault(message_name_for_subject(msg.subject), []).append(codec.decode_raw(msg.data))

    nc = await connect([nats_server.url], ServiceMetrics("e2e"), name="e2e")
    await nc.subscribe("gpuscale.v1.>", cb=capture)
    api = await new_api_client(kubeconfig)
    apps = AppsV1Api(api)
    try:

        async def replicas() -> int:
            scale = await apps.read_namespaced_deployment_scale(NAME, NAMESPACE)
            return int(scale.spec.replicas)

        _put_load(sim_url, 20)
        await eventually_while_running(
            group, lambda: _has(captured, "WorkloadMetrics"), 30, "the first metrics message"
        )

        # Load step: one pod at 100 % against a target of 60 -> up, then 3 pods at ~50 %.
        stepped = time.monotonic()
        _put_load(sim_url, 150)

        async def scaled_up() -> bool:
            return await replicas() >= 3

        await eventually_while_running(group, scaled_up, WINDOW_S + 40, "scale-up to 3 replicas")
        scale_up_s = time.monotonic() - stepped

        # Load falls: after the scale-down stabilization, back to min.
        _put_load(sim_url, 10)

        async def scaled_down() -> bool:
            return await replicas() == 1

        await eventually_while_running(
            group, scaled_down, WINDOW_S + STABILIZATION_S + 40, "scale-down to 1 replica"
        )

        async def status_says_one() -> dict[str, Any] | None:
            scaler = await CustomObjectsApi(api).get_namespaced_custom_object(
                "gpuscale.io", "v1alpha1", NAMESPACE, "gpuscalers", NAME
            )
            status = scaler.get("status") or {}
            return status if status.get("desiredReplicas") == 1 else None

        # The status is written beside the decision, not before it: wait for it.
        status = await eventually_while_running(group, status_says_one, 15, "the status to say 1")
    finally:
        await api.close()
        await drain(nc)

    assert scale_up_s < WINDOW_S + 40
    decisions = captured.get("Decision", [])
    assert any(d["to_replicas"] > d["from_replicas"] for d in decisions)
    assert any(d["to_replicas"] < d["from_replicas"] for d in decisions)
    assert all(d["reason"] for d in decisions)
    actions = captured.get("Action", [])
    assert any(a["outcome"] in ("applied", "conflict_retried") for a in actions)
    # What the services really sent matches the published contract.
    for name, payloads in captured.items():
        for payload in payloads[:50]:
            validate_payload(name, payload)
    assert {"SampleBatch", "WorkloadMetrics", "Decision", "Action"} <= set(captured)
    assert status.get("lastScaleTime")


async def _has(captured: dict[str, list[dict[str, Any]]], name: str) -> bool:
    with contextlib.suppress(KeyError):
        return bool(captured[name])
    return False
