"""Fixtures shared by every test: real servers, started by the test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, drain
from gpuscale_kubesim import KubeSim


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
