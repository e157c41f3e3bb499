"""Record what a real GPU gives the collector, and every NVML call behind dcgm-exporter.

Two parts, on a GPU node (no NATS, no Kubernetes):

1. The collector's production NVML backend (``gpuscale_collector.backends.nvml``),
   used as the collector uses it: ``start``, ``read`` once per interval on its
   worker thread, the batch built by the attribution core, checked against the
   wire contract the aggregator applies, and rendered to the collector's
   ``/metrics`` text. ``nvidia-smi``'s figures for the same second sit beside
   each reading when it is there.
2. Every NVML call behind dcgm-exporter's default counters
   (etc/default-counters.csv: clocks, temperatures, power, energy, PCIe
   replays, utilisations, XID events, framebuffer incl. reserved, NVLink,
   vGPU licence, row remapping, driver version, and the PROF_* ratios through
   GPM), each with its value and unit or the exact NVML error name
   (``NVML_ERROR_NOT_SUPPORTED``), taken idle and again under load.

``--load-seconds N`` runs a torch matmul and PCIe copy loop on GPU 0 in a
subprocess, so that utilisation, tensor, DRAM and PCIe figures move; skipped
where torch or CUDA is absent. Every NVML call is wrapped: an error is a
result, never a crash. Without a GPU (or without pynvml) the script records
why and exits 0. Needs only the standard library and pynvml (nvidia-ml-py);
part 1 also needs msgspec, structlog and prometheus-client, and is skipped
(recorded) where they do not import.

    python bench/nvml_probe.py --out "$OUT/nvml" --load-seconds 40
    python bench/nvml_probe.py --seconds 30 --json probe.json   # the older form

Writes ``nvml_probe.json``, ``nvml_probe.md``, ``summary.md`` (one row per
default counter), ``collector_metrics_<phase>.txt``, ``backend_log.jsonl`` and
``load.log`` into ``--out``. Exit code 0, NVML or not; 130 when interrupted
(what was read by then is written).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import shutil
import socket
import sys
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from nvml_backend import backend_phase, diffs_vs_smi
from nvml_calls import Nvml, now_iso
from nvml_counters import probe_gpu
from nvml_load import Load
from nvml_report import markdown, summary

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT / "shared", ROOT / "services" / "collector"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def environment() -> dict[str, Any]:
    env: dict[str, Any] = {
        "when": now_iso(),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "nvidia_smi": shutil.which("nvidia-smi"),
    }
    for dist in ("nvidia-ml-py", "msgspec", "structlog", "prometheus-client", "torch"):
        try:
            env[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            env[dist] = None
    # The first on the path is the one imported; a machine may hold others (its own, ours in .whl).
    env["nvidia-ml-py_all"] = sorted(
        f"{d.version} at {d.locate_file('')}"
        for d in metadata.distributions()
        if (d.metadata["Name"] or "").lower() == "nvidia-ml-py"
    )
    return env


def raw_snapshot(label: str, args: argparse.Namespace, report: dict[str, Any]) -> bool:
    """Part 2 once: init, every GPU, shutdown. False when NVML is not there."""
    snap: dict[str, Any] = {"label": label, "when": now_iso()}
    report.setdefault("snapshots", []).append(snap)
    try:
        import pynvml  # the probe records its absence instead of failing
    except ImportError as e:
        snap["init"] = f"pynvml not importable: {e}"
        return False
    report["environment"]["pynvml_file"] = getattr(pynvml, "__file__", None)
    nv = Nvml(pynvml)
    try:
        nv("nvmlInit")
    except Exception as e:  # noqa: BLE001 - no NVML here is a finding: record it, exit 0
        snap["init"] = nv.error_name(e)
        return False
    snap["init"] = "ok"
    try:
        count = nv("nvmlDeviceGetCount")
        snap["device_count"] = count
        snap["gpus"] = [probe_gpu(nv, i, args.gpm_sleep) for i in range(min(count, args.max_gpus))]
    except Exception as e:  # noqa: BLE001 - record it; the shutdown still runs
        snap["error"] = nv.error_name(e)
        snap["traceback"] = traceback.format_exc()
    finally:
        with contextlib.suppress(Exception):
            nv("nvmlShutdown")
    return True


async def session(args: argparse.Namespace, report: dict[str, Any], save: Callable[[], None]) -> None:
    load = Load(args.load_seconds, args.out / "load.log")
    report["load"] = {"status": load.status}
    try:
        nvml_ok = raw_snapshot("idle", args, report)
        if not nvml_ok:
            print(f"NVML not available: {report['snapshots'][0]['init']}")
        save()
        try:
            # Without NVML too: it records the collector's own start-up message.
            await backend_phase(args, report, load, save)
        except Exception as e:  # noqa: BLE001 - record and go on to part 2
            report.setdefault("backend", {})["error"] = f"{type(e).__name__}: {e}"
            report["backend"]["traceback"] = traceback.format_exc()
        if not nvml_ok:
            return
        await asyncio.to_thread(load.start, args.load_ready_s)  # if the backend phase did not
        running = load.proc is not None and load.proc.poll() is None
        report["load"]["running_at_second_snapshot"] = running
        raw_snapshot("load" if load.ready.is_set() and running else "again", args, report)
    finally:
        load.stop()
        report["load"] = {**report.get("load", {}), "status": load.status, "pid": load.pid}
        ticks = report.get("backend", {}).get("ticks", [])
        if ticks:
            report["backend"]["diff_vs_nvidia_smi"] = diffs_vs_smi(ticks)
            for key in ("read_ms", "cpu_ms"):
                values = sorted(t[key] for t in ticks)
                report["backend"][key] = {"median": values[len(values) // 2], "max": values[-1]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=Path("nvml-probe-out"), help="folder for the results")
    parser.add_argument("--seconds", type=int, default=5, help="backend ticks under load (one per interval)")
    parser.add_argument("--idle-ticks", type=int, default=2, help="backend ticks before the load starts")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument(
        "--load-seconds", "--load", type=float, default=0.0, help="seconds of torch load on GPU 0 (0: none)"
    )
    parser.add_argument(
        "--load-ready-s", type=float, default=90.0, help="how long to wait for the load to start"
    )
    parser.add_argument("--gpm-sleep", type=float, default=1.0, help="seconds between the two GPM samples")
    parser.add_argument("--max-gpus", type=int, default=16)
    parser.add_argument("--json", type=Path, default=None, help="also write the JSON report here")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"environment": environment(), "argv": sys.argv[1:]}

    def save() -> None:
        text = json.dumps(report, indent=1, default=repr)
        (args.out / "nvml_probe.json").write_text(text)
        if args.json is not None:
            args.json.write_text(text)

    started = time.monotonic()
    rc = 0
    try:
        asyncio.run(session(args, report, save))
    except KeyboardInterrupt:  # timeout -s INT: keep what was read
        report["fatal"] = "interrupted"
        rc = 130
    except Exception as e:  # noqa: BLE001 - the record is the product: keep it whatever happened
        report["fatal"] = f"{type(e).__name__}: {e}"
        report["traceback"] = traceback.format_exc()
    finally:
        report["seconds"] = round(time.monotonic() - started, 1)
        save()
        for name, render in (("nvml_probe.md", markdown), ("summary.md", summary)):
            try:
                (args.out / name).write_text(render(report))
            except Exception as e:  # noqa: BLE001 - the JSON is written; a report that fails says why
                (args.out / name).write_text(
                    f"{name} failed: {type(e).__name__}: {e}\n{traceback.format_exc()}"
                )
    print(f"wrote {args.out / 'nvml_probe.json'} and {args.out / 'nvml_probe.md'} in {report['seconds']} s")
    return rc


if __name__ == "__main__":
    sys.exit(main())
