"""One team's longer window costs the other teams no CPU: their pods stay on the compiled loops.

The compiled twins (core/_loops.pyx) run where a pod's ring is in the shared buffers. Before,
one pod anywhere with a ring of its own (a GPUScaler's ``window: 5m``) sent every batch and every
workload's message through the Python loops: with 4,000 other pods, their ingest went from
3 to 10 ms and their publish pass from 4 to 15 ms of CPU a second, and at the 12,500 nodes one
aggregator keeps up with compiled it fell behind (docs/BENCHMARKS.md: 91.5 % processed, batch
age p99 8.6 s). Now only the asking workload's own pods take the Python path.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from gpuscale.codec import Reader, encode, encode_raw
from gpuscale.wire import SampleBatch, WorkloadMetrics
from gpuscale_aggregator.core import pods
from gpuscale_aggregator.core.window import WindowConfig, WindowStore

from .aggregator_builders import NOW, batch, engine, gpu, owner

if pods._compiled is None:
    if os.environ.get("GPUSCALE_REQUIRE_COMPILED"):
        pytest.fail("GPUSCALE_REQUIRE_COMPILED is set but core/_loops is not built (make venv builds it)")
    pytest.skip("core/_loops is not built here: the Python loop alone runs", allow_module_level=True)

ASKER = ("team-a", "Deployment", "asker")
OTHERS = [("team-b", "Deployment", f"w{i}") for i in range(4)]


class PythonOnly(WindowStore):
    """The reference: the Python loops alone."""

    def add_batch(self, batch: SampleBatch, at: float | None = None) -> None:
        self._add_batch_python(batch, batch.ts if at is None else at)

    def _message(self, *args: Any) -> WorkloadMetrics | None:
        return self._message_python(*args)


def _batches(t: int) -> list[SampleBatch]:
    """Eight nodes of the other team's pods; node 0's first GPU is time-sliced with the asker's pod."""
    out = []
    for n in range(8):
        node = f"node-{n}"
        gpus = []
        for i in range(4):
            w = OTHERS[(n + i) % 4]
            owners = [owner(f"{w[2]}-{n}-{i}", w[2], namespace=w[0], engine=engine(waiting=float(i)))]
            if n == 0 and i == 0:
                owners.append(owner("asker-0", ASKER[2], namespace=ASKER[0]))
            gpus.append(gpu(i, *owners, util=float((t * 7 + n * 5 + i) % 97), node=node))
        wire = batch(*gpus, node=node, ts=NOW + t, seq=t)
        out.append(Reader(SampleBatch).read(encode_raw(wire), NOW + t)[0])
    return out


def test_a_longer_window_sends_only_its_own_pods_through_the_python_loops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config = WindowConfig(window_s=10.0, max_window_s=300.0)
    store, reference = WindowStore(config), PythonOnly(config)
    python_pods: set[str] = set()
    python_messages: set[tuple[str, str, str]] = set()
    add_python, message_python = WindowStore._add_batch_python, WindowStore._message_python

    def spy_add(self: WindowStore, b: SampleBatch, ts: float) -> None:
        if self is store:
            python_pods.update(o.pod for g in b.gpus for o in g.owners)
        add_python(self, b, ts)

    def spy_message(self: WindowStore, workload: tuple[str, str, str], *args: Any) -> Any:
        if self is store:
            python_messages.add(workload)
        return message_python(self, workload, *args)

    monkeypatch.setattr(WindowStore, "_add_batch_python", spy_add)
    monkeypatch.setattr(WindowStore, "_message_python", spy_message)
    for t in range(1, 60):
        if t == 5:
            for s in (store, reference):
                s.request(ASKER, 300.0, 3.0, NOW + t, 3600.0)
        for b in _batches(t):
            store.add_batch(b, NOW + t)
            reference.add_batch(b, NOW + t)
        sent = [(w, encode(m) if m else None) for w, m in store.iter_messages(NOW + t + 0.5)]
        assert sent == [(w, encode(m) if m else None) for w, m in reference.iter_messages(NOW + t + 0.5)]
    assert store.own_ring_count == 1  # the asker's pod holds its 5 min ring
    # The other team's 32 pods and 4 workloads never left the compiled loops.
    assert python_pods <= {"asker-0"}
    assert python_messages <= {ASKER}
