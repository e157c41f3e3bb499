"""The demo's observer against a real kube-sim over HTTP: what it records of the load."""

from __future__ import annotations

import asyncio
import time

import aiohttp
from kubernetes_asyncio.client import ApiClient

from gpuscale.natsio import NATS
from gpuscale_cli.demo.observer import DemoState, Observer
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload


async def test_each_load_level_is_recorded_once_at_its_own_start(
    kube_sim: KubeSim, nats_client: NATS
) -> None:
    """kube-sim computes a level's start from two clocks on every read; polled many
    times, one level is still one change, at the time the step happened, not the
    poll's. A poll-based report saw the step up to a second late."""
    await kube_sim.create(gpu_workload("bert"))
    state = DemoState("step")
    state.workload = "default/bert"
    state.started = time.time()
    before = time.time()
    kube_sim.set_load("default", "bert", [{"t": 0, "load": 30}, {"t": 0.2, "load": 200}])
    after = time.time()
    api = ApiClient()  # never called: only the cluster read runs here
    try:
        observer = Observer(state, nats_client, api, kube_sim.url)
        async with aiohttp.ClientSession() as http:
            while kube_sim.load_of("default", "bert") < 200:
                await observer._read_cluster(http)  # the 30 level, if a read comes in time
                await asyncio.sleep(0.05)
            for _ in range(5):
                await observer._read_cluster(http)
    finally:
        await api.close()
    changes = state.record.load_changes
    assert [load for _, load in changes] in ([30.0, 200.0], [200.0])  # once each, however often read
    t_high = changes[-1][0]
    assert before + 0.2 - 0.002 <= state.started + t_high <= after + 0.2 + 0.002  # the step's own time
