"""A tenant's fat workloads cost the actuator, which serves every team, a /scale read each,
never the object: the real actuator process, resyncing every 0.5 s. The objects here are
~150 KiB (4,500 env entries), enough to show the reads; what a read of one at the API
server's 1.5 MiB limit costs is measured in docs/BENCHMARKS.md ("A team's MiB-sized
workload objects"), not asserted: a shared CI machine times nothing reliably."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload, gpuscaler
from .actuator_harness import WRITTEN, decision, publish, watch_actions
from .test_actuator_failover_process import _spawn

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAT = 4
ENV = [{"name": f"E{i}", "value": "x"} for i in range(4_500)]
WINDOW_S = 4.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def fat_statefulset(name: str) -> dict[str, Any]:
    obj = gpu_workload(name, 1, kind="StatefulSet", namespace="team-b", gpus=None)
    obj["spec"]["template"]["spec"]["containers"][0]["env"] = ENV
    return obj


async def test_fat_targets_cost_the_actuator_a_scale_read_and_the_other_team_is_served(
    kube_sim: KubeSim, nats_server: EmbeddedNats, nats_client: NATS, tmp_path: Path
) -> None:
    for ns in ("team-a", "team-b"):
        await kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    await kube_sim.create(gpu_workload("bert", 1, namespace="team-a", gpus=None))
    await kube_sim.create(gpuscaler("bert", namespace="team-a"))
    for i in range(FAT):
        await kube_sim.create(fat_statefulset(f"fat-{i}"))
        await kube_sim.create(
            gpuscaler(
                f"fat-{i}", namespace="team-b", scaleTargetRef={"kind": "StatefulSet", "name": f"fat-{i}"}
            )
        )
    object_reads = kube_sim.faults.add("GET", r"/statefulsets/fat-\d+$", count=None)
    args = [
        str(Path(sys.executable).parent / "gpuscale"), "actuator",
        "--nats-url", nats_server.url, "--kubeconfig", str(kube_sim.kubeconfig_path),
        "--http-port", "0", "--identity", "fat", "--resync-interval", "0.5",
        "--lease-duration", "2", "--renew-deadline", "1.5", "--retry-period", "0.2",
    ]  # fmt: skip
    proc = _spawn(args, tmp_path / "actuator.log")
    try:
        async with watch_actions(nats_client) as actions:
            # Already at their count: converged again on every resync, never reported.
            for i in range(FAT):
                await publish(
                    nats_client, decision(f"fat-{i}", from_=1, to=1, kind="StatefulSet", namespace="team-b")
                )
            first = decision("bert", from_=1, to=2, namespace="team-a")
            await publish(nats_client, first)
            assert (await actions.wait_for(first.id, timeout_s=60)).outcome in WRITTEN
            before = cpu_s(proc.pid)
            await asyncio.sleep(WINDOW_S)  # ~8 resyncs
            used = cpu_s(proc.pid) - before
            started = time.monotonic()
            second = decision("bert", from_=2, to=3, namespace="team-a")
            await publish(nats_client, second)
            assert (await actions.wait_for(second.id, timeout_s=60)).outcome in WRITTEN
            took = time.monotonic() - started
    finally:
        proc.terminate()
        await asyncio.to_thread(proc.wait, 10)
    print(
        f"actuator CPU {used:.2f} s in {WINDOW_S:g} s; object reads {object_reads.hits}; team-a in {took:.2f} s"
    )
    assert object_reads.hits == 0  # ~8 resyncs of 4 targets: 28-36 object reads before /scale only
