"""Scenario benchmark (issue 14): what users pay for, gpuscale beside the usual chain.

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
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.logging import configure
from gpuscale.policy import parse_gpuscaler
from gpuscale_cli.demo.processes import ProcessGroup
from gpuscale_cli.demo.report import NEEDED_PER_POD, Provisioning, needed_replicas, provisioning
from gpuscale_decider.core.reconcile import Config, Memory, Observation, Target, reconcile
from gpuscale_decider.core.replicas import PodView
from gpuscale_kubesim import load as loadmod
from gpuscale_kubesim import scenarios as sim_scenarios
from gpuscale_kubesim.cluster import ClusterPlayer, Now
from gpuscale_kubesim.sim import KubeSim
from gpuscale_kubesim.store import Store

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


def measure(points: list[tuple[float, float, int]]) -> Provisioning:
    return provisioning(points, NEEDED_PER_POD, min_replicas=1, max_replicas=MAX_REPLICAS)


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
) -> list[tuple[float, float, int]]:
    """dcgm-exporter → Prometheus → adapter/KEDA → HPA on a virtual cluster; (t, load, requested) per second."""
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
    dt = 0.5
    steps = int(duration_s / dt)
    for i in range(steps + 1):
        t = i * dt
        clock.t = start + t
        now = player.now()
        player.reconcile(now)
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
    return out


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
) -> dict[str, dict[str, list[tuple[float, float, int]]]]:
    """Every trace's two workloads at once on one pipeline; (t, load, requested) every
    POLL_S each (read in-process, so a step and a PATCH are placed within POLL_S)."""
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
                sim.set_load(NAMESPACE, name, loadmod.constant(profile.at(0.0)))
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
                tick = 0
                while (t := time.monotonic() - begin) <= run_s:
                    if group.exited():
                        raise RuntimeError(
                            f"a part exited: {[c.name for c in group.exited()]}; logs in {work}"
                        )
                    for (trace, kind), name in names.items():
                        if t <= traces[trace][1]:
                            replicas = int(
                                sim.get("apps/v1", "Deployment", name, NAMESPACE)["spec"]["replicas"]
                            )
                            series[trace][kind].append((round(t, 3), sim.load_of(NAMESPACE, name), replicas))
                    if tick % round(30 / POLL_S) == 0:
                        print(f"  gpuscale pipeline: t={t:5.0f}s of {run_s:.0f}", file=sys.stderr, flush=True)
                    tick += 1
                    await asyncio.sleep(max(0.0, begin + tick * POLL_S - time.monotonic()))
                return series
            finally:
                await asyncio.to_thread(group.stop_all)


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
    for f in FIELDS:
        v = p[f]
        cells.append("—" if v is None else f"{v:g}" if isinstance(v, int | float) else str(v))
    return f"| {label} | " + " | ".join(cells) + " |"


def _chain_summary(runs: list[Provisioning]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in FIELDS:
        values = [getattr(r, f) for r in runs]
        known = [v for v in values if v is not None]
        out[f] = round(statistics.fmean(known), 1) if known else None
        out[f"{f}_range"] = [min(known), max(known)] if known else None
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
    parser.add_argument("--seed", type=int, default=14)
    parser.add_argument("--json", type=Path, default=None, help="write every figure and series here")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args()
    chosen = [t.strip() for t in args.traces.split(",") if t.strip()]
    known = {**TRACES, **EXTRA_TRACES}
    unknown = [t for t in chosen if t not in known]
    if unknown:
        parser.error(f"unknown traces {unknown}; choose from {', '.join(known)}")
    traces = {t: (known[t][0], args.duration or known[t][1]) for t in chosen}

    rng = random.Random(args.seed)
    chain: dict[str, list[Provisioning]] = {}
    for trace, (profile, duration) in traces.items():
        chain[trace] = [
            measure(
                emulate_chain(profile, duration, ChainPhases.draw(rng), args.seed + i, args.scale_down_window)
            )
            for i in range(args.chain_runs)
        ]
    pipeline: dict[str, dict[str, list[tuple[float, float, int]]]] = {}
    configure("bench", args.log_level)  # kube-sim runs in this process
    if not args.chain_only:
        work = Path(tempfile.mkdtemp(prefix="gpuscale-scenarios-"))
        print(f"gpuscale pipeline: logs in {work}", file=sys.stderr, flush=True)
        pipeline = asyncio.run(run_pipeline(traces, work, args.log_level, args.scale_down_window))

    stabilization_s = (
        DEFAULT_SCALE_DOWN_WINDOW_S if args.scale_down_window is None else args.scale_down_window
    )
    doc: dict[str, Any] = {
        "traces": {},
        "needed_per_pod": NEEDED_PER_POD,
        "chain_runs": args.chain_runs,
        "scale_down_window_s": stabilization_s,
    }
    print()
    print("| trace · scaler | " + " | ".join(FIELDS) + " |")
    print("|---|" + "---:|" * len(FIELDS))
    totals: dict[str, dict[str, float]] = {}
    for trace in traces:
        entry: dict[str, Any] = {"chain": _chain_summary(chain[trace])}
        if trace in pipeline:
            for kind, (metric, _) in METRICS.items():
                p = measure(pipeline[trace][kind])
                entry[f"gpuscale_{metric}"] = {**p.to_json(), "series": pipeline[trace][kind]}
                print(_row(f"{trace} · gpuscale {metric}", entry[f"gpuscale_{metric}"]))
        print(_row(f"{trace} · usual chain (gpu_util, mean of {args.chain_runs})", entry["chain"]))
        profile, duration = traces[trace]
        entry["floor"] = measure(oracle(profile, duration, stabilization_s)).to_json()
        print(
            _row(
                f"{trace} · floor (exact and instant, {stabilization_s} s scale-down window)", entry["floor"]
            )
        )
        doc["traces"][trace] = entry
        for label, figures in entry.items():
            bucket = totals.setdefault(label, {"underprovisioned_gpu_s": 0.0, "overprovisioned_gpu_s": 0.0})
            for f in bucket:
                bucket[f] += float(figures[f] or 0.0)
    print()
    print("| over the traces | underprovisioned_gpu_s | overprovisioned_gpu_s |")
    print("|---|---:|---:|")
    for label, figures in totals.items():
        print(
            f"| {label} | {figures['underprovisioned_gpu_s']:.1f} | {figures['overprovisioned_gpu_s']:.1f} |"
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
                }
        doc["verdicts"] = verdicts
        print()
        for label, v in verdicts.items():
            print(
                f"{label}: under ≤ chain/5: {'met' if v['under_at_most_a_fifth_of_chain'] else 'MISSED'}; over ≤ chain: {'met' if v['over_no_more_than_chain'] else 'MISSED'}"
            )
        floor = totals.get("floor")
        if floor is not None and floor["overprovisioned_gpu_s"] > chain_total["overprovisioned_gpu_s"]:
            # The verdict alone reads as a defect of the scaler; the floor says whether any could meet it.
            print(
                f"the floor's surplus ({floor['overprovisioned_gpu_s']:.0f} GPU-s) is above the chain's "
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
