"""A flush that timed out leaves the connection reading: its PONG, when it comes, is no error.

nats-py keeps each flush's PING future in a list that its PONGs resolve in order. A flush that
times out cancels its future and leaves it there; the late PONG's ``set_result`` on it raised
``InvalidStateError`` inside the read loop, which then stopped: the connection read nothing
more (no message, no PONG) until its pings went unanswered long enough to call it stale, and
what arrived meanwhile was lost. Against a real nats-server, frozen so that the flush times out."""

from __future__ import annotations

import asyncio

import pytest
from nats.aio.msg import Msg
from nats.errors import FlushTimeoutError

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain, flush


@pytest.mark.parametrize("how", ["timeout", "cancelled"])
async def test_a_flush_given_up_on_leaves_the_connection_reading(nats_server: EmbeddedNats, how: str) -> None:
    reader = await connect([nats_server.url], ServiceMetrics("reader"), name="reader", reconnect_wait_s=0.2)
    writer = await connect([nats_server.url], ServiceMetrics("writer"), name="writer", reconnect_wait_s=0.2)
    try:
        got: asyncio.Queue[bytes] = asyncio.Queue()

        async def take(msg: Msg) -> None:
            await got.put(msg.data)

        await reader.subscribe("t.after", cb=take)
        await flush(reader)
        nats_server.pause()
        try:
            if how == "timeout":
                with pytest.raises(FlushTimeoutError):
                    await flush(reader, 0.3)
            else:  # a caller's own deadline cancels the flush
                with pytest.raises(asyncio.TimeoutError):
                    await asyncio.wait_for(flush(reader, 10.0), 0.3)
        finally:
            nats_server.pause(False)
        await flush(reader, 5.0)  # the late PONG came first, then this one's

        await writer.publish("t.after", b"still reading")
        await flush(writer)
        # Well inside the 15 s (three unanswered 5 s pings) after which a deaf one reconnects.
        assert await asyncio.wait_for(got.get(), 5.0) == b"still reading"
        assert reader.is_connected
    finally:
        await drain(reader)
        await drain(writer)
