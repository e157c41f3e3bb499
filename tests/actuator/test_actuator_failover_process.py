"""Two real `gpuscale actuator` processes: one leader acts; SIGKILL it, the other takes over."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.kube import KubeError, request_json
from gpuscale.leader import lease_from_object
from gpuscale.natsio import NATS
from gpuscale_kubesim import KubeSim

from ..waiting import eventually
from .actuator_harness import WRITTEN, decision, publish, watch_actions
from .kube_fixtures import api_client, events_about, seed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/default/leases/gpuscale-actuator"
LEASE_DURATION_S = 2.0
GPUSCALE = str(Path(sys.executable).parent / "gpuscale")


@asynccontextmanager
async def actuator_process(
    identity: str, nats_url: str, kubeconfig: str, log_dir: Path
) -> AsyncIterator[subprocess.Popen[bytes]]:
    args = [
        GPUSCALE, "actuator",
        "--nats-url", nats_url,
        "--kubeconfig", kubeconfig,
        "--http-port", "0",
        "--identity", identity,
        "--lease-duration", str(LEASE_DURATION_S),
        "--renew-deadline", "1.5",
        "--retry-period", "0.2",
    ]  # fmt: skip
    proc = _spawn(args, log_dir / f"actuator-{identity}.log")
    try:
        yield proc
    finally:
        # Wait without blocking the loop: kube-sim runs in it and must answer
        # the process's last requests (the lease release).
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 10
            while proc.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def _spawn(args: list[str], log_path: Path) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:  # the child keeps its own descriptor
        return subprocess.Popen(
            args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "NO_COLOR": "1"}
        )


async def lease_holder(kube_sim: KubeSim) -> str:
    async with api_client(kube_sim.kubeconfig_path) as api:
        try:
            return lease_from_object(await request_json(api, "GET", LEASE_PATH)).holder
        except KubeError:
            return ""


async def reporters(kube_sim: KubeSim) -> list[str]:
    async with api_client(kube_sim.kubeconfig_path) as api:
        return [e.get("reportingInstance", "") for e in await events_about(api, "bert")]


async def test_two_actuators_one_leader_and_failover(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await seed(kube_sim, "Deployment", "bert", 1)
    kubeconfig = str(kube_sim.kubeconfig_path)
    async with (
        actuator_process("a", nats_server.url, kubeconfig, tmp_path) as proc_a,
        actuator_process("b", nats_server.url, kubeconfig, tmp_path) as proc_b,
    ):
        procs = {"a": proc_a, "b": proc_b}
        await eventually(lambda: _held(kube_sim), timeout_s=30, what="a lease holder")
        leader = await lease_holder(kube_sim)
        follower = "b" if leader == "a" else "a"
        async with watch_actions(nats_client) as actions:
            for replicas in (1, 2, 3):  # only the leader acts on every one of them
                d = decision(from_=replicas, to=replicas + 1)
                await publish(nats_client, d)
                assert (await actions.wait_for(d.id, timeout_s=30)).outcome in WRITTEN
            await eventually(lambda: _count(kube_sim, 3), what="three events")
            assert await reporters(kube_sim) == [leader] * 3

            killed_at = time.monotonic()
            procs[leader].kill()  # SIGKILL: no release, the lease must expire
            await eventually(
                lambda: _holder_is(kube_sim, follower), timeout_s=LEASE_DURATION_S + 10, what="takeover"
            )
            took = time.monotonic() - killed_at
            assert took < LEASE_DURATION_S + 3.0, f"takeover took {took:.1f} s"

            d = decision(from_=4, to=5)
            await publish(nats_client, d)
            assert (await actions.wait_for(d.id, timeout_s=30)).outcome in WRITTEN
            await eventually(lambda: _count(kube_sim, 4), what="the fourth event")
            assert (await reporters(kube_sim))[-1] == follower
        assert procs[follower].poll() is None


async def _held(kube_sim: KubeSim) -> bool:
    return await lease_holder(kube_sim) in ("a", "b")


async def _holder_is(kube_sim: KubeSim, identity: str) -> bool:
    return await lease_holder(kube_sim) == identity


async def _count(kube_sim: KubeSim, n: int) -> bool:
    return len(await reporters(kube_sim)) >= n


def test_gpuscale_actuator_rejects_bad_lease_timings() -> None:
    result = subprocess.run(
        [GPUSCALE, "actuator", "--lease-duration", "2", "--renew-deadline", "5"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "--lease-duration" in result.stderr
