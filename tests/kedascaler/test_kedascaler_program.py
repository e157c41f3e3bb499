"""`gpuscale keda-scaler` as its own process: ready when serving and connected, a clean stop
on SIGTERM, and one line naming the option for a bad one."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from gpuscale.embedded_nats import EmbeddedNats, free_port

from ..waiting import eventually
from .certs import shared_pki

GPUSCALE = Path(sys.executable).with_name("gpuscale")


@pytest.mark.integration
async def test_ready_then_a_clean_stop(nats_server: EmbeddedNats) -> None:
    http_port = free_port()
    process = await asyncio.create_subprocess_exec(
        str(GPUSCALE),
        "keda-scaler",
        f"--nats-url={nats_server.url}",
        f"--http-port={http_port}",
        "--grpc-port=0",
        "--api-port=0",
        *(f"--{k.replace('_', '-')}={v}" for k, v in shared_pki().grpc_options().items()),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:

        def ready() -> bool:
            assert process.returncode is None, "the keda-scaler exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=2) as r:
                    body = json.loads(r.read())
            except (urllib.error.URLError, ConnectionError):
                return False
            return bool(body["ready"]) and set(body["checks"]) == {"nats", "serving"}

        await eventually(ready, 30, "the keda-scaler to be ready")
        process.send_signal(signal.SIGTERM)
        code = await asyncio.wait_for(process.wait(), 20)
        assert code == 0
        assert process.stdout is not None
        out = (await process.stdout.read()).decode()
        assert "keda_scaler_serving" in out
        assert "keda_scaler_stopped" in out
        assert "unauthenticated" not in out
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--tls-cert-file=/etc/hostname"], "--tls-cert-file and --tls-private-key-file go together"),
        (["--grpc-port=9404"], "must differ"),
        (["--max-metrics-age=soon"], "invalid option --max-metrics-age"),
        (["--client-ca-file=/nonexistent"], "invalid option --client-ca-file: no such file"),
        # Authenticated by default: no certificates, no start (a plaintext port must be asked for).
        ([], "invalid option --grpc-client-ca-file: the gRPC port needs --grpc-tls-cert-file"),
        (
            ["--grpc-plaintext", "--external-metrics-api"],
            "invalid option --client-ca-file: the external metrics API needs the API server's front-proxy CA",
        ),
        (["--max-streams=10", "--max-streams-per-namespace=11"], "must not exceed --max-streams"),
    ],
)
def test_a_bad_option_exits_2_with_one_line(args: list[str], says: str) -> None:
    done = subprocess.run(
        [str(GPUSCALE), "keda-scaler", *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert says in done.stderr


@pytest.mark.integration
async def test_the_plaintext_opt_out_is_loud(nats_server: EmbeddedNats) -> None:
    """--grpc-plaintext and --api-any-client start, each with a warning and a gauge to alert on."""
    http_port = free_port()
    process = await asyncio.create_subprocess_exec(
        str(GPUSCALE), "keda-scaler", f"--nats-url={nats_server.url}", f"--http-port={http_port}",
        "--grpc-port=0", "--api-port=0", "--grpc-plaintext", "--external-metrics-api", "--api-any-client",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:

        def metrics() -> str:
            assert process.returncode is None, "the keda-scaler exited"
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=2) as r:
                    text: str = r.read().decode()
            except (urllib.error.URLError, ConnectionError):
                return ""
            return text if "keda_scaler" in text or "gpuscale_kedascaler_unauthenticated{" in text else ""

        text = await eventually(metrics, 30, "the keda-scaler's /metrics")
        assert 'gpuscale_kedascaler_unauthenticated{api="grpc"} 1.0' in text
        assert 'gpuscale_kedascaler_unauthenticated{api="external_metrics"} 1.0' in text
        process.send_signal(signal.SIGTERM)
        assert await asyncio.wait_for(process.wait(), 20) == 0
        assert process.stdout is not None
        out = (await process.stdout.read()).decode()
        assert "grpc_unauthenticated" in out
        assert "external_metrics_api_unauthenticated" in out
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
