"""gpuscale's real pipeline (nats-server, kube-sim and every service) run over the traces."""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path

from request_trace import TraceProfile
from scenario_setup import (
    GPUS_PER_NODE,
    NAMESPACE,
    NODES,
    POLL_S,
    STARTUP_DELAY_S,
    Scaler,
    Series,
    deployment,
    gpuscaler,
)

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale_cli.demo.processes import ProcessGroup
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster.inference import WaitAccount
from gpuscale_kubesim.sim import KubeSim


async def run_pipeline(
    traces: dict[str, tuple[loadmod.Profile, float]],
    scalers: dict[str, Scaler],
    work: Path,
    log_level: str,
    scale_down_window_s: int | None = None,
    measure_from: dict[str, float] | None = None,
) -> tuple[dict[str, dict[str, Series]], dict[str, dict[str, WaitAccount]]]:
    """Every trace's workloads (one per scaler) at once on one pipeline: (t, load, requested) every
    POLL_S each (read in-process), and what each one's requests paid from ``measure_from`` on."""
    measure_from = measure_from or {}
    run_s = max(duration for _, duration in traces.values())
    # A SIGTERM (kill, timeout) ends the run through its clean-ups, not around them: no orphans.
    task = asyncio.current_task()
    if task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
    with EmbeddedNats(log_file=str(work / "nats-server.log")) as nats:
        async with KubeSim(
            port=0,
            scenario="empty",
            nodes=NODES,
            gpus_per_node=GPUS_PER_NODE,
            startup_delay_s=STARTUP_DELAY_S,
            seed=1,
            kubeconfig_path=work / "kubeconfig",
        ) as sim:
            names = {(trace, kind): f"{trace}-{kind}" for trace in traces for kind in scalers}
            for (trace, kind), name in names.items():
                profile, _ = traces[trace]
                scaler = scalers[kind]
                await sim.create(deployment(name, scaler.engine_signals))
                await sim.create(
                    gpuscaler(name, scaler.metric, scaler.target, scale_down_window_s=scale_down_window_s)
                )
                opening = profile.opening_level() if isinstance(profile, TraceProfile) else profile.at(0.0)
                sim.set_load(NAMESPACE, name, loadmod.constant(opening))
            group = ProcessGroup(work, env={"GPUSCALE_NATS_URL": nats.url, "GPUSCALE_LOG_LEVEL": log_level})
            kube = ("--kubeconfig", str(sim.kubeconfig_path), "--http-port", "0")
            try:
                group.start("actuator", "actuator", *kube)
                group.start("decider", "decider", *kube)
                group.start("aggregator", "aggregator", "--window", "30", "--http-port", "0")
                for i in range(1, NODES + 1):
                    group.start(
                        f"collector-{i}",
                        "collector",
                        "--backend", "sim", "--sim-source", "kube-sim", "--node-name", f"gpu-node-{i}", *kube,
                    )  # fmt: skip
                await _wait_until_measured(sim, list(names.values()), group)
                for (trace, _kind), name in names.items():
                    sim.set_load(NAMESPACE, name, traces[trace][0])
                begin = time.monotonic()
                series: dict[str, dict[str, Series]] = {t: {k: [] for k in scalers} for t in traces}
                before: dict[str, WaitAccount] = {}
                ended: dict[str, WaitAccount] = {}
                tick = 0
                while (t := time.monotonic() - begin) <= run_s:
                    if group.exited():
                        raise RuntimeError(
                            f"a part exited: {[c.name for c in group.exited()]}; logs in {work}"
                        )
                    if any(
                        name not in before and t >= measure_from.get(tr, 0.0)
                        for (tr, _), name in names.items()
                    ):
                        paid_now = _requests_paid(sim)
                        for (trace, _kind), name in names.items():
                            if name not in before and t >= measure_from.get(trace, 0.0):
                                before[name] = paid_now.get(name, WaitAccount())
                    for (trace, kind), name in names.items():
                        if t <= traces[trace][1]:
                            replicas = int(
                                sim.get("apps/v1", "Deployment", name, NAMESPACE)["spec"]["replicas"]
                            )
                            series[trace][kind].append((round(t, 3), sim.load_of(NAMESPACE, name), replicas))
                        elif name not in ended:
                            ended[name] = _requests_paid(sim).get(name, WaitAccount())
                    if tick % round(30 / POLL_S) == 0:
                        print(f"  gpuscale pipeline: t={t:5.0f}s of {run_s:.0f}", file=sys.stderr, flush=True)
                    tick += 1
                    await asyncio.sleep(max(0.0, begin + tick * POLL_S - time.monotonic()))
                last = _requests_paid(sim)
                accounts: dict[str, dict[str, WaitAccount]] = {t: {} for t in traces}
                for (trace, kind), name in names.items():
                    end = ended.get(name) or last.get(name, WaitAccount())
                    accounts[trace][kind] = end.since(before.get(name, WaitAccount()))
                return series, accounts
            finally:
                await asyncio.to_thread(group.stop_all)


def _requests_paid(sim: KubeSim) -> dict[str, WaitAccount]:
    """Each workload's ``requests_paid`` as ``/sim/v1/workloads`` serves it (read in-process)."""
    return {
        w["name"]: WaitAccount.from_json(w["requests_paid"])
        for w in sim.cluster.workloads()
        if w["namespace"] == NAMESPACE and "requests_paid" in w
    }


async def _wait_until_measured(
    sim: KubeSim, names: list[str], group: ProcessGroup, timeout_s: float = 120.0
) -> None:
    """Until every GPUScaler shows a current metric, then a full window of the base load."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if group.exited():
            raise RuntimeError(f"a part exited early: {[c.name for c in group.exited()]}")
        measured = 0
        for name in names:
            status = sim.get("gpuscale.io/v1alpha1", "GPUScaler", name, NAMESPACE).get("status") or {}
            if status.get("currentMetrics"):
                measured += 1
        if measured == len(names):
            await asyncio.sleep(30.0)  # a full 30 s window of the base load
            return
        await asyncio.sleep(1.0)
    raise RuntimeError("the pipeline did not report metrics for every workload in time")
