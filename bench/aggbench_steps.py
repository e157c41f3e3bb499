"""The aggregator bench's measurements: saturation against a bare subscriber, and one keep-up step."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from pathlib import Path
from typing import Any

import psutil
from aggbench_env import Env, hist_quantile, percentile, sample_value, scrape

from gpuscale import codec, subjects


def saturation(env: Env, count: int) -> dict[str, float]:
    nodes = 2000
    out: dict[str, float] = {}
    # Bare subscriber.
    server = env.start_nats()
    ready = Path(f"/tmp/aggbench-ready-{os.getpid()}")  # noqa: S108 - a flag file for our own children
    ready.unlink(missing_ok=True)
    try:
        bare = env.role("bare", server.url, str(count), str(ready), cores=env.agg_core)
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
        points: list[tuple[float, float, float]] = []  # (t, processed, CPU s)
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
        # Rate while saturated: from the first progress to the first poll that saw the final count.
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
        bare = env.role("bare-idle", server.url, str(duration + 2))  # off the aggregator's core
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
    # Judged on what was published: the generator may fall a little short of 1 Hz on a busy machine.
    res["kept_up"] = (
        res["lost"] <= nodes * 0.01
        and res["backlog"] < nodes
        and res["age_p99"] < 1.0
        and (
            res["cycle_gap_max"] != res["cycle_gap_max"] or res["cycle_gap_max"] < env.publish_interval * 1.5
        )
    )
    return res
