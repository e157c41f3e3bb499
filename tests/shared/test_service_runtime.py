"""The shared runtime as a real process: probes, metrics, JSON logs, graceful SIGTERM."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuscale.embedded_nats import EmbeddedNats, free_port

from ..waiting import eventually_sync

pytestmark = pytest.mark.integration

SERVICE = Path(__file__).with_name("sample_service.py")


def _get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_service_probes_metrics_and_graceful_stop(nats_server: EmbeddedNats, sig: signal.Signals) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(SERVICE), nats_server.url, str(port)], stderr=subprocess.PIPE, text=True
    )
    try:
        eventually_sync(lambda: _get(port, "/readyz")[0] == 200)
        assert _get(port, "/healthz")[0] == 200
        status, body = _get(port, "/metrics")
        assert status == 200
        assert 'gpuscale_messages_in_total{kind="samples"} 1.0' in body
        assert "gpuscale_nats_connected 1.0" in body
        assert "gpuscale_event_loop_lag_seconds_bucket" in body

        nats_server.stop()  # NATS gone: not ready, still alive
        eventually_sync(lambda: _get(port, "/readyz")[0] == 503)
        assert json.loads(_get(port, "/readyz")[1])["checks"]["nats"]["ok"] is False
        assert _get(port, "/healthz")[0] == 200
        nats_server.start()
        eventually_sync(lambda: _get(port, "/readyz")[0] == 200)

        started = time.monotonic()
        proc.send_signal(sig)
        code = proc.wait(timeout=10)
        assert time.monotonic() - started < 5.0
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = proc.stderr.read() if proc.stderr else ""
    assert code == 0, stderr
    assert "Traceback" not in stderr
    records = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    events = [r["event"] for r in records]
    assert {
        "service_starting",
        "nats_connected",
        "nats_disconnected",
        "nats_reconnected",
        "shutdown_requested",
        "service_stopped",
    } <= set(events)
    assert all(r["service"] == "sample" for r in records)


def test_busy_http_port_is_a_clear_error(nats_server: EmbeddedNats) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))  # noqa: S104 - collide with the service's own wildcard bind
        s.listen()
        port = s.getsockname()[1]
        result = subprocess.run(
            [sys.executable, str(SERVICE), nats_server.url, str(port)],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    assert result.returncode == 1
    assert "http_port_unavailable" in result.stderr
    assert "Traceback" not in result.stderr
