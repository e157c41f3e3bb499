"""Each part of the demo as its own process, as it would run in a cluster."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    def tail(self, lines: int = 8) -> str:
        try:
            with self.log_path.open("rb") as f:
                return b"".join(deque(f, maxlen=lines)).decode(errors="replace")
        except OSError:
            return ""


class ProcessGroup:
    """Starts ``gpuscale <command>`` children with logs in ``log_dir``; stops them all."""

    def __init__(self, log_dir: Path, env: dict[str, str] | None = None) -> None:
        self.log_dir = log_dir
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.children: list[Child] = []

    def start(self, name: str, command: str, *args: str, env: dict[str, str] | None = None) -> Child:
        argv = [sys.executable, "-m", "gpuscale_cli.main", command, *args]
        child = Child(name, argv, self.log_dir / f"{name}.log")
        child._log = child.log_path.open("ab")
        # Own session: a Ctrl-C on the terminal reaches the demo, which then stops
        # the children in order, instead of every child at once.
        child.proc = subprocess.Popen(  # noqa: S603 - our own program, fixed argv
            argv,
            stdout=child._log,
            stderr=subprocess.STDOUT,
            env={**self.env, **(env or {})},
            start_new_session=True,
        )
        self.children.append(child)
        return child

    def exited(self) -> list[Child]:
        """Children that stopped on their own."""
        return [c for c in self.children if c.proc is not None and c.proc.poll() is not None]

    def stop_all(self, timeout_s: float = 6.0) -> dict[str, int | None]:
        """SIGTERM to every child but the first, which is stopped once they have exited
        (the demo's kube-sim: the services release their leases and write their last
        status through it as they stop); each wave's stragglers are killed after
        ``timeout_s``. Exit codes by name."""
        codes: dict[str, int | None] = {}
        for wave in (self.children[1:], self.children[:1]):
            for child in reversed(wave):
                if child.proc is not None and child.proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        child.proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + timeout_s
            for child in wave:
                if child.proc is None:
                    continue
                try:
                    codes[child.name] = child.proc.wait(max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.proc.kill()
                    codes[child.name] = child.proc.wait()
                if child._log is not None:
                    child._log.close()
        return codes
