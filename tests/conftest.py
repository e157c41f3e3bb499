"""Fixtures shared by every test: real servers, started by the test."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import tempfile
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

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


@contextlib.contextmanager
def _locked(path: Path, operation: int) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, operation)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


LOCKS_ENV = "GPUSCALE_TEST_LOCKS"


def pytest_configure(config: pytest.Config) -> None:
    """The xdist controller (or a lone process) makes the folder of the workers' locks; the workers,
    started after this, inherit its path."""
    if not hasattr(config, "workerinput"):
        os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="gpuscale-pytest-")


def pytest_unconfigure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        shutil.rmtree(os.environ.pop(LOCKS_ENV, ""), ignore_errors=True)


# A worker's exclusive turn, kept over its consecutive serial tests (one drain, not one each).
_ALONE: list[contextlib.ExitStack] = []


@contextlib.contextmanager
def _turn(serial: bool, next_serial: bool) -> Iterator[None]:
    """Under pytest-xdist, a ``serial`` test runs while no other worker runs a test: every test
    holds a shared lock, a serial one an exclusive lock, and a gate lets a waiting serial test in
    before new shared holders (else the workers' overlapping tests would starve it)."""
    locks = os.environ.get(LOCKS_ENV)
    if locks is None or "PYTEST_XDIST_WORKER" not in os.environ:  # one process: each test is alone
        yield
        return
    gate, turn = Path(locks, "gate"), Path(locks, "turn")
    if serial:
        if not _ALONE:
            alone = contextlib.ExitStack()
            alone.enter_context(_locked(gate, fcntl.LOCK_EX))
            alone.enter_context(_locked(turn, fcntl.LOCK_EX))
            _ALONE.append(alone)
        try:
            yield
        finally:
            if not next_serial:
                _ALONE.pop().close()
    else:
        with contextlib.ExitStack() as held:
            with _locked(gate, fcntl.LOCK_SH):
                held.enter_context(_locked(turn, fcntl.LOCK_SH))
            yield


def _serial(item: pytest.Item | None) -> bool:
    return item is not None and item.get_closest_marker("serial") is not None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, object, object]:
    with _turn(_serial(item), _serial(nextitem)):
        return (yield)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files are handed to xdist's workers in collection order (addopts: --no-loadscope-reorder):
    the serial tests' files first, so they wait for no long test of another worker to end, then
    the files that start servers, so that the quick rest fills the workers' ends evenly."""
    rank: dict[Path, int] = {}
    for item in items:
        marks = {mark.name for mark in item.iter_markers()}
        own = 0 if "serial" in marks else 1 if marks & {"integration", "slow"} else 2
        rank[item.path] = min(own, rank.get(item.path, 2))
    items.sort(key=lambda item: rank[item.path])  # stable: a file's tests keep their order


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


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts and then says nothing (a filtered or hung server)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    try:
        yield int(s.getsockname()[1])
    finally:
        s.close()


@pytest.fixture
def nats_with_password(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    """A nats-server that takes tests.secret_nats' user and password only."""
    from .secret_nats import CONFIG

    server = EmbeddedNats(store_dir=str(tmp_path_factory.mktemp("nats-auth")), config_text=CONFIG)
    server.start()
    try:
        yield server
    finally:
        server.close()
