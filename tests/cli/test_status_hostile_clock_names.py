"""`gpuscale status`'s clock section names each sender that is off: a node by its samples
subject, an aggregator by its metrics' ``source``. Without node-auth every collector's one
credential may publish on ``gpuscale.v1.samples.*``, and a subject token unescapes to any
byte (``~1B`` is ESC): the node's name reached the operator's terminal raw, where the table
above it shows every cell escaped (`tests/cli/test_status_hostile_text.py`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from gpuscale import natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale_cli.status import Clocks, StatusSettings, collect, render_clocks

from ..skew import golden, pack, restamp

pytestmark = pytest.mark.integration

KEY = subjects.WorkloadKey("default", "Deployment", "bert")
# Clear the screen, retitle the terminal (OSC 0 ... BEL), write over the line.
HOSTILE = "x\x1b[2J\x1b]0;owned\x07\rnode-ok"


async def _keep_publishing(
    nc: NATS, subject: str, payload: dict[str, Any], stop: asyncio.Event, skew_s: float
) -> None:
    while not stop.is_set():
        await nc.publish(subject, pack(restamp(payload, time.time() + skew_s)))
        await natsio.flush(nc)
        await asyncio.sleep(0.05)


async def test_a_made_up_node_or_aggregator_name_is_shown_escaped(
    nats_server: EmbeddedNats, nats_client: NATS
) -> None:
    samples = golden("samples")
    metrics = {**golden("metrics"), "source": "agg" + HOSTILE}
    stop = asyncio.Event()
    publishers = [
        asyncio.create_task(
            _keep_publishing(nats_client, subjects.samples(samples["node"]), samples, stop, 0.0)
        ),
        asyncio.create_task(_keep_publishing(nats_client, subjects.samples("b-node"), samples, stop, 0.0)),
        # 30 s ahead (within the 60 s allowance): off the fleet's median, so listed by name.
        asyncio.create_task(_keep_publishing(nats_client, subjects.samples(HOSTILE), samples, stop, 30.0)),
        asyncio.create_task(_keep_publishing(nats_client, subjects.metrics(KEY), metrics, stop, -30.0)),
    ]
    clocks = Clocks()
    try:
        await collect(StatusSettings(nats_url=(nats_server.url,), listen_s=1.0), nats_client, clocks)
    finally:
        stop.set()
        await asyncio.gather(*publishers)
    aggregators, nodes = clocks.offsets()
    assert HOSTILE in nodes, "the made-up node is heard (and off by 30 s)"
    text = render_clocks(aggregators, nodes)
    assert "\\x1b[2J" in text  # shown, escaped
    assert not any(ch in text for ch in "\x1b\x07\r"), repr(text)
