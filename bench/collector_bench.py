"""Collector cost at 1 Hz on an 8-GPU node (docs/ARCHITECTURE.md#budgets: under 1 % of one core, 60 MB RSS).

Runs ``gpuscale collector --backend sim --sim-gpus 8 --interval 1`` as a
subprocess against a private nats-server, waits for its first batch (start-up
excluded), then samples the process's CPU time and RSS for --duration seconds.

    .venv/bin/python bench/collector_bench.py --duration 60
    .venv/bin/python bench/collector_bench.py --duration 60 --engine-pods 8

``--engine-pods N`` measures, in the same run, the collector as it
runs in a cluster with inference servers: GPUs and owners from a kube-sim
node of 8 GPUs (``--sim-source kube-sim``), the pod watch of its node through
the API (kubernetes-asyncio), and N vLLM-like pods kube-sim serves /metrics
for, each scraped once a second over HTTP at its pod IP (a real vLLM page's
size: ~30 KB, mostly histograms). It is printed beside the same collector
with ``--engine-metrics false`` (the pod watch still runs there, so the
difference is the scraping), and beside the plain sim run above.

Also prints what the sim path imports (``-X importtime`` totals of the
heaviest top-level packages), since imports dominate a Python agent's RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import psutil

from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain

CPU_BUDGET_PCT = 1.0
RSS_BUDGET_MB = 60.0
NODE = "bench-node"


def gpuscale_binary() -> str:
    candidate = Path(sys.executable).parent / "gpuscale"
    return str(candidate) if candidate.exists() else "gpuscale"


async def first_batch(url: str, timeout_s: float, node: str = NODE) -> float:
    got = asyncio.get_running_loop().create_future()
    nc = await connect([url], ServiceMetrics("bench"), name="bench")

    async def on_msg(_msg: object) -> None:
        if not got.done():
            got.set_result(time.monotonic())

    await nc.subscribe(subjects.samples(node), cb=on_msg)
    try:
        return float(await asyncio.wait_for(got, timeout_s))
    finally:
        await drain(nc)


async def count_batches(url: str, seconds: float, node: str = NODE) -> int:
    n = 0
    nc = await connect([url], ServiceMetrics("bench"), name="bench-count")

    async def on_msg(_msg: object) -> None:
        nonlocal n
        n += 1

    await nc.subscribe(subjects.samples(node), cb=on_msg)
    await asyncio.sleep(seconds)
    await drain(nc)
    return n


def import_profile(env: dict[str, str]) -> list[tuple[str, float]]:
    """Cumulative import time (ms) per top-level package when the collector's modules load."""
    code = (
        "import gpuscale_cli.main, gpuscale_collector.app, gpuscale_collector.backends.sim, "
        "gpuscale_collector.settings"
    )
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code], capture_output=True, text=True, env=env, check=True
    )
    totals: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = [p.strip() for p in line.removeprefix("import time:").split("|")]
        try:
            cumulative_us = float(parts[1])
        except ValueError:
            continue
        name = parts[2]
        if not name.startswith(" ") and "." not in name.strip():
            totals[name.strip()] = totals.get(name.strip(), 0.0) + cumulative_us / 1000.0
    return sorted(totals.items(), key=lambda kv: -kv[1])[:8]


RSS_STEPS_CODE = """
import json, os
def rss():
    return int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20
steps = [('python', rss())]
for name in ('asyncio', 'msgpack', 'structlog', 'prometheus_client', 'aiohttp', 'nats',
             'gpuscale_cli.main', 'gpuscale_collector.app', 'gpuscale_collector.backends.sim'):
    __import__(name)
    steps.append((name, rss()))
from gpuscale_cli.main import build_parser
build_parser()  # the CLI imports every sub-command's settings module
steps.append(('gpuscale_cli.build_parser', rss()))
print(json.dumps(steps))
"""


def rss_by_import(env: dict[str, str]) -> list[tuple[str, float]]:
    """RSS added (MB) by each import on the sim path, in load order: what dominates."""
    proc = subprocess.run(
        [sys.executable, "-c", RSS_STEPS_CODE], capture_output=True, text=True, env=env, check=True
    )
    steps = json.loads(proc.stdout)
    out = [(steps[0][0], round(steps[0][1], 1))]
    for (_, before), (name, after) in itertools.pairwise(steps):
        out.append((name, round(after - before, 1)))
    return out


