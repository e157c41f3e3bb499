"""One step of the scale-out bench: N partitioned aggregators at one node count, and its judgement."""

from __future__ import annotations

import itertools
import json
import math
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from aggbench_env import Env, hist_quantile, sample_value, scrape, wait_ready

from gpuscale import subjects

SAMPLES_IN = ("gpuscale_messages_in_total", 'kind="samples"')
METRICS_OUT = ("gpuscale_messages_out_total", 'kind="metrics"')
BACKLOG = "gpuscale_aggregator_live_backlog"
GENERATOR_LATE_S = 0.5  # a generator this far behind its schedule was a limit itself


def subscriptions(monitor_port: int) -> dict[int, dict[str, float]]:
    """Per partition, what nats-server delivered to its instance: ``part`` (its mapped
    sub-batches) and ``split`` (node batches the queue group gave its split stage)."""
    url = f"http://127.0.0.1:{monitor_port}/connz?subs=detail&limit=4096"
    with urllib.request.urlopen(url, timeout=5) as resp:
        connz = json.loads(resp.read())
    return parse_connz(connz)


def parse_connz(connz: dict[str, Any]) -> dict[int, dict[str, float]]:
    out: dict[int, dict[str, float]] = {}
    prefix = subjects.AGGREGATOR_PARTS_PREFIX + "."
    for conn in connz.get("connections", []):
        subs = conn.get("subscriptions_list_detail") or []
        part = next((s for s in subs if s["subject"].startswith(prefix)), None)
        if part is None:
            continue
        split = next((s for s in subs if s.get("qgroup") == subjects.AGGREGATOR_SPLIT_QUEUE), None)
        index = int(part["subject"][len(prefix) :].split(".", 1)[0])
        out[index] = {
            "part": float(part.get("msgs", 0)),
            "split": float(split.get("msgs", 0) if split else 0),
        }
    return out


def cpu_s(proc: psutil.Process) -> float:
    try:
        t = proc.cpu_times()
    except psutil.Error:
        return math.nan
    return float(t.user + t.system)


def snapshot(ports: list[int], monitor_port: int, procs: dict[str, list[psutil.Process]]) -> dict[str, Any]:
    return {
        "t": time.monotonic(),
        "text": [scrape(p) for p in ports],
        "subs": subscriptions(monitor_port),
        "cpu": {k: [cpu_s(p) for p in ps] for k, ps in procs.items()},
    }


def parse_generator(stdout: str) -> dict[str, float]:
    """The generator's closing lines (``late_max_s X``, ``published N``) as a dict."""
    out = {}
    for line in stdout.splitlines():
        key, _, value = line.partition(" ")
        if value:
            out[key] = float(value)
    return out


def instance_result(
    i: int,
    before: dict[str, Any],
    after: dict[str, Any],
    final: dict[str, Any],
    rss_mib: float,
    interval: float,
) -> dict[str, Any]:
    seconds = after["t"] - before["t"]
    b, a, f = before["text"][i], after["text"][i], final["text"][i]
    sent = after["subs"][i]["part"] - before["subs"][i]["part"]
    processed = sample_value(a, *SAMPLES_IN) - sample_value(b, *SAMPLES_IN)
    sent_total = final["subs"][i]["part"]
    r = {
        "partition": i,
        "cpu": (after["cpu"]["agg"][i] - before["cpu"]["agg"][i]) / seconds,
        "rss_mib": rss_mib,
        "sent_per_s": sent / seconds,
        "split_per_s": (after["subs"][i]["split"] - before["subs"][i]["split"]) / seconds,
        "processed_ratio": processed / sent if sent else math.nan,
        "lost": sent_total - sample_value(f, *SAMPLES_IN),
        "sent_total": sent_total,
        "backlog": max(sample_value(a, BACKLOG), sample_value(f, BACKLOG)),
        "age_p50": hist_quantile(b, a, "gpuscale_aggregator_batch_age_seconds", 0.5),
        "age_p99": hist_quantile(b, a, "gpuscale_aggregator_batch_age_seconds", 0.99),
        "cycle_max": hist_quantile(b, a, "gpuscale_aggregator_publish_cycle_seconds", 1.0),
        "metrics_per_s": (sample_value(a, *METRICS_OUT) - sample_value(b, *METRICS_OUT)) / seconds,
        "workloads": sample_value(f, "gpuscale_aggregator_workloads"),
    }
    r["failed"] = instance_failures(r, interval)
    return r


