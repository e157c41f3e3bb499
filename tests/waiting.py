"""The one way tests wait for asynchronous work.

CI machines are shared and busy: a consequence of asynchronous work (a
counter, a stream's state, a cluster object, a log line) may land well after
the event that causes it. Tests therefore poll for it with :func:`eventually`
instead of asserting straight away or after a fixed sleep. A fixed wait is
only right when a test proves that something does *not* happen; that is
:func:`holds_for`, which fails as soon as the property breaks and names how
long it watched.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

POLL_S = 0.02
# Generous on purpose: the budget is for a machine with every core busy; an
# idle one meets these conditions in milliseconds.
DEFAULT_TIMEOUT_S = 15.0


async def _value(check: Callable[[], Any]) -> Any:
    result = check()
    if inspect.isawaitable(result):
        result = await result
    return result


async def eventually(
    check: Callable[[], T | Awaitable[T]],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    what: str = "condition",
) -> T:
    """Poll ``check`` (sync or async) until it returns something truthy, and
    return that. An ``AssertionError`` raised by ``check`` counts as "not yet"
    and, if it is still raised at the deadline, is re-raised with its message,
    so a check may be written as plain asserts."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        failure: AssertionError | None = None
        try:
            last = await _value(check)
        except AssertionError as e:
            failure = e
        else:
            if last:
                return last  # type: ignore[no-any-return]  # truthy T, checked above
        if time.monotonic() > deadline:
            if failure is not None:
                raise AssertionError(f"{what} not met within {timeout_s:g} s: {failure}") from failure
            raise AssertionError(f"{what} not met within {timeout_s:g} s (last value: {last!r})")
        await asyncio.sleep(POLL_S)


async def holds_for(check: Callable[[], Any], duration_s: float, what: str = "property") -> None:
    """Assert that ``check`` stays truthy for ``duration_s``: the way to show
    that something does NOT happen. Callers say in a comment why
    ``duration_s`` is long enough for the thing to have happened if it would."""
    deadline = time.monotonic() + duration_s
    while True:
        result = await _value(check)
        if not result:
            raise AssertionError(f"{what} broke after {duration_s - (deadline - time.monotonic()):.2f} s")
        if time.monotonic() >= deadline:
            return
        await asyncio.sleep(POLL_S)


def sample_value(registry: Any, name: str, **labels: str) -> float:
    """A Prometheus sample's value, 0 when the series does not exist yet."""
    value = registry.get_sample_value(name, labels)
    return 0.0 if value is None else float(value)


def eventually_sync(
    check: Callable[[], T], timeout_s: float = DEFAULT_TIMEOUT_S, what: str = "condition"
) -> T:
    """:func:`eventually` for tests without an event loop (subprocesses, threads).
    An ``OSError`` (a port not listening yet) also counts as "not yet"."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        failure: Exception | None = None
        try:
            last = check()
        except (AssertionError, OSError) as e:
            failure = e
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{what} not met within {timeout_s:g} s: {failure or f'last value {last!r}'}"
            ) from failure
        time.sleep(POLL_S * 5)


async def eventually_while_running(
    group: Any,
    check: Callable[[], Any],
    timeout_s: float,
    what: str,
    explain: Callable[[], str] | None = None,
) -> Any:
    """:func:`eventually` for a pipeline of processes (``gpuscale_cli.demo.processes.ProcessGroup``):
    fails at once, with their last words, when one of them exits, and on a timeout
    shows each process's last log lines (and ``explain()``, when given)."""

    async def alive_check() -> Any:
        died = group.exited()
        if died:  # no point waiting for a pipeline with a part missing
            raise RuntimeError(f"{[c.name for c in died]} exited:\n" + "\n".join(c.tail(20) for c in died))
        return await _value(check)

    try:
        return await eventually(alive_check, timeout_s, what)
    except AssertionError as e:
        logs = "\n".join(f"--- {c.name}\n{c.tail(10)}" for c in group.children)
        extra = f"\n{explain()}" if explain is not None else ""
        raise AssertionError(f"{e}{extra}\n{logs}") from None
