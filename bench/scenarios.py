"""Scenario benchmark: what users pay for, gpuscale beside the usual chain.

One command runs both, in the same run and on the same traces:

    .venv/bin/python bench/scenarios.py            # all five traces, ~6 min
    .venv/bin/python bench/scenarios.py --traces step --duration 150

**gpuscale**: the real pipeline (nats-server; kube-sim with vLLM-like pods that
queue requests and serve /metrics; one sim collector per node scraping them at
1 Hz; aggregator, 30 s window; decider; actuator; every service its own
process). Per trace two Deployments get the trace's load at the same instant:
one GPUScaler on ``requests_waiting`` (target 4 queued requests per pod), one
on ``gpu_util`` (target 70). All traces run at once, each pair its own
workloads, on 4 nodes × 32 GPUs.

**The usual chain**, emulated in virtual time with its published defaults on
the same trace and the same simulated cluster (kube-sim's cluster player,
the same queueing model and start-up delay): dcgm-exporter collects
DCGM_FI_DEV_GPU_UTIL every 30 s (its default ``-c 30000``); Prometheus scrapes
it every 30 s; the metrics adapter or KEDA polls ``avg_over_time(...[1m])``
per pod every 30 s; the HPA syncs every 15 s. The HPA is gpuscale's own
HPA-exact decider core (``gpuscale_decider.core.reconcile.reconcile``) with
the pods built from the simulated replicas and HPA's rules for Pods metrics
(a not-Ready pod's value counts), so only the plumbing differs. The phases of
the four periods relative to the trace are drawn at random (``--chain-runs``
draws, seeded); the figures are their mean, with the range.

Both sides use HPA's default behaviour (scale up 100 % or 4 pods per 15 s,
scale down after a 300 s stabilization), min 1, max 10 replicas, a 20 s model
load, and are measured the same way (cli/gpuscale_cli/demo/report.py): the
replicas a load needs are ``ceil(load / 70)``; ``time_to_adequate_s`` is the
longest stretch with fewer requested replicas than needed;
``underprovisioned_gpu_s`` / ``overprovisioned_gpu_s`` integrate the missing and
surplus GPUs (requested, one GPU per pod); ``scale_events`` counts changes.

**The floor** row is a scaler that asks for exactly what the load needs the
instant it changes, under the same scale-down stabilization: never short, so
its surplus is the least any scaler that is never short can have. With HPA's
default 300 s window a scale-up is held five minutes after the load falls,
whoever asked for it; ``--scale-down-window S`` runs both sides (and the floor)
with ``behavior.scaleDown.stabilizationWindowSeconds: S`` instead.

**What users pay**, beside those figures, per scaler and trace:
``gpu_hours`` requested (replicas × time, one GPU per pod), ``waiting_request_s``
spent in the engines' queues (the integral of kube-sim's queues, its fluid
requests) and ``wait_p90_s``, the 90th percentile of how long a started request
waited (kube-sim's engine model keeps each pod's queue FIFO and accounts every
cohort's wait; ``/sim/v1/workloads`` serves it as ``requests_paid``). The chain
is measured on the same engine model in its virtual cluster; the floor by
running the engine model over its replicas, each ready the instant it is asked
for.

**Real traffic**: ``--trace-file CSV`` replays a request trace (one row per
request: ``TIMESTAMP``, ``ContextTokens``, ``GeneratedTokens``, as the Azure
Public Dataset's LLM inference traces are written, e.g. "Azure LLM inference
trace 2023", https://github.com/Azure/AzurePublicDataset, CC-BY 4.0, Patel et
al., "Splitwise", ISCA 2024) at real speed instead of the synthetic traces,
through the same pipeline, chain emulation and floor: its most variable 15
minutes after a 10-minute lead-in (replayed, not measured), or with
``--trace-whole`` all of it. The tokens-to-GPU mapping (``bench/request_trace.py``)
is set by ``--prefill-tokens-per-gpu-s``, ``--decode-tokens-per-gpu-s`` and
``--trace-peak-replicas`` or ``--trace-scale``:

    .venv/bin/python bench/scenarios.py --trace-file AzureLLMInferenceTrace_code.csv --json /tmp/code.json
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from request_trace import TokenCost, TraceProfile, trace_profile

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.logging import configure
from gpuscale.policy import parse_gpuscaler
from gpuscale_cli.demo.processes import ProcessGroup
from gpuscale_cli.demo.report import NEEDED_PER_POD, Provisioning, needed_replicas, provisioning
from gpuscale_decider.core.reconcile import Config, Memory, Observation, Target, reconcile
from gpuscale_decider.core.replicas import PodView
from gpuscale_kubesim.apiserver.store import Store
from gpuscale_kubesim.cluster import ClusterPlayer, Now
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster import scenarios as sim_scenarios
from gpuscale_kubesim.cluster.inference import Endpoint, InferenceWorkloads, WaitAccount
from gpuscale_kubesim.sim import KubeSim

NAMESPACE = "default"
NODES, GPUS_PER_NODE = 4, 32
STARTUP_DELAY_S = 20.0
WAITING_TARGET = 4.0
UTIL_TARGET = 70.0
MAX_REPLICAS = 10
# How often the pipeline's replicas and loads are read: a step or a PATCH is placed
# within this (a 1 s poll made every time to adequate a whole second, rounded up).
POLL_S = 0.1
DEFAULT_SCALE_DOWN_WINDOW_S = 300  # HPA's behavior.scaleDown.stabilizationWindowSeconds

# The traces (GPU-percent of work over seconds). step is the demo's: 30 → 200
# at 15 s (3 pods' worth at 70 %), back to 40 at 100 s.
TRACES: dict[str, tuple[loadmod.Profile, float]] = {
    "step": (loadmod.STEP, 180.0),
    "spike": (loadmod.SPIKE, 240.0),
    "ramp": (loadmod.RAMP, 280.0),
    "diurnal": (loadmod.Profile("diurnal-240s", sine=(40.0, 260.0), period_s=240.0), 240.0),
    "bursty": (loadmod.BURSTY, 240.0),
}
# Asked for by name only (not in the default set): steady is 260 GPU-% for 17 min, past
# the 10 min a queue's measured capacity holds a count and a 300 s window after it.
EXTRA_TRACES: dict[str, tuple[loadmod.Profile, float]] = {
    "steady": (loadmod.Profile("steady", ((0.0, 40.0), (15.0, 260.0))), 1020.0),
}
METRICS = {"queue": ("requests_waiting", WAITING_TARGET), "util": ("gpu_util", UTIL_TARGET)}
FIELDS = (
    "time_to_adequate_s",
    "underprovisioned_gpu_s",
    "overprovisioned_gpu_s",
    "scale_events",
    "max_overshoot_replicas",
    "oscillations",
)
PAID_FIELDS = ("gpu_hours", "waiting_request_s", "wait_p90_s")


def deployment(name: str) -> dict[str, Any]:
    deploy = sim_scenarios.vllm_deployment(name, NAMESPACE)
    deploy["metadata"]["labels"] = {"app": name}
    return deploy


def gpuscaler(
    name: str, metric: str, target: float, window: str = "30s", scale_down_window_s: int | None = None
) -> dict[str, Any]:
    """HPA's default behaviour (no ``behavior``) unless a scale-down stabilization
    window is given: what both sides run."""
    scaler: dict[str, Any] = {
        "apiVersion": "gpuscale.io/v1alpha1",
        "kind": "GPUScaler",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [{"name": metric, "target": target}],
            "window": window,
        },
    }
    if scale_down_window_s is not None:
        scaler["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": scale_down_window_s}}
    return scaler


def measure(points: list[tuple[float, float, int]], measure_from: float = 0.0) -> Provisioning:
    """The provisioning figures over the points from ``measure_from`` on (after a lead-in)."""
    kept = [(t - measure_from, load, n) for t, load, n in points if t >= measure_from]
    return provisioning(kept, NEEDED_PER_POD, min_replicas=1, max_replicas=MAX_REPLICAS)


def gpu_hours(points: list[tuple[float, float, int]], measure_from: float = 0.0) -> float:
    """Requested replicas (one GPU each) integrated over time from ``measure_from``, in hours."""
    kept = [(t, n) for t, _, n in points if t >= measure_from]
    return sum(n * (later - t) for (t, n), (later, _) in itertools.pairwise(kept)) / 3600.0


def paid(
    points: list[tuple[float, float, int]], account: WaitAccount, measure_from: float = 0.0
) -> dict[str, Any]:
    """What users paid over the measured stretch: GPU-hours requested and their requests' waits."""
    return {
        "gpu_hours": round(gpu_hours(points, measure_from), 4),
        "waiting_request_s": round(account.waiting_request_s, 1),
        "wait_p90_s": round(account.wait_quantile_s(0.9), 2),
        "wait_p99_s": round(account.wait_quantile_s(0.99), 2),
        "requests_arrived": round(account.arrived, 1),
        "requests_abandoned": round(account.abandoned, 1),
        "requests_dropped": round(account.dropped, 1),
        "requests_unserved": round(account.unserved, 1),
    }


