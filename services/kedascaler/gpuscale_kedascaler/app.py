"""The keda-scaler's I/O shell: NATS in, KEDA's gRPC and the external metrics API out.

- NATS: one callback subscription on ``gpuscale.v1.metrics.>``; each message
  is decoded (``gpuscale.codec``), checked against its subject and kept as its
  workload's latest (:class:`~gpuscale_kedascaler.core.latest.LatestMetrics`),
  stamped with its arrival time.
- gRPC (``--grpc-port``): KEDA's ``externalscaler.ExternalScaler``, mutual TLS
  (KEDA's client certificate). A value that is not fresh is an error
  (UNAVAILABLE), never a number: KEDA then keeps the current replicas (or
  applies the ScaledObject's fallback) instead of scaling on old data, and does
  not scale to zero on missing data. A trigger reads its own ScaledObject's
  namespace only; requests, metadata and open streams are bounded.
- HTTPS (``--api-port``, with ``--external-metrics-api``): the external metrics
  API for an APIService, to the API server's front proxy only (its client
  certificate); stale data is a 503 Status, which the HPA reports as
  FailedGetExternalMetric and does not scale on.
- HTTP (``--http-port``): /healthz, /readyz, /metrics (the shared runtime).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final

import grpc
from aiohttp import web
from nats.aio.msg import Msg
from prometheus_client import Counter, Gauge

from gpuscale import codec, subjects
from gpuscale.logging import LogThrottle, get_logger
from gpuscale.natsio import NATS, connect, drain, is_connected
from gpuscale.runtime import ServiceContext, run
from gpuscale.subjects import SubjectError, WorkloadKey
from gpuscale.wire import WireError, WorkloadMetrics

from . import tls
from .core import external_api
from .core.latest import LatestMetrics, Unavailable
from .core.query import (
    OTHER_NAMESPACE,
    TOO_LARGE,
    QueryError,
    ScalerQuery,
    parse_scaled_object_ref,
)
from .externalscaler import externalscaler_pb2 as pb
from .externalscaler import externalscaler_pb2_grpc as pb_grpc
from .settings import KedaScalerSettings

SERVICE: Final = "keda-scaler"
KIND: Final = "metrics"
# How often an open StreamIsActive re-checks a workload that sends nothing (to notice staleness).
STREAM_RECHECK_S: Final = 1.0
EXPIRE_EVERY_S: Final = 30.0
GRPC_GRACE_S: Final = 1.0
# KEDA prefixes the names it got from GetMetricSpec with "s<trigger index>-" in older releases.
_KEDA_INDEX: Final = re.compile(r"^s\d+-")
# One request's bytes at most: a real ScaledObjectRef is a few hundred (query.MAX_METADATA_*).
MAX_GRPC_MESSAGE: Final = 16 * 1024
# Unary calls in flight beside the open streams, at most (more: RESOURCE_EXHAUSTED from gRPC).
GRPC_UNARY_IN_FLIGHT: Final = 256
# The external metrics API takes GETs: no body.
MAX_HTTP_BODY: Final = 16 * 1024
# Caller text in a log line or a status detail is cut to this.
DETAIL_MAX: Final = 500


class KedaScalerMetrics:
    def __init__(self, ctx: ServiceContext) -> None:
        registry = ctx.metrics.registry
        self.messages_in = ctx.metrics.messages_in.labels(kind=KIND)
        self.rejected = ctx.metrics.messages_rejected
        ctx.metrics.reads(KIND)  # born at 0: an alert sees the first rejection
        self.ignored = Counter(
            "gpuscale_kedascaler_messages_ignored_total",
            "Valid metrics messages not kept: out_of_order (older than the one kept)",
            ["reason"],
            registry=registry,
        )
        self.requests = Counter(
            "gpuscale_kedascaler_requests_total",
            "Requests answered, by API (grpc, external_metrics), method and outcome "
            "(ok, invalid, no_metrics, stale, no_fresh_pods, metric_not_reported, not_found; refused: "
            "too_large, other_namespace, too_many_streams, forbidden)",
            ["api", "method", "outcome"],
            registry=registry,
        )
        self.unauthenticated = Gauge(
            "gpuscale_kedascaler_unauthenticated",
            "1 while an API serves callers without a client certificate (--grpc-plaintext, "
            "--api-any-client): alert on it",
            ["api"],
            registry=registry,
        )
        self.workloads = Gauge(
            "gpuscale_kedascaler_workloads", "Workloads with metrics received recently", registry=registry
        )
        self.streams = Gauge(
            "gpuscale_kedascaler_active_streams",
            "Open StreamIsActive streams (external-push)",
            registry=registry,
        )


class _Waiting:
    """The streams waiting for one workload's next message: forgotten with the last of them."""

    __slots__ = ("count", "event")

    def __init__(self) -> None:
        self.event = asyncio.Event()
        self.count = 0


