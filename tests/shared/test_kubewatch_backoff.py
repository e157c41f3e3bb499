"""A watch that fails at once, every time, after a list that works: the reflector backs off.

Two ways an API server (or a proxy in front of it) does this for as long as it likes:

- it ends every watch at once with nothing in it (a proxy's idle cut, a server shutting down):
  the reflector opened the next watch at once, with no pause at all, as fast as the server
  answered: every collector (one per GPU node), decider and actuator in a request loop
  against a struggling API server (client-go calls this a "very short watch" and backs off);
- it answers every watch with 410 Gone (a list that took longer than the watch cache keeps
  history, in a cluster that changes fast): the list worked, so the backoff started from its
  first step each time: a whole relist every 0.25-0.5 s, forever, and an info line each.

The backoff now grows until a watch works (it delivers an event, or lasts a second).
Time here is virtual: the reflector's waits are recorded, not slept.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from structlog.testing import capture_logs

from gpuscale import kubewatch
from gpuscale.kube.errors import ServerError
from gpuscale.kubewatch import Reflector, read_events

LISTS_SEEN = 8


class FailingWatches:
    """Lists answer at once; each watch ends at once (``gone``: with a 410 ERROR event)."""

    def __init__(self, stop: asyncio.Event, *, gone: bool, event_first: bool = False) -> None:
        self.stop = stop
        self.gone = gone
        self.event_first = event_first  # each watch delivers an event, then breaks
        self.lists = 0
        self.watches = 0

    async def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        self.lists += 1
        return {"items": [], "metadata": {"resourceVersion": str(100 + self.lists)}}

    async def watch(
        self, path: str, params: Mapping[str, str], read_timeout_s: float
    ) -> AsyncGenerator[Mapping[str, Any], None]:
        self.watches += 1
        if self.watches >= 40 or self.lists >= LISTS_SEEN:
            self.stop.set()  # enough seen: the test ends here, whatever the reflector does

        async def body() -> AsyncIterator[bytes]:
            if self.event_first:
                pod = {"metadata": {"name": "p", "resourceVersion": "7"}}
                yield json.dumps({"type": "ADDED", "object": pod}).encode() + b"\n"
                raise ConnectionResetError("the connection broke")
            if self.gone:
                status = {
                    "kind": "Status",
                    "code": 410,
                    "reason": "Expired",
                    "message": "too old resource version",
                }
                yield json.dumps({"type": "ERROR", "object": status}).encode() + b"\n"

        async for event in read_events(body()):
            yield event


class SlowlyRefused(FailingWatches):
    """Each watch is refused with 429 after longer than MIN_WATCH_S (on a clock of its own)."""

    clock = 0.0

    async def watch(
        self, path: str, params: Mapping[str, str], read_timeout_s: float
    ) -> AsyncGenerator[Mapping[str, Any], None]:
        self.watches += 1
        if self.lists >= LISTS_SEEN:
            self.stop.set()
        SlowlyRefused.clock += 1.5
        raise ServerError(429, "the server is overloaded", reason="TooManyRequests")
        yield {}  # an async generator


async def run_until_stopped(
    monkeypatch: pytest.MonkeyPatch,
    *,
    gone: bool,
    event_first: bool = False,
    watches: type[FailingWatches] = FailingWatches,
) -> tuple[FailingWatches, list[float], list[Any]]:
    waits: list[float] = []

    async def recorded(stop: asyncio.Event, delay_s: float) -> bool:
        waits.append(delay_s)
        await asyncio.sleep(0)
        return stop.is_set()

    monkeypatch.setattr(kubewatch, "sleep_unless_stopped", recorded)
    monkeypatch.setattr(kubewatch, "random", SimpleNamespace(random=lambda: 0.5))  # mid-jitter
    stop = asyncio.Event()
    api = watches(stop, gone=gone, event_first=event_first)
    reflector = Reflector(api, "/api/v1/pods", on_list=lambda _: None, on_event=lambda *_: None, what="pods")
    with capture_logs() as logs:
        await asyncio.wait_for(reflector.run(stop), 30)
    return api, waits, logs


async def test_watches_the_server_ends_at_once_are_opened_again_after_a_growing_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, waits, logs = await run_until_stopped(monkeypatch, gone=False)
    # Before: 40 watches in a row and not one wait between them.
    assert len(waits) >= api.watches - 1, (api.watches, waits)
    assert max(waits) >= 4.0, waits  # the pause grows (to the 10 s cap, jittered)
    assert len([e for e in logs if e["event"].startswith("watch_")]) <= 2, logs


async def test_a_watch_answered_410_after_every_list_relists_after_a_growing_pause(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api, waits, logs = await run_until_stopped(monkeypatch, gone=True)
    assert api.lists >= LISTS_SEEN
    # Before: 0.5 s before every relist, however many came before it.
    assert max(waits) >= 4.0, waits
    # A line at the first and every tenth try, as for any other failure; before, one each relist.
    assert len([e for e in logs if e["event"].startswith("watch_")]) <= 2, logs


async def test_a_watch_that_worked_and_then_broke_is_a_first_failure_each_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The count is of failures in a row: a watch that delivered an event worked, so when it
    breaks the relist waits the backoff's first step, not one grown by failures before it."""
    api, waits, _ = await run_until_stopped(monkeypatch, gone=False, event_first=True)
    assert api.lists >= LISTS_SEEN
    assert len(set(waits)) == 1, waits
    assert waits[0] <= 0.5, waits


async def test_a_watch_refused_slowly_is_a_failure_however_long_the_refusal_took(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An overloaded API server may take seconds to answer a watch with 429: only an event
    shows a watch worked once it raised, or such a server is relisted every half second."""
    monkeypatch.setattr(kubewatch, "time", SimpleNamespace(monotonic=lambda: SlowlyRefused.clock))
    api, waits, _ = await run_until_stopped(monkeypatch, gone=False, watches=SlowlyRefused)
    assert api.lists >= LISTS_SEEN
    assert max(waits) >= 4.0, waits  # before: 0.5 s before every relist
