"""KEDA's externalscaler.ExternalScaler, served by a real keda-scaler fed by a real nats-server,
called with a real gRPC client generated from KEDA's externalscaler.proto.

What KEDA does with the answers (KEDA's external scaler, pkg/scalers/external_scaler.go):
GetMetricSpec's targetSizeFloat becomes the HPA target of the metric, GetMetrics'
metricValueFloat its current value, IsActive decides scaling from and to zero, and
StreamIsActive (``external-push``) pushes activity. An error keeps the current
replicas (or applies the ScaledObject's fallback): stale data must be an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import grpc
import msgpack
import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.subjects import WorkloadKey
from gpuscale_kedascaler.externalscaler import externalscaler_pb2 as pb
from gpuscale_kedascaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

from ..waiting import eventually, holds_for
from .harness import (
    RunningScaler,
    keda_channel,
    metrics_payload,
    publish,
    running_scaler,
    settings_for,
    subject_of,
)

pytestmark = pytest.mark.integration

TRIGGER = {
    "scalerAddress": "gpuscale-keda-scaler.gpuscale:9500",
    "workload": "bert",
    "metric": "gpu_util",
    "target": "70",
}


def ref(metadata: dict[str, str] | None = None, namespace: str = "default") -> Any:
    return pb.ScaledObjectRef(
        name="bert-so", namespace=namespace, scalerMetadata=TRIGGER if metadata is None else metadata
    )


@pytest.fixture
async def scaler(nats_server: EmbeddedNats) -> AsyncIterator[RunningScaler]:
    async with running_scaler(settings_for(nats_server.url)) as running:
        yield running


@pytest.fixture
async def stub(scaler: RunningScaler) -> AsyncIterator[Any]:
    async with keda_channel(scaler) as channel:
        yield pb_grpc.ExternalScalerStub(channel)


async def rpc_error(call: Any) -> grpc.aio.AioRpcError:
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await call
    return info.value


async def test_metric_spec_comes_from_the_trigger_metadata(stub: Any) -> None:
    spec = await stub.GetMetricSpec(ref({**TRIGGER, "target": "62.5"}))
    (metric,) = spec.metricSpecs
    assert metric.metricName == "gpuscale-gpu_util"
    assert metric.targetSizeFloat == 62.5
    assert metric.targetSize == 62  # the whole-number field older KEDA reads
    total = await stub.GetMetricSpec(ref({**TRIGGER, "value": "total"}))
    assert total.metricSpecs[0].metricName == "gpuscale-gpu_util-total"


async def test_get_metrics_serves_the_latest_fresh_average(
    scaler: RunningScaler, nats_client: NATS, stub: Any
) -> None:
    await scaler.fed(
        nats_client, metrics_payload(averages={"gpu_util": 83.5, "power_w": 250.0}, pods_fresh=3)
    )
    answer = await stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-gpu_util")
    )
    (value,) = answer.metricValues
    assert (value.metricName, value.metricValueFloat, value.metricValue) == ("gpuscale-gpu_util", 83.5, 84)
    # total: the average times the fresh pods, for KEDA's default metricType AverageValue.
    total = await stub.GetMetrics(
        pb.GetMetricsRequest(
            scaledObjectRef=ref({**TRIGGER, "value": "total"}), metricName="s0-gpuscale-gpu_util-total"
        )
    )
    assert total.metricValues[0].metricValueFloat == pytest.approx(250.5)
    # A newer message replaces the value.
    await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 41.0}))
    answer = await stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-gpu_util")
    )
    assert answer.metricValues[0].metricValueFloat == 41.0
    assert (
        scaler.counter("gpuscale_kedascaler_requests_total", api="grpc", method="GetMetrics", outcome="ok")
        == 3
    )


async def test_is_active_compares_with_the_activation_target(
    scaler: RunningScaler, nats_client: NATS, stub: Any
) -> None:
    await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 4.0}))
    assert (await stub.IsActive(ref())).result is True  # above the default activation target 0
    assert (await stub.IsActive(ref({**TRIGGER, "activationTarget": "5"}))).result is False
    await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 0.0}))
    assert (await stub.IsActive(ref())).result is False


async def test_no_metrics_is_an_error_that_names_what_was_seen(
    scaler: RunningScaler, nats_client: NATS, stub: Any
) -> None:
    await scaler.fed(nats_client, metrics_payload(WorkloadKey("default", "Deployment", "bert-v2")))
    error = await rpc_error(
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-gpu_util"))
    )
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "no gpuscale metrics for default/Deployment/bert" in (error.details() or "")
    assert "workloads seen in default: Deployment/bert-v2" in (error.details() or "")
    error = await rpc_error(stub.IsActive(ref()))
    assert error.code() == grpc.StatusCode.UNAVAILABLE


async def test_no_fresh_pod_and_an_unreported_metric_are_errors(
    scaler: RunningScaler, nats_client: NATS, stub: Any
) -> None:
    await scaler.fed(nats_client, metrics_payload(averages={}, pods_fresh=0, pods_stale=2))
    error = await rpc_error(
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-gpu_util"))
    )
    assert error.code() == grpc.StatusCode.UNAVAILABLE
    assert "no pod with fresh GPU samples" in (error.details() or "")
    await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 50.0}))
    error = await rpc_error(stub.IsActive(ref({**TRIGGER, "metric": "sm_active"})))
    assert error.code() == grpc.StatusCode.NOT_FOUND
    assert "does not report sm_active (it reports: gpu_util)" in (error.details() or "")


async def test_bad_trigger_metadata_is_refused_with_every_problem(stub: Any) -> None:
    metadata = {
        "scalerAddress": "x:9500",
        "workload": "Rollout/bert",
        "metric": "gpu_utilisation",
        "target": "-3",
        "treshold": "5",
    }
    for call in (stub.GetMetricSpec(ref(metadata)), stub.IsActive(ref(metadata))):
        error = await rpc_error(call)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = error.details() or ""
        for problem in (
            "unknown metadata treshold",
            "kind must be one of Deployment, StatefulSet",
            "metric must be one of",
            "target must be greater than 0",
        ):
            assert problem in details, details
    error = await rpc_error(
        stub.GetMetrics(pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-power_w"))
    )
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "is not this trigger's" in (error.details() or "")


async def test_stream_metric_spec_pushes_the_triggers_spec_and_holds_the_stream(
    scaler: RunningScaler, stub: Any
) -> None:
    """The same spec GetMetricSpec answers, once, on a stream that stays open until KEDA closes it."""
    call = stub.StreamMetricSpec(ref({**TRIGGER, "target": "62.5"}))
    received: list[Any] = []

    async def read() -> None:
        async for response in call:
            received.append(response)

    reader = asyncio.create_task(read())
    try:
        await eventually(lambda: len(received) == 1, what="the pushed spec")
        (metric,) = received[0].metricSpecs
        assert (metric.metricName, metric.targetSizeFloat, metric.targetSize) == (
            "gpuscale-gpu_util",
            62.5,
            62,
        )
        assert scaler.counter("gpuscale_kedascaler_active_streams") == 1
        await holds_for(lambda: len(received) == 1 and not reader.done(), 0.5, what="one spec, stream open")
    finally:
        call.cancel()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    await eventually(
        lambda: scaler.counter("gpuscale_kedascaler_active_streams") == 0, what="the stream to close"
    )
    invalid = stub.StreamMetricSpec(ref({**TRIGGER, "target": "0"}))
    with pytest.raises(grpc.aio.AioRpcError) as info:
        async for _ in invalid:
            pass
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_stream_is_active_pushes_when_activity_changes(
    scaler: RunningScaler, nats_client: NATS, stub: Any
) -> None:
    call = stub.StreamIsActive(ref({**TRIGGER, "activationTarget": "10"}))
    received: list[bool] = []

    async def read() -> None:
        async for response in call:
            received.append(response.result)

    reader = asyncio.create_task(read())
    try:
        await eventually(
            lambda: scaler.counter("gpuscale_kedascaler_active_streams") == 1, what="the stream to open"
        )
        await publish(nats_client, metrics_payload(averages={"gpu_util": 50.0}))
        await eventually(lambda: received == [True], what="the first activity")
        await publish(nats_client, metrics_payload(averages={"gpu_util": 60.0}))  # still active: nothing new
        await publish(nats_client, metrics_payload(averages={"gpu_util": 2.0}))
        await eventually(lambda: received == [True, False], what="the change to inactive")
    finally:
        call.cancel()
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
    await eventually(
        lambda: scaler.counter("gpuscale_kedascaler_active_streams") == 0, what="the stream to close"
    )


async def test_stale_metrics_are_never_served_as_fresh(nats_server: EmbeddedNats, nats_client: NATS) -> None:
    async with (
        running_scaler(settings_for(nats_server.url, max_metrics_age="1")) as scaler,
        keda_channel(scaler) as channel,
    ):
        stub = pb_grpc.ExternalScalerStub(channel)
        await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 90.0}))
        # The aggregator stops publishing: after --max-metrics-age the value is an error, not 90.

        async def stale() -> grpc.aio.AioRpcError | None:
            try:
                await stub.GetMetrics(
                    pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-gpu_util")
                )
            except grpc.aio.AioRpcError as e:
                return e
            return None

        error = await eventually(stale, what="the value to go stale")
        assert error.code() == grpc.StatusCode.UNAVAILABLE
        assert "not served as current" in (error.details() or "")
        assert (
            scaler.counter(
                "gpuscale_kedascaler_requests_total", api="grpc", method="GetMetrics", outcome="stale"
            )
            >= 1
        )
        # Fresh again as soon as a message arrives.
        await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 30.0}))
        answer = await stub.GetMetrics(
            pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-gpu_util")
        )
        assert answer.metricValues[0].metricValueFloat == 30.0


async def test_bad_messages_are_rejected_counted_and_never_served(
    scaler: RunningScaler, nats_client: NATS, stub: Any
) -> None:
    await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 40.0}))
    bad: list[tuple[Any, str]] = [
        ({**metrics_payload(averages={"gpu_util": 99.0}), "v": 2}, "wrong_version"),
        (metrics_payload(averages={"gpu_util": 140.0}), "out_of_range"),
        ({k: v for k, v in metrics_payload().items() if k != "pods_fresh"}, "missing_field"),
        (
            metrics_payload(WorkloadKey("default", "Deployment", "other"), averages={"gpu_util": 99.0}),
            "subject_mismatch",
        ),
    ]
    for payload, reason in bad:
        await scaler.fed(nats_client, payload, subject="gpuscale.v1.metrics.default.Deployment.bert")
        assert scaler.counter("gpuscale_messages_rejected_total", kind="metrics", reason=reason) == 1, reason
    await scaler.fed(nats_client, b"\xc1", subject="gpuscale.v1.metrics.default.Deployment.bert")
    assert scaler.counter("gpuscale_messages_rejected_total", kind="metrics", reason="undecodable") == 1
    # An older message (reordered) does not replace a newer one.
    await scaler.fed(nats_client, metrics_payload(averages={"gpu_util": 10.0}, ts=time.time() - 5))
    assert scaler.counter("gpuscale_kedascaler_messages_ignored_total", reason="out_of_order") == 1
    answer = await stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-gpu_util")
    )
    assert answer.metricValues[0].metricValueFloat == 40.0


async def test_the_scaler_outlives_nats_going_away(tmp_path_factory: pytest.TempPathFactory) -> None:
    server = EmbeddedNats(store_dir=str(tmp_path_factory.mktemp("nats-restart")))
    server.start()
    try:
        async with running_scaler(settings_for(server.url, max_metrics_age="2")) as scaler:
            server.close()
            await eventually(
                lambda: not scaler.service.nc or not scaler.service.nc.is_connected, what="the disconnect"
            )
            async with keda_channel(scaler) as channel:
                stub = pb_grpc.ExternalScalerStub(channel)
                error = await rpc_error(stub.IsActive(ref()))  # still answering: no data, so an error
                assert error.code() == grpc.StatusCode.UNAVAILABLE
            server.start()
            await eventually(
                lambda: scaler.service.nc is not None and scaler.service.nc.is_connected, 30, "the reconnect"
            )
            # nats-py says connected before its reconnected callback counts the reconnect.
            await eventually(
                lambda: scaler.counter("gpuscale_nats_reconnects_total") >= 1, 30, "the reconnect counted"
            )
    finally:
        server.close()


async def test_a_clock_set_back_still_forgets_the_workloads_gone_silent(scaler: RunningScaler) -> None:
    """The periodic expiry ran when this clock had passed the last one by a minute: set back an
    hour, it stopped for that hour, keeping every workload that had stopped publishing."""
    now = time.time()
    service = scaler.service
    for name in ("bert", "llama", "whisper"):
        payload = metrics_payload(WorkloadKey("default", "Deployment", name), ts=now)
        service.handle(subject_of(payload), msgpack.packb(payload), now)
    assert len(service.store) == 3
    back = now - 3600
    payload = metrics_payload(WorkloadKey("default", "Deployment", "bert"), ts=back)
    service.handle(subject_of(payload), msgpack.packb(payload), back)
    assert sorted(k.name for k in service.store.fresh_workloads(back)) == ["bert"]
    assert len(service.store) == 1, "the two that arrived an hour 'after' now are forgotten"
