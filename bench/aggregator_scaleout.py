"""Aggregator scale-out benchmark (not a test): N partitioned aggregators on one nats-server.

    .venv/bin/python bench/aggregator_scaleout.py --partitions 1,2 --nodes 500,1000,2000 --out /tmp/so
    OUT=/tmp/x bash bench/device_scaleout.sh     # the lent 16-core machine, under 7 minutes

What it measures, for each N in --partitions and each node count in --nodes
(rising; for N > 1 from the step after the previous N's largest kept up, down
again if that one fails; stop at the first that does not keep up):

- a fresh nats-server with the partition mapping (gpuscale.subjects), N real
  ``gpuscale aggregator --partition i/N`` processes, each pinned to its own
  core (--first-core, --first-core + 1, ...), and generator processes (one per
  --nodes-per-generator nodes) pinned with nats-server to the other cores,
  publishing one 8-GPU batch per node per second with a random phase per node
  (aggbench_roles.role_generator; 2 workloads per node, 4 pods each, hashed
  over the partitions by the mapping);
- after --warmup seconds, over --seconds: each instance's CPU (its split
  stage and its windows together: one process), RSS, what nats-server
  delivered to its partition subscription and its split stage (connz), what
  it processed (its own /metrics), batch age, publish cycle, backlog; the CPU
  of nats-server and of the generators;
- keep-up (aggbench_steps' criteria, per instance): processed >= 99 % of what
  its partition was sent, <= 1 % never processed, live backlog under one
  second of its batches, batch age p99 < 1 s (generator to window: both
  stages and NATS), publish cycle under the interval; and the split stages
  got >= 99 % of the node batches. A generator more than 0.5 s behind its
  schedule, or short of 1 Hz, is reported: that step measured the generator.

Output: a table per N (largest node count kept up, CPU per instance,
nats-server CPU), every step, and where the next limit is; summary.md,
results.json and logs.tar.gz (every process's log) in --out.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tarfile
import time
from pathlib import Path
from typing import Any

from aggbench_batches import GPUS_PER_NODE
from aggbench_env import Env, pin
from aggscale_step import scaleout_step


def step_order(steps: list[int], start: int, kept: dict[int, bool]) -> int | None:
    """The index of the next node count to run: up from ``start`` until one fails; when
    ``start``'s own fails, down until one keeps up. None when done."""
    if start not in kept:
        return start
    if kept[start]:
        i = start + 1
        while i < len(steps) and kept.get(i):
            i += 1
        return i if i < len(steps) and i not in kept else None
    below = [i for i in range(start - 1, -1, -1) if i not in kept]
    if any(kept.get(i) for i in range(start)) or not below:
        return None
    return below[0]


def fmt_cpu(values: list[float], digits: int = 2) -> str:
    if not values:
        return "-"
    return f"{sum(values) / len(values):,.{digits}f} (max {max(values):,.{digits}f})"


def next_limit(step: dict[str, Any], other_cores: int) -> str:
    """Which stage the first failing step ran out of: an aggregator's core, nats-server, the generator."""
    if step["generator_behind"]:
        return "the generator (rerun with a smaller --nodes-per-generator): inconclusive"
    if step["nats_cpu"] >= 0.8 * other_cores:
        return f"nats-server ({step['nats_cpu']:.1f} of {other_cores} cores)"
    if max(step["agg_cpu"], default=0.0) >= 0.9:
        return "the aggregator instances' cores (split stage + windows in one process, one core each)"
    return "no CPU saturated: see the failures (a latency criterion)"


