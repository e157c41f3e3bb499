"""Fixtures shared by every test: real servers, started by the test."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import pytest

from gpuscale.apiwarnings import API_WARNINGS, STRICT_ENV
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, drain
from gpuscale_kubesim import KubeSim

# In the tests a field the API server drops is an error, here and in every service process
# the tests start (they inherit the environment): no field may vanish unnoticed.
os.environ[STRICT_ENV] = "error"
API_WARNINGS.strict = True


@pytest.fixture(autouse=True)
def no_dropped_fields() -> Iterator[None]:
    """Fail a test whose code sent a field the (simulated) API server did not keep."""
    API_WARNINGS.take_dropped()
    yield
    dropped = API_WARNINGS.take_dropped()
    assert not dropped, (
        f"the API server dropped fields we sent: {[(w.method, w.path, w.text) for w in dropped]}"
    )


@pytest.fixture
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """A private nats-server with JetStream on a free loopback port."""
    server = EmbeddedNats(store_dir=str(tmp_path_factory.mktemp("nats")))
    server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
async def nats_client(nats_server: EmbeddedNats) -> AsyncIterator[NATS]:
    nc = await connect(
        [nats_server.url], ServiceMetrics("test-client"), name="test-client", reconnect_wait_s=0.2
    )
    try:
        yield nc
    finally:
        await drain(nc)


@pytest.fixture
async def kube_sim() -> AsyncIterator[KubeSim]:
    """A started kube-sim (scenario "empty": 2 nodes x 8 GPUs, fast pod start-up), stopped after."""
    sim = KubeSim(port=0, scenario="empty", startup_delay_s=0.2, termination_delay_s=0.1)
    await sim.start()
    try:
        yield sim
    finally:
        await sim.stop()
