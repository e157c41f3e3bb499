"""`gpuscale shadow-report --kubeconfig` reads each workload's HPA Events, which anyone who
may create Events in that namespace writes: a "New size" past any replica count is that
change left out, not the end of every team's report."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

import pytest

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_kubesim import KubeSim

from ..decider.test_decider_service_nats_sim import hpa
from ..k8s_objects import gpu_workload
from .test_shadow_report_nats_sim import rescale_event
from .test_shadow_report_stream import BERT, LLAMA, advice, store

pytestmark = pytest.mark.integration


def in_namespace(event: dict[str, Any], namespace: str, message: str) -> dict[str, Any]:
    event["metadata"]["namespace"] = event["involvedObject"]["namespace"] = namespace
    event["message"] = message
    return event


async def two_teams(kube_sim: KubeSim, now: float) -> None:
    """team-a's bert and team-b's llama, each with its HPA; team-a's HPA rescaled to 2 at now - 200."""
    for key in (BERT, LLAMA):
        await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": key.namespace}})
        await kube_sim.create(gpu_workload(key.name, 1, namespace=key.namespace))
        obj = hpa(key.name, key.name)
        obj["metadata"]["namespace"] = key.namespace
        await kube_sim.create(obj)
    await kube_sim.create(
        in_namespace(rescale_event("bert", 2, now - 200), "team-a", "New size: 2; reason: x")
    )


@pytest.mark.parametrize("size", ["9" * 5000, "9" * 400, "2147483648"])
async def test_a_teams_hostile_rescale_event_spoils_no_other_report(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, size: str
) -> None:
    now = time.time()
    await two_teams(kube_sim, now)
    await kube_sim.create(
        in_namespace(rescale_event("llama", 2, now - 200), "team-b", f"New size: {size}; reason: x")
    )
    await store(
        nats_client,
        [
            (subjects.advice(BERT), codec.encode(advice(BERT, now - 300, 1, 2))),
            (subjects.advice(LLAMA), codec.encode(advice(LLAMA, now - 300, 1, 2))),
        ],
    )
    args = ["--nats-url", nats_server.url, "--kubeconfig", str(kube_sim.kubeconfig_path), "--output", "json"]
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "gpuscale_cli.main", "shadow-report", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    reports = {r["workload"]["namespace"]: r for r in json.loads(out)}
    assert [c["to_replicas"] for c in reports["team-a"]["live"]] == [2, 1]  # the Event, then /scale
    assert reports["team-b"]["live"] == []  # its Event left out; its advice still reported
    assert [a["to_replicas"] for a in reports["team-b"]["advised"]] == [2]