def summary(
    results: list[dict[str, Any]], partitions: list[int], other_cores: int, meta: dict[str, Any]
) -> str:
    out = [
        "## aggregator scale-out: N partitioned aggregators on one nats-server",
        "",
        f"{meta['cores']} cores; aggregators on cores {meta['agg_cores']}, nats-server and generators on "
        f"{meta['other_cores']}; window {meta['window']:.0f} s, {meta['seconds']:.0f} s measured after "
        f"{meta['warmup']:.0f} s per step; load average before {meta['loadavg']}",
        "",
        "| N | largest nodes kept up | GPU samples/s | CPU per instance (cores) | nats-server CPU "
        "| generator CPU | nodes per aggregator core | metrics msgs/s to deciders | first failure |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    for n in partitions:
        steps = [r for r in results if r["partitions"] == n]
        kept = [r for r in steps if r["kept_up"]]
        best = max(kept, key=lambda r: r["nodes"]) if kept else None
        fail = min((r for r in steps if not r["kept_up"]), key=lambda r: r["nodes"], default=None)
        why = f"{fail['nodes']}: {next_limit(fail, other_cores)}" if fail else "none (raise --nodes)"
        if best is None:
            out.append(f"| {n} | none of {[r['nodes'] for r in steps]} | - | - | - | - | - | - | {why} |")
            continue
        per_core = best["nodes"] / max(1e-9, sum(best["agg_cpu"]))
        out.append(
            f"| {n} | {best['nodes']:,} | {best['nodes'] * GPUS_PER_NODE:,} | {fmt_cpu(best['agg_cpu'])} "
            f"| {best['nats_cpu']:.2f} | {best['gen_cpu']:.2f} | {per_core:,.0f} "
            f"| {best['metrics_per_s']:,.0f} | {why} |"
        )
    out += [
        "",
        "Every step (CPU in cores over the measured seconds; age p99 and RSS: the worst instance):",
        "",
        "| N | nodes | kept up | CPU per instance | nats-server | generators | age p99 ms | RSS MiB "
        "| sent per instance /s | why not |",
        "|---:|---:|---|---|---:|---|---:|---:|---|---|",
    ]
    for r in results:
        ins = r["instances"]
        gen = f"{r['gen_cpu']:.2f} ({r['generators']}{', BEHIND' if r['generator_behind'] else ''})"
        out.append(
            f"| {r['partitions']} | {r['nodes']:,} | {'yes' if r['kept_up'] else 'NO'} | {fmt_cpu(r['agg_cpu'])} "
            f"| {r['nats_cpu']:.2f} | {gen} | {max(i['age_p99'] for i in ins) * 1e3:.0f} "
            f"| {max(i['rss_mib'] for i in ins):.0f} | {fmt_cpu([i['sent_per_s'] for i in ins], 0)} "
            f"| {'; '.join(r['failed'][:3]) or '-'} |"
        )
    return "\n".join(out) + "\n"


def write(
    out_dir: Path,
    meta: dict[str, Any],
    results: list[dict[str, Any]],
    errors: list[dict[str, Any]],
    partitions: list[int],
    other_cores: int,
    started: float,
) -> str:
    """results.json and summary.md as they stand; the summary's text."""
    meta["total_s"] = round(time.monotonic() - started, 1)
    (out_dir / "results.json").write_text(
        json.dumps({"meta": meta, "steps": results, "errors": errors}, indent=1)
    )
    text = summary(results, partitions, other_cores, meta)
    text += "".join(
        f"\nstep N={e['partitions']} nodes={e['nodes']} did not run: {e['error']}\n" for e in errors
    )
    (out_dir / "summary.md").write_text(text)
    return text


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--partitions", default="1,2,4,8", help="comma-separated N (aggregator instances)")
    parser.add_argument(
        "--nodes",
        default="2000,4000,8000,12500,20000,30000,40000",
        help="comma-separated node counts, rising",
    )
    parser.add_argument(
        "--first-core", type=int, default=None, help="core of instance 0 (default: cores - max N)"
    )
    parser.add_argument("--nodes-per-generator", type=int, default=4000, help="nodes per generator process")
    parser.add_argument("--window", type=float, default=10.0, help="the aggregators' window, seconds")
    parser.add_argument(
        "--warmup", type=float, default=10.0, help="seconds before measuring (fill the window)"
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="measured seconds per step")
    parser.add_argument(
        "--budget", type=float, default=math.inf, help="start no step after this many seconds"
    )
    parser.add_argument(
        "--out", default="bench/out/scaleout", help="directory for summary.md, results.json, logs"
    )
    args = parser.parse_args()
    partitions = [int(x) for x in args.partitions.split(",") if x]
    steps = [int(x) for x in args.nodes.split(",") if x]
    cores = sorted(os.sched_getaffinity(0))
    first = args.first_core if args.first_core is not None else max(0, len(cores) - max(partitions))
    agg_cores = [cores[(first + i) % len(cores)] for i in range(max(partitions))]
    others = set(cores) - set(agg_cores) or set(cores)
    env = Env(agg_core=set(agg_cores), other_cores=others, window=args.window)
    pin(os.getpid(), others)
    out_dir = Path(args.out)
    log_dir = out_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    meta = {
        "cores": len(cores),
        "agg_cores": agg_cores,
        "other_cores": sorted(others),
        "window": args.window,
        "warmup": args.warmup,
        "seconds": args.seconds,
        "loadavg": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "nodes_per_generator": args.nodes_per_generator,
    }
    print(f"# aggregator scale-out: {json.dumps(meta)}", flush=True)
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []  # steps that did not run to the end (their logs say why)
    started = time.monotonic()
    start = 0
    try:
        for n in partitions:
            kept: dict[int, bool] = {}
            while (i := step_order(steps, start, kept)) is not None:
                if time.monotonic() - started > args.budget:
                    print(f"budget spent: N={n} at {steps[i]} nodes and after not run", flush=True)
                    break
                try:
                    r = scaleout_step(
                        env,
                        n,
                        steps[i],
                        agg_cores,
                        args.warmup,
                        args.seconds,
                        args.nodes_per_generator,
                        log_dir,
                    )
                except Exception as e:  # noqa: BLE001 - a failed step is a result, the run goes on
                    r = {
                        "partitions": n,
                        "nodes": steps[i],
                        "kept_up": False,
                        "error": f"{type(e).__name__}: {e}",
                    }
                    errors.append(r)
                    print(f"N={n} nodes={steps[i]}: {r['error']}", flush=True)
                kept[i] = r["kept_up"]
                write(
                    out_dir, meta, results, errors, partitions, len(others), started
                )  # a killed run keeps these
                if "instances" in r:
                    results.append(r)
                    print(
                        f"N={n} nodes={steps[i]} kept_up={r['kept_up']} agg_cpu={fmt_cpu(r['agg_cpu'])} "
                        f"nats={r['nats_cpu']:.2f} gen={r['gen_cpu']:.2f} {'; '.join(r['failed'][:3])}",
                        flush=True,
                    )
            good = [i for i, ok in kept.items() if ok]
            start = min(max(good) + 1, len(steps) - 1) if good else 0
    finally:
        for proc in env.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    text = write(out_dir, meta, results, errors, partitions, len(others), started)
    with tarfile.open(out_dir / "logs.tar.gz", "w:gz") as tar:
        tar.add(log_dir, arcname="logs")
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
