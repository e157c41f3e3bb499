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
import contextlib
import itertools
import os
import random
import re
import signal
import struct
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgpack
import psutil

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.wire import WIRE_VERSION

GPUS_PER_NODE = 8
PODS_PER_WORKLOAD = 4
SEQ_BASE = 2**31  # packs as a fixed-width uint32, so the template can be patched in place
TS_SENTINEL = 1234.5678
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


# --- batches --------------------------------------------------------------------


def node_name(n: int) -> str:
    return f"gpu-node-{n:05d}"


def batch_template(n: int, nodes: int) -> tuple[bytes, int, int]:
    """A node's encoded batch and the byte offsets of its ts and seq."""
    workloads = max(1, nodes * GPUS_PER_NODE // PODS_PER_WORKLOAD)
    rng = random.Random(n)
    gpus = []
    for i in range(GPUS_PER_NODE):
        pod_index = n * GPUS_PER_NODE + i
        w = pod_index % workloads
        util = rng.uniform(10, 95)
        gpus.append(
            {
                "uuid": f"GPU-{n:05d}-{i}-8f1c2b7e-5a4d-4c3e-9b1a",
                "index": i,
                "model": "NVIDIA H100 80GB HBM3",
                "util": util,
                "mem_util": util / 2,
                "fb_used_mib": rng.uniform(1000, 70000),
                "fb_free_mib": 81559.0 - 70000,
                "temp_c": rng.uniform(30, 80),
                "power_w": rng.uniform(100, 700),
                "sm_active": util * 0.8,
                "mig": None,
                "health": "ok",
                "owners": [
                    {
                        "namespace": "inference",
                        "pod": f"model-{w:05d}-{pod_index:06d}",
                        "container": "server",
                        "pod_uid": f"uid-{pod_index:06d}-2a6f-4b1e-8c3d",
                        "workload": {"kind": "Deployment", "name": f"model-{w:05d}"},
                        "sm_util": None,
                        "fb_used_mib": None,
                    }
                ],
            }
        )
    raw = codec.encode_raw(
        {
            "v": WIRE_VERSION,
            "node": node_name(n),
            "ts": TS_SENTINEL,
            "seq": SEQ_BASE,
            "interval_s": 1.0,
            "gpus": gpus,
        }
    )
    ts_at = raw.find(struct.pack(">d", TS_SENTINEL))
    seq_at = raw.find(struct.pack(">I", SEQ_BASE))
    assert ts_at > 0
    assert seq_at > 0
    return raw, ts_at, seq_at


def stamp(template: tuple[bytes, int, int], ts: float, seq: int) -> bytes:
    raw, ts_at, seq_at = template
    buf = bytearray(raw)
    struct.pack_into(">d", buf, ts_at, ts)
    struct.pack_into(">I", buf, seq_at, SEQ_BASE + seq)
    return bytes(buf)


def bare_decode(data: bytes) -> Any:
    """The baseline's whole work per batch: ``msgpack.unpackb`` to plain dicts
    (what the aggregator's codec did before gpuscale.wire became typed msgspec)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


# --- roles run as child processes --------------------------------------------------


async def role_generator(url: str, nodes: int, duration: float, first_node: int) -> None:
    import nats

    nc = await nats.connect(url, pending_size=256 * 1024 * 1024)
    templates = [
        (n, batch_template(n, nodes), subjects.samples(node_name(n))) for n in range(first_node, nodes)
    ]
    rng = random.Random(7)
    # Phase per node (jitter): a thousand nodes never tick at the same instant.
    # Published in 10 ms slots, sleeping between them so nats-py's flusher
    # sends each slot right away (a batch's ts is its publish time).
    slots: list[list[tuple[tuple[bytes, int, int], str]]] = [[] for _ in range(100)]
    for _n, template, subject in templates:
        slots[int(rng.random() * 100)].append((template, subject))
    start = time.time() + 0.2
    published = 0
    second = 0
    while time.time() < start + duration:
        for i, slot in enumerate(slots):
            delay = start + second + i * 0.01 - time.time()
            await asyncio.sleep(max(0.0, delay))
            for template, subject in slot:
                await nc.publish(subject, stamp(template, time.time(), second))
            published += len(slot)
        second += 1
    await nc.flush()
    await nc.close()
    print(f"published {published}", flush=True)


async def role_burst(url: str, count: int, nodes: int, ready_file: str) -> None:
    """Publish ``count`` pre-stamped batches as fast as possible once ready_file exists."""
    import nats

    templates = [(batch_template(n, nodes), subjects.samples(node_name(n))) for n in range(nodes)]
    nc = await nats.connect(url, pending_size=1024 * 1024 * 1024)
    print("encoded", flush=True)
    while not os.path.exists(ready_file):  # noqa: ASYNC240 - a flag-file poll in a bench child
        await asyncio.sleep(0.01)
    for k in range(count):
        template, subject = templates[k % nodes]
        await nc.publish(subject, stamp(template, time.time(), k // nodes))
    await nc.flush(timeout=60)
    await nc.close()


async def role_bare_idle(url: str, duration: float) -> None:
    """The baseline at the keep-up load: decode every batch, nothing else."""
    import nats

    nc = await nats.connect(url)
    count = 0

    async def on_msg(msg: Any) -> None:
        nonlocal count
        bare_decode(msg.data)
        count += 1

    await nc.subscribe(subjects.SAMPLES_ALL, cb=on_msg, pending_msgs_limit=10_000_000, pending_bytes_limit=0)
    await asyncio.sleep(duration)
    await nc.close()
    print(f"bare {count}", flush=True)


async def role_bare(url: str, expected: int, ready_file: str) -> None:
    """The baseline: a nats-py callback subscriber that only decodes."""
    import nats

    nc = await nats.connect(url)
    state = {"n": 0, "first": 0.0, "last": 0.0, "cpu_first": 0.0, "cpu_last": 0.0}
    done = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        bare_decode(msg.data)
        n = state["n"] = state["n"] + 1
        state["last"] = time.perf_counter()
        state["cpu_last"] = time.process_time()
        if n == 1:
            state["first"] = state["last"]
            state["cpu_first"] = state["cpu_last"]
        if n >= expected:
            done.set()

    await nc.subscribe(subjects.SAMPLES_ALL, cb=on_msg, pending_msgs_limit=10_000_000, pending_bytes_limit=0)
    await nc.flush()
    Path(ready_file).touch()  # noqa: ASYNC240 - one tiny write before the measurement starts
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), 60)
    elapsed = max(1e-9, state["last"] - state["first"])
    cpu = max(1e-9, state["cpu_last"] - state["cpu_first"])
    print(f"bare {state['n']} {elapsed:.6f} {cpu:.6f}", flush=True)
    await nc.close()


# --- orchestration -------------------------------------------------------------------


def pin(pid: int, cores: set[int]) -> None:
    with contextlib.suppress(OSError):
        os.sched_setaffinity(pid, cores)


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        text: str = resp.read().decode()
        return text


def sample_value(text: str, name: str, labels: str = "") -> float:
    pattern = re.escape(name) + (r"\{" + re.escape(labels) + r"\}" if labels else "") + r" ([0-9.e+-]+)"
    m = re.search(r"^" + pattern + r"$", text, re.MULTILINE)
    return float(m.group(1)) if m else 0.0


def buckets(text: str, name: str) -> list[tuple[float, float]]:
    out = []
    for m in re.finditer(
        r"^" + re.escape(name) + r'_bucket\{le="([^"]+)"\} ([0-9.e+-]+)$', text, re.MULTILINE
    ):
        out.append((float("inf") if m.group(1) == "+Inf" else float(m.group(1)), float(m.group(2))))
    return out


def hist_quantile(before: str, after: str, name: str, q: float) -> float:
    b0 = dict(buckets(before, name))
    b1 = buckets(after, name)
    cum = [(le, c - b0.get(le, 0.0)) for le, c in b1]
    total = cum[-1][1] if cum else 0.0
    if total <= 0:
        return float("nan")
    target = q * total
    prev_le, prev_c = 0.0, 0.0
    for le, c in cum:
        if c >= target:
            if le == float("inf"):
                return prev_le
            return prev_le + (le - prev_le) * ((target - prev_c) / max(1e-12, c - prev_c))
        prev_le, prev_c = le, c
    return prev_le


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Env:
    agg_core: set[int]
    other_cores: set[int]
    window: float
    publish_interval: float = 2.0
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, args: list[str], cores: set[int], **kw: Any) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(args, **kw)
        pin(proc.pid, cores)
        self.procs.append(proc)
        return proc

    def role(self, *args: str, stdout: Any = subprocess.PIPE) -> subprocess.Popen[bytes]:
        return self.spawn([sys.executable, __file__, "--role", *args], self.other_cores, stdout=stdout)

    def start_nats(self) -> EmbeddedNats:
        # A consumer behind a burst must not be cut off as a slow consumer by
        # the server (default 64 MB pending per client) while it catches up.
        server = EmbeddedNats(config_text="max_pending: 1GB\n")
        server.start()
        if server._proc is not None:  # private, but ours to pin: keep it off the aggregator's core
            pin(server._proc.pid, self.other_cores)
        return server

    def start_aggregator(self, url: str, window: float | None = None) -> tuple[subprocess.Popen[bytes], int]:
        port = free_port()
        env = {
            **os.environ,
            "GPUSCALE_NATS_URL": url,
            "GPUSCALE_HTTP_PORT": str(port),
            "GPUSCALE_WINDOW": str(window or self.window),
            "GPUSCALE_PUBLISH_INTERVAL": str(self.publish_interval),
            "GPUSCALE_SAMPLES_STORAGE": "memory",
            "GPUSCALE_LOG_LEVEL": "warning",
        }
        proc = self.spawn(
            [str(BIN / "gpuscale"), "aggregator"], self.agg_core, env=env, stdout=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
                    if resp.status == 200:
                        return proc, port
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("aggregator not ready")

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def saturation(env: Env, count: int) -> dict[str, float]:
    nodes = 2000
    out: dict[str, float] = {}
    # Bare subscriber.
    server = env.start_nats()
    ready = Path(f"/tmp/aggbench-ready-{os.getpid()}")  # noqa: S108 - a flag file for our own children
    ready.unlink(missing_ok=True)
    try:
        bare = env.spawn(
            [sys.executable, __file__, "--role", "bare", server.url, str(count), str(ready)],
            env.agg_core,
            stdout=subprocess.PIPE,
        )
        burst = env.role("burst", server.url, str(count), str(nodes), str(ready))
        stdout, _ = bare.communicate(timeout=180)
        burst.wait(60)
        _, n, elapsed, cpu = stdout.decode().split()
        out["bare_batches_per_s"] = int(n) / float(elapsed)
        out["bare_batches_per_cpu_s"] = int(n) / float(cpu)
        out["bare_received"] = int(n)
    finally:
        ready.unlink(missing_ok=True)
        server.close()
    # The aggregator.
    server = env.start_nats()
    try:
        # A long window: batches queued behind a busy consumer must not age out.
        agg, port = env.start_aggregator(server.url, window=120.0)
        agg_ps = psutil.Process(agg.pid)
        burst = env.role("burst", server.url, str(count), str(nodes), str(ready))
        assert burst.stdout is not None
        burst.stdout.readline()  # "encoded"
        ready.touch()
        points: list[tuple[float, float]] = []
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            text = scrape(port)
            done = sample_value(text, "gpuscale_messages_in_total", 'kind="samples"')
            cpu_times = agg_ps.cpu_times()
            points.append((time.perf_counter(), done, cpu_times.user + cpu_times.system))
            if done >= count or (len(points) > 25 and points[-25][1] == done > 0):
                break  # all in, or no progress for 5 s (some were lost)
            time.sleep(0.2)
        burst.wait(60)
        text = scrape(port)
        # Rate while saturated: from the first to the last poll that saw progress.
        # From the first progress to the first poll that saw the final count.
        final_count = max(c for _, c, _ in points)
        last = next(i for i, (_, c, _) in enumerate(points) if c == final_count)
        busy = [(t, c, u) for t, c, u in points[: last + 1] if c > 0]
        if len(busy) >= 2:
            (t0, c0, u0), (t1, c1, u1) = busy[0], busy[-1]
            out["agg_batches_per_s"] = (c1 - c0) / (t1 - t0)
            out["agg_batches_per_cpu_s"] = (c1 - c0) / max(1e-9, u1 - u0)
        else:
            out["agg_batches_per_s"] = out["agg_batches_per_cpu_s"] = float("nan")
        out["agg_ignored"] = sum(
            sample_value(text, "gpuscale_aggregator_batches_ignored_total", f'reason="{r}"')
            for r in ("duplicate", "out_of_order", "too_old")
        )
        out["agg_processed"] = sample_value(text, "gpuscale_messages_in_total", 'kind="samples"')
        env.stop(agg)
    finally:
        ready.unlink(missing_ok=True)
        server.close()
    return out


async def observe_metrics(url: str, stop_at: float, measure_from: float, decode: bool) -> dict[str, Any]:
    import nats

    nc = await nats.connect(url, pending_size=256 * 1024 * 1024)
    fresh_lat: list[float] = []
    last_seen: dict[tuple[str, str], float] = {}
    arrivals: list[float] = []

    async def on_msg(msg: Any) -> None:
        now = time.time()
        arrivals.append(now)
        if not decode:
            return
        m = codec.decode_raw(msg.data)
        for p in m["pods"]:
            key = (m["name"], p["pod"])
            seen = p["last_seen"]
            prev = last_seen.get(key)
            if prev is None or seen > prev:
                last_seen[key] = seen
                if prev is not None and now >= measure_from:
                    fresh_lat.append(now - seen)

    await nc.subscribe(subjects.METRICS_ALL, cb=on_msg, pending_msgs_limit=10_000_000, pending_bytes_limit=0)
    while time.time() < stop_at:
        await asyncio.sleep(0.1)
    await nc.close()
    # Publish cycles as seen by a subscriber: bursts separated by > 0.5 s.
    cycles: list[float] = []
    for a, b in itertools.pairwise(arrivals):
        if b - a > 0.5:
            cycles.append(b)
    gaps = [b - a for a, b in itertools.pairwise(cycles)]
    return {"freshness": fresh_lat, "cycle_gaps": gaps, "messages": len(arrivals)}


def keep_up_step(env: Env, nodes: int, duration: float, warmup: float) -> dict[str, Any]:
    server = env.start_nats()
    try:
        agg, port = env.start_aggregator(server.url)
        agg_ps = psutil.Process(agg.pid)
        bare = env.spawn(
            [sys.executable, __file__, "--role", "bare-idle", server.url, str(duration + 2)],
            env.other_cores,  # off the aggregator's core; its CPU time is what we compare
            stdout=subprocess.PIPE,
        )
        bare_ps = psutil.Process(bare.pid)
        gen = env.role("generator", server.url, str(nodes), str(duration), "0")
        start = time.time()
        measure_from = start + warmup
        loop = asyncio.new_event_loop()
        observer = loop.create_task(
            observe_metrics(server.url, start + duration, measure_from, decode=nodes <= 2000)
        )
        while time.time() < measure_from:
            loop.run_until_complete(asyncio.sleep(0.2))
        before = scrape(port)
        cpu_before = agg_ps.cpu_times()
        bare_before = bare_ps.cpu_times()
        t_before = time.monotonic()
        obs = loop.run_until_complete(observer)
        loop.close()
        after = scrape(port)
        cpu_after = agg_ps.cpu_times()
        bare_after = bare_ps.cpu_times()
        t_after = time.monotonic()
        rss_mib = agg_ps.memory_info().rss / 2**20
        stdout, _ = gen.communicate(timeout=60)
        published_total = int(stdout.decode().split()[-1])
        bare.communicate(timeout=30)
        time.sleep(0.5)
        final = scrape(port)
        env.stop(agg)
    finally:
        server.close()
    processed = sample_value(after, "gpuscale_messages_in_total", 'kind="samples"') - sample_value(
        before, "gpuscale_messages_in_total", 'kind="samples"'
    )
    expected = nodes * (t_after - t_before)  # 1 Hz per node
    total_in = sample_value(final, "gpuscale_messages_in_total", 'kind="samples"')
    cpu = (cpu_after.user + cpu_after.system - cpu_before.user - cpu_before.system) / (t_after - t_before)
    bare_cpu = (bare_after.user + bare_after.system - bare_before.user - bare_before.system) / (
        t_after - t_before
    )
    res = {
        "nodes": nodes,
        "processed_ratio": processed / expected if expected else float("nan"),
        "lost": published_total - total_in,
        "backlog": sample_value(final, "gpuscale_aggregator_live_backlog"),
        "age_p50": hist_quantile(before, after, "gpuscale_aggregator_batch_age_seconds", 0.5),
        "age_p99": hist_quantile(before, after, "gpuscale_aggregator_batch_age_seconds", 0.99),
        "proc_p50": hist_quantile(before, after, "gpuscale_aggregator_batch_processing_seconds", 0.5),
        "proc_p99": hist_quantile(before, after, "gpuscale_aggregator_batch_processing_seconds", 0.99),
        "cycle_p50": hist_quantile(before, after, "gpuscale_aggregator_publish_cycle_seconds", 0.5),
        "cycle_max": hist_quantile(before, after, "gpuscale_aggregator_publish_cycle_seconds", 1.0),
        "cycle_gap_max": max(obs["cycle_gaps"]) if obs["cycle_gaps"] else float("nan"),
        "fresh_p50": percentile(obs["freshness"], 0.5),
        "fresh_p99": percentile(obs["freshness"], 0.99),
        "workloads": sample_value(final, "gpuscale_aggregator_workloads"),
        "pods": sample_value(final, "gpuscale_aggregator_pods"),
        "rss_mib": rss_mib,
        "cpu": cpu,
        "bare_cpu": bare_cpu,
        "published_rate": published_total / duration,
    }
    # "processed" compares with an ideal 1 Hz; the generator may run a little
    # slower on a busy machine, so keeping up is judged on what was published.
    res["kept_up"] = (
        res["lost"] <= nodes * 0.01
        and res["backlog"] < nodes
        and res["age_p99"] < 1.0
        and (
            res["cycle_gap_max"] != res["cycle_gap_max"] or res["cycle_gap_max"] < env.publish_interval * 1.5
        )
    )
    return res


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
            asyncio.run(role_generator(rest[0], int(rest[1]), float(rest[2]), int(rest[3])))
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
