"""KEDA's external scaler over gRPC: the servicer, answered from the latest fresh metrics."""

from __future__ import annotations

import re
import time
from collections.abc import AsyncIterator
from typing import Any, Final, Protocol

import grpc

from gpuscale.runtime import ServiceContext
from gpuscale.subjects import WorkloadKey

from .core.latest import LatestMetrics, Unavailable
from .core.query import OTHER_NAMESPACE, TOO_LARGE, QueryError, ScalerQuery
from .detail import cut
from .externalscaler import externalscaler_pb2 as pb
from .externalscaler import externalscaler_pb2_grpc as pb_grpc
from .metrics import KedaScalerMetrics

# How often an open StreamIsActive re-checks a workload that sends nothing (to notice staleness).
STREAM_RECHECK_S: Final = 1.0
# KEDA prefixes the names it got from GetMetricSpec with "s<trigger index>-" in older releases.
_KEDA_INDEX: Final = re.compile(r"^s\d+-")
# MetricValue.metricValue is an int64; KEDA reads metricValueFloat, which carries the value whole.
INT64_MAX: Final = 2**63 - 1


class StreamRefused(Exception):
    """No room for another stream: in all, or for the asking ScaledObject's namespace."""


class ScalerService(Protocol):
    """What the servicer asks of the service: its store, its counts and its bounds on streams."""

    ctx: ServiceContext
    store: LatestMetrics
    m: KedaScalerMetrics

    def scaler_query(self, ref: Any) -> ScalerQuery: ...

    def refused(self, api: str, method: str, outcome: str, who: str, detail: str) -> None: ...

    def unavailable(self, api: str, method: str, query: Any, e: Unavailable) -> None: ...

    def open_stream(self, namespace: str) -> None: ...

    def close_stream(self, namespace: str) -> None: ...

    async def changed(self, key: WorkloadKey, timeout_s: float) -> None: ...


class ExternalScaler(pb_grpc.ExternalScalerServicer):
    """KEDA's externalscaler.ExternalScaler, answered from the latest fresh metrics."""

    def __init__(self, service: ScalerService) -> None:
        self.service = service

    async def _query(self, ref: Any, method: str, context: grpc.aio.ServicerContext[Any, Any]) -> ScalerQuery:
        try:
            return self.service.scaler_query(ref)
        except QueryError as e:
            key = f"{cut(ref.namespace, 80)}/{cut(ref.name, 120)}"
            self.service.refused("grpc", method, e.reason, key, str(e))
            code = {
                TOO_LARGE: grpc.StatusCode.RESOURCE_EXHAUSTED,
                OTHER_NAMESPACE: grpc.StatusCode.PERMISSION_DENIED,
            }.get(e.reason, grpc.StatusCode.INVALID_ARGUMENT)
            await context.abort(code, f"ScaledObject {key}: trigger metadata: {cut(e, 1000)}")
            raise  # abort raises; this line keeps the type checker sure nothing returns

    async def _refuse_stream(
        self, method: str, query: ScalerQuery, e: StreamRefused, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        self.service.refused("grpc", method, "too_many_streams", query.query.workload.namespace, str(e))
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"no room for another stream: {e}")

    async def _unavailable(
        self, method: str, query: ScalerQuery, e: Unavailable, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        self.service.unavailable("grpc", method, query.query.workload, e)
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
                    service.unavailable("grpc", "StreamIsActive", query.query.workload, e)
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
                f"metric {cut(request.metricName, 100)!r} is not this trigger's: its metadata names "
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
            # A tenant's engine page sets how large (up to 1e30): past int64, pb raised ValueError.
            metricValue=min(round(reading.value), INT64_MAX),
            metricValueFloat=reading.value,
        )
        return pb.GetMetricsResponse(metricValues=[value])
