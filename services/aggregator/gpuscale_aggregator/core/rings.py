"""The window's packed storage: per pod number a ring of buckets in flat buffers shared by all
pods (memory bounds a fleet; nothing here is an object the GC walks), the closed buckets' totals
and the open bucket; engine records likewise, only for pods that sent one. Rings longer than the
shared one (a policy's longer window) are the pod's own. Which pod a number is: :mod:`.pods`."""

from __future__ import annotations

from array import array
from operator import add, sub
from struct import Struct
from typing import Any, Final

from gpuscale.wire import NO_METRICS, UNSET, MetricValues

from .records import (
    COUNT_MAX,
    EMPTY,
    EMPTY_ENGINE,
    EMPTY_RECORD,
    ENGINE_METRICS,
    ENGINE_RECORD,
    ENGINE_TOTALS,
    ENGINE_TOTALS_RECORD,
    KV,
    MEM_RATIO,
    N_ENGINE,
    N_METRICS,
    NO_ENGINE,
    NO_ENGINE_VALUES,
    RECORD,
    TOTALS,
    TOTALS_RECORD,
    WINDOW_METRICS,
    engine_added,
    engine_values,
)

# A pod's ring: times, records, engine records, first bucket's index in the first two and in
# the engine records, length.
Where = tuple["array[float]", bytearray, bytearray, int, int, int]
# Nothing yet: the sums a pod's recent means start from.
_NO_TOTALS: Final = (0.0,) * TOTALS
_NO_ENGINE_TOTALS: Final = (0.0,) * ENGINE_TOTALS
# The positions _recent spells out.
if (
    MEM_RATIO != 3
    or N_ENGINE != 5
    or KV != 2
    or MetricValues.__struct_fields__ != WINDOW_METRICS + ENGINE_METRICS
):
    raise ImportError("core.rings._recent spells out the metrics in an order that has changed")
_RUNS: dict[int, Struct] = {}


def _run_of(k: int) -> Struct:
    """``k`` records side by side, as one struct (read at once)."""
    run = _RUNS.get(k)
    if run is None:
        run = _RUNS[k] = Struct(RECORD.format[0] + RECORD.format[1:] * k)
    return run


# A pod not heard since its workload's last message: fresh then (its workload waits for it), or not.
AWAITED: Final = 1
UNAWAITED: Final = 2