ENGINE_SCENARIO = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: llm, namespace: default, labels: {app: llm}}
spec:
  replicas: %(pods)d
  selector: {matchLabels: {app: llm}}
  template:
    metadata:
      labels: {app: llm}
      annotations: {sim.gpuscale.io/engine: vllm, gpuscale.io/metrics-port: "8000"}
    spec:
      nodeName: %(node)s
      containers:
      - name: server
        image: vllm/vllm-openai:v0.10.1
        resources: {limits: {nvidia.com/gpu: 1}}
"""


def start_kube_sim(work: Path, pods: int, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], Path, str]:
    """kube-sim with one 8-GPU node running ``pods`` vLLM-like pods at 1.5 × their capacity."""
    scenario = work / "scenario.yaml"
    scenario.write_text(ENGINE_SCENARIO % {"pods": pods, "node": "gpu-node-1"})
    kubeconfig = work / "kubeconfig"
    port = free_port()
    proc = subprocess.Popen(
        [gpuscale_binary(), "kube-sim", "--port", str(port), "--kubeconfig-out", str(kubeconfig),
         "--scenario", str(scenario), "--nodes", "1", "--gpus-per-node", "8", "--startup-delay", "0",
         "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            body = json.dumps({"load": 150.0 * pods}).encode()
            request = urllib.request.Request(f"{url}/sim/v1/workloads/default/llm/load", body, method="PUT")  # noqa: S310 - loopback
            with urllib.request.urlopen(request, timeout=1):  # noqa: S310 - our own loopback server
                break
        except OSError:
            time.sleep(0.2)
    else:
        proc.terminate()
        raise RuntimeError("kube-sim did not come up")
    # The node in kube-sim is gpu-node-1; the collector is told so.
    return proc, kubeconfig, url


async def count_with_peak_rss(
    proc: psutil.Process, peak_rss: int, url: str, seconds: float, node: str
) -> tuple[int, int]:
    """The batches seen over ``seconds``, and the collector's peak RSS meanwhile."""
    counter = asyncio.create_task(count_batches(url, seconds, node=node))
    while not counter.done():
        peak_rss = max(peak_rss, proc.memory_info().rss)
        await asyncio.sleep(0.5)
    return counter.result(), peak_rss


def scrapes_ok(http_port: int) -> float:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return 0.0
    for line in text.splitlines():
        if line.startswith('gpuscale_collector_engine_scrapes_total{outcome="ok"}'):
            return float(line.split()[-1])
    return 0.0


def measure_collector(
    cmd: list[str],
    env: dict[str, str],
    url: str,
    duration: float,
    node: str,
    probe: Any = None,
    want: float = 0,
) -> dict[str, Any]:
    """Start ``cmd``, wait for its first batch (and ``probe() >= want``), then CPU
    and RSS over ``duration``; ``probe``'s growth meanwhile too."""
    started = time.monotonic()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        proc = psutil.Process(child.pid)
        first = asyncio.run(first_batch(url, timeout_s=30, node=node))
        startup_s = first - started
        if probe is not None:
            deadline = time.monotonic() + 30
            while probe() < want and time.monotonic() < deadline:
                time.sleep(0.2)
        probed = probe() if probe is not None else 0.0
        cpu0 = proc.cpu_times()
        rss_start = proc.memory_info().rss
        t0 = time.monotonic()
        batches, peak_rss = asyncio.run(count_with_peak_rss(proc, rss_start, url, duration, node))
        cpu1 = proc.cpu_times()
        elapsed = time.monotonic() - t0
        uss = proc.memory_full_info().uss
        probed = (probe() - probed) if probe is not None else 0.0
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    return {
        "engine_scrapes_ok": probed,
        "duration_s": round(elapsed, 1),
        "startup_s": round(startup_s, 2),
        "batches_seen": batches,
        "cpu_pct_of_one_core": round(100.0 * cpu_s / elapsed, 3),
        "rss_mb_peak": round(peak_rss / 2**20, 1),
        "uss_mb_end": round(uss / 2**20, 1),
    }


