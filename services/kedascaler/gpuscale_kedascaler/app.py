"""The keda-scaler's I/O shell: NATS in, KEDA's gRPC and the external metrics API out.

- NATS: one callback subscription on ``gpuscale.v1.metrics.>``; each message
  is decoded (``gpuscale.codec``), checked against its subject and kept as its
  workload's latest (:class:`~gpuscale_kedascaler.core.latest.LatestMetrics`),
  stamped with its arrival time.
- gRPC (``--grpc-port``): KEDA's ``externalscaler.ExternalScaler``. A value
  that is not fresh is an error (UNAVAILABLE), never a number: KEDA then keeps
  the current replicas (or applies the ScaledObject's fallback) instead of
  scaling on old data, and does not scale to zero on missing data.
- HTTPS (``--api-port``): the external metrics API for an APIService; stale
  data is a 503 Status, which the HPA reports as FailedGetExternalMetric and
  does not scale on.
- HTTP (``--http-port``): /healthz, /readyz, /metrics (the shared runtime).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import shutil
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
from gpuscale.logging import LogThrottle, OncePerKey, get_logger
from gpuscale.natsio import NATS, connect, drain, is_connected
from gpuscale.runtime import ServiceContext, run
from gpuscale.subjects import SubjectError, WorkloadKey
from gpuscale.wire import WireError, WorkloadMetrics

from . import tls
from .core import external_api
from .core.latest import LatestMetrics, Unavailable
from .core.query import QueryError, ScalerQuery, parse_scaler_metadata
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


class KedaScalerMetrics:
    def __init__(self, ctx: ServiceContext) -> None:
        registry = ctx.metrics.registry
        self.messages_in = ctx.metrics.messages_in.labels(kind=KIND)
        self.rejected = ctx.metrics.messages_rejected
        self.ignored = Counter(
            "gpuscale_kedascaler_messages_ignored_total",
            "Valid metrics messages not kept: out_of_order (older than the one kept)",
            ["reason"],
            registry=registry,
        )
        self.requests = Counter(
            "gpuscale_kedascaler_requests_total",
            "Requests answered, by API (grpc, external_metrics), method and outcome "
            "(ok, invalid, no_metrics, stale, no_fresh_pods, metric_not_reported, not_found)",
            ["api", "method", "outcome"],
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


class KedaScalerService:
    def __init__(self, ctx: ServiceContext, tls_dir: Path | None = None) -> None:
        self.ctx = ctx
        self.settings: KedaScalerSettings = ctx.settings
        self.store = LatestMetrics(self.settings.max_metrics_age)
        self.m = KedaScalerMetrics(ctx)
        self.log = get_logger(service=SERVICE)
        self.once = OncePerKey()
        self.throttle = LogThrottle()  # rejected messages: by reason, once a minute
        self.nc: NATS | None = None
        self.grpc_port = 0
        self.api_port = 0
        self.serving = False
        self.subscription: Any = None  # the metrics subscription, once made
        self.tls_cert_file: Path | None = None  # the external metrics API's serving certificate
        self._tls_dir = tls_dir
        self._own_tls_dir: Path | None = None  # made here for a self-signed key: removed at stop
        self._changed: dict[WorkloadKey, asyncio.Event] = {}
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
        event = self._changed.pop(key, None)
        if event is not None:
            event.set()
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
        event = self._changed.setdefault(key, asyncio.Event())
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout_s)

    def _unavailable(self, api: str, method: str, query: Any, e: Unavailable) -> None:
        self.m.requests.labels(api=api, method=method, outcome=e.reason).inc()
        if self.once.first(api, str(query), e.reason):
            self.log.info("metric_unavailable", api=api, query=str(query), reason=e.reason, detail=e.message)

    # --- HTTPS: the external metrics API ----------------------------------------------------------

    def api_app(self) -> web.Application:
        app = web.Application()
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
        message = f"the server could not find the requested resource {request.path!r}"
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
        context = tls.server_context(cert, key, settings.client_ca_file)
        runner = web.AppRunner(self.api_app(), access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, "0.0.0.0", settings.api_port, ssl_context=context)  # noqa: S104 - the API server's aggregator calls from outside the pod
        await site.start()
        sockets = getattr(site._server, "sockets", None)
        self.api_port = int(sockets[0].getsockname()[1]) if sockets else settings.api_port
        return runner

    # --- gRPC: KEDA's external scaler -------------------------------------------------------------

    def scaler_query(self, ref: Any) -> ScalerQuery:
        return parse_scaler_metadata(dict(ref.scalerMetadata), ref.namespace)

    async def start_grpc(self) -> grpc.aio.Server:
        server = grpc.aio.server()
        pb_grpc.add_ExternalScalerServicer_to_server(ExternalScaler(self), server)  # type: ignore[no-untyped-call]  # generated, untyped
        self.grpc_port = server.add_insecure_port(f"0.0.0.0:{self.settings.grpc_port}")
        await server.start()
        return server

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
        grpc_server = await self.start_grpc()
        try:
            api_runner = await self.start_api()
        except BaseException:
            await grpc_server.stop(0)
            self._remove_own_tls_dir()
            raise
        self.serving = True
        self.log.info(
            "keda_scaler_serving",
            grpc_port=self.grpc_port,
            api_port=self.api_port,
            max_metrics_age_s=self.settings.max_metrics_age,
            client_certificates="required" if self.settings.client_ca_file else "not required",
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
            self.service.m.requests.labels(api="grpc", method=method, outcome="invalid").inc()
            key = f"{ref.namespace}/{ref.name}"
            if self.service.once.first("grpc_invalid", key, str(e)):
                self.service.log.warning("scaler_metadata_invalid", scaled_object=key, problems=e.problems)
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, f"ScaledObject {key}: trigger metadata: {e}"
            )
            raise  # abort raises; this line keeps the type checker sure nothing returns

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
        service.m.streams.inc()
        last: bool | None = None
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
            service.m.streams.dec()

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
        service.m.streams.inc()
        try:
            service.m.requests.labels(api="grpc", method="StreamMetricSpec", outcome="ok").inc()
            yield self._metric_spec(query)
            await service.ctx.stop.wait()
        finally:
            service.m.streams.dec()

    async def GetMetrics(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        query = await self._query(request.scaledObjectRef, "GetMetrics", context)
        asked = _KEDA_INDEX.sub("", request.metricName)
        if asked and asked != query.metric_name:
            self.service.m.requests.labels(api="grpc", method="GetMetrics", outcome="invalid").inc()
            await context.abort(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"metric {request.metricName!r} is not this trigger's: its metadata names {query.metric_name}",
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
    return run(SERVICE, settings, serve)
