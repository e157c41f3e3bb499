"""Shadow mode end to end: a GPUScaler in spec.mode Shadow beside an HPA that
owns the target. The decider advises on the advice subject and never decides;
the test plays the HPA controller (it scales, then records SuccessfulRescale as
pkg/controller/podautoscaler does); `gpuscale shadow-report`, run as its own
process, reads the advice stream and the cluster and says who was earlier."""

from __future__ import annotations

import asyncio
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS, jetstream
from gpuscale.timefmt import format_time
from gpuscale.wire import Decision
from gpuscale_kubesim import KubeSim

from ..decider.decider_harness import (
    gpuscaler,
    metrics_message,
    publish_metrics,
    running_decider,
    running_pods,
    settings_for,
    write_policies,
)
from ..decider.test_decider_service_nats_sim import hpa, scale_to
from ..k8s_objects import gpu_workload
from ..waiting import eventually, holds_for

pytestmark = pytest.mark.integration
KEY = subjects.WorkloadKey("default", "Deployment", "bert")


def rescale_event(hpa_name: str, replicas: int, at: float) -> dict[str, Any]:
    """What the HPA controller records (horizontal.go: "New size: %d; reason: %s")."""
    stamp = format_time(at)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{hpa_name}.{int(at)}", "namespace": "default"},
        "involvedObject": {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "name": hpa_name,
            "namespace": "default",
        },
        "reason": "SuccessfulRescale",
        "message": f"New size: {replicas}; reason: cpu resource utilization (percentage of request) above target",
        "type": "Normal",
        "source": {"component": "horizontal-pod-autoscaler"},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


async def advice_kept(nc: NATS, count: int) -> list[Decision]:
    js = jetstream(nc)
    found: list[Decision] = []
    seq = 1
    while True:
        try:
            raw = await js.get_msg(subjects.ADVICE_STREAM, seq=seq, subject=subjects.ADVICE_ALL, next=True)
        except Exception:  # noqa: BLE001 - not found: the end of the stream
            break
        seq = int(raw.seq or seq) + 1
        found.append(codec.decode(raw.data or b"", Decision, time.time()))
    assert len(found) >= count, f"{len(found)} advice so far"
    return found


async def run_report(nats_url: str, kubeconfig: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuscale_cli.main",
        "shadow-report",
        "--nats-url",
        nats_url,
        "--kubeconfig",
        kubeconfig,
        "--output",
        "json",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_shadow_advice_beside_an_hpa_and_the_report_says_who_was_earlier(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(gpu_workload("bert", 2, gpus=2))
    await kube_sim.create(hpa("bert", "bert"))
    policies = write_policies(
        tmp_path / "policies.yaml",
        gpuscaler("bert", "bert", mode="Shadow", metrics=[{"name": "gpu_util", "target": 50}]),
    )
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    decisions: list[Any] = []

    async def on_decision(msg: Any) -> None:
        decisions.append(msg)

    await nats_client.subscribe(subjects.DECISIONS_ALL, cb=on_decision)
    async with running_decider(settings) as running:
        pods = await running_pods(kube_sim, "bert", 2)
        await eventually(
            lambda: running.decider.workloads[KEY].conflict == "HorizontalPodAutoscaler default/bert",
            what="the decider to see the HPA",
        )

        async def advised_up() -> Decision:
            await publish_metrics(nats_client, metrics_message("bert", 100.0, 2, pods=pods))
            found = await advice_kept(nats_client, 1)
            up = [d for d in found if (d.from_replicas, d.to_replicas) == (2, 4)]
            assert up, "no 2 -> 4 advice yet"
            assert "HorizontalPodAutoscaler default/bert owns the target" in up[0].reason
            return up[0]

        up = await eventually(advised_up, what="the advice 2 -> 4 naming the HPA")
        assert running.metric("gpuscale_messages_out_total", kind="advice") >= 1

        # The HPA acts later: whole seconds, as its Event records them.
        hpa_at = float(math.ceil(up.ts) + 2)
        await eventually(lambda: time.time() >= hpa_at, what="the HPA's moment")
        await scale_to(kube_sim, "bert", 4)
        await kube_sim.create(rescale_event("bert", 4, hpa_at))
        pods = await running_pods(kube_sim, "bert", 4)

        async def agreed() -> Decision:
            await publish_metrics(nats_client, metrics_message("bert", 50.0, 4, pods=pods))
            keep = [
                d for d in await advice_kept(nats_client, 2) if (d.from_replicas, d.to_replicas) == (4, 4)
            ]
            assert keep, "no keep-4 advice yet"
            return keep[0]

        keep = await eventually(agreed, what="the keep-4 advice")
        assert "shadow mode: would keep 4" in keep.reason
        # Never a decision, and the live count is the HPA's, not ours.
        await holds_for(lambda: not decisions, 0.5, what="no decision in shadow mode")

    rc, out, err = await run_report(nats_server.url, kube_sim.kubeconfig_path)
    assert rc == 0, err
    (report,) = json.loads(out)
    assert report["workload"] == {"namespace": "default", "kind": "Deployment", "name": "bert"}
    assert report["controllers"] == ["HorizontalPodAutoscaler default/bert"]
    first = report["advised"][0]
    assert (first["from_replicas"], first["to_replicas"], first["reached_at"]) == (2, 4, hpa_at)
    assert first["lead_s"] == pytest.approx(hpa_at - up.ts)
    (live,) = report["live"]
    assert (live["to_replicas"], live["source"]) == (4, "HorizontalPodAutoscaler default/bert")
    assert live["lead_s"] == pytest.approx(hpa_at - up.ts)
    # Two replicas more, two GPUs each (the pod template's limit), until the HPA caught up.
    assert report["gpus_per_replica"] == 2
    assert report["extra_gpu_s"] == pytest.approx(2 * 2 * (hpa_at - up.ts))
    assert report["saved_gpu_s"] == 0

    _, text, _ = await run_report(nats_server.url, kube_sim.kubeconfig_path)
    assert json.loads(text)  # the same again: reading the stream consumed nothing


async def test_the_report_says_when_there_is_no_advice(nats_server: EmbeddedNats, kube_sim: KubeSim) -> None:
    rc, out, err = await run_report(nats_server.url, kube_sim.kubeconfig_path)
    assert (rc, out) == (0, "")
    assert "No shadow advice" in err
