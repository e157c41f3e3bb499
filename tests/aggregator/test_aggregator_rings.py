"""The window's packed storage on its own (core/rings.py), apart from its policy:
pod numbers are handed out and taken back, and a pod's totals are exactly what
its buckets in the window hold, however many buckets came and went."""

from __future__ import annotations

import random

from gpuscale.codec import Reader, encode_raw
from gpuscale.wire import SampleBatch
from gpuscale_aggregator.core.records import EMPTY, N_METRICS, RECORD, TOTALS
from gpuscale_aggregator.core.rings import Rings
from gpuscale_aggregator.core.window import WindowConfig, WindowStore

from .aggregator_builders import NOW, batch, engine, gpu, owner

BERT = ("default", "Deployment", "bert")


def read(wire: dict[str, object], now: float) -> SampleBatch:
    return Reader(SampleBatch).read(encode_raw(wire), now)[0]


def totals_of(store: Rings, pid: int) -> list[float]:
    return list(store._totals[pid * TOTALS : (pid + 1) * TOTALS])


def held_in_ring(store: Rings, pid: int) -> list[float]:
    """The sums and counts of the pod's closed buckets, read bucket by bucket."""
    slot_ts, ring, _, base, _, n = store._rings(pid)
    open_slot = base + store._open[pid] % n
    held = [0.0] * TOTALS
    for slot in range(base, base + n):
        if slot != open_slot and slot_ts[slot] != EMPTY:
            for i, v in enumerate(RECORD.unpack_from(ring, slot * RECORD.size)):
                held[i] += v
    return held


def test_pod_numbers_are_handed_out_taken_back_and_reused_by_the_storage_alone() -> None:
    rings = Rings(slots=4, bucket_s=1.0)
    first, second = rings._alloc_pod(0, 0.5), rings._alloc_pod(0, 0.5)
    assert (first, second, rings.pod_count) == (0, 1, 2)
    rings._release_pod(first)
    assert rings.pod_count == 1
    assert rings._alloc_pod(3, 3.5) == first  # the freed number, not a new one
    assert rings._capacity == 2
    assert rings._open[first] == -1
    assert rings._oldest[first] == 3


def test_a_pods_totals_are_exactly_its_closed_buckets_after_many_folds_and_evictions() -> None:
    """Fractional values, metrics that come and go, pods on one to three GPUs, for
    three windows' worth of buckets: the totals, folded and evicted as one
    struct per bucket, equal the sum of what the ring holds, to the last bit, and
    come back to exactly zero once every bucket has left."""
    rng = random.Random(37)
    store = WindowStore(WindowConfig(window_s=10.0))
    for second in range(35):
        ts = NOW + second + 0.25
        gpus = [
            gpu(
                i,
                owner("bert-1", engine=engine(waiting=rng.uniform(0, 1e4), kv=rng.uniform(0, 100))),
                util=rng.choice([0.0, 100.0, rng.uniform(0, 100)]),
                sm_active=rng.choice([None, rng.uniform(0, 100)]),
                power_w=rng.choice([None, rng.uniform(0, 700)]),
            )
            for i in range(rng.randint(1, 3))
        ]
        store.add_batch(read(batch(*gpus, ts=ts, seq=second), ts), ts)
        store.expire(ts)
        pid = store.workloads[BERT]["bert-1"]
        assert totals_of(store, pid) == held_in_ring(store, pid)
    store.expire(NOW + 100.0)
    assert BERT not in store.workloads
    assert totals_of(store, pid) == [0.0] * TOTALS
    assert list(store._engine_totals) == [0.0] * len(store._engine_totals)


def test_a_bucket_stops_taking_samples_at_its_count_limit_and_keeps_its_mean() -> None:
    store = WindowStore(WindowConfig(window_s=10.0))
    owners = [gpu(i, owner("bert-1"), util=40.0) for i in range(300)]
    store.add_batch(read(batch(*owners[:256], ts=NOW), NOW), NOW)
    store.add_batch(read(batch(*owners[:44], ts=NOW + 0.5, seq=1), NOW + 0.5), NOW + 0.5)
    pid = store.workloads[BERT]["bert-1"]
    _, ring, _, base, _, n = store._rings(pid)
    record = RECORD.unpack_from(ring, (base + store._open[pid] % n) * RECORD.size)
    assert record[N_METRICS] == 255
    (message,) = store.snapshot(NOW + 1.0)
    assert message.averages.gpu_util == 40.0
