"""gpuscale.leader against kube-sim: one leader, release, takeover on expiry."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass

import pytest
from kubernetes_asyncio.client import ApiClient

from gpuscale.kube import request_json
from gpuscale.leader import LeaderElector, lease_from_object
from gpuscale_kubesim import KubeSim

from ..waiting import holds_for
from .kube_fixtures import api_client

pytestmark = pytest.mark.integration

LEASE_PATH = "/apis/coordination.k8s.io/v1/namespaces/default/leases/test-lease"
# Short, but with room for a loaded 2-core CI machine.
TIMING = {"lease_duration_s": 2.0, "renew_deadline_s": 1.5, "retry_period_s": 0.2}


@dataclass
class Candidate:
    elector: LeaderElector
    stop: asyncio.Event
    task: asyncio.Task[None]
    transitions: list[str]


@asynccontextmanager
async def candidate(
    api: ApiClient, identity: str, *, release_on_stop: bool = True
) -> AsyncIterator[Candidate]:
    transitions: list[str] = []
    elector = LeaderElector(
        api,
        "test-lease",
        "default",
        identity,
        **TIMING,
        on_started_leading=lambda: transitions.append("started"),
        on_stopped_leading=lambda: transitions.append("stopped"),
        release_on_stop=release_on_stop,
    )
    stop = asyncio.Event()
    task = asyncio.create_task(elector.run(stop))
    try:
        yield Candidate(elector, stop, task, transitions)
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


async def holder(api: ApiClient) -> str:
    return lease_from_object(await request_json(api, "GET", LEASE_PATH)).holder


async def first_leader(*cands: Candidate, timeout_s: float = 10.0) -> Candidate:
    waits = {asyncio.create_task(c.elector.wait_until_leader()): c for c in cands}
    done, pending = await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    for t in pending:
        t.cancel()
    assert done, "nobody became leader"
    return waits[next(iter(done))]


@pytest.mark.serial  # it times the handover against the lease: alone, not beside another worker's test
async def test_one_leader_among_two_and_fast_handover_on_release(kube_sim: KubeSim) -> None:
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(api_client(kube_sim.kubeconfig_path))
        a = await stack.enter_async_context(candidate(api, "a"))
        b = await stack.enter_async_context(candidate(api, "b"))
        leader = await first_leader(a, b)
        other = b if leader is a else a
        # Five retry periods: the other candidate tries and fails again and again.
        await holds_for(
            lambda: leader.elector.is_leader and not other.elector.is_leader, 1.0, what="exactly one leader"
        )
        assert await holder(api) == leader.elector.identity

        started = time.monotonic()
        leader.stop.set()
        await asyncio.wait_for(leader.task, 5)
        assert leader.transitions == ["started", "stopped"]
        await asyncio.wait_for(other.elector.wait_until_leader(), 5)
        # Released: the other takes over at its next try, well before a lease duration.
        assert time.monotonic() - started < TIMING["lease_duration_s"]
        assert await holder(api) == other.elector.identity
        spec = (await request_json(api, "GET", LEASE_PATH))["spec"]
        assert spec["leaseTransitions"] >= 1


async def test_takeover_after_the_lease_expires_when_the_leader_dies(kube_sim: KubeSim) -> None:
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(api_client(kube_sim.kubeconfig_path))
        a = await stack.enter_async_context(candidate(api, "a", release_on_stop=False))
        await asyncio.wait_for(a.elector.wait_until_leader(), 10)
        b = await stack.enter_async_context(candidate(api, "b"))
        # b tries every 0.2 s and must keep failing while a renews.
        await holds_for(lambda: not b.elector.is_leader, 0.5, what="b standing by")

        started = time.monotonic()
        a.stop.set()  # dies without releasing: the lease stays with "a" until it expires
        await asyncio.wait_for(a.task, 5)
        assert await holder(api) == "a"
        await asyncio.wait_for(b.elector.wait_until_leader(), 10)
        took = time.monotonic() - started
        assert took >= TIMING["lease_duration_s"] * 0.9  # not before the lease expired
        assert took < TIMING["lease_duration_s"] + 3.0  # within the lease duration (+ retry, + margin)
        assert await holder(api) == "b"


async def test_a_leader_that_cannot_renew_steps_down(kube_sim: KubeSim) -> None:
    async with AsyncExitStack() as stack:
        api = await stack.enter_async_context(api_client(kube_sim.kubeconfig_path))
        a = await stack.enter_async_context(candidate(api, "a"))
        await asyncio.wait_for(a.elector.wait_until_leader(), 10)
        kube_sim.faults.add(None, r"/leases/test-lease$", status=503, count=None)
        await asyncio.wait_for(a.elector.wait_until_not_leader(), 5)
        assert not a.elector.is_leader
        assert a.transitions == ["started", "stopped"]
        kube_sim.faults.clear()
        await asyncio.wait_for(a.elector.wait_until_leader(), 5)
