"""The window core's ingest cost per GPU sample, in process (not a test).

    .venv/bin/python bench/window_ingest.py             # gpu_util 50 and 100, ~1 min
    .venv/bin/python bench/window_ingest.py --util 100
    .venv/bin/python bench/window_ingest.py --decode    # also bytes -> window vs msgpack.unpackb

Feeds 30 s of 1,000 nodes × 8 GPUs (two pods of one workload per node, 1 Hz) to
``WindowStore.add_batch``, already decoded, every workload with a window request
(30 s, recent means over 3 s, as the decider asks), and reports CPU time per GPU
sample, the best of ``--rounds`` fresh stores. No NATS, no decoding, no
publishing: only the hot path a change to the window core moves. To compare two
commits, run each one's copy alternately on the same idle machine; the spread
between runs of one commit (a few percent) is the noise floor.

``--decode`` adds the whole core's path from the bytes (``Aggregator.ingest``:
decode and validate, order, place, window) beside ``msgpack.unpackb`` of the
same bytes, the baseline of bench/aggregator_bench.py's saturation ratio
without NATS (which costs both the same per message).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import msgpack
from wire_builders import batch_wire, gpu_wire, owner_wire

from gpuscale.codec import Reader, encode_raw
from gpuscale.wire import SampleBatch
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import WindowConfig, WindowStore

START = 1_700_000_000.0
NODES = 1000
GPUS = 8
SECONDS = 30


def _gpu(node: str, index: int, util: float) -> dict[str, Any]:
    return gpu_wire(node, index, util, [owner_wire(f"{node}-pod-{index % 2}", f"w-{node}")])


def wires(util: float) -> list[bytes]:
    return [
        encode_raw(batch_wire(f"node-{n}", t, START + t, [_gpu(f"node-{n}", i, util) for i in range(GPUS)]))
        for t in range(SECONDS)
        for n in range(NODES)
    ]


def decode_ns_per_sample(feed: list[bytes], rounds: int) -> tuple[float, float]:
    """Best of ``rounds``: ``Aggregator.ingest`` from the bytes, and ``msgpack.unpackb`` alone."""
    best = bare = float("inf")
    for _ in range(rounds):
        agg = Aggregator(WindowConfig(window_s=30.0))
        started = time.process_time()
        for i, data in enumerate(feed):
            agg.ingest(data, START + i // NODES + 0.01, subject_node=f"node-{i % NODES}")
        best = min(best, time.process_time() - started)
        started = time.process_time()
        for data in feed:
            msgpack.unpackb(data, raw=False, strict_map_key=False)
        bare = min(bare, time.process_time() - started)
    samples = len(feed) * GPUS
    return best / samples * 1e9, bare / samples * 1e9


def batches(util: float) -> list[SampleBatch]:
    reader = Reader(SampleBatch)
    out = []
    for t in range(SECONDS):
        for n in range(NODES):
            node = f"node-{n}"
            wire = batch_wire(node, t, START + t, [_gpu(node, i, util) for i in range(GPUS)])
            out.append(reader.read(encode_raw(wire), START + t)[0])
    return out


def ns_per_sample(feed: list[SampleBatch], rounds: int) -> float:
    best = float("inf")
    for _ in range(rounds):
        store = WindowStore(WindowConfig(window_s=30.0))
        for n in range(NODES):
            store.request(("default", "Deployment", f"w-node-{n}"), 30.0, 3.0, START, 600.0)
        started = time.process_time()
        for b in feed:
            store.add_batch(b, b.ts)
        best = min(best, time.process_time() - started)
    return best / (len(feed) * GPUS) * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--util", type=float, action="append", help="gpu_util of every sample (repeatable)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--decode", action="store_true", help="also from the bytes, beside msgpack.unpackb")
    args = parser.parse_args()
    for util in args.util or [50.0, 100.0]:
        cost = ns_per_sample(batches(util), args.rounds)
        print(f"gpu_util {util:g}: {cost:,.0f} ns per GPU sample (best of {args.rounds})")
        if args.decode:
            whole, bare = decode_ns_per_sample(wires(util), min(args.rounds, 3))
            print(
                f"gpu_util {util:g}, from the bytes: {whole:,.0f} ns per GPU sample; msgpack.unpackb alone "
                f"{bare:,.0f} ns; ratio per CPU-second {bare / whole:.2f}"
            )


if __name__ == "__main__":
    main()
