"""The start-up replay: the samples stream read back from its start, in big fetches."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Final

from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from prometheus_client import Counter

from gpuscale import subjects
from gpuscale.natsio import NATS, declare_stream, jetstream

from .settings import AggregatorSettings

# Held while a slow cycle runs: nats-py drops (slow consumer) beyond these.
PENDING_MSGS_LIMIT: Final = 1_000_000
PENDING_BYTES_LIMIT: Final = 512 * 1024 * 1024
REPLAY_FETCH: Final = 5_000


async def read_stream(
    nc: NATS,
    settings: AggregatorSettings,
    stop: asyncio.Event,
    feed: Callable[[str, bytes, float], None],
    replayed: Counter,
) -> int:
    """Feed every stored batch (subject, data, when the stream stored it) once; the count fed."""
    js = jetstream(nc)
    window_s, storage = settings.window_s, settings.samples_storage
    if settings.partition is not None:
        spec = subjects.aggregator_parts_stream(window_s, storage)
        filter_subject = subjects.aggregator_partition(settings.partition[0])
    else:
        spec = subjects.samples_stream(window_s, storage)
        filter_subject = subjects.SAMPLES_ALL
    await declare_stream(js, spec)
    stream = spec.name
    info = await js.stream_info(stream)
    last_seq = info.state.last_seq
    if info.state.messages == 0:
        return 0
    sub = await js.pull_subscribe(
        filter_subject,
        stream=stream,
        config=ConsumerConfig(
            deliver_policy=DeliverPolicy.ALL,
            ack_policy=AckPolicy.NONE,
            inactive_threshold=30.0,
            mem_storage=True,
            num_replicas=1,
        ),
        pending_msgs_limit=PENDING_MSGS_LIMIT,
        pending_bytes_limit=PENDING_BYTES_LIMIT,
    )
    count = 0
    try:
        while not stop.is_set():
            try:
                msgs = await sub.fetch(REPLAY_FETCH, timeout=1.0)
            except TimeoutError:
                break  # nothing more (the tail expired, or a filtered partition ended early)
            reached = False
            for msg in msgs:
                # The NATS server's clock: a restart puts every sample back where the live path had.
                stored = msg.metadata.timestamp.timestamp()
                feed(msg.subject, msg.data, stored)
                count += 1
                if msg.metadata.sequence.stream >= last_seq:
                    reached = True
            replayed.inc(len(msgs))
            if reached:
                break
            await asyncio.sleep(0)
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return count
