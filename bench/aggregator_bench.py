"""Aggregator throughput and latency benchmark (not a test).

    .venv/bin/python bench/aggregator_bench.py            # a few minutes
    .venv/bin/python bench/aggregator_bench.py --quick    # ~30-60 s
    .venv/bin/python bench/aggregator_bench.py --quick --nodes 12500 --step-seconds 60
    .venv/bin/python bench/aggregator_bench.py --quick --saturation-only   # the burst alone (profiling)

What it runs (all on this machine, a private nats-server):

1. Saturation, aggregator vs a bare subscriber, same run, same core: a burst
   of pre-encoded node batches (8 GPUs each, distinct nodes and seqs, fresh
   ts) is published as fast as possible, first to a bare nats-py callback
   subscriber that only msgpack-decodes each batch, then to the aggregator
   (the real ``gpuscale aggregator`` process). Each consumer is pinned to one
   core (os.sched_setaffinity); the rate is batches processed per second
   while saturated, × 8 for GPU samples/s.
2. Keep-up steps: a generator publishes one batch per node per second with a
   random phase per node (jitter), for N nodes, N rising; each step runs on a
   fresh nats-server + aggregator. The aggregator keeps up when it processed
   >= 99 % of what was published in the measured part, its live backlog is
   under one second of batches, batch age p99 < 1 s and publish cycles fit in
   the publish interval. The largest such N is reported.
3. At 1,000 nodes (the first step), latencies:
   - processing: receive -> window updated for one batch (in the callback),
     from the aggregator's own histogram (1 in 8 batches observed);
   - batch age: sample ts (set at publish) -> window updated: NATS transit +
     queueing + processing;
   - freshness (publish-interval inclusive): for every pod, each time a
     metrics message shows a newer ``last_seen``, the time from that sample's
     publish to the metrics message's arrival at a subscriber. Bounded by the
     publish interval (2 s) plus the publish cycle;
   - one publish cycle (expire + compute + encode + publish all workloads).
   RSS of the aggregator after the window has filled, at 1,000 nodes and at
   the largest N.

Percentiles from histograms are interpolated inside Prometheus buckets.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time

from aggbench_batches import GPUS_PER_NODE
from aggbench_env import Env, pin
from aggbench_roles import role_bare, role_bare_idle, role_burst, role_generator
from aggbench_steps import keep_up_step, saturation


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="a ~30-60 s run")
    parser.add_argument("--nodes", default="", help="comma-separated node counts for the keep-up steps")
    parser.add_argument("--agg-core", type=int, default=None, help="core to pin the aggregator to")
    parser.add_argument(
        "--step-seconds", type=float, default=0.0, help="measured seconds per keep-up step (default: by mode)"
    )
    parser.add_argument("--saturation-only", action="store_true", help="skip the keep-up steps (profiling)")
    parser.add_argument("--role", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role:
        role, *rest = args.role
        if role == "generator":
            end = int(rest[4]) if len(rest) > 4 else None
            asyncio.run(role_generator(rest[0], int(rest[1]), float(rest[2]), int(rest[3]), end))
        elif role == "burst":
            asyncio.run(role_burst(rest[0], int(rest[1]), int(rest[2]), rest[3]))
        elif role == "bare-idle":
            asyncio.run(role_bare_idle(rest[0], float(rest[1])))
        elif role == "bare":
            asyncio.run(role_bare(rest[0], int(rest[1]), rest[2]))
        return 0

    cores = sorted(os.sched_getaffinity(0))
    agg_core = {args.agg_core if args.agg_core is not None else cores[-1]}
    others = set(cores) - agg_core or agg_core
    window = 10.0 if args.quick else 30.0
    env = Env(agg_core=agg_core, other_cores=others, window=window)
    pin(os.getpid(), others)
    steps = [int(x) for x in args.nodes.split(",") if x] or (
        [1000, 4000, 12500] if args.quick else [1000, 2000, 3000, 4000, 6000, 8000, 12500]
    )
    warmup = window if args.quick else window + 2.0
    duration = (
        warmup + args.step_seconds if args.step_seconds else window + 6.0 if args.quick else window + 10.0
    )
    count = 20_000 if args.quick else 60_000
    print(
        f"# aggregator bench: {len(cores)} cores, aggregator on core {sorted(agg_core)}, others on "
        f"{sorted(others)}; window {window:.0f} s, publish interval {env.publish_interval:.0f} s",
        flush=True,
    )
    started = time.monotonic()
    try:
        sat = saturation(env, count)
        g = GPUS_PER_NODE
        bare_w, agg_w = sat["bare_batches_per_s"] * g, sat["agg_batches_per_s"] * g
        bare_c, agg_c = sat["bare_batches_per_cpu_s"] * g, sat["agg_batches_per_cpu_s"] * g
        print(f"\n## saturation (burst of {count} batches x 8 GPUs, each consumer pinned to one core)")
        print("| consumer | GPU samples/s (wall) | ratio | GPU samples per CPU-second | ratio |")
        print("|---|---:|---:|---:|---:|")
        print(f"| bare nats-py subscriber (decode only) | {bare_w:,.0f} | 1.00 | {bare_c:,.0f} | 1.00 |")
        print(
            f"| gpuscale aggregator | {agg_w:,.0f} | {agg_w / bare_w:.2f} | {agg_c:,.0f} | {agg_c / bare_c:.2f} |"
        )
        print(
            f"(aggregator processed {sat['agg_processed']:.0f} of {count}, ignored {sat['agg_ignored']:.0f})"
        )
        if args.saturation_only:
            return 0
        rows = []
        print(
            f"\n## keep-up at 1 Hz per node with jitter ({duration:.0f} s per step, measured after {warmup:.0f} s)"
        )
        print(
            "| nodes | kept up | processed | lost | backlog | age p50/p99 ms | processing p50/p99 ms "
            "| cycle p50/max ms | freshness p50/p99 ms | workloads | pods | RSS MiB | CPU (cores) "
            "| bare subscriber CPU | ratio | nodes per full core |"
        )
        print("|" + "---|" * 17)
        for nodes in steps:
            r = keep_up_step(env, nodes, duration, warmup)
            rows.append(r)
            print(
                f"| {nodes} | {'yes' if r['kept_up'] else 'NO'} | {r['processed_ratio']:.3f} | {r['lost']:.0f} "
                f"| {r['backlog']:.0f} | {r['age_p50'] * 1e3:.1f} / {r['age_p99'] * 1e3:.1f} "
                f"| {r['proc_p50'] * 1e3:.3f} / {r['proc_p99'] * 1e3:.3f} "
                f"| {r['cycle_p50'] * 1e3:.0f} / {r['cycle_max'] * 1e3:.0f} "
                f"| {r['fresh_p50'] * 1e3:.0f} / {r['fresh_p99'] * 1e3:.0f} "
                f"| {r['workloads']:.0f} | {r['pods']:.0f} | {r['rss_mib']:.1f} | {r['cpu']:.2f} "
                f"| {r['bare_cpu']:.2f} | {r['bare_cpu'] / max(r['cpu'], 1e-9):.2f} "
                f"| {nodes / max(r['cpu'], 1e-9):,.0f} |",
                flush=True,
            )
            if not r["kept_up"]:
                break
        kept = [r["nodes"] for r in rows if r["kept_up"]]
        print(
            f"\nlargest N kept up: {max(kept) if kept else 0} nodes "
            f"({(max(kept) if kept else 0) * GPUS_PER_NODE:,} GPU samples/s); total {time.monotonic() - started:.0f} s"
        )
    finally:
        for proc in env.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
