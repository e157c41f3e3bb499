"""Run the collector's NVML backend against real GPUs and compare with nvidia-smi.

For a GPU machine: needs only nvidia-ml-py (``pip install nvidia-ml-py``) and
this repository (the script puts ``shared/`` and ``services/collector/`` on
the path itself; no NATS, no Kubernetes). Every tick it prints what the
backend read per GPU (util, memory util, framebuffer, temperature, power,
GPM SM activity, processes with their memory and SM share) next to
``nvidia-smi --query-gpu=... --format=csv`` taken in the same second, then a
summary of the differences and of the NVML calls each GPU does not support.

    python bench/nvml_probe.py --seconds 30
    python bench/nvml_probe.py --seconds 30 --load 20   # busy GPU 0 with torch for 20 s, if torch is there
    python bench/nvml_probe.py --json $OUT/probe.json

Exit codes: 0 read fine, 2 NVML unavailable (the collector's start-up message), 3 nvidia-smi missing.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for extra in (ROOT / "shared", ROOT / "services" / "collector"):
    if str(extra) not in sys.path:
        sys.path.insert(0, str(extra))


def _shim_structlog() -> None:
    """gpuscale's logger is structlog; on a bare GPU box print its events instead."""
    try:
        import structlog  # noqa: F401 - only checking it is there
    except ImportError:
        shim = types.ModuleType("structlog")

        class _Logger:
            def __init__(self, **bound: Any) -> None:
                self.bound = bound

            def bind(self, **more: Any) -> _Logger:
                return _Logger(**self.bound, **more)

            def _emit(self, level: str, event: str, **kw: Any) -> None:
                print(f"  [{level}] {event} {kw}", file=sys.stderr)

            def info(self, event: str, **kw: Any) -> None:
                self._emit("info", event, **kw)

            def warning(self, event: str, **kw: Any) -> None:
                self._emit("warning", event, **kw)

            def error(self, event: str, **kw: Any) -> None:
                kw.pop("exc_info", None)
                self._emit("error", event, **kw)

            debug = info

        shim.get_logger = lambda *a, **k: _Logger()  # type: ignore[attr-defined]  # a stand-in module
        sys.modules["structlog"] = shim


_shim_structlog()

from gpuscale_collector.backends.base import BackendUnavailable  # noqa: E402 - after the path set-up
from gpuscale_collector.backends.nvml import NvmlBackend  # noqa: E402 - after the path set-up

SMI_FIELDS = (
    "index",
    "uuid",
    "name",
    "utilization.gpu",
    "utilization.memory",
    "memory.used",
    "memory.free",
    "temperature.gpu",
    "power.draw",
)
COMPARED = (  # (reading attribute, nvidia-smi field)
    ("util", "utilization.gpu"),
    ("mem_util", "utilization.memory"),
    ("fb_used_mib", "memory.used"),
    ("fb_free_mib", "memory.free"),
    ("temp_c", "temperature.gpu"),
    ("power_w", "power.draw"),
)


def smi_gpus() -> dict[str, dict[str, str]]:
    out = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    rows: dict[str, dict[str, str]] = {}
    for line in out.stdout.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(SMI_FIELDS):
            row = dict(zip(SMI_FIELDS, values, strict=True))
            rows[row["uuid"]] = row
    return rows


def smi_apps() -> list[str]:
    out = subprocess.run(
        ["nvidia-smi", "--query-compute-apps=pid,gpu_uuid,used_memory", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=10,
        check=False,
    )
    return [line.strip() for line in out.stdout.strip().splitlines() if line.strip()]


def as_float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "[N/A]", "N/A") else None
    except ValueError:
        return None


def start_load(seconds: float) -> subprocess.Popen[bytes] | None:
    code = (
        "import time, torch\n"
        "a = torch.randn(8192, 8192, device='cuda', dtype=torch.float16)\n"
        f"end = time.time() + {seconds}\n"
        "while time.time() < end:\n"
        "    for _ in range(20): a = (a @ a).clamp_(-1, 1)\n"
        "    torch.cuda.synchronize()\n"
    )
    try:
        return subprocess.Popen([sys.executable, "-c", code])
    except OSError as e:
        print(f"load generator not started: {e}")
        return None


