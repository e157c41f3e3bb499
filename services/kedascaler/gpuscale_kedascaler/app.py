"""The keda-scaler's I/O shell: NATS in, KEDA's gRPC and the external metrics API out.

Data that is not fresh is an error, never a number: KEDA and the HPA then keep the replicas."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

import grpc
from aiohttp import web
from nats.aio.msg import Msg

from gpuscale import codec, subjects
from gpuscale.logging import LogThrottle, get_logger
from gpuscale.natsio import NATS, connect, drain, is_connected
from gpuscale.runtime import ServiceContext, run
from gpuscale.subjects import SubjectError, WorkloadKey
from gpuscale.wire import WireError, WorkloadMetrics

from . import tls
from .core.latest import LatestMetrics, Unavailable
from .core.query import (
    ScalerQuery,
    parse_scaled_object_ref,
)
from .detail import cut
from .externalscaler import externalscaler_pb2_grpc as pb_grpc
from .grpcscaler import ExternalScaler, StreamRefused
from .metrics import KIND, KedaScalerMetrics
from .metricsapi import ExternalMetricsApi
from .settings import KedaScalerSettings

__all__ = ["ExternalScaler", "KedaScalerMetrics", "KedaScalerService", "StreamRefused", "main", "serve"]

SERVICE: Final = "keda-scaler"
EXPIRE_EVERY_S: Final = 30.0
GRPC_GRACE_S: Final = 1.0
# One request's bytes at most: a real ScaledObjectRef is a few hundred (query.MAX_METADATA_*).
MAX_GRPC_MESSAGE: Final = 16 * 1024
# Unary calls in flight beside the open streams, at most (more: RESOURCE_EXHAUSTED from gRPC).
GRPC_UNARY_IN_FLIGHT: Final = 256


class _Waiting:
    """The streams waiting for one workload's next message: forgotten with the last of them."""

    __slots__ = ("count", "event")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.count = 0


