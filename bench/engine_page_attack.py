"""What one tenant's /metrics page costs a node's collector.

Runs the real collector (``gpuscale collector --backend sim --sim-source
kube-sim``) as a subprocess against a private nats-server and a kube-sim node
of 9 GPUs: ``--pods`` hostile pods whose metrics annotation names a port where
an attack server (its own process, so that serving costs the collector
nothing) answers every one of them with the same page, and one victim pod
that kube-sim plays as vLLM. For each page it prints the collector's RSS
(at its first batch and the peak), the batches it published against those due
and the longest gap between two, what it logged (bytes/s), the scrapes'
outcomes, and whether the victim's engine values kept coming.

    .venv/bin/python bench/engine_page_attack.py                  # every page, 12 s each
    .venv/bin/python bench/engine_page_attack.py --page series --duration 20

Pages (each just under 4 MiB, the old byte cap, or --page-bytes; served chunked):
  series   ~105k ``vllm:request_success_total`` counter series (distinct labels)
  gauges   ~100k ``vllm:num_requests_waiting`` gauge series
  lines    ~4 MiB of valid lines of a family gpuscale does not read
  nan      one running gauge and ~100k ``vllm:num_requests_waiting`` NaN samples
  real     a real vLLM page (the baseline)
  worst    the costliest page the default bounds accept (~1 MiB, ~20k lines, 64 KiB read)
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import psutil
from collector_bench import gpuscale_binary

from gpuscale import codec, subjects
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.logging import configure
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain
from gpuscale.wire import SampleBatch

NODE = "gpu-node-1"
PAGE_BYTES = 4 * 2**20 - 10 * 1024
REAL = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "engine_metrics" / "vllm_v0.txt"


def page(kind: str, size: int = PAGE_BYTES) -> bytes:
    """The attack page ``kind``, just under ``size`` bytes."""
    if kind == "real":
        return REAL.read_bytes()
    if kind == "worst":
        return worst_accepted()
    head = {
        "series": "# TYPE vllm:request_success counter\n",
        "gauges": "# TYPE vllm:num_requests_waiting gauge\n",
        "lines": "# TYPE attack_gauge gauge\n",
        "nan": "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 1\n"
        "# TYPE vllm:num_requests_waiting gauge\n",
    }[kind]
    line = {
        "series": 'vllm:request_success_total{{finished_reason="stop",i="{i}"}} 1\n',
        "gauges": 'vllm:num_requests_waiting{{engine="{i}"}} 1\n',
        "lines": 'attack_gauge{{i="{i}"}} 1\n',
        "nan": 'vllm:num_requests_waiting{{engine="{i}"}} NaN\n',
    }[kind]
    parts = [head]
    total = len(head)
    i = 0
    while True:
        text = line.format(i=i)
        if total + len(text) > size:
            break
        parts.append(text)
        total += len(text)
        i += 1
    return "".join(parts).encode()


def worst_accepted() -> bytes:
    """The costliest page the default bounds accept: 990 gauge series whose lines hold
    ~64 KiB in all, among unread lines up to ~1 MiB and ~20k lines."""
    label = "x" * 40
    kept = ["# TYPE vllm:num_requests_waiting gauge"] + [
        f'vllm:num_requests_waiting{{engine="{i}",model_name="{label}"}} 1' for i in range(990)
    ]
    while sum(len(k) + 1 for k in kept) > 64 * 1024 - 100:
        kept.pop()
    room_lines = 20_000 - len(kept) - 10
    room_bytes = 2**20 - sum(len(k) + 1 for k in kept) - 1024
    each = max(40, room_bytes // room_lines)
    filler = [
        f'attack_bucket{{i="{i}",le="{"9" * (each - 40)}"}} 1'.ljust(each - 1) for i in range(room_lines)
    ]
    return ("\n".join(kept + filler) + "\n").encode()


def serve(kind: str, port: int, size: int) -> None:
    """The attack server: every request to 0.0.0.0:port gets the page, chunked (no
    Content-Length to refuse it by)."""
    from aiohttp import web  # the child process only

    body = page(kind, size)

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):  # refused part-way: the collector hung up
            for i in range(0, len(body), 65536):
                await resp.write(body[i : i + 65536])
            await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/metrics", handler)
    web.run_app(app, host="0.0.0.0", port=port, access_log=None, print=None)  # noqa: S104 - every pod IP of the loopback block


SCENARIO = """
apiVersion: v1
kind: Namespace
metadata: {name: tenant-a}
---
apiVersion: v1
kind: Namespace
metadata: {name: tenant-b}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: hostile, namespace: tenant-a, labels: {app: hostile}}
spec:
  replicas: %(pods)d
  selector: {matchLabels: {app: hostile}}
  template:
    metadata:
      labels: {app: hostile}
      annotations: {gpuscale.io/metrics-port: "%(port)d"}
    spec:
      nodeName: %(node)s
      containers:
      - name: server
        image: example.com/hostile:1
        resources: {limits: {nvidia.com/gpu: 1}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: victim, namespace: tenant-b, labels: {app: victim}}
spec:
  replicas: 1
  selector: {matchLabels: {app: victim}}
  template:
    metadata:
      labels: {app: victim}
      annotations: {sim.gpuscale.io/engine: vllm, gpuscale.io/metrics-port: "8000"}
    spec:
      nodeName: %(node)s
      containers:
      - name: server
        image: vllm/vllm-openai:v0.10.1
        resources: {limits: {nvidia.com/gpu: 1}}