def fmt(v: float | None, width: int = 7, digits: int = 1) -> str:
    return f"{'-':>{width}}" if v is None else f"{v:>{width}.{digits}f}"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=int, default=30, help="how long to sample (one tick per interval)")
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument(
        "--load", type=float, default=0.0, help="seconds of torch matmul load on GPU 0 (if torch is there)"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write every tick as JSON here")
    args = parser.parse_args()

    if shutil.which("nvidia-smi") is None:
        print("nvidia-smi not found: run this on a GPU node with the NVIDIA driver")
        return 3
    backend = NvmlBackend(on_error=lambda call: None)
    try:
        backend.start_sync()
    except BackendUnavailable as e:
        print(f"gpuscale collector: {e}")
        return 2
    loader = start_load(args.load) if args.load > 0 else None
    ticks: list[dict[str, Any]] = []
    diffs: dict[str, list[float]] = {attr: [] for attr, _ in COMPARED}
    read_ms: list[float] = []
    next_at = time.monotonic()
    try:
        for tick in range(args.seconds):
            next_at += args.interval
            t0 = time.perf_counter()
            readings = backend.read_sync()
            read_ms.append((time.perf_counter() - t0) * 1000)
            smi = smi_gpus()
            apps = smi_apps()
            print(
                f"--- tick {tick + 1}/{args.seconds}  NVML read {read_ms[-1]:.1f} ms  nvidia-smi apps: {apps or 'none'}"
            )
            print(
                f"{'gpu':>4} {'source':>6} {'util':>7} {'mem%':>7} {'fb_used':>9} {'fb_free':>9} {'temp':>7} {'power':>7} {'sm_act':>7}  health / processes"
            )
            row_json = []
            for r in readings:
                s = smi.get(r.mig_parent or r.uuid, {})
                procs = ", ".join(
                    f"pid {p.pid}: {fmt(p.fb_used_mib, 0)} MiB sm {fmt(p.sm_util, 0)}%"
                    for p in (r.processes or ())
                )
                label = f"{r.index}" + (f"/gi{r.mig_gi}" if r.mig_gi is not None else "")
                print(
                    f"{label:>4} {'nvml':>6} {fmt(r.util)} {fmt(r.mem_util)} {fmt(r.fb_used_mib, 9)} {fmt(r.fb_free_mib, 9)}"
                    f" {fmt(r.temp_c)} {fmt(r.power_w)} {fmt(r.sm_active)}  {r.health}"
                    f" / {procs or ('none' if r.processes is not None else 'unknown')}"
                )
                if s:
                    print(
                        f"{'':>4} {'smi':>6} {fmt(as_float(s.get('utilization.gpu')))} {fmt(as_float(s.get('utilization.memory')))}"
                        f" {fmt(as_float(s.get('memory.used')), 9)} {fmt(as_float(s.get('memory.free')), 9)}"
                        f" {fmt(as_float(s.get('temperature.gpu')))} {fmt(as_float(s.get('power.draw')))}"
                    )
                    if r.mig_parent is None:
                        for attr, field in COMPARED:
                            mine, theirs = getattr(r, attr), as_float(s.get(field))
                            if mine is not None and theirs is not None:
                                diffs[attr].append(abs(mine - theirs))
                row_json.append(
                    {
                        "reading": {k: getattr(r, k) for k in r.__dataclass_fields__ if k != "processes"},
                        "smi": s,
                    }
                )
            ticks.append({"tick": tick, "read_ms": read_ms[-1], "gpus": row_json, "apps": apps})
            time.sleep(max(0.0, next_at - time.monotonic()))
    finally:
        if loader is not None:
            loader.terminate()
        for gpu in backend._gpus:  # the probe reports the backend's own view of each GPU
            gpm = "yes" if gpu.gpm is not None else "no"
            print(
                f"GPU {gpu.index} {gpu.uuid} {gpu.model}: unsupported calls {sorted(gpu.unsupported) or 'none'};"
                f" GPM {gpm}; MIG {'on' if gpu.mig_on else 'off'}; lost {gpu.lost or 'no'}"
            )
        backend._close_sync()
    print("mean |nvml - nvidia-smi| per field (same second; utilization windows differ, expect a few %):")
    for attr, values in diffs.items():
        mean = sum(values) / len(values) if values else None
        print(f"  {attr:12} {fmt(mean, 8, 2)}  over {len(values)} readings")
    read_ms.sort()
    if read_ms:
        print(f"NVML read per tick: median {read_ms[len(read_ms) // 2]:.2f} ms, max {read_ms[-1]:.2f} ms")
    if args.json is not None:
        args.json.write_text(json.dumps({"ticks": ticks, "diffs": diffs}, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