class Rings:
    """Per pod number: a ring of buckets, the closed buckets' totals and the pod's bookkeeping, packed."""

    def __init__(self, slots: int, bucket_s: float) -> None:
        self.slots = slots  # the shared rings' length
        self._inv_bucket = 1.0 / bucket_s
        self._pod_count = 0
        self._free: list[int] = []
        self._capacity = 0
        # Per pod × slot:
        self._ts = array("d")  # newest sample time in the bucket; EMPTY: nothing
        self._ring = bytearray()  # RECORD per bucket
        # Per pod:
        self._totals = array("d")  # TOTALS per pod: the closed buckets' sums and counts
        self._open = array("q")  # the open (newest) bucket's index, -1: none
        self._len = array("q")  # the ring's length: ``slots`` (shared buffers), else in ``_long``
        # pod -> its own ring (times, records, engine records: empty without an engine).
        self._long: dict[int, tuple[array[float], bytearray, bytearray]] = {}
        self._oldest = array("q")  # lowest bucket index that may still be in the ring
        self._last_seen = array("d")
        self._interval = array("d")
        self._joined = array("d")  # the pod's first sample in this life: when it came to serve
        self._engine = array("q")  # per pod: its engine number, NO_ENGINE: none yet
        self._unheard = bytearray()  # 0: heard since its workload's last message, else AWAITED, UNAWAITED
        # Per engine number × slot, and per engine number:
        self._engine_ring = bytearray()  # ENGINE_RECORD per bucket
        self._engine_totals = array("d")  # ENGINE_TOTALS per engine pod
        self._engine_capacity = 0
        self._engine_free: list[int] = []

    def _rings(self, pid: int) -> Where:
        n = self._len[pid]
        if n == self.slots:
            return self._ts, self._ring, self._engine_ring, pid * n, self._engine[pid] * n, n
        ts, ring, engine = self._long[pid]
        return ts, ring, engine, 0, 0, n

    def _reshape(self, pid: int, slots: int) -> None:
        """Re-lay one pod's ring for ``slots`` buckets (the shared length: back into the shared
        buffers), keeping its newest buckets (in at most three runs); the rest leave its totals."""
        where = self._rings(pid)
        old_ts, old_ring, old_engine, base, ebase, n = where
        eid = self._engine[pid]
        size, esize, inv = RECORD.size, ENGINE_RECORD.size, self._inv_bucket
        current = self._open[pid]
        oldest = self._oldest[pid]
        keep_from = max(oldest, current - min(n, slots) + 1)
        for bucket in range(max(oldest, current - n + 1), keep_from):
            held = old_ts[base + bucket % n]
            if held != EMPTY and int(held * inv) == bucket:
                self._evict_slot(pid, bucket % n, where)
        shared = slots == self.slots
        if shared:
            ts, ring, engine = self._ts, self._ring, self._engine_ring
            to, eto = pid * slots, eid * slots
            ts[to : to + slots] = array("d", bytes(8 * slots))
        else:
            ts, ring = array("d", bytes(8 * slots)), bytearray(size * slots)
            engine = bytearray(esize * slots if eid != NO_ENGINE else 0)
            to = eto = 0
        bucket = keep_from
        while 0 <= bucket <= current:
            src, dst = bucket % n, bucket % slots
            run = min(current - bucket + 1, n - src, slots - dst)
            ts[to + dst : to + dst + run] = old_ts[base + src : base + src + run]
            ring[(to + dst) * size : (to + dst + run) * size] = old_ring[
                (base + src) * size : (base + src + run) * size
            ]
            if eid != NO_ENGINE:
                engine[(eto + dst) * esize : (eto + dst + run) * esize] = old_engine[
                    (ebase + src) * esize : (ebase + src + run) * esize
                ]
            bucket += run
        if n == self.slots:  # it leaves the shared buffers: its place there holds nothing
            self._ts[base : base + n] = array("d", bytes(8 * n))
        if shared:
            del self._long[pid]
        else:
            self._long[pid] = (ts, ring, engine)
        self._oldest[pid] = keep_from
        self._len[pid] = slots

    def _alloc_pod(self, bucket: int, ts: float) -> int:
        """A number for a pod whose first sample is at ``ts``: a free one, else the buffers grow."""
        if self._free:
            pid = self._free.pop()
        else:
            pid = self._capacity
            self._capacity += 1
            self._ts.extend(array("d", bytes(8 * self.slots)))
            self._ring.extend(bytes(RECORD.size * self.slots))
            self._totals.extend(array("d", bytes(8 * TOTALS)))
            self._len.append(self.slots)
            self._engine.append(NO_ENGINE)
            self._unheard.append(UNAWAITED)
            for per_pod in (self._open, self._oldest, self._last_seen, self._interval, self._joined):
                per_pod.append(0)  # each set below
        self._open[pid] = -1
        self._joined[pid] = ts
        self._unheard[pid] = UNAWAITED
        self._oldest[pid] = bucket
        self._last_seen[pid] = 0.0
        self._interval[pid] = 1.0
        self._pod_count += 1
        return pid

    def _release_pod(self, pid: int) -> None:
        """Its ring is already empty: the number goes back, and a ring of its own is freed."""
        self._pod_count -= 1
        if self._len[pid] != self.slots:
            del self._long[pid]
            self._len[pid] = self.slots
        t = pid * TOTALS
        self._totals[t : t + TOTALS] = array("d", bytes(8 * TOTALS))
        eid = self._engine[pid]
        if eid != NO_ENGINE:
            self._engine[pid] = NO_ENGINE
            self._engine_free.append(eid)
        self._free.append(pid)

    def _new_engine(self, pid: int) -> int:
        """The pod's engine number: a ring of empty records and zero totals."""
        if self._engine_free:
            eid = self._engine_free.pop()
        else:
            eid = self._engine_capacity
            self._engine_capacity += 1
            self._engine_ring.extend(bytes(ENGINE_RECORD.size * self.slots))
            self._engine_totals.extend(array("d", bytes(8 * ENGINE_TOTALS)))
        size = ENGINE_RECORD.size * self.slots
        self._engine_ring[eid * size : (eid + 1) * size] = bytes(size)
        n = self._len[pid]
        if n != self.slots:  # a ring of its own: its engine records beside it
            ts, ring, _ = self._long[pid]
            self._long[pid] = (ts, ring, bytearray(ENGINE_RECORD.size * n))
        t = eid * ENGINE_TOTALS
        self._engine_totals[t : t + ENGINE_TOTALS] = array("d", bytes(8 * ENGINE_TOTALS))
        self._engine[pid] = eid
        return eid

    def _engine_open(self, engines: bytearray, eslot: int, engine: Any) -> None:
        """A new bucket's engine record: the owner's values, or nothing yet."""
        values = engine_values(engine) if engine else NO_ENGINE_VALUES
        ENGINE_RECORD.pack_into(engines, eslot * ENGINE_RECORD.size, *engine_added(EMPTY_ENGINE, values))

    def _engine_merge(self, engines: bytearray, eslot: int, engine: Any) -> None:
        """More values for the open bucket (the pod's other GPU entries carry the same)."""
        off = eslot * ENGINE_RECORD.size
        old = ENGINE_RECORD.unpack_from(engines, off)
        if max(old[N_ENGINE:]) >= COUNT_MAX:
            return
        ENGINE_RECORD.pack_into(engines, off, *engine_added(old, engine_values(engine)))

    def _engine_fold(self, eid: int, engines: bytearray, eslot: int) -> None:
        """The closing bucket's engine record joins the engine totals."""
        v = ENGINE_RECORD.unpack_from(engines, eslot * ENGINE_RECORD.size)
        off = eid * ENGINE_TOTALS_RECORD.size
        totals = self._engine_totals
        ENGINE_TOTALS_RECORD.pack_into(
            totals, off, *map(add, ENGINE_TOTALS_RECORD.unpack_from(totals, off), v)
        )

    def _evict_slot(self, pid: int, position: int, where: Where | None = None) -> None:
        """Take one closed bucket out of the pod's totals and empty it (``where``: :meth:`_rings`;
        None: the shared buffers)."""
        eid = self._engine[pid]
        if where is None:  # (the publish cycle's common case: no tuple built)
            slot_ts, ring, slot = self._ts, self._ring, pid * self.slots + position
        else:
            slot_ts, ring = where[0], where[1]
            slot = where[3] + position
        if eid != NO_ENGINE:
            if where is None:
                engines, eslot = self._engine_ring, eid * self.slots + position
            else:
                engines, eslot = where[2], where[4] + position
            eoff = eid * ENGINE_TOTALS_RECORD.size
            e = ENGINE_RECORD.unpack_from(engines, eslot * ENGINE_RECORD.size)
            engine_totals = self._engine_totals
            ENGINE_TOTALS_RECORD.pack_into(
                engine_totals, eoff, *map(sub, ENGINE_TOTALS_RECORD.unpack_from(engine_totals, eoff), e)
            )
        totals = self._totals
        off = pid * TOTALS_RECORD.size
        v = RECORD.unpack_from(ring, slot * RECORD.size)
        TOTALS_RECORD.pack_into(totals, off, *map(sub, TOTALS_RECORD.unpack_from(totals, off), v))
        slot_ts[slot] = EMPTY

    def _add_late(
        self, pid: int, position: int, bucket: int, ts: float, values: tuple[float | None, ...], engine: Any
    ) -> None:
        """A sample for a bucket older than the open one: into its closed bucket and the totals;
        dropped when a ring or more older than the open bucket or the slot's bucket."""
        where = self._rings(pid)
        slot_ts, ring, engines, base, ebase, n = where
        if bucket <= self._open[pid] - n:
            return
        slot = base + position
        held_ts = slot_ts[slot]
        if held_ts != EMPTY:
            held = int(held_ts * self._inv_bucket)
            if held > bucket:
                return
            if held < bucket:
                self._evict_slot(pid, position, where)
        off = slot * RECORD.size
        occupied = slot_ts[slot] != EMPTY
        old = RECORD.unpack_from(ring, off) if occupied else EMPTY_RECORD
        if old[N_METRICS] >= COUNT_MAX:
            return
        eid = self._engine[pid]
        if eid != NO_ENGINE:
            self._engine_late(eid, engines, ebase + position, occupied, engine)
        sums = [s + (v or 0.0) for s, v in zip(old[:N_METRICS], values, strict=True)]
        counts = [c + (v is not None) for c, v in zip(old[N_METRICS:], values, strict=True)]
        RECORD.pack_into(ring, off, *sums, *counts)
        new = RECORD.unpack_from(ring, off)
        t = pid * TOTALS
        totals = self._totals
        for i in range(TOTALS):
            totals[t + i] += new[i] - old[i]
        if ts > slot_ts[slot]:
            slot_ts[slot] = ts
        if bucket < self._oldest[pid]:
            self._oldest[pid] = bucket

    def _engine_late(self, eid: int, engines: bytearray, eslot: int, occupied: bool, engine: Any) -> None:
        """A late sample's engine values into its closed bucket, and so into the totals."""
        off = eslot * ENGINE_RECORD.size
        old = ENGINE_RECORD.unpack_from(engines, off) if occupied else EMPTY_ENGINE
        if max(old[N_ENGINE:]) >= COUNT_MAX:
            return
        values = engine_values(engine) if engine else NO_ENGINE_VALUES
        ENGINE_RECORD.pack_into(engines, off, *engine_added(old, values))
        stored = ENGINE_RECORD.unpack_from(engines, off)
        t = eid * ENGINE_TOTALS
        for i in range(ENGINE_TOTALS):
            self._engine_totals[t + i] += stored[i] - old[i]

    def _evict_closed(
        self, pid: int, cutoff: float, pod_totals: tuple[float, ...]
    ) -> tuple[tuple[float, ...], bool]:
        """:meth:`_evict`'s common case (the shared ring, no engine): the pod's closed buckets at
        or before ``cutoff`` out of ``pod_totals`` and emptied. The totals left, and whether any
        went (the caller writes them back: the publish pass reads them for the means too)."""
        slots, slot_ts, ring, inv, size = self.slots, self._ts, self._ring, self._inv_bucket, RECORD.size
        base, oldest, current = pid * slots, self._oldest[pid], self._open[pid]
        evicted = False
        while oldest < current:
            slot = base + oldest % slots
            held = slot_ts[slot]
            if held != EMPTY and int(held * inv) == oldest:
                if held > cutoff:
                    break
                pod_totals = tuple(map(sub, pod_totals, RECORD.unpack_from(ring, slot * size)))
                slot_ts[slot] = EMPTY
                evicted = True
            oldest += 1
        self._oldest[pid] = oldest
        return pod_totals, evicted

    def _evict(self, pid: int, cutoff: float) -> bool:
        """Drop the pod's buckets whose newest sample is at or before ``cutoff``; False: none left."""
        slots = self.slots
        if not self._long or self._len[pid] == slots:  # (most pods: no tuple built)
            where = None
            slot_ts, base = self._ts, pid * slots
        else:
            where = self._rings(pid)
            slot_ts, base, slots = where[0], 0, where[5]
        current = self._open[pid]
        if where is None and self._engine[pid] == NO_ENGINE:
            off = pid * TOTALS_RECORD.size
            pod_totals, evicted = self._evict_closed(
                pid, cutoff, TOTALS_RECORD.unpack_from(self._totals, off)
            )
            if evicted:
                TOTALS_RECORD.pack_into(self._totals, off, *pod_totals)
            oldest = self._oldest[pid]
        else:
            inv = self._inv_bucket
            oldest = self._oldest[pid]
            while oldest < current:
                position = oldest % slots
                held = slot_ts[base + position]
                if held != EMPTY and int(held * inv) == oldest:
                    if held > cutoff:
                        break
                    self._evict_slot(pid, position, where)
                oldest += 1
            self._oldest[pid] = oldest
        if oldest < current:
            return True
        # Only the open bucket may be left; it is not in the totals.
        slot = base + current % slots
        if slot_ts[slot] > cutoff:
            return True
        slot_ts[slot] = EMPTY
        self._open[pid] = -1
        return False

    def _recent(self, pid: int, cutoff: float) -> MetricValues:
        """The pod's means over its buckets whose newest sample is after ``cutoff`` (the last
        seconds, for the workloads whose policy asked). Spelled out: this runs for every pod of
        such a workload in every message (``_loops.pyx`` spells it out again for the shared rings)."""
        current = self._open[pid]
        if current < 0:
            return NO_METRICS
        eid = self._engine[pid]
        slots = self.slots
        if self._len[pid] == slots:  # (most pods: no tuple built)
            slot_ts, ring, engines, base, ebase = (
                self._ts,
                self._ring,
                self._engine_ring,
                pid * slots,
                eid * slots,
            )
        else:
            slot_ts, ring, engines, base, ebase, slots = self._rings(pid)
        inv, unset = self._inv_bucket, UNSET
        size = RECORD.size
        # Which buckets: from the open one down to ``lowest``, ``k`` of them.
        bucket, lowest, k = current, current + 1, 0
        while bucket > current - slots:
            held = slot_ts[base + bucket % slots]
            if held != EMPTY and int(held * inv) == bucket:
                if held <= cutoff:
                    break
                lowest = bucket
                k += 1
            bucket -= 1
        # Summed newest first, the newest record as it is: the sums of adding them to zeros, for
        # every value the means below can tell apart.
        sums: Any = _NO_TOTALS
        esums: Any = _NO_ENGINE_TOTALS
        start = lowest % slots
        if k and k == current - lowest + 1 and start + k <= slots and eid == NO_ENGINE:
            # The usual case: one run of buckets in one read.
            values = _run_of(k).unpack_from(ring, (base + start) * size)
            sums = values[(k - 1) * TOTALS :]
            for j in range(k - 2, -1, -1):
                sums = map(add, sums, values[j * TOTALS : (j + 1) * TOTALS])
            sums = tuple(sums)
        elif k:
            unpack, first = RECORD.unpack_from, True
            for bucket in range(current, lowest - 1, -1):
                position = bucket % slots
                held = slot_ts[base + position]
                if held != EMPTY and int(held * inv) == bucket:
                    record = unpack(ring, (base + position) * size)
                    sums, first = (record if first else tuple(map(add, sums, record))), False
                    if eid != NO_ENGINE:
                        record = ENGINE_RECORD.unpack_from(engines, (ebase + position) * ENGINE_RECORD.size)
                        esums = tuple(map(add, esums, record))
        s0, s1, s2, s3, s4, s5, c0, c1, c2, c3, c4, c5 = sums
        # max(0.0, mean), and min(that, 100.0) for a %, without the builtins' calls.
        window_means = (
            (100.0 if (v := s0 / c0) > 100.0 else v if v > 0.0 else 0.0) if c0 > 0.5 else unset,
            (100.0 if (v := s1 / c1) > 100.0 else v if v > 0.0 else 0.0) if c1 > 0.5 else unset,
            (100.0 if (v := s2 / c2) > 100.0 else v if v > 0.0 else 0.0) if c2 > 0.5 else unset,
            (100.0 if (v := s3 / c3) > 100.0 else v if v > 0.0 else 0.0) if c3 > 0.5 else unset,
            (v if (v := s4 / c4) > 0.0 else 0.0) if c4 > 0.5 else unset,
            (v if (v := s5 / c5) > 0.0 else 0.0) if c5 > 0.5 else unset,
        )
        if eid == NO_ENGINE:
            return MetricValues(*window_means)
        e0, e1, e2, e3, e4, k0, k1, k2, k3, k4 = esums
        return MetricValues(
            *window_means,
            (v if (v := e0 / k0) > 0.0 else 0.0) if k0 > 0.5 else unset,
            (v if (v := e1 / k1) > 0.0 else 0.0) if k1 > 0.5 else unset,
            (100.0 if (v := e2 / k2) > 100.0 else v if v > 0.0 else 0.0) if k2 > 0.5 else unset,
            (v if (v := e3 / k3) > 0.0 else 0.0) if k3 > 0.5 else unset,
            (v if (v := e4 / k4) > 0.0 else 0.0) if k4 > 0.5 else unset,
        )

    def _engine_means(self, pid: int, eid: int) -> tuple[Any, ...]:
        """An engine pod's window means (totals plus the open record), UNSET where it sent none."""
        t = eid * ENGINE_TOTALS
        _, _, engines, _, ebase, n = self._rings(pid)
        v = ENGINE_RECORD.unpack_from(engines, (ebase + self._open[pid] % n) * ENGINE_RECORD.size)
        totals = self._engine_totals
        means: list[Any] = []
        for i in range(N_ENGINE):
            total, count = totals[t + i] + v[i], totals[t + N_ENGINE + i] + v[N_ENGINE + i]
            if count <= 0.5:
                means.append(UNSET)
            elif total <= 0.0:
                means.append(0.0)
            elif i == KV and total >= 100.0 * count:
                means.append(100.0)
            else:
                means.append(total / count)
        return tuple(means)

    @property
    def pod_count(self) -> int:
        return self._pod_count

    @property
    def own_ring_count(self) -> int:
        """Pods holding a ring of their own (their workload asked for a longer window)."""
        return len(self._long)
