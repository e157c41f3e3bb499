"""Rolling upgrades: the keda-scaler serves the averages an aggregator one
version newer or one older sends (its real subscription, real nats-server,
real gRPC server), and counts a newer one's unknown names once each."""

from __future__ import annotations

import time
from typing import Any

import pytest

from gpuscale.wire import WorkloadMetrics
from gpuscale_kedascaler.externalscaler import externalscaler_pb2 as pb

from ..skew import counted, golden, newer, newer_names, older, pack, restamp
from .harness import RunningScaler
from .test_kedascaler_grpc import ref, scaler, stub  # noqa: F401 - the fixtures this module uses

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("variant", ["newer", "older"])
async def test_averages_from_another_aggregator_version_are_served(
    scaler: RunningScaler,  # noqa: F811 - the fixture imported above
    nats_client: Any,
    stub: Any,  # noqa: F811 - the fixture imported above
    variant: str,
) -> None:
    base = golden("metrics")  # default/Deployment/bert: gpu_util 43.5 on 1 fresh pod
    payload = newer(base, WorkloadMetrics) if variant == "newer" else older(base, WorkloadMetrics)
    for _ in range(3):
        await scaler.fed(nats_client, pack(restamp(payload, time.time())))
    answer = await stub.GetMetrics(
        pb.GetMetricsRequest(scaledObjectRef=ref(), metricName="gpuscale-gpu_util")
    )
    (value,) = answer.metricValues
    assert value.metricValueFloat == 43.5
    assert counted(scaler, "gpuscale_messages_rejected") == {}
    expected = newer_names(base, WorkloadMetrics) if variant == "newer" else set()
    assert counted(scaler, "gpuscale_messages_unknown_fields") == dict.fromkeys(expected, 1.0)
