"""The aggregator bench's processes (pinned to cores) and its reading of Prometheus text."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from gpuscale.embedded_nats import EmbeddedNats, free_port

BIN = Path(sys.executable).parent
SCRIPT = str(Path(__file__).resolve().with_name("aggregator_bench.py"))  # runs the roles: --role NAME ...


def gpuscale_command() -> list[str]:
    """The ``gpuscale`` console entry, else its module (a lent machine runs the repo from PYTHONPATH)."""
    entry = BIN / "gpuscale"
    return [str(entry)] if entry.is_file() else [sys.executable, "-m", "gpuscale_cli.main"]


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


def wait_ready(port: int, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("aggregator not ready")


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

    def role(self, *args: str, cores: set[int] | None = None) -> subprocess.Popen[bytes]:
        """``aggregator_bench.py --role ARGS`` on ``cores`` (default: off the aggregator's core)."""
        return self.spawn(
            [sys.executable, SCRIPT, "--role", *args], cores or self.other_cores, stdout=subprocess.PIPE
        )

    def start_nats(self, config: str = "", log_file: str | None = None) -> EmbeddedNats:
        # A consumer behind a burst must not be cut off as slow (default 64 MB pending per client).
        server = EmbeddedNats(config_text="max_pending: 1GB\n" + config, log_file=log_file)
        server.start()
        if server._proc is not None:  # private, but ours to pin: keep it off the aggregator's core
            pin(server._proc.pid, self.other_cores)
        return server

    def start_aggregator(self, url: str, window: float | None = None) -> tuple[subprocess.Popen[bytes], int]:
        proc, port = self.spawn_aggregator(url, window)
        wait_ready(port)
        return proc, port

    def spawn_aggregator(
        self,
        url: str,
        window: float | None = None,
        args: tuple[str, ...] = (),
        cores: set[int] | None = None,
        log: IO[bytes] | None = None,
    ) -> tuple[subprocess.Popen[bytes], int]:
        """``gpuscale aggregator ARGS`` on ``cores`` (default: the aggregator's), not yet ready."""
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
        out = log or subprocess.DEVNULL
        proc = self.spawn(
            [*gpuscale_command(), "aggregator", *args],
            cores or self.agg_core,
            env=env,
            stdout=out,
            stderr=log,
        )
        return proc, port

    def stop(self, proc: subprocess.Popen[bytes]) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
