"""Where a demo's seconds go: every message on the wire and every pod change, timed.

    .venv/bin/python bench/demo_timeline.py                      # the step demo, 50 s
    .venv/bin/python bench/demo_timeline.py --duration 60 -- --profile ramp

Runs ``gpuscale demo`` (arguments after ``--`` go to it), subscribes to every
``gpuscale.v1.>`` subject on the demo's own nats-server and watches pods with
the real ``kubectl get pods -w`` against kube-sim, and prints one line per
event with its arrival time from the first: samples (node, each owner's pod
and the GPU's util), metrics messages (pods, ``since``, the gpu_util
average), decisions, actions and pod phases. The demo's own report follows.
Not a test: it reads what a run did, it judges nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import nats

from gpuscale.codec import decode_raw

BIN = Path(sys.executable).parent


def _short(pod: str) -> str:
    return pod.rsplit("-", 1)[-1]


def describe(subject: str, payload: dict[str, Any]) -> str:
    kind = subject.split(".")[2]
    if kind == "samples":
        owners = [
            f"{_short(o['pod'])}{'' if o.get('ready', True) else ' (loading)'} util={g.get('util')}"
            for g in payload.get("gpus", [])
            for o in g.get("owners", [])
        ]
        return f"sample   {payload.get('node')}: {', '.join(owners) or '-'}"
    if kind == "metrics":
        since = payload.get("since")
        pods = [_short(p["pod"]) for p in payload.get("pods", [])]
        average = (payload.get("averages") or {}).get("gpu_util")
        since_text = "" if since is None else f" since {payload['ts'] - since:.2f} s"
        return f"metrics  {payload.get('name')}: pods {pods}{since_text} gpu_util {average and round(average, 1)}"
    if kind == "decisions":
        return (
            f"decision {payload.get('name')}: {payload.get('from_replicas')} -> {payload.get('to_replicas')}"
        )
    if kind == "actions":
        return f"action   {payload.get('name')}: {payload.get('outcome')} -> {payload.get('replicas_after')}"
    return f"{kind:8} {payload.get('name', '')}"


async def run(duration: float, demo_args: list[str]) -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="gpuscale-timeline-"))
    demo = await asyncio.create_subprocess_exec(
        str(BIN / "gpuscale"),
        "demo",
        "--duration",
        str(duration),
        "--ui-port",
        "0",
        "--log-dir",
        str(log_dir),
        *demo_args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    lines: list[tuple[float, str]] = []
    url = None
    while url is None and demo.returncode is None:
        await asyncio.sleep(0.1)
        log = log_dir / "demo.log"
        if log.exists():
            found = re.search(r'"server": "([^"]+)"', log.read_text())
            url = f"nats://{found.group(1)}" if found else None
    if url is None:
        print("the demo ended before its nats-server answered", file=sys.stderr)
        return 1

    async def quiet(_: Exception) -> None:  # the demo stops its nats-server when it ends
        return None

    nc = await nats.connect(url, allow_reconnect=False, error_cb=quiet)

    async def on_message(msg: Any) -> None:
        try:
            lines.append((time.time(), describe(msg.subject, decode_raw(msg.data))))
        except Exception as e:  # noqa: BLE001 - a line that says what could not be read
            lines.append((time.time(), f"{msg.subject}: unreadable ({type(e).__name__})"))

    await nc.subscribe("gpuscale.v1.>", cb=on_message)
    kubeconfig = log_dir / "kubeconfig"
    while not kubeconfig.exists():
        await asyncio.sleep(0.1)
    watch = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "get",
        "pods",
        "-w",
        "--output-watch-events",
        "--no-headers",
        "-o",
        "custom-columns=T:.type,N:.object.metadata.name,PH:.object.status.phase,"
        "R:.object.status.conditions[?(@.type=='Ready')].status",
        stdout=asyncio.subprocess.PIPE,
    )

    async def read_pods() -> None:
        assert watch.stdout is not None
        while line := await watch.stdout.readline():
            event, name, phase, ready = [*line.decode().split(), "", "", "", ""][:4]
            lines.append((time.time(), f"pod      {_short(name)}: {event} {phase} ready={ready}"))

    reader = asyncio.create_task(read_pods())
    report, _ = await demo.communicate()
    with contextlib.suppress(ProcessLookupError):  # kubectl ends by itself with kube-sim
        watch.kill()
    await watch.wait()
    reader.cancel()
    with contextlib.suppress(Exception):
        await nc.close()
    start = lines[0][0] if lines else 0.0
    for at, text in sorted(lines):
        print(f"{at - start:8.3f}  {text}")
    print(report.decode())
    return demo.returncode or 0


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--duration", type=float, default=50.0, help="seconds the demo runs (default: 50)")
    parser.add_argument("demo_args", nargs="*", help="after --: more arguments for gpuscale demo")
    args = parser.parse_args()
    return asyncio.run(run(args.duration, args.demo_args))


if __name__ == "__main__":
    sys.exit(main())
