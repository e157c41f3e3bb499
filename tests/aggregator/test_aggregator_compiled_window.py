"""The compiled loops (core/_loops.pyx) against the Python loops they twin: the same bytes.

Two stores take the same varied stream of batches and publish passes, one through the compiled
loops where the rings are shared, one through ``_add_batch_python`` and ``_message_python``
only; after every batch and every pass their packed buffers and bookkeeping are equal, and every
message encodes to the same bytes. The stream covers what the compiled loops handle themselves
and every branch they hand back to Python.
"""

from __future__ import annotations

import os
import random
import sys
import types
from typing import Any

import pytest

from gpuscale.codec import Reader, encode, encode_raw
from gpuscale.wire import SampleBatch, WorkloadMetrics
from gpuscale_aggregator import core as core_package
from gpuscale_aggregator.core import pods, window
from gpuscale_aggregator.core.window import WindowConfig, WindowStore

from .aggregator_builders import NOW, batch, engine, gpu, owner

if pods._compiled is None:
    if os.environ.get("GPUSCALE_REQUIRE_COMPILED"):
        pytest.fail("GPUSCALE_REQUIRE_COMPILED is set but core/_loops is not built (make venv builds it)")
    pytest.skip("core/_loops is not built here: the Python loop alone runs", allow_module_level=True)

_BUFFERS = (
    "_ts",
    "_ring",
    "_totals",
    "_open",
    "_len",
    "_oldest",
    "_last_seen",
    "_interval",
    "_joined",
    "_engine",
    "_unheard",
    "_engine_ring",
    "_engine_totals",
)


class PythonOnly(WindowStore):
    def add_batch(self, batch: SampleBatch, at: float | None = None) -> None:
        self._add_batch_python(batch, batch.ts if at is None else at)

    def _message(self, *args: Any) -> WorkloadMetrics | None:
        return self._message_python(*args)


def _value(rng: random.Random, low: float, high: float) -> float | None:
    roll = rng.random()
    if roll < 0.15:
        return None
    if roll < 0.2:
        return float(rng.choice((0, 0.0, high)))
    if roll < 0.3:  # near the ceiling, where the means are pinned
        return rng.uniform(0.99 * high, high)
    return round(rng.uniform(low, high), rng.choice((0, 1, 3)))


def _owner(rng: random.Random, pod: str, workload: str) -> dict[str, Any]:
    kw: dict[str, Any] = {
        "namespace": rng.choice(("default", "team-b")),
        "sm_util": _value(rng, 0.0, 100.0),
        "fb_used_mib": rng.choice((None, None, 1e31, 16_100.0, rng.uniform(0.0, 80_000.0))),
        "ready": rng.choice((None, True, True, True, False)),
    }
    if rng.random() < 0.3:
        kw["engine"] = engine(
            _value(rng, 0.0, 50.0),
            _value(rng, 0.0, 300.0),
            _value(rng, 0.0, 100.0),
            arrival=_value(rng, 0, 9),
        )
    return owner(pod, workload, **kw)


def _batch(rng: random.Random, node: int, ts: float, seq: int) -> dict[str, Any]:
    name = f"node-{node}"
    gpus = []
    for index in range(rng.randint(1, 8)):
        owners = [
            _owner(rng, f"{name}-pod-{rng.randint(0, 3)}", f"w{(node + rng.randint(0, 1)) % 4}")
            for _ in range(rng.choice((0, 1, 1, 1, 2)))
        ]
        health = "ok" if rng.random() < 0.9 else "lost"
        util = _value(rng, 0.0, 100.0) if health == "ok" else None
        if health == "ok" and util is None:
            util = 0.0  # a healthy GPU's util is never null on the wire
        fb_used = rng.choice((None, 4000.0, rng.uniform(0.0, 1e32)))
        gpus.append(
            gpu(
                index,
                *owners,
                util=util,
                sm_active=_value(rng, 0.0, 100.0),
                fb_used_mib=fb_used if health == "ok" else None,
                fb_free_mib=rng.choice((None, 0.0, 12_000.0)) if health == "ok" else None,
                power_w=rng.choice((None, 200.0, 1.5e30, 5e30)) if health == "ok" else None,
                health=health,
                node=name,
            )
        )
    wire = batch(*gpus, node=name, ts=ts, seq=seq, interval_s=rng.choice((1.0, 1.0, 2.0)))
    if rng.random() < 0.3:  # engines once per pod, as newer collectors send them
        wire["engines"] = [
            {"pod_uid": f"uid-{name}-pod-{p}", "signals": engine(_value(rng, 0, 40), _value(rng, 0, 64))}
            for p in range(rng.randint(0, 4))
        ]
    return wire


