"""Rolling upgrades: `gpuscale status` and the demo's observer (what the web
page shows) read messages from producers one version newer and one older,
through real subscriptions on a real nats-server."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from kubernetes_asyncio.client import ApiClient

from gpuscale import natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS, declare_stream, headers_msg_id, jetstream
from gpuscale.wire import Action, Decision, WorkloadMetrics
from gpuscale_cli.demo.observer import DemoState, Observer
from gpuscale_cli.status import Clocks, StatusSettings, collect, render_clocks, render_table

from ..skew import NEWER_METRICS, golden, newer, older, pack, restamp

pytestmark = pytest.mark.integration

KEY = subjects.WorkloadKey("default", "Deployment", "bert")


def _variant(name: str, kind: str, cls: type[Any]) -> dict[str, Any]:
    base = golden(name)
    return newer(base, cls) if kind == "newer" else older(base, cls)


async def _keep_publishing(
    nc: NATS, subject: str, payload: dict[str, Any], stop: asyncio.Event, skew_s: float = 0.0
) -> None:
    """``payload`` again and again, stamped on a clock ``skew_s`` ahead."""
    while not stop.is_set():
        await nc.publish(subject, pack(restamp(payload, time.time() + skew_s)))
        await natsio.flush(nc)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


@pytest.mark.parametrize("variant", ["newer", "older"])
async def test_status_shows_another_versions_metrics_and_decisions(
    nats_server: EmbeddedNats, nats_client: NATS, variant: str
) -> None:
    js = jetstream(nats_client)
    await declare_stream(js, subjects.DECISIONS)
    decision = restamp(_variant("decisions", variant, Decision), time.time() - 5)
    await js.publish(subjects.decisions(KEY), pack(decision), headers=headers_msg_id(decision["id"]))
    stop = asyncio.Event()
    publisher = asyncio.create_task(
        _keep_publishing(
            nats_client, subjects.metrics(KEY), _variant("metrics", variant, WorkloadMetrics), stop
        )
    )
    try:
        views = await collect(StatusSettings(nats_url=(nats_server.url,), listen_s=1.0), nats_client)
    finally:
        stop.set()
        await publisher
    (view,) = views
    assert view.key == KEY
    assert view.metrics["gpu_util"] == 43.5
    assert set(view.metrics).isdisjoint(NEWER_METRICS)
    assert view.decision is not None
    assert view.decision.to_replicas == 3
    assert view.targets == {"gpu_util": 20.0}
    table = render_table(views, time.time())
    assert "43.5/20" in table
    assert "1→3" in table


@pytest.mark.parametrize("variant", ["newer", "older"])
async def test_the_demo_observer_follows_another_versions_messages(nats_client: NATS, variant: str) -> None:
    state = DemoState("step")
    state.workload = "default/bert"
    api = ApiClient()  # never called here: the observer only subscribes
    try:
        observer = Observer(state, nats_client, api, "http://127.0.0.1:1")
        await observer.subscribe()
        await natsio.flush(nats_client)
        now = time.time()
        metrics = restamp(_variant("metrics", variant, WorkloadMetrics), now)
        decision = restamp(_variant("decisions", variant, Decision), now)
        action = restamp(_variant("actions", variant, Action), now)
        await nats_client.publish(subjects.metrics(KEY), pack(metrics))
        await nats_client.publish(subjects.decisions(KEY), pack(decision))
        await nats_client.publish(subjects.actions(KEY), pack(action))
        await natsio.flush(nats_client)
        deadline = time.monotonic() + 10
        while not (state.record.actions and state.record.decisions and state.gpu_util_avg is not None):
            assert time.monotonic() < deadline, "the observer did not see all three messages"
            await asyncio.sleep(0.05)
        assert state.gpu_util_avg == 43.5
        assert [(d.from_replicas, d.to_replicas) for d in state.record.decisions] == [(1, 3)]
        assert [(a.outcome, a.replicas_after) for a in state.record.actions] == [("applied", 3)]
    finally:
        await api.close()


async def test_status_hears_the_senders_clocks(nats_server: EmbeddedNats, nats_client: NATS) -> None:
    """An aggregator 20 s behind and a node 10 s ahead, measured while status listens."""
    metrics = {**restamp(golden("metrics"), time.time() - 20), "source": "aggregator-7"}
    samples = golden("samples")
    stop = asyncio.Event()
    publishers = [
        asyncio.create_task(_keep_publishing(nats_client, subjects.metrics(KEY), metrics, stop, -20.0)),
        asyncio.create_task(
            _keep_publishing(nats_client, subjects.samples(samples["node"]), samples, stop, 10.0)
        ),
    ]
    clocks = Clocks()
    try:
        await collect(StatusSettings(nats_url=(nats_server.url,), listen_s=1.0), nats_client, clocks)
    finally:
        stop.set()
        await asyncio.gather(*publishers)
    aggregators, nodes = clocks.offsets()
    assert aggregators["aggregator-7"] == pytest.approx(20.0, abs=1.0)
    assert nodes[samples["node"]] == pytest.approx(-10.0, abs=1.0)
    assert "aggregator-7" in render_clocks(aggregators, nodes)