def _cut(text: object, limit: int = DETAIL_MAX) -> str:
    raw = str(text)
    return raw if len(raw) <= limit else f"{raw[:limit]}... (+{len(raw) - limit} more)"


class StreamRefused(Exception):
    """No room for another stream: in all, or for the asking ScaledObject's namespace."""


class KedaScalerService:
    def __init__(self, ctx: ServiceContext, tls_dir: Path | None = None) -> None:
        self.ctx = ctx
        self.settings: KedaScalerSettings = ctx.settings
        self.store = LatestMetrics(self.settings.max_metrics_age)
        self.m = KedaScalerMetrics(ctx)
        self.log = get_logger(service=SERVICE)
        # Keyed by our own words (API, reason), never by what a caller names: once a minute each.
        self.throttle = LogThrottle()
        self.nc: NATS | None = None
        self.grpc_port = 0
        self.api_port = 0
        self.serving = False
        self.subscription: Any = None  # the metrics subscription, once made
        self.tls_cert_file: Path | None = None  # the external metrics API's serving certificate
        self._tls_dir = tls_dir
        self._own_tls_dir: Path | None = None  # made here for a self-signed key: removed at stop
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
                "request_refused", api=api, method=method, outcome=outcome, caller=_cut(who, 200),
                detail=_cut(detail), suppressed=held,
            )  # fmt: skip

    def _unavailable(self, api: str, method: str, query: Any, e: Unavailable) -> None:
        self.m.requests.labels(api=api, method=method, outcome=e.reason).inc()
        held = self.throttle.allow("unavailable", api, e.reason)
        if held is not None:
            self.log.info(
                "metric_unavailable", api=api, query=_cut(query, 400), reason=e.reason,
                detail=_cut(e.message), suppressed=held,
            )  # fmt: skip

    # --- HTTPS: the external metrics API ----------------------------------------------------------

    def api_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_HTTP_BODY, middlewares=[self._allowed_names])
        base = external_api.BASE_PATH
        routes: list[tuple[str, Callable[[web.Request], Any]]] = [
            ("/apis", lambda _r: external_api.api_group_list()),
            (f"/apis/{external_api.GROUP}", lambda _r: external_api.api_group()),
            (base, lambda _r: external_api.resource_list()),
            (f"{base}/namespaces/{{namespace}}/{{metric}}", self._external_value),
            ("/healthz", lambda _r: {"status": "ok"}),
        ]
        for path, handler in routes:
            app.router.add_route("*", path, self._json_handler(handler))
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    @web.middleware
    async def _allowed_names(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """requestheader-allowed-names: the handshake proved the CA; this, which of its certificates."""
        allowed = self.settings.requestheader_allowed_names
        if allowed and self.settings.client_ca_file is not None:
            name = tls.peer_common_name(
                request.transport.get_extra_info("peercert") if request.transport else None
            )
            if name not in allowed:
                self.refused(
                    "external_metrics", "any", "forbidden", str(name), "client certificate name not allowed"
                )
                message = f"client certificate {_cut(name, 80)!r} is not one of --requestheader-allowed-names"
                return web.json_response(external_api.status(403, "Forbidden", message), status=403)
        response: web.StreamResponse = await handler(request)
        return response

    def _json_handler(self, handler: Callable[[web.Request], Any]) -> Callable[[web.Request], Any]:
        async def respond(request: web.Request) -> web.Response:
            if request.method not in ("GET", "HEAD"):
                return web.json_response(
                    external_api.status(405, "MethodNotAllowed", f"{request.method} is not supported"),
                    status=405,
                )
            try:
                body = handler(request)
            except external_api.ApiError as e:
                return web.json_response(e.body, status=e.code)
            return web.json_response(body)

        return respond

    async def _not_found(self, request: web.Request) -> web.Response:
        message = f"the server could not find the requested resource {_cut(request.path, 200)!r}"
        return web.json_response(external_api.status(404, "NotFound", message), status=404)

    def _external_value(self, request: web.Request) -> Any:
        method = "get_value"
        try:
            query = external_api.parse_request(
                request.match_info["namespace"],
                request.match_info["metric"],
                request.query.get("labelSelector"),
            )
        except external_api.ApiError as e:
            self.m.requests.labels(
                api="external_metrics", method=method, outcome="not_found" if e.code == 404 else "invalid"
            ).inc()
            raise
        try:
            reading = self.store.read(query, time.time())
        except Unavailable as e:
            self._unavailable("external_metrics", method, query.workload, e)
            raise external_api.unavailable(e) from None
        self.m.requests.labels(api="external_metrics", method=method, outcome="ok").inc()
        return external_api.value_list(reading)

    async def start_api(self) -> web.AppRunner:
        settings = self.settings
        if settings.tls_cert_file is not None and settings.tls_private_key_file is not None:
            cert, key = settings.tls_cert_file, settings.tls_private_key_file
        else:
            directory = self._tls_dir
            if directory is None:
                directory = self._own_tls_dir = Path(tempfile.mkdtemp(prefix="gpuscale-keda-scaler-tls-"))
            cert, key = tls.write_self_signed(directory, "gpuscale-keda-scaler", tls.default_dns_names())
            self.log.info("self_signed_certificate", cert=str(cert))
        self.tls_cert_file = cert
        context = tls.server_context(cert, key, None if settings.api_any_client else settings.client_ca_file)
        runner = web.AppRunner(
            self.api_app(), access_log=None, handle_signals=False, max_line_size=8190, max_headers=64
        )
        await runner.setup()
        site = web.TCPSite(runner, "0.0.0.0", settings.api_port, ssl_context=context)  # noqa: S104 - the API server's aggregator calls from outside the pod
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        self.api_port = int(sockets[0].getsockname()[1]) if sockets else settings.api_port
        return runner

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

    def _remove_own_tls_dir(self) -> None:
        # A private key the service wrote for itself must not outlive it (nor pile up in /tmp).
        if self._own_tls_dir is not None:
            shutil.rmtree(self._own_tls_dir, ignore_errors=True)
            self._own_tls_dir = None

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
                api_runner = await self.start_api()
        except BaseException:
            await grpc_server.stop(0)
            self._remove_own_tls_dir()
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
            self._remove_own_tls_dir()
            await drain(self.nc)
            self.log.info("keda_scaler_stopped")


class ExternalScaler(pb_grpc.ExternalScalerServicer):
    """KEDA's externalscaler.ExternalScaler, answered from the latest fresh metrics."""

    def __init__(self, service: KedaScalerService) -> None:
        self.service = service

    async def _query(self, ref: Any, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> ScalerQuery:
        try:
            return self.service.scaler_query(ref)
        except QueryError as e:
            key = f"{_cut(ref.namespace, 80)}/{_cut(ref.name, 120)}"
            self.service.refused("grpc", method, e.reason, key, str(e))
            code = {
                TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
                OTHER_NAMESPACE: grpc.StatusCode.PERMISSION_DENIED,
            }.get(e.reason, grpc.StatusCode.INVALID_ARGUMENT)
            await context.abort(code, f"ScaledObject {key}: trigger metadata: {_cut(e, 1000)}")
            raise  # abort raises; this line keeps the type checker sure nothing returns

    async def _refuse_stream(
        self, method: str, query: ScalerQuery, e: StreamRefused, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        self.service.refused("grpc", method, "too_many_streams", query.query.workload.namespace, str(e))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"no room for another stream: {e}")

    async def _unavailable(
        self, method: str, query: ScalerQuery, e: Unavailable, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        self.service._unavailable("grpc", method, query.query.workload, e)
        code = grpc.StatusCode.NOT_FOUND if e.reason == "metric_not_reported" else grpc.StatusCode.UNAVAILABLE
        await context.abort(code, e.message)

    async def IsActive(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        query = await self._query(request, "IsActive", context)
        try:
            active = self.service.store.is_active(query, time.time())
        except Unavailable as e:
            await self._unavailable("IsActive", query, e, context)
            raise
        self.service.m.requests.labels(api="grpc", method="IsActive", outcome="ok").inc()
        return pb.IsActiveResponse(result=active)

    async def StreamIsActive(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        """Pushes the activity when it is first known and whenever it changes; silent while the
        metrics are not fresh (KEDA's polling IsActive reports that as an error meanwhile)."""
        query = await self._query(request, "StreamIsActive", context)
        service = self.service
        last: bool | None = None
        namespace = query.query.workload.namespace
        try:
            service.open_stream(namespace)
        except StreamRefused as e:
            await self._refuse_stream("StreamIsActive", query, e, context)
            raise
        try:
            while not service.ctx.stop.is_set():
                try:
                    active: bool | None = service.store.is_active(query, time.time())
                except Unavailable as e:
                    service._unavailable("grpc", "StreamIsActive", query.query.workload, e)
                    active = None
                if active is not None and active != last:
                    service.m.requests.labels(api="grpc", method="StreamIsActive", outcome="ok").inc()
                    yield pb.IsActiveResponse(result=active)
                last = active
                await service.changed(query.query.workload, STREAM_RECHECK_S)
        finally:
            service.close_stream(namespace)

    @staticmethod
    def _metric_spec(query: ScalerQuery) -> Any:
        spec = pb.MetricSpec(
            metricName=query.metric_name, targetSize=max(1, round(query.target)), targetSizeFloat=query.target
        )
        return pb.GetMetricSpecResponse(metricSpecs=[spec])

    async def GetMetricSpec(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        query = await self._query(request, "GetMetricSpec", context)
        self.service.m.requests.labels(api="grpc", method="GetMetricSpec", outcome="ok").inc()
        return self._metric_spec(query)

    async def StreamMetricSpec(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        """The trigger's metric spec, pushed once: it follows from the ScaledObject's
        metadata alone, which comes anew in a new call when the ScaledObject changes.
        The stream then stays open until KEDA closes it or the service stops."""
        query = await self._query(request, "StreamMetricSpec", context)
        service = self.service
        namespace = query.query.workload.namespace
        try:
            service.open_stream(namespace)
        except StreamRefused as e:
            await self._refuse_stream("StreamMetricSpec", query, e, context)
            raise
        try:
            service.m.requests.labels(api="grpc", method="StreamMetricSpec", outcome="ok").inc()
            yield self._metric_spec(query)
            await service.ctx.stop.wait()
        finally:
            service.close_stream(namespace)

    async def GetMetrics(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        query = await self._query(request.scaledObjectRef, "GetMetrics", context)
        asked = _KEDA_INDEX.sub("", request.metricName)
        if asked and asked != query.metric_name:
            self.service.m.requests.labels(api="grpc", method="GetMetrics", outcome="invalid").inc()
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metric {_cut(request.metricName, 100)!r} is not this trigger's: its metadata names "
                f"{query.metric_name}",
            )
        try:
            reading = self.service.store.read(query.query, time.time())
        except Unavailable as e:
            await self._unavailable("GetMetrics", query, e, context)
            raise
        self.service.m.requests.labels(api="grpc", method="GetMetrics", outcome="ok").inc()
        value = pb.MetricValue(
            metricName=request.metricName or query.metric_name,
            metricValue=round(reading.value),
            metricValueFloat=reading.value,
        )
        return pb.GetMetricsResponse(metricValues=[value])


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
