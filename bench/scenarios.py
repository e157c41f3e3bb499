"""Scenario benchmark: what users pay for, gpuscale beside the usual chain.

One command runs both, in the same run and on the same traces:

    .venv/bin/python bench/scenarios.py            # all five traces, ~6 min
    .venv/bin/python bench/scenarios.py --traces step --duration 150

**gpuscale**: the real pipeline (nats-server; kube-sim with vLLM-like pods that
queue requests and serve /metrics; one sim collector per node scraping them at
1 Hz; aggregator, 30 s window; decider; actuator; every service its own
process). Per trace two Deployments get the trace's load at the same instant:
one GPUScaler on ``requests_waiting`` (target 4 queued requests per pod), one
on ``gpu_util`` (target 70). ``--scalers queue,util,gpu-only`` adds a third:
``gpu_util`` on pods that name no metrics endpoint, so gpuscale sees only their
GPUs, as a user of dcgm-exporter alone would. All traces run at once, each its
own workloads, on 4 nodes × 32 GPUs.

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
with ``behavior.scaleDown.stabilizationWindowSeconds: S`` instead. **The reacting
floor** asks for the same, but its pods load their model for the same 20 s as
everyone's before they serve: its waits are what asking for exactly the need, the
instant it arises, still pays; only pods held ahead of the need wait less.

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
al., "Splitwise", ISCA 2024; the week-long 2024 traces read the same) at real
speed instead of the synthetic traces,
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
import json
import random
import sys
import tempfile
from pathlib import Path
from typing import Any

from request_trace import TokenCost, trace_profile
from scenario_chain import ChainPhases, emulate_chain
from scenario_pipeline import run_pipeline
from scenario_report import totals_and_verdicts, trace_table
from scenario_setup import (
    DEFAULT_SCALE_DOWN_WINDOW_S,
    DEFAULT_SCALERS,
    EXTRA_TRACES,
    SCALERS,
    TRACES,
    Series,
    measure,
    paid,
)

from gpuscale.logging import configure
from gpuscale_cli.demo.report import NEEDED_PER_POD, Provisioning
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster.inference import WaitAccount


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
    parser.add_argument(
        "--scalers",
        default=",".join(DEFAULT_SCALERS),
        help=f"comma-separated: {', '.join(SCALERS)} (gpu-only: gpu_util with no engine signals, "
        "what dcgm-exporter alone shows)",
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

    kinds = [k.strip() for k in args.scalers.split(",") if k.strip()]
    if not kinds or any(k not in SCALERS for k in kinds):
        parser.error(f"--scalers: choose from {', '.join(SCALERS)}")
    scalers = {k: SCALERS[k] for k in kinds}

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
    pipeline: dict[str, dict[str, Series]] = {}
    pipeline_paid: dict[str, dict[str, WaitAccount]] = {}
    configure("bench", args.log_level)  # kube-sim runs in this process
    if not args.chain_only:
        work = Path(tempfile.mkdtemp(prefix="gpuscale-scenarios-"))
        print(f"gpuscale pipeline: logs in {work}", file=sys.stderr, flush=True)
        try:
            pipeline, pipeline_paid = asyncio.run(
                run_pipeline(traces, scalers, work, args.log_level, args.scale_down_window, measure_from)
            )
        except asyncio.CancelledError:  # SIGTERM: the pipeline's processes are stopped
            print("stopped (SIGTERM) before the end: nothing measured", file=sys.stderr)
            return 143

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
    totals = trace_table(
        doc, traces, scalers, measure_from, chain, chain_paid, pipeline, pipeline_paid, stabilization_s
    )
    totals_and_verdicts(doc, totals, bool(pipeline))
    if args.json is not None:
        args.json.write_text(json.dumps(doc, indent=1))
        print(f"\nwritten to {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
