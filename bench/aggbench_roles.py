"""The aggregator bench's child processes: the generator, the burst and the bare baseline subscribers."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
from pathlib import Path
from typing import Any

from aggbench_batches import bare_decode, batch_template, node_name, stamp

from gpuscale import natsio, subjects


async def role_generator(
    url: str, nodes: int, duration: float, first_node: int, end_node: int | None = None
) -> None:
    """Nodes ``first_node`` to ``end_node`` (default: all) of ``nodes``, one batch per node per second."""
    import nats

    nc = await nats.connect(url, pending_size=256 * 1024 * 1024)
    templates = [
        (n, batch_template(n, nodes), subjects.samples(node_name(n)))
        for n in range(first_node, end_node or nodes)
    ]
    rng = random.Random(7)
    # A random phase per node, in 10 ms slots slept between so nats-py sends each slot at once.
    slots: list[list[tuple[tuple[bytes, int, int], str]]] = [[] for _ in range(100)]
    for _n, template, subject in templates:
        slots[int(rng.random() * 100)].append((template, subject))
    start = time.time() + 0.2
    published = 0
    second = 0
    late = 0.0  # how far behind its schedule it ever was: a generator that is the limit says so
    while time.time() < start + duration:
        for i, slot in enumerate(slots):
            delay = start + second + i * 0.01 - time.time()
            late = max(late, -delay)
            await asyncio.sleep(max(0.0, delay))
            for template, subject in slot:
                await nc.publish(subject, stamp(template, time.time(), second))
            published += len(slot)
        second += 1
    await natsio.flush(nc)
    await nc.close()
    print(f"late_max_s {late:.3f}", flush=True)
    print(f"published {published}", flush=True)  # last: keep_up_step reads the last word


async def role_burst(url: str, count: int, nodes: int, ready_file: str) -> None:
    """Publish ``count`` pre-stamped batches as fast as possible once ready_file exists."""
    import nats

    templates = [(batch_template(n, nodes), subjects.samples(node_name(n))) for n in range(nodes)]
    nc = await nats.connect(url, pending_size=1024 * 1024 * 1024)
    print("encoded", flush=True)
    while not os.path.exists(ready_file):  # noqa: ASYNC240 - a flag-file poll in a bench child
        await asyncio.sleep(0.01)
    for k in range(count):
        template, subject = templates[k % nodes]
        await nc.publish(subject, stamp(template, time.time(), k // nodes))
    await natsio.flush(nc, timeout_s=60)
    await nc.close()


async def role_bare_idle(url: str, duration: float) -> None:
    """The baseline at the keep-up load: decode every batch, nothing else."""
    import nats

    nc = await nats.connect(url)
    count = 0

    async def on_msg(msg: Any) -> None:
        nonlocal count
        bare_decode(msg.data)
        count += 1

    await nc.subscribe(subjects.SAMPLES_ALL, cb=on_msg, pending_msgs_limit=10_000_000, pending_bytes_limit=0)
    await asyncio.sleep(duration)
    await nc.close()
    print(f"bare {count}", flush=True)


async def role_bare(url: str, expected: int, ready_file: str) -> None:
    """The baseline: a nats-py callback subscriber that only decodes."""
    import nats

    nc = await nats.connect(url)
    state = {"n": 0, "first": 0.0, "last": 0.0, "cpu_first": 0.0, "cpu_last": 0.0}
    done = asyncio.Event()

    async def on_msg(msg: Any) -> None:
        bare_decode(msg.data)
        n = state["n"] = state["n"] + 1
        state["last"] = time.perf_counter()
        state["cpu_last"] = time.process_time()
        if n == 1:
            state["first"] = state["last"]
            state["cpu_first"] = state["cpu_last"]
        if n >= expected:
            done.set()

    await nc.subscribe(subjects.SAMPLES_ALL, cb=on_msg, pending_msgs_limit=10_000_000, pending_bytes_limit=0)
    await natsio.flush(nc)
    Path(ready_file).touch()  # noqa: ASYNC240 - one tiny write before the measurement starts
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(done.wait(), 60)
    elapsed = max(1e-9, state["last"] - state["first"])
    cpu = max(1e-9, state["cpu_last"] - state["cpu_first"])
    print(f"bare {state['n']} {elapsed:.6f} {cpu:.6f}", flush=True)
    await nc.close()