def instance_failures(r: dict[str, Any], interval: float) -> list[str]:
    """aggbench_steps' keep-up criteria, per instance, against what its partition was sent."""
    p, why = r["partition"], []
    if not r["processed_ratio"] >= 0.99:
        why.append(f"p{p} processed {r['processed_ratio']:.3f} of what it was sent")
    if r["lost"] > r["sent_total"] * 0.01:
        why.append(f"p{p} {r['lost']:.0f} never processed")
    if not r["backlog"] < max(1.0, r["sent_per_s"]):
        why.append(f"p{p} backlog {r['backlog']:.0f} >= 1 s of its batches")
    if not r["age_p99"] < 1.0:
        why.append(f"p{p} batch age p99 {r['age_p99']:.2f} s")
    if r["cycle_max"] == r["cycle_max"] and r["cycle_max"] >= interval:
        why.append(f"p{p} publish cycle {r['cycle_max']:.2f} s >= the interval")
    return why


def scaleout_step(
    env: Env,
    partitions: int,
    nodes: int,
    agg_cores: list[int],
    warmup: float,
    measure: float,
    nodes_per_generator: int,
    log_dir: Path,
) -> dict[str, Any]:
    tag = f"N{partitions}-n{nodes}"
    server = env.start_nats(
        subjects.aggregator_partition_mapping(partitions), log_file=str(log_dir / f"{tag}-nats.log")
    )
    aggs = []
    try:
        for i in range(partitions):
            log = (log_dir / f"{tag}-agg{i}.log").open("wb")
            aggs.append(
                env.spawn_aggregator(
                    server.url, args=("--partition", f"{i}/{partitions}"), cores={agg_cores[i]}, log=log
                )
            )
            log.close()  # the child holds its own descriptor
        for _, port in aggs:
            wait_ready(port)
        generators = math.ceil(nodes / nodes_per_generator)
        duration = warmup + measure + 2.0
        bounds = [nodes * g // generators for g in range(generators + 1)]
        gens = [
            env.role("generator", server.url, str(nodes), str(duration), str(lo), str(hi))
            for lo, hi in itertools.pairwise(bounds)
        ]
        assert server._proc is not None
        procs = {
            "agg": [psutil.Process(p.pid) for p, _ in aggs],
            "nats": [psutil.Process(server._proc.pid)],
            "gen": [psutil.Process(g.pid) for g in gens],
        }
        ports = [port for _, port in aggs]
        time.sleep(warmup)
        before = snapshot(ports, server.monitor_port, procs)
        time.sleep(measure)
        after = snapshot(ports, server.monitor_port, procs)
        rss = [p.memory_info().rss / 2**20 for p in procs["agg"]]
        gen_out = [parse_generator(g.communicate(timeout=120)[0].decode()) for g in gens]
        time.sleep(1.0)  # let the last batches through both stages
        final = snapshot(ports, server.monitor_port, procs)
    finally:
        for proc, _ in aggs:
            env.stop(proc)
        server.close()
    return judge(partitions, nodes, before, after, final, rss, gen_out, duration, env.publish_interval)


def judge(
    partitions: int,
    nodes: int,
    before: dict[str, Any],
    after: dict[str, Any],
    final: dict[str, Any],
    rss: list[float],
    gen_out: list[dict[str, float]],
    duration: float,
    interval: float,
) -> dict[str, Any]:
    seconds = after["t"] - before["t"]
    instances = [instance_result(i, before, after, final, rss[i], interval) for i in range(partitions)]
    published = sum(g.get("published", 0.0) for g in gen_out)
    split_total = sum(s["split"] for s in final["subs"].values())
    late = max((g.get("late_max_s", math.inf) for g in gen_out), default=math.inf)
    due = nodes * math.ceil(duration)  # whole seconds, each one batch per node
    failed = [w for r in instances for w in r["failed"]]
    if published - split_total > published * 0.01:
        failed.append(f"split stages got {split_total:.0f} of {published:.0f} node batches")
    generator_behind = late > GENERATOR_LATE_S or published < due * 0.99
    gen_cpu = [(a - b) / seconds for a, b in zip(after["cpu"]["gen"], before["cpu"]["gen"], strict=True)]
    return {
        "partitions": partitions,
        "nodes": nodes,
        "kept_up": not failed,
        "failed": failed,
        "instances": instances,
        "agg_cpu": [r["cpu"] for r in instances],
        "nats_cpu": (after["cpu"]["nats"][0] - before["cpu"]["nats"][0]) / seconds,
        "gen_cpu": sum(gen_cpu),
        "gen_cpu_max": max(gen_cpu, default=0.0),
        "generators": len(gen_out),
        "generator_behind": generator_behind,
        "generator_late_max_s": late,
        "published": published,
        "published_due": due,
        "metrics_per_s": sum(r["metrics_per_s"] for r in instances),
        "measured_s": seconds,
    }
