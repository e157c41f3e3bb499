"""One tenant cannot hurt another through the keda-scaler.

Each test plays a tenant against the real keda-scaler (real gRPC server with mutual TLS, real
HTTPS server, real nats-server feeding it): what a tenant controls (its ScaledObject's trigger
metadata, how many ScaledObjects it has, a pod that calls the port directly) must cost a
bounded amount of memory and log, must not read another namespace, and must leave the other
tenants served.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
import psutil
import pytest
from structlog.testing import capture_logs

from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.natsio import NATS
from gpuscale.subjects import WorkloadKey
from gpuscale_kedascaler.externalscaler import externalscaler_pb2 as pb
from gpuscale_kedascaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

from ..waiting import eventually
from .certs import authority, grpc_channel, shared_pki
from .harness import RunningScaler, keda_channel, metrics_payload, publish, running_scaler, settings_for
from .test_kedascaler_external_metrics import BASE, get, trust

pytestmark = pytest.mark.integration

GPUSCALE = Path(sys.executable).with_name("gpuscale")
A_MODEL = WorkloadKey("tenant-a", "Deployment", "bert")
B_SECRET = WorkloadKey("tenant-b", "Deployment", "secret-model")


def trigger(workload: str = "bert", **more: str) -> dict[str, str]:
    return {"scalerAddress": "gpuscale-keda-scaler.gpuscale.svc:9500", "workload": workload,
            "metric": "gpu_util", "target": "70", **more}  # fmt: skip


def ref(namespace: str, metadata: dict[str, str] | None = None, name: str = "so") -> Any:
    return pb.ScaledObjectRef(name=name, namespace=namespace, scalerMetadata=metadata or trigger())


def value_request(namespace: str, metadata: dict[str, str] | None = None) -> Any:
    return pb.GetMetricsRequest(scaledObjectRef=ref(namespace, metadata), metricName="gpuscale-gpu_util")


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


@pytest.fixture
async def scaler(nats_server: EmbeddedNats, nats_client: NATS) -> AsyncIterator[RunningScaler]:
    settings = settings_for(
        nats_server.url,
        max_streams="6",
        max_streams_per_namespace="3",
        max_metrics_age="600",  # no test here waits for staleness; a busy machine may be slow
        **shared_pki().api_options(),
    )
    async with running_scaler(settings) as running:
        await running.fed(nats_client, metrics_payload(A_MODEL, averages={"gpu_util": 40.0}))
        await running.fed(nats_client, metrics_payload(B_SECRET, averages={"gpu_util": 90.0}))
        yield running


@pytest.fixture
async def keda(scaler: RunningScaler) -> AsyncIterator[Any]:
    async with keda_channel(scaler) as channel:
        yield pb_grpc.ExternalScalerStub(channel)


async def b_is_served(keda: Any) -> None:
    answer = await keda.GetMetrics(value_request("tenant-b", trigger("secret-model")))
    assert answer.metricValues[0].metricValueFloat == 90.0


# --- who may call --------------------------------------------------------------------------------


async def test_only_a_client_certificate_of_kedas_ca_is_let_in(scaler: RunningScaler, keda: Any) -> None:
    """A pod of any tenant that reaches the port directly, without KEDA's certificate, gets no
    handshake: it cannot send a ScaledObjectRef naming another namespace as its own."""
    pki = shared_pki()
    port = scaler.service.grpc_port
    for who in (None, pki.stranger, pki.front_proxy):
        async with grpc_channel(port, who) as channel:
            error = await rpc_error(pb_grpc.ExternalScalerStub(channel).GetMetrics(value_request("tenant-b")))
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error  # the handshake failed
    # Nor in plaintext.
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        error = await rpc_error(pb_grpc.ExternalScalerStub(channel).GetMetrics(value_request("tenant-b")))
        assert error.code() == grpc.StatusCode.UNAVAILABLE
    answer = await keda.GetMetrics(value_request("tenant-a"))
    assert answer.metricValues[0].metricValueFloat == 40.0


# --- what a trigger may read ---------------------------------------------------------------------


async def test_a_trigger_naming_another_namespace_is_refused(scaler: RunningScaler, keda: Any) -> None:
    stolen = trigger("secret-model", namespace="tenant-b")
    for call in (
        keda.GetMetrics(value_request("tenant-a", stolen)),
        keda.IsActive(ref("tenant-a", stolen)),
        keda.GetMetricSpec(ref("tenant-a", stolen)),
    ):
        error = await rpc_error(call)
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "is not the ScaledObject's own (tenant-a)" in (error.details() or "")
        assert "90" not in (error.details() or "")
    assert (
        scaler.counter(
            "gpuscale_kedascaler_requests_total", api="grpc", method="GetMetrics", outcome="other_namespace"
        )
        == 1
    )
    # Its own namespace, named or not, is served; tenant-b's own ScaledObject still reads its value.
    own = await keda.GetMetrics(value_request("tenant-a", trigger(namespace="tenant-a")))
    assert own.metricValues[0].metricValueFloat == 40.0
    await b_is_served(keda)


async def test_a_guessed_name_lists_only_the_callers_namespace(scaler: RunningScaler, keda: Any) -> None:
    error = await rpc_error(keda.GetMetrics(value_request("tenant-a", trigger("guess"))))
    details = error.details() or ""
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "workloads seen in tenant-a: Deployment/bert" in details
    assert "secret-model" not in details
    assert "tenant-b" not in details
    # Guessing in tenant-b's namespace from tenant-a's ScaledObject lists nothing of tenant-b's.
    error = await rpc_error(
        keda.GetMetrics(value_request("tenant-a", trigger("guess", namespace="tenant-b")))
    )
    assert error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "secret-model" not in (error.details() or "")
    # The external metrics API: the namespace is the URL's (the API server authorized the caller for it).
    code, body = await get(
        scaler, f"{BASE}/namespaces/tenant-a/gpuscale-gpu_util?labelSelector=workload%3Dguess", trust(scaler)
    )
    assert code == 404
    assert "Deployment/bert" in body["message"]
    assert "secret-model" not in body["message"]


# --- what one request may cost -------------------------------------------------------------------


@contextlib.asynccontextmanager
async def scaler_process(nats_url: str, log: Path) -> AsyncIterator[tuple[psutil.Process, int]]:
    """``gpuscale keda-scaler`` as deployed, in its own process (so that its memory is its own),
    logging to ``log``; yields the process and its gRPC port."""
    # Ports picked free may be taken before the child binds them (parallel suites): try fresh ones.
    for attempt in range(3):
        process, grpc_port = await start_scaler(nats_url, log)
        if process.returncode is None or attempt == 2 or "address already in use" not in tail(log).lower():
            break
    try:
        assert process.returncode is None, f"the keda-scaler exited: {tail(log)}"
        yield psutil.Process(process.pid), grpc_port
    finally:
        if process.returncode is None:
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 20)
            except TimeoutError:
                process.kill()
                await process.wait()


def tail(log: Path) -> str:
    return log.read_text()[-2000:]


async def start_scaler(nats_url: str, log: Path) -> tuple[asyncio.subprocess.Process, int]:
    """The keda-scaler started and ready, or exited (its log says why); with its gRPC port."""
    http_port, grpc_port = free_port(), free_port()
    options = [f"--{k.replace('_', '-')}={v}" for k, v in shared_pki().grpc_options().items()]
    with log.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            str(GPUSCALE), "keda-scaler", f"--nats-url={nats_url}", f"--http-port={http_port}",
            f"--grpc-port={grpc_port}", "--max-metrics-age=600", *options, stdout=out, stderr=out,
        )  # fmt: skip

    def ready_or_exited() -> bool:
        if process.returncode is not None:
            return True
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=2) as r:
                return bool(json.loads(r.read())["ready"])
        except (urllib.error.URLError, ConnectionError):
            return False

    try:
        await eventually(ready_or_exited, 30, "the keda-scaler to be ready")
    except BaseException:
        process.kill()
        await process.wait()
        raise
    return process, grpc_port


def rss_mib(process: psutil.Process) -> float:
    return float(process.memory_info().rss) / 2**20


async def test_oversized_metadata_is_refused_and_costs_no_memory_nor_log(
    nats_server: EmbeddedNats, nats_client: NATS, tmp_path: Path
) -> None:
    """20 requests with 3 MiB of metadata each: refused by size before they are read; the
    keda-scaler's memory and log stay flat; another tenant is served throughout."""
    log = tmp_path / "keda-scaler.log"
    async with (
        scaler_process(nats_server.url, log) as (process, port),
        grpc_channel(port, shared_pki().keda) as channel,
    ):
        keda = pb_grpc.ExternalScalerStub(channel)

        async def b_is_known() -> bool:
            await publish(nats_client, metrics_payload(B_SECRET, averages={"gpu_util": 90.0}))
            try:
                await b_is_served(keda)
            except grpc.aio.AioRpcError:
                return False  # its subscription is not made yet
            return True

        await eventually(b_is_known, what="tenant-b's value")
        for _ in range(50):  # warm: what serving costs anyway is not the tenant's
            await b_is_served(keda)
        before, logged = rss_mib(process), log.stat().st_size
        huge = trigger(**{"x" * 64: "y" * (3 * 2**20)})
        for _ in range(20):
            error = await rpc_error(keda.GetMetrics(value_request("tenant-a", huge)))
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert len(error.details() or "") < 2000
            await b_is_served(keda)
        grown, more_log = rss_mib(process) - before, log.stat().st_size - logged
    # Before the bound: 73 -> 482 MiB and 225 MiB of log for 50 such requests.
    assert grown < 16, f"the keda-scaler grew by {grown:.0f} MiB for 60 MiB of refused requests"
    assert more_log < 10_000, f"{more_log} bytes of log for 20 refused requests"


