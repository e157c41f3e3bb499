"""``gpuscale demo``: start everything, watch it scale, stop everything, report."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import signal
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from gpuscale.aio import sleep_unless_stopped
from gpuscale.embedded_nats import EmbeddedNats, NatsServerError, free_port
from gpuscale.kube import new_api_client
from gpuscale.logging import configure, get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain, redact
from gpuscale_cli.demo import report as report_mod
from gpuscale_cli.demo import terminal, ui
from gpuscale_cli.demo.observer import DemoState, Observer
from gpuscale_cli.demo.processes import ProcessGroup
from gpuscale_cli.demo.settings import DemoSettings

DEMO_NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4")
# ``--profile llm``: kube-sim's demo-llm cluster (two vLLM-like workloads, one
# scaled on requests_waiting, one on gpu_util) on this one trace.
LLM_PROFILE = "llm"
LLM_TRACE = "bursty"
DEFAULT_NON_TTY_DURATION_S = 120.0
ENV_FILE = "demo.env"  # in the logs folder: NATS URL and kubeconfig of the running demo


def _wait_for_kube_sim(url: str, kubeconfig: Path, group: ProcessGroup, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if group.exited():
            break
        if kubeconfig.exists():
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{url}/version", timeout=1) as resp:  # noqa: S310 - our own loopback server
                if resp.status == 200:
                    return
        time.sleep(0.1)
    sim = group.children[0]
    last = next((line for line in reversed(sim.tail().splitlines()) if line.strip()), "")
    said = f": {_plain(last)}" if last else ""
    raise RuntimeError(f"kube-sim did not come up{said} (its log: {sim.log_path})")


def _plain(log_line: str) -> str:
    """A JSON log line's error (or event), else the line itself, cut to one screen line."""
    with contextlib.suppress(ValueError, AttributeError):
        fields = json.loads(log_line)
        log_line = str(fields.get("error") or fields.get("event") or log_line)
    return " ".join(log_line.split())[:200]


def door_lines(nats_url: str, kubeconfig: Path, env_file: Path) -> list[str]:
    """What another terminal needs to reach the running demo: the commands that work against it."""
    return [
        f"gpuscale demo: NATS {redact(nats_url)} · kubeconfig {kubeconfig} · both in {env_file}",
        f"  gpuscale status --nats-url {redact(nats_url)} --kubeconfig {kubeconfig}",
        f"  kubectl --kubeconfig {kubeconfig} get gpuscalers -A",
        f"  gpuscale doctor --nats-url {redact(nats_url)} --kubeconfig {kubeconfig} --namespace default",
        f"  (or: . {env_file}; gpuscale status; gpuscale doctor; kubectl get gpuscalers -A)",
    ]


def write_env_file(path: Path, nats_url: str, kubeconfig: Path) -> None:
    """The env file of the door lines: what ``gpuscale status`` and ``kubectl`` read."""
    path.write_text(
        "# gpuscale demo: source this file (. FILE) to reach the running demo\n"
        f"export GPUSCALE_NATS_URL={redact(nats_url)}\n"
        f"export KUBECONFIG={kubeconfig}\n"
        "export GPUSCALE_NAMESPACE=default\n"  # where the demo's Leases are, for gpuscale doctor
    )


async def _start_ui(state: DemoState, port: int) -> tuple[Any, int]:
    """The web page on ``port``, or on a free one (said on the terminal) when that one is taken."""
    try:
        return await ui.start(state, "127.0.0.1", port)
    except OSError as e:
        if port == 0:
            raise
        runner, bound = await ui.start(state, "127.0.0.1", 0)
        reason = "is taken" if e.errno == errno.EADDRINUSE else f"cannot be used ({e.strerror or e})"
        print(f"gpuscale demo: port {port} {reason}; the web page is on port {bound} instead", flush=True)
        return runner, bound


