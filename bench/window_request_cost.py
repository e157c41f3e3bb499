"""What one workload's window request costs everyone else, in process (not a test).

    .venv/bin/python bench/window_request_cost.py                  # 20,000 pods, ~1 min
    .venv/bin/python bench/window_request_cost.py --window-py OLD  # another copy of core/window.py

Feeds 2,500 nodes × 8 GPUs (one pod per GPU, workloads of 10 pods) at 1 Hz to
``WindowStore.add_batch`` (already decoded), with a publish cycle (``expire``)
every 2 s: 40 s to fill the windows, 40 s measured; then one workload asks for a 5 min window (as the decider
does for a GPUScaler with ``window: 5m``) and the feed goes on for 40 s; then
the request lapses and the feed goes on for 40 s more. Reports the process's
RSS after each phase and the longest single call that held ingest up in each
(one batch, the request itself, one slice of 100 workloads of a publish
cycle). ``--window-py``: load ``WindowStore`` from that file instead (a copy of
another commit's ``core/window.py``), to compare.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
import time
from array import array
from itertools import islice
from pathlib import Path
from types import ModuleType
from typing import Any

from wire_builders import batch_wire, gpu_wire, owner_wire

from gpuscale.codec import Reader, encode_raw
from gpuscale.wire import SampleBatch

START = 1_700_000_000.0
NODES = 2500
GPUS = 8
PODS_PER_WORKLOAD = 10
PHASE_S = 40
PUBLISH_EVERY_S = 2
SLICE = 100  # workloads per publish slice: where the shell yields to the event loop
TENANT = ("default", "Deployment", "w-0")


def window_module(path: str | None) -> ModuleType:
    if path is None:
        from gpuscale_aggregator.core import window

        return window
    spec = importlib.util.spec_from_file_location("window_under_test", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def node_batch(n: int) -> SampleBatch:
    node = f"node-{n}"
    gpus: list[dict[str, Any]] = []
    for i in range(GPUS):
        pod_index = n * GPUS + i
        owner = owner_wire(f"pod-{pod_index}", f"w-{pod_index // PODS_PER_WORKLOAD}")
        gpus.append(gpu_wire(node, i, float(pod_index % 100), [owner]))
    batch, _ = Reader(SampleBatch).read(encode_raw(batch_wire(node, 0, START, gpus)), START)
    return batch


class Phase:
    """How long each kind of call held ingest up: the longest, and the median."""

    def __init__(self) -> None:
        self.times: dict[str, array[float]] = {}  # compact: the RSS measured is the window's

    def held(self, seconds: float, what: str) -> None:
        self.times.setdefault(what, array("d")).append(seconds)

    def __str__(self) -> str:
        parts = []
        for what, held in self.times.items():
            times = sorted(held)
            parts.append(f"{what} {times[-1] * 1000:.1f} ms (median {times[len(times) // 2] * 1000:.2f})")
        return "; ".join(parts)


def feed(store: Any, batches: list[SampleBatch], seconds: range, phase: Phase) -> None:
    clock = time.perf_counter
    for t in seconds:
        at = START + t
        for b in batches:
            started = clock()
            store.add_batch(b, at)
            phase.held(clock() - started, "one batch")
        if t % PUBLISH_EVERY_S == 0:
            messages = store.iter_messages(at + 0.5)
            while True:
                started = clock()
                done = sum(1 for _ in islice(messages, SLICE))
                phase.held(clock() - started, "publish slice")
                if done < SLICE:
                    break


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--window-py", help="load WindowStore from this copy of core/window.py")
    args = parser.parse_args()
    module = window_module(args.window_py)
    batches = [node_batch(n) for n in range(NODES)]
    gc.collect()
    gc.freeze()  # as the service does after its start: nothing here is garbage
    empty = rss_mib()
    store = module.WindowStore(module.WindowConfig(window_s=30.0, max_window_s=300.0))
    print(
        f"{NODES * GPUS:,} pods in {NODES * GPUS // PODS_PER_WORKLOAD:,} workloads; RSS before any: {empty:.1f} MiB; "
        f"longest holds of ingest: one batch, a publish slice of {SLICE} workloads, the request"
    )

    feed(store, batches, range(-PHASE_S, 0), Phase())  # the windows fill, evictions begin
    steady = Phase()
    feed(store, batches, range(PHASE_S), steady)
    print(f"steady, 30 s window:    RSS {rss_mib():6.1f} MiB; {steady}")
    del steady

    asked = Phase()
    started = time.perf_counter()
    store.request(TENANT, 300.0, None, START + PHASE_S, 60.0)  # lapses at +60 s unless repeated
    asked.held(time.perf_counter() - started, "request")
    feed(store, batches, range(PHASE_S, 2 * PHASE_S), asked)
    print(f"{'/'.join(TENANT)} asks 5 min: RSS {rss_mib():6.1f} MiB; {asked}")
    del asked

    lapsed = Phase()
    feed(store, batches, range(2 * PHASE_S, 3 * PHASE_S), lapsed)
    print(f"its request lapsed:     RSS {rss_mib():6.1f} MiB; {lapsed}")
    held = getattr(store, "ring_slots_held", None)
    if held is not None:
        print(f"bucket places held by every ring now: {held():,} ({NODES * GPUS:,} pods × {store.slots})")


if __name__ == "__main__":
    main()