def _state(store: WindowStore) -> dict[str, Any]:
    state = {name: bytes(getattr(store, name)) for name in _BUFFERS}
    state["long"] = {pid: tuple(bytes(b) for b in bufs) for pid, bufs in store._long.items()}
    state["workloads"] = {w: dict(m) for w, m in store.workloads.items()}
    state["ticks"] = {w: (t.at, t.awaiting) for w, t in store.ticks.items()}
    state["complete"] = list(store.complete)
    state["free"] = (list(store._free), list(store._engine_free))
    return state


@pytest.mark.parametrize("seed", range(6))
def test_compiled_loops_write_and_publish_what_the_python_loops_do(seed: int) -> None:
    rng = random.Random(seed)
    config = WindowConfig(window_s=rng.choice((5.0, 10.0, 30.0)))
    compiled, python = WindowStore(config), PythonOnly(config)
    reader = Reader(SampleBatch)
    t = NOW
    for step in range(400):
        t += rng.choice((0.0, 0.1, 0.4, 0.5, 1.0, 1.0, 2.0))
        node = rng.randint(0, 5)
        at = t - rng.choice((0.0, 0.0, 0.0, 0.7, 3.0, 40.0))  # late samples and too-old ones
        decoded, _ = reader.read(encode_raw(_batch(rng, node, at, step)), t)
        if rng.random() < 0.05:  # a longer window for one workload: its pods get rings of their own
            asked = (("default", "Deployment", f"w{rng.randint(0, 3)}"), rng.choice((5.0, 60.0)))
            recent = rng.choice((None, 3.0))
            for store in (compiled, python):
                store.request(*asked, recent, t, 5.0)
        compiled.add_batch(decoded, at)
        python.add_batch(decoded, at)
        assert _state(compiled) == _state(python), f"step {step}"
        roll = rng.random()
        if roll < 0.15:  # the cycle: every workload expired and its message built
            sent = [(w, encode(m) if m else None) for w, m in compiled.iter_messages(t)]
            assert sent == [(w, encode(m) if m else None) for w, m in python.iter_messages(t)]
            assert _state(compiled) == _state(python), f"publish after step {step}"
        elif roll < 0.4:  # the workloads whose tick completed, one message each
            due = compiled.take_complete(t)
            assert due == python.take_complete(t)
            offset = rng.choice((0.0, 0.25))  # a wall-clock step
            for workload in due:
                message, twin = (
                    compiled.message_of(workload, t, offset),
                    python.message_of(workload, t, offset),
                )
                assert (encode(message) if message else None) == (encode(twin) if twin else None)
            assert _state(compiled) == _state(python), f"messages due after step {step}"


def test_compiled_loops_are_used_where_the_rings_are_shared(monkeypatch: pytest.MonkeyPatch) -> None:
    """A guard against twins that are never called: the shared rings take the compiled paths."""
    store = WindowStore(WindowConfig(window_s=10.0))
    called = []
    real = pods._compiled

    class Spy:
        def add_batch(self, *args: Any) -> None:
            called.append("add_batch")
            real.add_batch(*args)

        def message(self, *args: Any) -> WorkloadMetrics | None:
            called.append("message")
            return real.message(*args)

    decoded, _ = Reader(SampleBatch).read(encode_raw(batch(gpu(0, owner("p")), ts=NOW)), NOW)
    monkeypatch.setattr(pods, "_compiled", Spy())
    monkeypatch.setattr(window, "_compiled", pods._compiled)
    store.add_batch(decoded, NOW)
    assert store.snapshot(NOW + 0.5)
    assert called == ["add_batch", "message"]


def test_a_module_built_from_an_older_loops_file_is_left_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale build (``pip install -e .`` over an old ``.so``) would write the rings as the
    old loops did: only a module that says this contract is used."""
    for contract in (None, pods.LOOPS_CONTRACT - 1):
        stale = types.ModuleType("gpuscale_aggregator.core._loops")
        if contract is not None:
            stale.CONTRACT = contract  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "gpuscale_aggregator.core._loops", stale)
        monkeypatch.setattr(core_package, "_loops", stale, raising=False)
        assert pods._compiled_loop() is None
    current = types.ModuleType("gpuscale_aggregator.core._loops")
    current.CONTRACT = pods.LOOPS_CONTRACT  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "gpuscale_aggregator.core._loops", current)
    monkeypatch.setattr(core_package, "_loops", current, raising=False)
    assert pods._compiled_loop() is current