def start_pipeline(settings: DemoSettings, group: ProcessGroup) -> tuple[str, Path]:
    """kube-sim first (the others need its kubeconfig), then the services."""
    log_dir = group.log_dir
    sim_port = free_port()
    sim_url = f"http://127.0.0.1:{sim_port}"
    kubeconfig = log_dir / "kubeconfig"
    scenario, profile = (
        ("demo-llm", LLM_TRACE) if settings.profile == LLM_PROFILE else ("demo", settings.profile)
    )
    group.start(
        "kube-sim",
        "kube-sim",
        "--port", str(sim_port),
        "--kubeconfig-out", str(kubeconfig),
        "--scenario", scenario,
        "--profile", profile,
        "--speed", str(settings.speed),
        "--startup-delay", str(settings.startup_delay_s),
        "--window", str(settings.window_s),
    )  # fmt: skip
    _wait_for_kube_sim(sim_url, kubeconfig, group)
    kube = ("--kubeconfig", str(kubeconfig), "--http-port", "0")
    group.start("actuator", "actuator", *kube)
    group.start("decider", "decider", *kube)
    group.start("aggregator", "aggregator", "--window", str(settings.window_s), "--http-port", "0")
    for node in DEMO_NODES:
        group.start(
            f"collector-{node}",
            "collector",
            "--backend",
            "sim",
            "--sim-source",
            "kube-sim",
            "--node-name",
            node,
            *kube,
        )
    return sim_url, kubeconfig


async def _run(settings: DemoSettings) -> int:
    log_dir = settings.log_dir or Path(tempfile.mkdtemp(prefix="gpuscale-demo-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    # The terminal belongs to the live view: the demo's own log goes beside the others.
    demo_log = (log_dir / "demo.log").open("a")
    configure("demo", settings.log_level, demo_log)
    log = get_logger(component="demo")
    duration = settings.duration_s
    if duration is None and not sys.stdout.isatty():
        duration = DEFAULT_NON_TTY_DURATION_S
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)

    try:
        nats = EmbeddedNats(log_file=str(log_dir / "nats-server.log")).start()
    except NatsServerError as e:
        print(f"gpuscale demo: {e}", file=sys.stderr)
        return 1
    group = ProcessGroup(
        log_dir, env={"GPUSCALE_NATS_URL": nats.url, "GPUSCALE_LOG_LEVEL": settings.log_level}
    )
    state = DemoState(settings.profile)
    code = 0
    runner = None
    nc = None
    api = None
    try:
        sim_url, kubeconfig = await asyncio.to_thread(start_pipeline, settings, group)
        runner, ui_port = await _start_ui(state, settings.ui_port)
        ui_url = f"http://127.0.0.1:{ui_port}/"
        print(f"gpuscale demo: web page {ui_url} · logs in {log_dir}", flush=True)
        env_file = log_dir / ENV_FILE
        write_env_file(env_file, nats.url, kubeconfig)
        print("\n".join(door_lines(nats.url, kubeconfig, env_file)), flush=True)
        nc = await connect([nats.url], ServiceMetrics("demo"), name="demo")
        api = await new_api_client(kubeconfig)
        observer = Observer(state, nc, api, sim_url)
        observe = asyncio.create_task(observer.run(stop))
        view = terminal.TerminalView()
        begin = time.monotonic()
        while not stop.is_set():
            elapsed = time.monotonic() - begin
            if duration is not None and elapsed >= duration:
                break
            died = group.exited()
            if died:
                for child in died:
                    log.error(
                        "demo_part_exited",
                        part=child.name,
                        code=child.proc.returncode if child.proc else None,
                        log_tail=child.tail(),
                    )
                code = 1
                break
            frame = terminal.render(state, elapsed, duration, ui_url)
            # On a terminal the door lines scroll away: a pointer to them stays, where it fits.
            if view.tty and frame.count("\n") < terminal.SIZE[1] - 2:
                frame += f"\nother tools: . {env_file}; gpuscale status"
            view.draw(frame, elapsed)
            await sleep_unless_stopped(stop, 1.0)
        stop.set()
        await observe
        run_s = time.monotonic() - begin
    except RuntimeError as e:
        print(f"gpuscale demo: {e}", file=sys.stderr)
        return 1
    finally:
        stop.set()
        if api is not None:
            await api.close()
        await drain(nc)
        if runner is not None:
            await runner.cleanup()
        codes = await asyncio.to_thread(group.stop_all)
        bad = {name: c for name, c in codes.items() if c not in (0, None)}
        if bad:
            log.warning("demo_parts_stopped_uncleanly", exit_codes=bad)
        nats.close()
        demo_log.close()

    summary = report_mod.summary(state.profile, run_s, state.report())
    print("\n".join(report_mod.summary_lines(summary, str(log_dir))))
    # Where the user says; else beside the logs, never in the working directory.
    report_path = settings.report or log_dir / "report.json"
    report_path.write_text(json.dumps(summary, indent=2))
    print(f"report written to {report_path}")
    return code


def main(settings: DemoSettings) -> int:
    return asyncio.run(_run(settings))
