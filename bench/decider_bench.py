"""Decider benchmark: 5,000 workloads, one metrics message each per second.

Not a test: a measurement. Runs a private nats-server, a publisher in its own
process, and in this process (pinned to one core) first a bare
receive-and-decode subscriber (the baseline), then the decider's real
evaluation path (``Decider.handle_metrics``: decode, validate, evaluate the
policy with HPA's algorithm, build the status, publish a decision to
JetStream when a change is wanted). Each is measured twice: paced at the
target rate (CPU share of one core, latency, backlog) and saturated (the
most messages per second it can take).

Replicas come from an in-process source that an in-process "actuator"
updates on each decision (see gpuscale_decider.sources: at this rate a GET
of the scale subresource per evaluation would measure the API server, not
the decider; production at thousands of workloads wants a watch-fed cache).
The pods behind each target come from the production pod cache
(``kubeio.PodCache``), fed the watch events of 4 pods per workload, and the
"actuator" adds and deletes pods as it scales: every evaluation selects its
pods by label selector as in production.

    .venv/bin/python bench/decider_bench.py            # 5,000 workloads, 15 s per phase
    .venv/bin/python bench/decider_bench.py --no-warm-up   # each workload's first evaluation counted in
    .venv/bin/python bench/decider_bench.py --workloads 1000 --seconds 5
    .venv/bin/python bench/decider_bench.py --signals engine   # scaled on requests_waiting and gpu_util

``--signals engine`` gives every workload an inference engine's signals: each
pod's queue, running batch, KV cache and request flows beside its GPU load, and a policy on
``requests_waiting`` (4 per pod) and ``gpu_util`` (70), so that the queue's rules run (the
flows' sizing, the capacity a queue measured and the scale-down it keeps) on every message.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import math
import multiprocessing
import os
import random
import statistics
import sys
import time
from array import array
from dataclasses import dataclass
from typing import Any

import psutil

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.logging import configure
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, drain, ensure_stream, flush, headers_msg_id, jetstream
from gpuscale.policy import parse_gpuscaler
from gpuscale.wire import Decision, MetricValues, PodMetrics, WorkloadMetrics
from gpuscale_decider.decider import Decider
from gpuscale_decider.pods import PodCache
from gpuscale_decider.sources import MemoryStateStore, StaticScaleSource

NAMESPACE = "bench"
REPLICAS = 4


def workload_name(i: int) -> str:
    return f"model-{i:05d}"


# --- publisher (own process) ----------------------------------------------------


def _message(i: int, now: float, rng: random.Random, signals: str = "gpu") -> bytes:
    # Most workloads hover around the target (inside the tolerance); one in
    # twenty swings far enough to want a change now and then.
    swing = 0.0 if i % 20 else math.sin(now / 7.0 + i)
    util = min(100.0, max(0.0, 70.0 + 25.0 * swing + rng.uniform(-3.0, 3.0)))
    # As the aggregator sends them to a decider: each pod's recent means too.
    recent = min(100.0, max(0.0, util + rng.uniform(-5.0, 5.0)))
    window, latest = MetricValues(gpu_util=util), MetricValues(gpu_util=recent)
    if signals == "engine":
        window, latest = _engine_values(util, swing, rng), _engine_values(recent, swing, rng)
    pods = tuple(PodMetrics(f"{workload_name(i)}-{p}", window, now, latest) for p in range(REPLICAS))
    m = WorkloadMetrics(
        NAMESPACE, "Deployment", workload_name(i), now, 30.0, pods, window, REPLICAS, 0, recent_s=3.0
    )
    return codec.encode(m)


def _engine_values(util: float, swing: float, rng: random.Random) -> MetricValues:
    """A vLLM-like pod that finishes 8 requests/s at capacity: within its queue target while
    steady; a swinging one builds a queue (more arrives than it finishes), then drains it."""
    finished = 8.0 * min(1.0, util / 90.0)
    return MetricValues(
        gpu_util=util,
        requests_waiting=max(0.0, 4.0 + 8.0 * swing + rng.uniform(-0.3, 0.3)),
        requests_running=16.0 * util / 100.0,
        kv_cache_usage=min(100.0, 40.0 + 30.0 * swing + rng.uniform(-2.0, 2.0)),
        request_arrival_rate=max(0.0, finished * (1.0 + 0.3 * swing)),
        request_completion_rate=finished,
    )


async def _publish(url: str, workloads: int, rate: float, seconds: float, signals: str) -> None:
    nc = await connect([url], ServiceMetrics("bench-publisher"), name="bench-publisher")
    rng = random.Random(7)
    subjects_by_i = [
        subjects.metrics(subjects.WorkloadKey(NAMESPACE, "Deployment", workload_name(i)))
        for i in range(workloads)
    ]
    total = int(rate * seconds) if math.isfinite(rate) else int(workloads * seconds)
    tick_s = 0.01
    per_tick = rate * tick_s if math.isfinite(rate) else float("inf")
    start = time.perf_counter()
    sent = 0
    i = 0
    while sent < total:
        if math.isfinite(per_tick):
            due = min(total, int((time.perf_counter() - start) / tick_s * per_tick) + int(per_tick))
        else:
            due = min(total, sent + 500)
        now = time.time()
        while sent < due:
            await nc.publish(subjects_by_i[i], _message(i, now, rng, signals))
            i = (i + 1) % workloads
            sent += 1
        if math.isfinite(per_tick):
            await asyncio.sleep(max(0.0, start + (sent / rate) - time.perf_counter()))
        else:
            await flush(nc)
    await flush(nc)
    await drain(nc)


def publisher_main(
    url: str, workloads: int, rate: float, seconds: float, cpu: int | None, signals: str
) -> None:
    if cpu is not None:
        with contextlib.suppress(OSError, AttributeError):
            os.sched_setaffinity(0, {cpu})
    configure("decider-bench-publisher", "warning", stream=open(os.devnull, "w"))  # noqa: SIM115 - process-long
    asyncio.run(_publish(url, workloads, rate, seconds, signals))


# --- subscribers (this process) ------------------------------------------------------


@dataclass
class PhaseResult:
    name: str
    messages: int
    wall_s: float
    cpu_s: float
    latencies: array[float]
    backlog: int
    rss_mb: float
    decisions: int = 0

    @property
    def per_s(self) -> float:
        return self.messages / self.wall_s if self.wall_s else 0.0

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s else 0.0

    def p(self, q: float) -> float:
        if not self.latencies:
            return float("nan")
        data = sorted(self.latencies)
        return data[min(len(data) - 1, int(q * len(data)))]

    @property
    def cpu_us_per_msg(self) -> float:
        return self.cpu_s / self.messages * 1e6 if self.messages else float("nan")


def pod_object(workload: str, index: int) -> dict[str, Any]:
    """A Pod as the API server's watch sends it (the fields the cache reads, and a few more)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{workload}-{index}",
            "namespace": NAMESPACE,
            "labels": {"app": workload, "pod-template-hash": "5d8f7c9b6"},
            "resourceVersion": "1",
        },
        "spec": {
            "containers": [{"name": "server", "image": "example.com/model:1"}],
            "nodeName": "gpu-node-1",
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


def make_decider(nc: NATS, workloads: int, signals: str = "gpu") -> tuple[Decider, list[Decision]]:
    replicas = StaticScaleSource(default=REPLICAS)
    pods = PodCache(api=None)  # type: ignore[arg-type]  # fed by hand below: no API server in the benchmark
    for i in range(workloads):
        for p in range(REPLICAS):
            pods.apply("ADDED", pod_object(workload_name(i), p))
    pods.synced.set()
    published: list[Decision] = []
    js = jetstream(nc)

    async def publish(decision: Decision) -> None:
        key = subjects.WorkloadKey(decision.namespace, decision.kind, decision.name)
        await js.publish(subjects.decisions(key), codec.encode(decision), headers=headers_msg_id(decision.id))
        published.append(decision)
        # the in-process "actuator": the scale subresource and the pods show the new count
        replicas.counts[(decision.namespace, decision.kind, decision.name)] = decision.to_replicas
        for p in range(
            min(decision.from_replicas, decision.to_replicas),
            max(decision.from_replicas, decision.to_replicas),
        ):
            kind = "ADDED" if decision.to_replicas > decision.from_replicas else "DELETED"
            pods.apply(kind, pod_object(decision.name, p))

    decider = Decider(ServiceMetrics("bench-decider"), replicas, pods, MemoryStateStore(), publish)
    metrics: list[dict[str, Any]] = [{"name": "gpu_util", "target": 70}]
    if signals == "engine":
        metrics.append({"name": "requests_waiting", "target": 4})
    scalers = [
        parse_gpuscaler(
            {
                "metadata": {"name": workload_name(i), "namespace": NAMESPACE},
                "spec": {
                    "scaleTargetRef": {"kind": "Deployment", "name": workload_name(i)},
                    "minReplicas": 1,
                    "maxReplicas": 20,
                    "metrics": metrics,
                },
            }
        )
        for i in range(workloads)
    ]
    decider.registry.set_policies(scalers, [])
    return decider, published


async def run_phase(
    name: str,
    url: str,
    workloads: int,
    rate: float,
    seconds: float,
    mode: str,
    publisher_cpu: int | None,
    warm_up: bool = True,
    signals: str = "gpu",
) -> PhaseResult:
    nc = await connect([url], ServiceMetrics("bench-sub"), name=f"bench-{mode}")
    latencies: array[float] = array("d")
    count = 0
    first_at: list[float] = []
    last_at = [0.0]
    perf = time.perf_counter
    published: list[Decision] = []
    if mode == "decider":
        await ensure_stream(
            jetstream(nc),
            subjects.DECISIONS_STREAM,
            [subjects.DECISIONS_ALL],
            storage="memory",
            duplicate_window_s=120,
        )
        decider, published = make_decider(nc, workloads, signals)
        handle = decider.handle_metrics
        if warm_up:
            # Each workload's first evaluation creates its series and caches its pod selection:
            # once in a decider's life, not per second, so it is left out of the measurement.
            rng = random.Random(0)
            for i in range(workloads):
                key = subjects.WorkloadKey(NAMESPACE, "Deployment", workload_name(i))
                await handle(subjects.metrics(key), _message(i, time.time(), rng, signals))
            await asyncio.sleep(0.5)  # its decisions published
            published.clear()

        async def cb(msg: Any) -> None:
            nonlocal count
            t = perf()
            if not first_at:
                first_at.append(t)
            await handle(msg.subject, msg.data)
            end = perf()
            latencies.append(end - t)
            last_at[0] = end
            count += 1
    else:

        async def cb(msg: Any) -> None:
            nonlocal count
            t = perf()
            if not first_at:
                first_at.append(t)
            codec.decode(msg.data, WorkloadMetrics, time.time())
            end = perf()
            latencies.append(end - t)
            last_at[0] = end
            count += 1

    sub = await nc.subscribe(
        subjects.METRICS_ALL, cb=cb, pending_msgs_limit=10_000_000, pending_bytes_limit=-1
    )
    await flush(nc)
    gc.collect()
    proc = psutil.Process()
    expected = int(rate * seconds) if math.isfinite(rate) else int(workloads * seconds)
    ctx = multiprocessing.get_context("spawn")
    pub = ctx.Process(target=publisher_main, args=(url, workloads, rate, seconds, publisher_cpu, signals))
    cpu_before = proc.cpu_times()
    pub.start()
    deadline = time.monotonic() + seconds * 4 + 30
    backlog_at_end = 0
    while count < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
        if not pub.is_alive() and count < expected:
            backlog_at_end = max(backlog_at_end, sub.pending_msgs)
    cpu_after = proc.cpu_times()
    pub.join(10)
    rss_mb = proc.memory_info().rss / 2**20
    await sub.unsubscribe()
    await drain(nc)
    wall = (last_at[0] - first_at[0]) if first_at else 0.0
    cpu = (cpu_after.user + cpu_after.system) - (cpu_before.user + cpu_before.system)
    return PhaseResult(name, count, wall, cpu, latencies, backlog_at_end, rss_mb, len(published))


def _fmt(result: PhaseResult) -> str:
    return (
        f"| {result.name:<34} | {result.messages:>8,} | {result.per_s:>10,.0f} | {result.cpu_share * 100:>6.1f}% "
        f"| {result.cpu_us_per_msg:>7.1f} | {result.p(0.5) * 1e6:>7.1f} | {result.p(0.99) * 1e6:>7.1f} "
        f"| {result.rss_mb:>6.1f} | {result.decisions:>6,} |"
    )


async def main_async(args: argparse.Namespace) -> int:
    # The service's own logging (JSON lines, info level), written nowhere: its
    # cost is part of the path, a terminal's speed is not.
    configure("decider-bench", "info", stream=open(os.devnull, "w"))  # noqa: SIM115, ASYNC230 - lives as long as the process
    load_at_start = os.getloadavg()[0]
    # One asyncio thread uses at most one core at a time; --pin-cpu also keeps
    # it on one named core (on a busy shared machine that can starve it).
    bench_cpu = args.pin_cpu
    publisher_cpu = None
    if bench_cpu is not None:
        os.sched_setaffinity(0, {bench_cpu})
        others = sorted(set(range(os.cpu_count() or 1)) - {bench_cpu})
        publisher_cpu = others[0] if others else None
    with EmbeddedNats() as server:
        rate = float(args.workloads)  # one message per workload per second
        results = []
        for name, mode, phase_rate in (
            (f"baseline: decode only @ {rate:,.0f}/s", "baseline", rate),
            (f"decider: evaluate @ {rate:,.0f}/s", "decider", rate),
            ("baseline: decode only, saturated", "baseline", float("inf")),
            ("decider: evaluate, saturated", "decider", float("inf")),
        ):
            print(f"running {name} for {args.seconds:g} s ...", file=sys.stderr)
            results.append(
                await run_phase(
                    name,
                    server.url,
                    args.workloads,
                    phase_rate,
                    args.seconds,
                    mode,
                    publisher_cpu,
                    warm_up=args.warm_up,
                    signals=args.signals,
                )
            )
    print()
    print(
        f"decider benchmark: {args.workloads:,} workloads, 1 msg/workload/s, {args.seconds:g} s per phase, "
        f"python {sys.version.split()[0]}, measured process pinned to cpu {bench_cpu}, "
        f"{'each workload evaluated once before' if args.warm_up else 'no warm-up'}, "
        f"{'engine signals, policy on requests_waiting and gpu_util' if args.signals == 'engine' else 'gpu_util only'}, "
        f"{psutil.cpu_count()} cpus, load average {load_at_start:.1f} at start / {os.getloadavg()[0]:.1f} at end"
    )
    print()
    print(
        "| phase                              | messages |  per sec   |  CPU   | µs CPU/msg | p50 µs | p99 µs | RSS MB | decisions |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        print(_fmt(r))
    base, dec, base_sat, dec_sat = results
    print()
    print(
        f"decider keeps up with {args.workloads:,} workloads/s: "
        f"{'yes' if dec.per_s >= 0.98 * rate and dec.backlog == 0 else 'NO'} "
        f"(paced {dec.per_s:,.0f} evaluations/s using {dec.cpu_share * 100:.0f}% of one core; "
        f"saturated {dec_sat.per_s:,.0f} evaluations/s = {dec_sat.per_s / base_sat.per_s * 100:.0f}% of the bare "
        f"decode loop's {base_sat.per_s:,.0f} msgs/s)"
    )
    print(
        f"one core's capacity at the measured CPU cost: {1e6 / dec.cpu_us_per_msg:,.0f} evaluations/s "
        f"(decode-only {1e6 / base.cpu_us_per_msg:,.0f} msgs/s)"
    )
    print(
        f"evaluation latency p99 {dec.p(0.99) * 1e6:.0f} µs (decode-only p99 {base.p(0.99) * 1e6:.0f} µs); "
        f"median CPU per message {statistics.median([dec.cpu_us_per_msg, dec_sat.cpu_us_per_msg]):.0f} µs"
    )
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workloads", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=15.0)
    parser.add_argument("--pin-cpu", type=int, default=None, help="pin the measured process to this CPU")
    parser.add_argument(
        "--warm-up",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="evaluate each workload once before measuring (its series created, its pods selected): "
        "the steady state; --no-warm-up counts those first evaluations in, as figures before 2026-11-25 (session 4) did",
    )
    parser.add_argument(
        "--signals",
        choices=("gpu", "engine"),
        default="gpu",
        help="gpu: GPU load and a gpu_util policy; engine: each pod's inference-engine signals too, "
        "and a policy on requests_waiting beside gpu_util (the queue's rules on every message)",
    )
    args = parser.parse_args()
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    sys.exit(main())