def engine_phase(args: argparse.Namespace, env: dict[str, str], server: EmbeddedNats) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gpuscale-collector-bench-"))
    sim, kubeconfig, _ = start_kube_sim(work, args.engine_pods, env)
    node = "gpu-node-1"
    out: dict[str, Any] = {}
    try:
        for label, engine in (
            ("kube-sim node, --engine-metrics false (no pod watch: the sim feed brings owners)", "false"),
            (f"kube-sim node, pod watch, {args.engine_pods} pods scraped at 1 Hz", "true"),
        ):
            http_port = free_port()
            cmd = [
                gpuscale_binary(), "collector", "--backend", "sim", "--sim-source", "kube-sim",
                "--kubeconfig", str(kubeconfig), "--interval", str(args.interval), "--nats-url", server.url,
                "--node-name", node, "--http-port", str(http_port), "--log-level", "warning",
                "--engine-metrics", engine,
            ]  # fmt: skip
            probe = (lambda port=http_port: scrapes_ok(port)) if engine == "true" else None
            out[label] = measure_collector(cmd, env, server.url, args.duration, node, probe, args.engine_pods)
    finally:
        sim.terminate()
        sim.wait(10)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=60.0, help="seconds measured after the first batch")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    parser.add_argument(
        "--engine-pods", type=int, default=0, help="also measure with this many inference-server pods scraped"
    )
    args = parser.parse_args()

    env = dict(os.environ)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    server = EmbeddedNats(jetstream=False)
    server.start()
    http_port = free_port()
    cmd = [
        gpuscale_binary(),
        "collector",
        "--backend",
        "sim",
        "--sim-gpus",
        str(args.gpus),
        "--interval",
        str(args.interval),
        "--nats-url",
        server.url,
        "--node-name",
        NODE,
        "--http-port",
        str(http_port),
        "--log-level",
        "warning",
    ]
    started = time.monotonic()
    child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        proc = psutil.Process(child.pid)
        first = asyncio.run(first_batch(server.url, timeout_s=30))
        startup_s = first - started
        cpu0 = proc.cpu_times()
        rss_start = proc.memory_info().rss
        t0 = time.monotonic()
        batches, peak_rss = asyncio.run(count_with_peak_rss(proc, rss_start, server.url, args.duration, NODE))
        cpu1 = proc.cpu_times()
        elapsed = time.monotonic() - t0
        rss_end = proc.memory_info().rss
        uss = proc.memory_full_info().uss
    finally:
        child.terminate()
        try:
            child.wait(10)
        except subprocess.TimeoutExpired:
            child.kill()
    try:
        engine = engine_phase(args, env, server) if args.engine_pods > 0 else None
    finally:
        server.close()
    cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
    cpu_pct = 100.0 * cpu_s / elapsed
    result = {
        "command": " ".join(cmd[1:]),
        "duration_s": round(elapsed, 1),
        "startup_s": round(startup_s, 2),
        "batches_seen": batches,
        "cpu_s": round(cpu_s, 3),
        "cpu_s_per_sampled_s": round(cpu_s / elapsed, 5),
        "cpu_pct_of_one_core": round(cpu_pct, 3),
        "rss_mb_at_first_batch": round(rss_start / 2**20, 1),
        "rss_mb_peak": round(peak_rss / 2**20, 1),
        "rss_mb_end": round(rss_end / 2**20, 1),
        "uss_mb_end": round(uss / 2**20, 1),
        "cpu_budget_pct": CPU_BUDGET_PCT,
        "rss_budget_mb": RSS_BUDGET_MB,
        "within_budget": cpu_pct < CPU_BUDGET_PCT and peak_rss / 2**20 < RSS_BUDGET_MB,
        "engine": engine,
        "rss_mb_added_by_import": rss_by_import(env),
        "import_ms_top": [(name, round(ms, 1)) for name, ms in import_profile(env)],
    }
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            if key == "engine" and isinstance(value, dict):
                for label, figures in value.items():
                    print(f"{label}:")
                    for k, v in figures.items():
                        print(f"  {k:22} {v}")
                    within = (
                        figures["cpu_pct_of_one_core"] < CPU_BUDGET_PCT
                        and figures["rss_mb_peak"] < RSS_BUDGET_MB
                    )
                    print(f"  {'within_budget':22} {within}")
                continue
            print(f"{key:24} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
