"""The running demo is a door to the other tools: with its web port taken it
moves to a free one and says so, and the `gpuscale status`, `kubectl` and
`gpuscale doctor` lines it prints work against it as printed."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuscale_cli.demo.settings import DemoSettings

DEFAULT_UI_PORT = DemoSettings().ui_port
GPUSCALE = [sys.executable, "-m", "gpuscale_cli.main"]
DEADLINE_S = 120.0  # a busy 2-core machine starts the nine processes slowly


@pytest.fixture
def default_ui_port_taken() -> Iterator[None]:
    """Something else listens on the demo's default web port (or already did)."""
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", DEFAULT_UI_PORT))
        s.listen()
    except OSError:
        pass  # taken already: just as good
    try:
        yield
    finally:
        s.close()


class Demo:
    """``gpuscale demo`` as a subprocess; its stdout read line by line."""

    def __init__(self, log_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [*GPUSCALE, "demo", "--duration", "300", "--log-dir", str(log_dir)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def line_starting(self, prefix: str) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            found = next((line.strip() for line in list(self.lines) if line.strip().startswith(prefix)), None)
            if found is not None:
                return found
            assert self.proc.poll() is None, "the demo exited:\n" + "\n".join(self.lines)
            time.sleep(0.2)
        raise AssertionError(f"no line starting {prefix!r} in:\n" + "\n".join(self.lines))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run_printed(line: str) -> subprocess.CompletedProcess[str]:
    """A printed command line, run as printed (``gpuscale`` is this checkout's)."""
    argv = shlex.split(line)
    if argv[0] == "gpuscale":
        argv = [*GPUSCALE, *argv[1:]]
    return subprocess.run(argv, capture_output=True, text=True, timeout=90, check=False)


def until_ok(line: str, want: str) -> subprocess.CompletedProcess[str]:
    """The printed command, until its output shows ``want`` (the demo's parts start one by one)."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        result = run_printed(line)
        if result.returncode == 0 and want in result.stdout:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{line!r} never showed {want!r}: {result}")
        time.sleep(1.0)


@pytest.mark.serial  # nine processes and three clients: alone, so a busy machine starts them in time
@pytest.mark.timeout(600)  # each wait below has its own deadline; together they may pass the default 120 s
def test_the_demo_moves_off_a_taken_port_and_its_printed_lines_reach_it(
    default_ui_port_taken: None, tmp_path: Path
) -> None:
    demo = Demo(tmp_path / "logs")
    try:
        moved = demo.line_starting(f"gpuscale demo: port {DEFAULT_UI_PORT} is taken")
        assert "the web page is on port" in moved
        status = demo.line_starting("gpuscale status ")
        doctor = demo.line_starting("gpuscale doctor ")
        kubectl = demo.line_starting("kubectl --kubeconfig ")
        env_file = tmp_path / "logs" / "demo.env"
        assert env_file.is_file()
        env = env_file.read_text()
        assert "GPUSCALE_NATS_URL=nats://127.0.0.1:" in env
        assert "KUBECONFIG=" in env

        table = until_ok(status, "bert-intent-detection")
        assert "Deployment/bert-intent-detection" in table.stdout
        if shutil.which("kubectl") is not None:
            got = until_ok(kubectl, "bert-intent-detection")
            assert "NAME" in got.stdout
        until_ok(doctor, "All 7 checks pass.")
        # The env file alone is enough: `. demo.env; gpuscale doctor`.
        sourced = subprocess.run(
            ["bash", "-c", f'. "{env_file}" && exec "$0" -m gpuscale_cli.main doctor', sys.executable],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
        )
        assert sourced.returncode == 0, sourced
        assert not any("Traceback" in line for line in demo.lines)
    finally:
        demo.stop()
    assert demo.proc.returncode == 0, "\n".join(demo.lines)
