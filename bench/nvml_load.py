"""nvidia-smi's view of each GPU, and the torch load the NVML probe runs beside its readings."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

from nvml_fields import SMI_FIELDS

LOAD_CODE = """
import os, sys, time
parent = os.getppid()
try:
    import torch
except Exception as e:
    print(f"no-load torch not importable: {e}", flush=True)
    sys.exit(0)
if not torch.cuda.is_available():
    print("no-load torch sees no CUDA device", flush=True)
    sys.exit(0)
seconds = float(sys.argv[1])
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
host = torch.empty(32 * 1024 * 1024, dtype=torch.uint8).pin_memory()
dev = torch.empty_like(host, device="cuda")
c = a @ b
torch.cuda.synchronize()
print(f"ready {torch.cuda.get_device_name(0)} torch {torch.__version__}", flush=True)
end = time.time() + seconds
rounds = 0
while time.time() < end and os.getppid() == parent:  # ends with the probe, even a killed one
    for _ in range(16):
        c = a @ b  # tensor pipes and DRAM
    dev.copy_(host, non_blocking=True)  # PCIe RX to the GPU
    host.copy_(dev, non_blocking=True)  # PCIe TX from it
    torch.cuda.synchronize()
    rounds += 1
print(f"done rounds={rounds}", flush=True)
"""


def smi_gpus() -> dict[str, dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        return {}
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return {}
    rows: dict[str, dict[str, str]] = {}
    for line in out.stdout.strip().splitlines():
        values = [v.strip() for v in line.split(",")]
        if len(values) == len(SMI_FIELDS):
            row = dict(zip(SMI_FIELDS, values, strict=True))
            rows[row["uuid"]] = row
    return rows


def as_float(text: str | None) -> float | None:
    try:
        return float(text) if text not in (None, "", "[N/A]", "N/A") else None
    except ValueError:
        return None


class Load:
    """A torch matmul + PCIe copy loop on GPU 0 in a subprocess, if torch and CUDA are there."""

    def __init__(self, seconds: float, log_path: Path) -> None:
        self.seconds = seconds
        self.log_path = log_path
        self.proc: subprocess.Popen[str] | None = None
        self.ready = threading.Event()
        self.finished = threading.Event()
        self.lines: list[str] = []
        self.status = "not requested"

    def start(self, ready_within_s: float) -> None:
        """Start once and wait until the loop runs (or gives up); later calls do nothing."""
        if self.seconds <= 0 or self.status != "not requested":
            return
        if importlib.util.find_spec("torch") is None:
            self.status = "skipped: torch is not importable"
            return
        try:
            log = self.log_path.open("w")
            self.proc = subprocess.Popen(
                [sys.executable, "-c", LOAD_CODE, str(self.seconds)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        except OSError as e:
            self.status = f"not started: {e}"
            return
        threading.Thread(target=self._read, daemon=True).start()
        started = time.monotonic()
        while not self.ready.is_set() and not self.finished.is_set():
            if time.monotonic() - started > ready_within_s:
                break
            self.ready.wait(0.2)
        took = time.monotonic() - started
        if self.ready.is_set():
            self.status = f"running (ready after {took:.1f} s): {self.lines[0]}"
        else:
            self.status = (
                f"not ready after {took:.1f} s: {' | '.join(self.lines) or 'no output (see load.log)'}"
            )

    def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())
            if line.startswith("ready"):
                self.ready.set()
        self.finished.set()

    @property
    def pid(self) -> int | None:
        return None if self.proc is None else self.proc.pid

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.status += f"; exit {self.proc.returncode}; output: {' | '.join(self.lines[-3:])}"