"""


def wait_http(url: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):  # noqa: S310 - our own loopback server
                return
        except urllib.error.HTTPError:
            return  # it answers
        except OSError:
            time.sleep(0.2)
    raise RuntimeError(f"{url} did not answer")


def outcomes(http_port: int) -> dict[str, float]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("gpuscale_collector_engine_scrapes_total{"):
            outcome = line.split('outcome="', 1)[1].split('"', 1)[0]
            if float(line.split()[-1]):
                out[outcome] = float(line.split()[-1])
    return out


class LogMeter:
    """Counts the bytes a child writes to stderr."""

    def __init__(self, child: subprocess.Popen[bytes]) -> None:
        self.bytes = 0
        self.lines = 0
        self._child = child
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._child.stderr is not None
        for line in self._child.stderr:
            self.bytes += len(line)
            self.lines += 1


async def watch(url: str, seconds: float, proc: psutil.Process) -> dict[str, Any]:
    """Batches, their largest gap, the victim's engine values and RSS over ``seconds``."""
    arrivals: list[float] = []
    victim = 0
    nc = await connect([url], ServiceMetrics("bench"), name="bench-watch")

    async def on_msg(msg: Any) -> None:
        nonlocal victim
        arrivals.append(time.monotonic())
        batch = codec.decode(msg.data, SampleBatch, time.time())
        if any(o.engine for g in batch.gpus for o in g.owners if o.namespace == "tenant-b"):
            victim += 1

    await nc.subscribe(subjects.samples(NODE), cb=on_msg)
    peak = proc.memory_info().rss
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, proc.memory_info().rss)
        await asyncio.sleep(0.1)
    await drain(nc)
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return {
        "batches": len(arrivals),
        "max_gap_s": round(max(gaps), 2) if gaps else None,
        "victim_batches_with_engine": victim,
        "rss_peak_mb": round(peak / 2**20, 1),
    }


def run_page(kind: str, args: argparse.Namespace, env: dict[str, str], nats: EmbeddedNats) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gpuscale-page-attack-"))
    attack_port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--serve",
            kind,
            "--port",
            str(attack_port),
            "--page-bytes",
            str(args.page_bytes),
        ],
        env=env,
    )
    scenario = work / "scenario.yaml"
    scenario.write_text(SCENARIO % {"pods": args.pods, "port": attack_port, "node": NODE})
    kubeconfig = work / "kubeconfig"
    sim_port = free_port()
    sim = subprocess.Popen(
        [gpuscale_binary(), "kube-sim", "--port", str(sim_port), "--kubeconfig-out", str(kubeconfig),
         "--scenario", str(scenario), "--nodes", "1", "--gpus-per-node", str(args.pods + 1),
         "--startup-delay", "0", "--log-level", "warning"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    child = None
    try:
        wait_http(f"http://127.0.0.1:{attack_port}/metrics", 30)
        wait_http(f"http://127.0.0.1:{sim_port}/version", 30)
        http_port = free_port()
        cmd = [
            gpuscale_binary(), "collector", "--backend", "sim", "--sim-source", "kube-sim",
            "--kubeconfig", str(kubeconfig), "--interval", str(args.interval), "--nats-url", nats.url,
            "--node-name", NODE, "--http-port", str(http_port), "--log-level", "info",
        ]  # fmt: skip
        child = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        meter = LogMeter(child)
        proc = psutil.Process(child.pid)
        wait_http(f"http://127.0.0.1:{http_port}/metrics", 30)
        rss_start = proc.memory_info().rss
        log_before = meter.bytes
        cpu0 = proc.cpu_times()
        t0 = time.monotonic()
        seen = asyncio.run(watch(nats.url, args.duration, proc))
        elapsed = time.monotonic() - t0
        cpu1 = proc.cpu_times()
        cpu_s = (cpu1.user - cpu0.user) + (cpu1.system - cpu0.system)
        return {
            "page_kib": round(len(page(kind, args.page_bytes)) / 1024),
            "rss_start_mb": round(rss_start / 2**20, 1),
            **seen,
            "batches_due": round(elapsed / args.interval),
            "cpu_pct_of_one_core": round(100 * cpu_s / elapsed, 1),
            "log_bytes_per_s": round((meter.bytes - log_before) / elapsed),
            "outcomes": outcomes(http_port),
            "alive": child.poll() is None,
        }
    finally:
        for p in (child, sim, server):
            if p is None:
                continue
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--page", default="all", choices=["all", "series", "gauges", "lines", "nan", "real", "worst"]
    )
    parser.add_argument("--page-bytes", type=int, default=PAGE_BYTES, help="size of the generated pages")
    parser.add_argument("--pods", type=int, default=8, help="hostile pods on the node (each serves the page)")
    parser.add_argument("--duration", type=float, default=12.0, help="seconds measured per page")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--serve", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.page_bytes)
        return 0
    configure("bench", "warning")
    env = dict(os.environ)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    nats = EmbeddedNats(jetstream=False)
    nats.start()
    results: dict[str, Any] = {}
    try:
        kinds = ["real", "series", "gauges", "lines", "nan", "worst"] if args.page == "all" else [args.page]
        for kind in kinds:
            results[kind] = run_page(kind, args, env, nats)
            if not args.json:
                print(f"{kind}: {json.dumps(results[kind])}", flush=True)
    finally:
        nats.close()
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