def floor_account(
    profile: loadmod.Profile, floor: list[tuple[float, float, int]], measure_from: float = 0.0
) -> WaitAccount:
    """The floor's requests run through kube-sim's engine model: its replicas, one GPU
    each, serve the instant it asks for them (and leave with their queue when it
    lets them go)."""
    engines = InferenceWorkloads()
    workload = (NAMESPACE, "floor")
    endpoint = Endpoint("vllm", 8000, "/metrics", "floor")
    before: WaitAccount | None = None
    serving = floor[0][2] if floor else 1
    for t, _, replicas in floor:
        # the replicas asked for at the previous point served until this one
        engines.advance(
            t, {workload: {f"floor-{i}": (1, endpoint) for i in range(serving)}}, lambda _w, s: profile.at(s)
        )
        serving = replicas
        if before is None and t >= measure_from:
            before = engines.accounts[workload].copy()
    account = engines.accounts.get(workload, WaitAccount())
    return account.since(before) if before is not None else WaitAccount()


def oracle(
    profile: loadmod.Profile, duration_s: float, scale_down_window_s: float
) -> list[tuple[float, float, int]]:
    """The floor: a scaler that knows the load the instant it changes and asks for
    exactly what it needs, under the same scale-down stabilization (HPA keeps the
    highest recommendation of the last window). It is never short, so its surplus is
    the least any scaler that is never short can have: the price of the
    stabilization, not of the signal."""
    out: list[tuple[float, float, int]] = []
    needs: list[tuple[float, int]] = []
    for second in range(int(duration_s) + 1):
        t = float(second)
        load = profile.at(t)
        needs.append((t, needed_replicas(load, NEEDED_PER_POD, 1, MAX_REPLICAS)))
        out.append((t, load, max(n for at, n in needs if at >= t - scale_down_window_s)))
    return out