class KedaScalerService:
    def __init__(self, ctx: ServiceContext) -> None:
        self.ctx = ctx
        self.settings: KedaScalerSettings = ctx.settings
        self.store = LatestMetrics(self.settings.max_metrics_age)
        self.m = KedaScalerMetrics(ctx)
        self.log = get_logger(service=SERVICE)
        # Keyed by our own words (API, reason), never by what a caller names: once a minute each.
        self.throttle = LogThrottle()
        self.nc: NATS | None = None
        self.grpc_port = 0
        self.serving = False
        self.subscription: Any = None  # the metrics subscription, once made
        self.api = ExternalMetricsApi(self)
        self._changed: dict[WorkloadKey, _Waiting] = {}  # only while a stream waits on the key
        self.streams_open = 0
        self._streams_by_namespace: dict[str, int] = {}  # only while a stream of it is open
        self.grpc_certificates: tls.GrpcCertificates | None = None
        self._last_expire = 0.0
        # A newer aggregator's fields and metric names: ignored, counted once per name.
        self.reader = codec.Reader(WorkloadMetrics, on_unknown=ctx.metrics.unknown_field)

    # --- NATS in ---------------------------------------------------------------------------------

    async def on_metrics(self, msg: Msg) -> None:
        self.handle(msg.subject, msg.data, time.time())

    def handle(self, subject: str, data: bytes, now: float) -> None:
        """One metrics message. Never raises."""
        self.m.messages_in.inc()
        try:
            key = subjects.parse_workload(subject, "metrics")
        except SubjectError:
            self._reject("bad_subject", f"not a metrics subject: {subject[:200]!r}", subject[:200])
            return
        try:
            message = self.reader.decode(data, now)
        except WireError as e:
            self._reject(e.code, e.detail, str(key))
            return
        if (message.namespace, message.kind, message.name) != (key.namespace, key.kind, key.name):
            self._reject(
                "subject_mismatch",
                f"payload {message.namespace}/{message.kind}/{message.name} on {subject!r}",
                str(key),
            )
            return
        if not self.store.observe(message, now):
            self.m.ignored.labels(reason="out_of_order").inc()
            return
        self.m.workloads.set(len(self.store))
        waiting = self._changed.pop(key, None)
        if waiting is not None:
            waiting.event.set()
        if not 0.0 <= now - self._last_expire <= EXPIRE_EVERY_S:  # due, or this clock was set back
            self._last_expire = now
            self.store.expire(now)
            self.m.workloads.set(len(self.store))

    def _reject(self, reason: str, detail: str, source: str) -> None:
        self.m.rejected.labels(kind=KIND, reason=reason).inc()
        held = self.throttle.allow("metrics", reason)
        if held is not None:
            self.log.warning(
                "metrics_rejected", source=source[:200], reason=reason, detail=detail[:300], suppressed=held
            )

    async def changed(self, key: WorkloadKey, timeout_s: float) -> None:
        """Wait until ``key`` gets a message, at most ``timeout_s``."""
        waiting = self._changed.get(key)
        if waiting is None:
            waiting = self._changed[key] = _Waiting()
        waiting.count += 1
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiting.event.wait(), timeout_s)
        finally:
            waiting.count -= 1
            if waiting.count == 0 and self._changed.get(key) is waiting:
                del self._changed[key]

    def open_stream(self, namespace: str) -> None:
        """Room for one more open stream of ``namespace``'s ScaledObjects, or StreamRefused;
        each one opened is closed with :meth:`close_stream`."""
        settings = self.settings
        held = self._streams_by_namespace.get(namespace, 0)
        if self.streams_open >= settings.max_streams:
            raise StreamRefused(
                f"the keda-scaler holds {self.streams_open} streams (at most {settings.max_streams})"
            )
        if held >= settings.max_streams_per_namespace:
            raise StreamRefused(
                f"namespace {namespace} holds {held} streams (at most {settings.max_streams_per_namespace})"
            )
        self.streams_open += 1
        self._streams_by_namespace[namespace] = held + 1
        self.m.streams.set(self.streams_open)

    def close_stream(self, namespace: str) -> None:
        self.streams_open -= 1
        left = self._streams_by_namespace[namespace] - 1
        if left:
            self._streams_by_namespace[namespace] = left
        else:
            del self._streams_by_namespace[namespace]
        self.m.streams.set(self.streams_open)

    def streams_of(self, namespace: str) -> int:
        return self._streams_by_namespace.get(namespace, 0)

    @property
    def waiting_keys(self) -> int:
        """Workloads some open stream waits on (each forgotten with its last stream)."""
        return len(self._changed)

    def refused(self, api: str, method: str, outcome: str, who: str, detail: str) -> None:
        """A request refused for what the caller sent: counted, and logged once a minute per outcome."""
        self.m.requests.labels(api=api, method=method, outcome=outcome).inc()
        held = self.throttle.allow("refused", api, outcome)
        if held is not None:
            self.log.warning(
                "request_refused", api=api, method=method, outcome=outcome, caller=cut(who, 200),
                detail=cut(detail), suppressed=held,
            )  # fmt: skip

    def unavailable(self, api: str, method: str, query: Any, e: Unavailable) -> None:
        self.m.requests.labels(api=api, method=method, outcome=e.reason).inc()
        held = self.throttle.allow("unavailable", api, e.reason)
        if held is not None:
            self.log.info(
                "metric_unavailable", api=api, query=cut(query, 400), reason=e.reason,
                detail=cut(e.message), suppressed=held,
            )  # fmt: skip

    @property
    def api_port(self) -> int:
        """The external metrics API's port, once listening."""
        return self.api.port

    @property
    def tls_cert_file(self) -> Path | None:
        """The external metrics API's serving certificate, once listening."""
        return self.api.tls_cert_file

    # --- gRPC: KEDA's external scaler -------------------------------------------------------------

    def scaler_query(self, ref: Any) -> ScalerQuery:
        return parse_scaled_object_ref(ref.name, ref.namespace, ref.scalerMetadata)

    async def start_grpc(self) -> grpc.aio.Server:
        settings = self.settings
        in_flight = settings.max_streams + GRPC_UNARY_IN_FLIGHT
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE),
                ("grpc.max_concurrent_streams", in_flight),  # KEDA sends every tenant's on one connection
                ("grpc.http2.bdp_probe", 0),  # windows stay small: a refused request is not buffered whole
            ],
            maximum_concurrent_rpcs=in_flight,
        )
        pb_grpc.add_ExternalScalerServicer_to_server(ExternalScaler(self), server)  # type: ignore[no-untyped-call]  # generated, untyped
        address = f"0.0.0.0:{settings.grpc_port}"
        if settings.grpc_plaintext:
            self.grpc_port = server.add_insecure_port(address)
        else:
            files = (
                settings.grpc_tls_cert_file,
                settings.grpc_tls_private_key_file,
                settings.grpc_client_ca_file,
            )
            cert, key, ca = (f for f in files if f is not None)
            self.grpc_certificates = tls.GrpcCertificates(cert, key, ca)
            self.grpc_port = server.add_secure_port(address, self.grpc_certificates.credentials())
        await server.start()
        return server

    def _warn_unauthenticated(self) -> None:
        settings = self.settings
        self.m.unauthenticated.labels(api="grpc").set(1 if settings.grpc_plaintext else 0)
        if settings.grpc_plaintext:
            self.log.warning(
                "grpc_unauthenticated",
                detail="--grpc-plaintext: any pod that reaches the gRPC port reads any namespace's "
                "metrics; give it --grpc-tls-cert-file, --grpc-tls-private-key-file, --grpc-client-ca-file",
            )
        if settings.external_metrics_api:
            anyone = settings.api_any_client or settings.client_ca_file is None
            self.m.unauthenticated.labels(api="external_metrics").set(1 if anyone else 0)
            if anyone:
                self.log.warning(
                    "external_metrics_api_unauthenticated",
                    detail="--api-any-client: any pod that reaches the HTTPS port reads any namespace's "
                    "metrics; give it --client-ca-file (requestheader-client-ca-file)",
                )

    # --- life cycle ---------------------------------------------------------------------------------

    async def serve(self) -> None:
        ctx = self.ctx
        ctx.http.add_readiness("nats", lambda: is_connected(self.nc))
        ctx.http.add_readiness(
            "serving",
            lambda: (True, "serving") if self.serving else (False, "starting the gRPC and HTTPS servers"),
        )
        problems = self.settings.unauthenticated_problems()
        if problems:
            raise ValueError("; ".join(f"{flag}: {message}" for flag, message in problems))
        self._warn_unauthenticated()
        grpc_server = await self.start_grpc()
        api_runner: web.AppRunner | None = None
        try:
            if self.settings.external_metrics_api:
                api_runner = await self.api.start()
        except BaseException:
            await grpc_server.stop(0)
            self.api.remove_own_tls_dir()
            raise
        self.serving = True
        self.log.info(
            "keda_scaler_serving",
            grpc_port=self.grpc_port,
            grpc_client_certificates="not required" if self.settings.grpc_plaintext else "required",
            api_port=self.api_port if api_runner is not None else None,
            max_metrics_age_s=self.settings.max_metrics_age,
            api_client_certificates=(
                "required"
                if self.settings.client_ca_file and not self.settings.api_any_client
                else "not required"
            ),
            max_streams=self.settings.max_streams,
            max_streams_per_namespace=self.settings.max_streams_per_namespace,
        )
        try:
            try:
                self.nc = await connect(
                    self.settings.nats_url,
                    ctx.metrics,
                    name=f"gpuscale-{SERVICE}",
                    creds=str(self.settings.nats_creds) if self.settings.nats_creds else None,
                    tls_ca=str(self.settings.nats_tls_ca) if self.settings.nats_tls_ca else None,
                    reconnect_wait_s=0.5,
                    stop=ctx.stop,
                )
            except Exception:  # noqa: BLE001 - stop was requested before NATS ever answered
                return
            self.subscription = await self.nc.subscribe(subjects.METRICS_ALL, cb=self.on_metrics)
            await ctx.stop.wait()
        finally:
            self.serving = False
            await grpc_server.stop(GRPC_GRACE_S)
            if api_runner is not None:
                await api_runner.cleanup()
            self.api.remove_own_tls_dir()
            await drain(self.nc)
            self.log.info("keda_scaler_stopped")


async def serve(ctx: ServiceContext, on_service: Callable[[KedaScalerService], None] | None = None) -> None:
    service = KedaScalerService(ctx)
    if on_service is not None:
        on_service(service)
    await service.serve()


def main(settings: KedaScalerSettings) -> int:
    problems = settings.unauthenticated_problems()
    if problems:  # as a bad option: one line each, exit 2, before anything listens
        for flag, message in problems:
            print(f"gpuscale keda-scaler: invalid option {flag}: {message}", file=sys.stderr)
        return 2
    return run(SERVICE, settings, serve)
