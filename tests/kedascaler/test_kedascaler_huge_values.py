"""A tenant's own engine page decides how large its workload's value is: KEDA's
``MetricValue.metricValue`` is an int64. A queue of 1e25 (an engine page may say
so; the aggregator keeps values up to 1e30) raised ``ValueError: Value out of
range`` in GetMetrics: UNKNOWN for the caller, uncounted, and a gRPC traceback in
the keda-scaler's log at every poll of every such ScaledObject (the log all
tenants share), where the tenancy table promises a refusal counted and logged
once a minute. The float is what KEDA reads; the int64 can be held at its largest."""

from __future__ import annotations

import grpc
import pytest

from gpuscale.natsio import NATS
from gpuscale_kedascaler.externalscaler import externalscaler_pb2 as pb

from .harness import RunningScaler, metrics_payload
from .test_kedascaler_tenants import A_MODEL, b_is_served, keda, ref, scaler, trigger  # noqa: F401 - fixtures

pytestmark = pytest.mark.integration


async def test_a_value_past_int64_is_served_not_raised(
    scaler: RunningScaler,  # noqa: F811 - the fixture
    keda: object,  # noqa: F811 - the fixture
    nats_client: NATS,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await scaler.fed(
        nats_client, metrics_payload(A_MODEL, averages={"gpu_util": 40.0, "requests_waiting": 1e25})
    )
    metadata = trigger(metric="requests_waiting", target="10")
    for _ in range(5):
        try:
            answer = await keda.GetMetrics(  # type: ignore[attr-defined]
                pb.GetMetricsRequest(scaledObjectRef=ref("tenant-a", metadata), metricName="")
            )
        except grpc.aio.AioRpcError as e:
            pytest.fail(f"{e.code()}: {e.details()}")
        assert answer.metricValues[0].metricValueFloat == 1e25
        assert answer.metricValues[0].metricValue == 2**63 - 1
    assert not [r for r in caplog.records if r.levelname == "ERROR"], [
        r.getMessage()[:200] for r in caplog.records
    ]
    await b_is_served(keda)