# --- the usual chain, in virtual time -----------------------------------------------------


class VirtualClock:
    def __init__(self, start: float) -> None:
        self.t = start

    def __call__(self) -> float:
        return self.t


@dataclass(frozen=True)
class ChainPhases:
    """Where each period of the chain falls relative to the trace's start (s)."""

    exporter: float
    prometheus: float
    adapter: float
    hpa: float

    @classmethod
    def draw(cls, rng: random.Random) -> ChainPhases:
        return cls(rng.uniform(0, 30), rng.uniform(0, 30), rng.uniform(0, 30), rng.uniform(0, 15))


def _due(t: float, phase: float, period: float, dt: float) -> bool:
    """Whether a tick of ``period`` (offset ``phase``) falls in ``(t - dt, t]``."""
    k = (t - phase) // period
    return t - dt < phase + k * period <= t


def emulate_chain(
    profile: loadmod.Profile,
    duration_s: float,
    phases: ChainPhases,
    seed: int,
    scale_down_window_s: int | None = None,
    measure_from: float = 0.0,
) -> tuple[list[tuple[float, float, int]], WaitAccount]:
    """dcgm-exporter → Prometheus → adapter/KEDA → HPA on a virtual cluster; (t, load,
    requested) per second, and what its requests paid in the engines' queues from
    ``measure_from`` on."""
    start = 10_000.0
    clock = VirtualClock(start)
    store = Store(clock=lambda: 1_800_000_000.0 + clock.t, rng=random.Random(seed))
    for obj in sim_scenarios.base_objects(nodes=1, gpus_per_node=MAX_REPLICAS + 2):
        rd = store.registry.by_kind(obj["apiVersion"], obj["kind"])
        assert rd is not None
        store.create(rd, (obj.get("metadata") or {}).get("namespace"), obj)
    player = ClusterPlayer(
        store,
        startup_delay_s=STARTUP_DELAY_S,
        termination_delay_s=2.0,
        rng=random.Random(seed),
        monotonic=clock,
        wall=lambda: 1_800_000_000.0 + clock.t,
    )
    name = "chain"
    rd_deploy = store.registry.get("apps", "v1", "deployments")
    rd_pod = store.registry.get("", "v1", "pods")
    assert rd_deploy is not None
    assert rd_pod is not None
    store.create(rd_deploy, NAMESPACE, deployment(name))
    player.settle(player.now())
    player.set_load(NAMESPACE, name, profile)
    # The 1-minute query window is the freshness bound on this side.
    scaler = parse_gpuscaler(
        gpuscaler(name, "gpu_util", UTIL_TARGET, window="60s", scale_down_window_s=scale_down_window_s)
    )
    memory = Memory()
    config = Config()
    exporter: dict[str, float] = {}  # the exporter's last collection, per pod
    tsdb: list[tuple[float, dict[str, float]]] = []  # Prometheus' scrapes
    adapter: dict[str, float] = {}
    adapter_at: float | None = None
    out: list[tuple[float, float, int]] = []
    accounts = player.load_model.inference.accounts
    before: WaitAccount | None = None
    dt = 0.5
    steps = int(duration_s / dt)
    for i in range(steps + 1):
        t = i * dt
        clock.t = start + t
        now = player.now()
        player.reconcile(now)
        if before is None and t >= measure_from:
            before = accounts.get((NAMESPACE, name), WaitAccount()).copy()
        pods = [p for p in store.raw_items(rd_pod) if p["metadata"]["name"].startswith(f"{name}-")]
        if _due(t, phases.exporter, 30.0, dt):
            uids = {p["metadata"]["uid"]: p["metadata"]["name"] for p in pods}
            exporter = {}
            for node in player.scheduler.node_capacity():
                for g in player.node_gpus(node).gpus:
                    for o in g.owners:
                        if o.pod_uid in uids:
                            exporter[o.pod] = g.util  # dcgm-exporter labels every pod's GPU, Ready or not
        if _due(t, phases.prometheus, 30.0, dt) and exporter:
            tsdb.append((t, dict(exporter)))
        if _due(t, phases.adapter, 30.0, dt):
            window = [values for ts, values in tsdb if t - 60.0 < ts <= t]
            names = {pod for values in window for pod in values}
            adapter = {
                pod: statistics.fmean(values[pod] for values in window if pod in values)
                for pod in sorted(names)
            }
            adapter_at = start + t
        if _due(t, phases.hpa, 15.0, dt) and adapter_at is not None:
            views = tuple(_pod_view(p) for p in pods)
            deploy = store.get(rd_deploy, NAMESPACE, name)
            current = int(deploy["spec"]["replicas"])
            observation = Observation(
                received_at=adapter_at,
                sent_at=adapter_at,
                window_s=60.0,
                values={"gpu_util": adapter},
                averages={"gpu_util": statistics.fmean(adapter.values())} if adapter else {},
                pods_fresh=len(adapter),
                pods_stale=0,
            )
            step = reconcile(
                memory, scaler, Target(current, f"app={name}"), views, observation, start + t, config
            )
            memory = step.memory
            if step.decision is not None:
                deploy["spec"]["replicas"] = step.decision.to_replicas
                store.put(rd_deploy, deploy)
                player.reconcile(player.now())
        if i % int(1 / dt) == 0:
            replicas = int(store.get(rd_deploy, NAMESPACE, name)["spec"]["replicas"])
            out.append((t, profile.at(t), replicas))
    account = accounts.get((NAMESPACE, name), WaitAccount())
    return out, account.since(before) if before is not None else WaitAccount()