async def test_metadata_over_the_entry_and_length_bounds_is_refused_with_one_line(
    scaler: RunningScaler, keda: Any
) -> None:
    """Under the byte limit but over the entry and length limits: refused with what was too large."""
    many = trigger(**{f"k{i}": "v" for i in range(40)})
    long_value = trigger(workload="w" * 2000)
    with capture_logs() as logs:
        for metadata, says in ((many, "has 44 entries (at most 32)"), (long_value, "longer than 1024")):
            for _ in range(20):
                error = await rpc_error(keda.IsActive(ref("tenant-a", metadata)))
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert says in (error.details() or ""), error.details()
                assert len(error.details() or "") < 1200
    refused = [line for line in logs if line["event"] == "request_refused"]
    assert len(refused) == 1, "refusals are logged once a minute per reason, not per request"
    assert len(repr(refused[0])) < 2000
    assert (
        scaler.counter(
            "gpuscale_kedascaler_requests_total", api="grpc", method="IsActive", outcome="too_large"
        )
        == 40
    )
    await b_is_served(keda)


async def test_a_target_past_int64_is_refused_with_its_reason_counted_and_logged_once(
    scaler: RunningScaler, keda: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """KEDA's targetSize is an int64: 1e300 raised in the handler (UNKNOWN, "Value out of range",
    a traceback logged by gRPC per call, no count). Now a refusal like any other bad metadata."""
    with capture_logs() as logs:
        for target in ("1e300", "9.3e18"):
            for _ in range(10):
                error = await rpc_error(keda.GetMetricSpec(ref("tenant-a", trigger(target=target))))
                assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error
                assert "target must be below 9.22e+18" in (error.details() or ""), error.details()
    assert [line["outcome"] for line in logs if line["event"] == "request_refused"] == ["invalid"]
    assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.records
    counted = scaler.counter(
        "gpuscale_kedascaler_requests_total", api="grpc", method="GetMetricSpec", outcome="invalid"
    )
    assert counted == 20
    spec = await keda.GetMetricSpec(ref("tenant-a", trigger(target="9.2e18")))  # the largest still served
    assert spec.metricSpecs[0].targetSize == 9_200_000_000_000_000_000
    await b_is_served(keda)


# --- how many streams ----------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def streams(keda: Any, namespace: str, count: int, workload: str = "bert") -> AsyncIterator[list[Any]]:
    """``count`` open StreamIsActive calls of ``namespace``'s ScaledObjects, cancelled at exit."""
    calls = [
        keda.StreamIsActive(ref(namespace, trigger(f"{workload}-{i}"), name=f"so-{i}")) for i in range(count)
    ]
    try:
        yield calls
    finally:
        for call in calls:
            call.cancel()


async def stream_error(call: Any) -> grpc.aio.AioRpcError | None:
    """How a stream ended, if it did before pushing anything (None: still open, or pushed)."""
    try:
        await asyncio.wait_for(call.read(), 0.5)
    except grpc.aio.AioRpcError as e:
        return e
    except TimeoutError:
        return None
    return None


async def test_streams_are_bounded_per_namespace_and_in_total_and_forgotten_when_closed(
    scaler: RunningScaler, keda: Any
) -> None:
    service = scaler.service

    def open_streams() -> int:
        return int(scaler.counter("gpuscale_kedascaler_active_streams"))

    async with streams(keda, "tenant-a", 3, "nowhere-a"):
        await eventually(lambda: open_streams() == 3, what="tenant-a's three streams to open")
        async with streams(keda, "tenant-a", 1, "one-more") as (extra,):
            error = await stream_error(extra)
            assert error is not None
            assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "namespace tenant-a holds 3 streams (at most 3)" in (error.details() or "")
        # Another tenant is not held back by tenant-a's streams...
        async with streams(keda, "tenant-b", 3, "nowhere-b"):
            await eventually(lambda: open_streams() == 6, what="tenant-b's three streams to open")
            assert service.streams_of("tenant-b") == 3
            # ...and the total holds: a third namespace waits for room, as its status says.
            async with streams(keda, "tenant-c", 1) as (late,):
                error = await stream_error(late)
                assert error is not None
                assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
                assert "holds 6 streams (at most 6)" in (error.details() or "")
            await b_is_served(keda)  # unary calls still answered
            assert service.waiting_keys == 6  # each stream waits on its own (made-up) workload
        await eventually(lambda: open_streams() == 3, what="tenant-b's streams to close")
    await eventually(lambda: open_streams() == 0, what="tenant-a's streams to close")
    # Nothing the streams named outlives them.
    await eventually(lambda: service.waiting_keys == 0, what="the streams' workload keys to go")
    assert service.streams_of("tenant-a") == service.streams_of("tenant-b") == 0
    assert not service._streams_by_namespace
    assert (
        scaler.counter(
            "gpuscale_kedascaler_requests_total",
            api="grpc",
            method="StreamIsActive",
            outcome="too_many_streams",
        )
        == 2
    )
    # Room again for the tenant that was turned away.
    async with streams(keda, "tenant-c", 1):
        await eventually(lambda: open_streams() == 1, what="tenant-c's stream to open")


async def test_the_grpc_certificate_is_reread_when_its_files_change(
    nats_server: EmbeddedNats, tmp_path: Any
) -> None:
    """cert-manager renews the mounted Secret: new connections get the new certificate."""

    pki = shared_pki()
    files = {"cert": tmp_path / "tls.crt", "key": tmp_path / "tls.key"}
    files["cert"].write_bytes(pki.server[0].read_bytes())
    files["key"].write_bytes(pki.server[1].read_bytes())
    settings = settings_for(
        nats_server.url, grpc_tls_cert_file=str(files["cert"]), grpc_tls_private_key_file=str(files["key"])
    )
    async with running_scaler(settings) as scaler:
        certificates = scaler.service.grpc_certificates
        assert certificates is not None
        certificates.check_every_s = 0.0
        # A certificate of a new server CA, as after a CA rotation (the client CA stays).
        renewed_ca = authority(tmp_path, "renewed-ca")
        cert, key = renewed_ca.issue("gpuscale-keda-scaler", server=True)
        files["key"].write_bytes(key.read_bytes())
        files["cert"].write_bytes(cert.read_bytes())

        async def served_with_new() -> bool:
            async with grpc_channel(
                scaler.service.grpc_port, pki.keda, trust=renewed_ca.cert_file
            ) as channel:
                try:
                    await pb_grpc.ExternalScalerStub(channel).GetMetricSpec(ref("tenant-a"))
                except grpc.aio.AioRpcError:
                    return False
            return True

        await eventually(served_with_new, what="the renewed certificate to be served")
        assert certificates.loads == 2
