"""Reaction benchmark: a 30 % -> 90 % GPU step against a target of 70 (docs/ARCHITECTURE.md#budgets).

Runs the demo's pipeline (nats-server, kube-sim, sim collectors, aggregator,
decider, actuator; each its own process) N times and reports, per run:

- reaction_s: the load step in kube-sim -> the first scale-up PATCH (the
  actuator's action message), the figure a user sees;
- detection_s: the moment the window average, recomputed here from every
  sample on the wire exactly as the aggregator defines it, first exceeds
  target x (1 + tolerance) -> that PATCH. This is the pipeline's own delay,
  the window's averaging excluded (budget: p99 < 3 s);
- pipeline_s: sample published -> decision published for the sample that
  made the average cross (includes up to one aggregator publish interval);
- metrics_to_decision_s: metrics message published -> decision published.

Usage: .venv/bin/python bench/reaction.py [--runs 5] [--window 30]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
import urllib.request
from collections import defaultdict
from pathlib import Path
from typing import Any

import yaml

from gpuscale import codec
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain
from gpuscale_cli.demo.processes import ProcessGroup
from gpuscale_cli.demo.run import start_pipeline
from gpuscale_cli.demo.settings import DemoSettings

WORKLOAD = "bert-intent-detection"
TARGET, TOLERANCE = 70.0, 0.1


def window_average(samples: list[tuple[float, str, float]], now: float, window_s: float) -> float | None:
    """Mean over pods of each pod's mean over the window (the aggregator's definition)."""
    per_pod: dict[str, list[float]] = defaultdict(list)
    for ts, pod, util in samples:
        if now - window_s < ts <= now:
            per_pod[pod].append(util)
    if not per_pod:
        return None
    return statistics.fmean(statistics.fmean(v) for v in per_pod.values())


def _is_scale_up(action: dict[str, Any]) -> bool:
    applied = action.get("outcome") in ("applied", "conflict_retried")
    return applied and (action.get("replicas_after") or 0) > (action.get("replicas_before") or 0)


def analyse(
    events: list[tuple[float, str, dict[str, Any]]], step_wall: float, window_s: float
) -> dict[str, float | None]:
    samples: list[tuple[float, str, float]] = []  # (ts, pod, util) of the workload
    sample_recv: list[tuple[float, float]] = []  # (ts, received)
    cross_ts = cross_recv = None
    metrics_recv: list[float] = []
    decision = action = None
    for recv, subject, p in events:
        family = subject.split(".")[2]
        if family == "samples":
            for g in p["gpus"]:
                for o in g.get("owners", []):
                    if o["workload"]["name"] == WORKLOAD and g.get("util") is not None:
                        samples.append((p["ts"], o["pod"], g["util"]))
                        sample_recv.append((p["ts"], recv))
                        if cross_ts is None and p["ts"] >= step_wall - 1:
                            avg = window_average(samples, p["ts"], window_s)
                            if avg is not None and avg > TARGET * (1 + TOLERANCE):
                                cross_ts, cross_recv = p["ts"], recv
        elif family == "metrics" and p["name"] == WORKLOAD:
            metrics_recv.append(recv)
        elif family == "decisions" and decision is None and p["to_replicas"] > p["from_replicas"]:
            decision = (recv, p)
        elif family == "actions" and action is None and _is_scale_up(p):
            action = (recv, p)
    out: dict[str, float | None] = {
        "reaction_s": None,
        "detection_s": None,
        "pipeline_s": None,
        "metrics_to_decision_s": None,
    }
    if action is not None:
        out["reaction_s"] = action[1]["ts"] - step_wall
        if cross_ts is not None:
            out["detection_s"] = action[1]["ts"] - cross_ts
    if decision is not None:
        if cross_recv is not None:
            out["pipeline_s"] = decision[1]["ts"] - cross_recv
        before = [m for m in metrics_recv if m <= decision[0]]
        if before:
            out["metrics_to_decision_s"] = decision[1]["ts"] - before[-1]
    return out


def _load(sim_url: str) -> float | None:
    try:
        with urllib.request.urlopen(f"{sim_url}/sim/v1/workloads", timeout=1) as resp:  # noqa: S310 - loopback
            body = json.loads(resp.read())
    except OSError:
        return None
    items = body.get("workloads", []) if isinstance(body, dict) else body
    return next((float(w["load"]) for w in items if w["name"] == WORKLOAD), None)


async def one_run(args: argparse.Namespace, work: Path) -> dict[str, float | None]:
    profile = work / "step.yaml"
    profile.write_text(yaml.safe_dump([{"t": 0, "load": 30}, {"t": args.pre, "load": 90}]))
    settings = DemoSettings(
        profile=str(profile), startup_delay_s=args.startup_delay, window_s=args.window, log_level="warning"
    )
    with EmbeddedNats(log_file=str(work / "nats.log")) as nats:
        group = ProcessGroup(work, env={"GPUSCALE_NATS_URL": nats.url, "GPUSCALE_LOG_LEVEL": "warning"})
        events: list[tuple[float, str, dict[str, Any]]] = []

        async def on_msg(msg: Any) -> None:
            events.append((time.time(), msg.subject, codec.decode_raw(msg.data)))

        nc = await connect([nats.url], ServiceMetrics("bench"), name="bench")
        await nc.subscribe("gpuscale.v1.>", cb=on_msg)
        try:
            sim_url, _ = await asyncio.to_thread(start_pipeline, settings, group)
            step_wall = None
            deadline = time.time() + args.pre + args.window + 60
            while time.time() < deadline:
                load = _load(sim_url)
                if step_wall is None and load is not None and load >= 89:
                    step_wall = time.time()
                if any(
                    s.split(".")[2] == "actions"
                    and p.get("outcome") in ("applied", "conflict_retried")
                    and (p.get("replicas_after") or 0) > (p.get("replicas_before") or 0)
                    for _, s, p in events
                ):
                    break
                await asyncio.sleep(0.1)
        finally:
            await drain(nc)
            await asyncio.to_thread(group.stop_all)
    if step_wall is None:
        raise RuntimeError(f"the load step was never seen; logs in {work}")
    return analyse(events, step_wall, args.window)


def _fmt(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"median {statistics.median(values):.3f} s, max {max(values):.3f} s"


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--window", type=float, default=30.0)
    parser.add_argument(
        "--pre", type=float, default=40.0, help="seconds at 30 %% before the step (fills the window)"
    )
    parser.add_argument("--startup-delay", type=float, default=2.0)
    args = parser.parse_args()
    results = []
    for i in range(args.runs):
        work = Path(tempfile.mkdtemp(prefix=f"gpuscale-reaction-{i}-"))
        r = await one_run(args, work)
        results.append(r)
        print(
            f"run {i + 1}: "
            + ", ".join(f"{k}={v:.2f}" if v is not None else f"{k}=n/a" for k, v in r.items()),
            flush=True,
        )
    print()
    for key in ("reaction_s", "detection_s", "pipeline_s", "metrics_to_decision_s"):
        values = [r[key] for r in results if r[key] is not None]
        print(f"{key:24s} {_fmt(values)}  ({len(values)}/{len(results)} runs)")  # type: ignore[arg-type]
    print(
        "usual chain, defaults: dcgm-exporter 30 s collect + Prometheus 30 s scrape + KEDA 30 s poll + HPA 15 s sync"
    )


if __name__ == "__main__":
    asyncio.run(main())