def _pod_view(pod: dict[str, Any]) -> PodView:
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    # HPA counts a not-Ready pod's value for Pods metrics: its phase decides (Pending is unready).
    return PodView(
        pod["metadata"]["name"],
        str(status.get("phase", "Pending")),
        ready,
        bool(pod["metadata"].get("deletionTimestamp")),
    )


# --- gpuscale, the real pipeline --------------------------------------------------------------


async def run_pipeline(
    traces: dict[str, tuple[loadmod.Profile, float]],
    work: Path,
    log_level: str,
    scale_down_window_s: int | None = None,
    measure_from: dict[str, float] | None = None,
) -> tuple[dict[str, dict[str, list[tuple[float, float, int]]]], dict[str, dict[str, WaitAccount]]]:
    """Every trace's two workloads at once on one pipeline; (t, load, requested) every
    POLL_S each (read in-process, so a step and a PATCH are placed within POLL_S), and
    what each workload's requests paid from the trace's ``measure_from`` on (kube-sim's
    ``requests_paid``, as ``/sim/v1/workloads`` serves it)."""
    measure_from = measure_from or {}
    run_s = max(duration for _, duration in traces.values())
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
            names = {(trace, kind): f"{trace}-{kind}" for trace in traces for kind in METRICS}
            for (trace, kind), name in names.items():
                profile, _ = traces[trace]
                await sim.create(deployment(name))
                metric, target = METRICS[kind]
                await sim.create(gpuscaler(name, metric, target, scale_down_window_s=scale_down_window_s))
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
                series: dict[str, dict[str, list[tuple[float, float, int]]]] = {
                    t: {k: [] for k in METRICS} for t in traces
                }
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
    """Until every GPUScaler's status shows a current metric (the pipeline is up),
    so every trace starts on a running pipeline with a full window of its base load."""
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


# --- report ------------------------------------------------------------------------------------


def _row(label: str, p: dict[str, Any]) -> str:
    cells = []
    for f in FIELDS + PAID_FIELDS:
        v = p.get(f)
        cells.append("—" if v is None else f"{v:g}" if isinstance(v, int | float) else str(v))
    return f"| {label} | " + " | ".join(cells) + " |"


def _chain_summary(runs: list[Provisioning], paid_runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in FIELDS:
        values = [getattr(r, f) for r in runs]
        known = [v for v in values if v is not None]
        out[f] = round(statistics.fmean(known), 1) if known else None
        out[f"{f}_range"] = [min(known), max(known)] if known else None
    for f in paid_runs[0] if paid_runs else ():
        values = [float(r[f]) for r in paid_runs]
        out[f] = round(statistics.fmean(values), 4 if f == "gpu_hours" else 2)
        out[f"{f}_range"] = [min(values), max(values)]
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--traces",
        default=",".join(TRACES),
        help=f"comma-separated: {', '.join(TRACES)} (the default set), or {', '.join(EXTRA_TRACES)}",
    )
    parser.add_argument(
        "--duration", type=float, default=None, help="seconds per trace (default: each trace's own)"
    )
    parser.add_argument("--chain-runs", type=int, default=20, help="random phase draws of the emulated chain")
    parser.add_argument(
        "--chain-only", action="store_true", help="skip the real pipeline (seconds, not minutes)"
    )
    parser.add_argument(
        "--scale-down-window",
        type=int,
        default=None,
        help="behavior.scaleDown.stabilizationWindowSeconds on both sides (default: HPA's 300)",
    )
    trace = parser.add_argument_group("real traffic (instead of the synthetic traces)")
    trace.add_argument(
        "--trace-file",
        type=Path,
        default=None,
        help="a request trace CSV (TIMESTAMP, ContextTokens, GeneratedTokens), replayed at real speed",
    )
    trace.add_argument(
        "--trace-whole",
        action="store_true",
        help="replay and measure all of it (default: its most variable 15 min after a 10 min lead-in)",
    )
    trace.add_argument(
        "--prefill-tokens-per-gpu-s",
        type=float,
        default=TokenCost().prefill_tokens_per_gpu_s,
        help="input tokens one GPU prefills a second",
    )
    trace.add_argument(
        "--decode-tokens-per-gpu-s",
        type=float,
        default=TokenCost().decode_tokens_per_gpu_s,
        help="output tokens one GPU decodes a second, over its batch",
    )
    trace.add_argument(
        "--trace-peak-replicas",
        type=float,
        default=8.0,
        help=f"scale the traffic so that the replayed span's busiest minute needs this many replicas at {NEEDED_PER_POD:g} GPU-%%",
    )
    trace.add_argument(
        "--trace-scale",
        type=float,
        default=None,
        help="scale the traffic by this instead (copies of the service)",
    )
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--json", type=Path, default=None, help="write every figure and series here")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    measure_from: dict[str, float] = {}
    source: dict[str, Any] | None = None
    traces: dict[str, tuple[loadmod.Profile, float]]
    if args.trace_file is not None:
        try:
            replay = trace_profile(
                args.trace_file,
                TokenCost(args.prefill_tokens_per_gpu_s, args.decode_tokens_per_gpu_s),
                whole=args.trace_whole,
                peak_replicas=args.trace_peak_replicas,
                scale=args.trace_scale,
                per_pod=NEEDED_PER_POD,
            )
        except (OSError, ValueError) as e:
            parser.error(str(e))
        traces = {replay.name: (replay, replay.duration_s - replay.bin_s)}
        measure_from[replay.name] = replay.lead_in_s
        source = dict(replay.source)
        print(f"replaying {replay.name}: {json.dumps(source)}", file=sys.stderr, flush=True)
    else:
        chosen = [t.strip() for t in args.traces.split(",") if t.strip()]
        known = {**TRACES, **EXTRA_TRACES}
        unknown = [t for t in chosen if t not in known]
        if unknown:
            parser.error(f"unknown traces {unknown}; choose from {', '.join(known)}")
        traces = {t: (known[t][0], args.duration or known[t][1]) for t in chosen}

    rng = random.Random(args.seed)
    chain: dict[str, list[Provisioning]] = {}
    chain_paid: dict[str, list[dict[str, Any]]] = {}
    for trace_name, (profile, duration) in traces.items():
        start = measure_from.get(trace_name, 0.0)
        chain[trace_name], chain_paid[trace_name] = [], []
        for i in range(args.chain_runs):
            series, account = emulate_chain(
                profile, duration, ChainPhases.draw(rng), args.seed + i, args.scale_down_window, start
            )
            chain[trace_name].append(measure(series, start))
            chain_paid[trace_name].append(paid(series, account, start))
    pipeline: dict[str, dict[str, list[tuple[float, float, int]]]] = {}
    pipeline_paid: dict[str, dict[str, WaitAccount]] = {}
    configure("bench", args.log_level)  # kube-sim runs in this process
    if not args.chain_only:
        work = Path(tempfile.mkdtemp(prefix="gpuscale-scenarios-"))
        print(f"gpuscale pipeline: logs in {work}", file=sys.stderr, flush=True)
        pipeline, pipeline_paid = asyncio.run(
            run_pipeline(traces, work, args.log_level, args.scale_down_window, measure_from)
        )

    stabilization_s = (
        DEFAULT_SCALE_DOWN_WINDOW_S if args.scale_down_window is None else args.scale_down_window
    )
    doc: dict[str, Any] = {
        "traces": {},
        "needed_per_pod": NEEDED_PER_POD,
        "chain_runs": args.chain_runs,
        "scale_down_window_s": stabilization_s,
    }
    if source is not None:
        doc["trace_file"] = source
    print()
    print("| trace · scaler | " + " | ".join(FIELDS + PAID_FIELDS) + " |")
    print("|---|" + "---:|" * len(FIELDS + PAID_FIELDS))
    totals: dict[str, dict[str, float]] = {}
    for trace_name in traces:
        start = measure_from.get(trace_name, 0.0)
        entry: dict[str, Any] = {"chain": _chain_summary(chain[trace_name], chain_paid[trace_name])}
        if trace_name in pipeline:
            for kind, (metric, _) in METRICS.items():
                points = pipeline[trace_name][kind]
                p = measure(points, start)
                entry[f"gpuscale_{metric}"] = {
                    **p.to_json(),
                    **paid(points, pipeline_paid[trace_name][kind], start),
                    "series": points,
                }
                print(_row(f"{trace_name} · gpuscale {metric}", entry[f"gpuscale_{metric}"]))
        print(_row(f"{trace_name} · usual chain (gpu_util, mean of {args.chain_runs})", entry["chain"]))
        profile, duration = traces[trace_name]
        floor = oracle(profile, duration, stabilization_s)
        entry["floor"] = {
            **measure(floor, start).to_json(),
            **paid(floor, floor_account(profile, floor, start), start),
        }
        print(
            _row(
                f"{trace_name} · floor (exact and instant, {stabilization_s} s scale-down window)",
                entry["floor"],
            )
        )
        doc["traces"][trace_name] = entry
        for label, figures in entry.items():
            bucket = totals.setdefault(
                label,
                {
                    "underprovisioned_gpu_s": 0.0,
                    "overprovisioned_gpu_s": 0.0,
                    "gpu_hours": 0.0,
                    "waiting_request_s": 0.0,
                },
            )
            for f in bucket:
                bucket[f] += float(figures.get(f) or 0.0)
    print()
    print(
        "| over the traces | underprovisioned_gpu_s | overprovisioned_gpu_s | gpu_hours | waiting_request_s |"
    )
    print("|---|---:|---:|---:|---:|")
    for label, figures in totals.items():
        print(
            f"| {label} | {figures['underprovisioned_gpu_s']:.1f} | {figures['overprovisioned_gpu_s']:.1f} "
            f"| {figures['gpu_hours']:.3f} | {figures['waiting_request_s']:.1f} |"
        )
    doc["totals"] = totals
    if "chain" in totals and pipeline:
        chain_total = totals["chain"]
        verdicts = {}
        for label in (f"gpuscale_{m}" for m, _ in METRICS.values()):
            if label in totals:
                mine = totals[label]
                verdicts[label] = {
                    "under_at_most_a_fifth_of_chain": mine["underprovisioned_gpu_s"]
                    <= chain_total["underprovisioned_gpu_s"] / 5,
                    "over_no_more_than_chain": mine["overprovisioned_gpu_s"]
                    <= chain_total["overprovisioned_gpu_s"],
                    # the yardstick: what users pay
                    "waiting_at_most_a_fifth_of_chain": mine["waiting_request_s"]
                    <= chain_total["waiting_request_s"] / 5,
                    "gpu_hours_at_most_1_15_chain": mine["gpu_hours"] <= 1.15 * chain_total["gpu_hours"],
                }
        doc["verdicts"] = verdicts
        print()
        for label, v in verdicts.items():
            print(f"{label}: " + "; ".join(f"{k}: {'met' if ok else 'MISSED'}" for k, ok in v.items()))
        floor_total = totals.get("floor")
        if (
            floor_total is not None
            and floor_total["overprovisioned_gpu_s"] > chain_total["overprovisioned_gpu_s"]
        ):
            # The verdict alone reads as a defect of the scaler; the floor says whether any could meet it.
            print(
                f"the floor's surplus ({floor_total['overprovisioned_gpu_s']:.0f} GPU-s) is above the chain's "
                f"({chain_total['overprovisioned_gpu_s']:.0f}): under this scale-down window no scaler "
                "that is never short can meet 'over ≤ chain'; the chain has less by being short"
            )
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"\nwritten to {args.json}")
    return 0


if __name__ == "__main__":
    _ = Now  # the cluster player's clock type, for readers of emulate_chain
    sys.exit(main())
