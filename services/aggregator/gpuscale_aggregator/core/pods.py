"""The window's policy on the ingest side: which pod a sample feeds, in which window.

Per (GPU, owner) of a healthy GPU, a ready owner's pod gets the GPU's util, sm_active and power,
its own sm_util, its own memory (else the GPU's) and its engine gauges. A workload whose policy asks
for a longer window pays for it alone: its pods get rings of their own, re-laid as buckets open.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Final

from msgspec.structs import replace

from gpuscale.wire import HEALTH_OK, UNSET, GpuOwner, GpuSample, SampleBatch

from .records import COUNT_MAX, EMPTY, HUGE, NO_ENGINE, RECORD, TOTALS_RECORD
from .rings import AWAITED, Rings

# What the compiled loops do for these callers (2: they hand a pod with a ring of its own back to
# the Python loop). A module built from an older ``_loops.pyx`` says another, or nothing: unused.
LOOPS_CONTRACT: Final = 2


def _compiled_loop() -> ModuleType | None:
    """The hot loop compiled (``make compiled``, where a C compiler is); None: it runs in Python."""
    try:
        from . import _loops
    except ImportError:
        return None
    return _loops if getattr(_loops, "CONTRACT", None) == LOOPS_CONTRACT else None


_compiled = _compiled_loop()
COMPILED_LOOP: Final = _compiled is not None

WorkloadTuple = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class WindowConfig:
    window_s: float = 30.0  # for workloads whose policy asked for nothing
    bucket_s: float = 1.0
    stale_intervals: float = 3.0
    source: str = ""  # names this aggregator in its messages (their ``source``); "": unnamed
    max_window_s: float = 300.0  # the longest window a policy may ask for
    max_requests: int = 100_000  # how many workloads may have a window of their own (bounded memory)
    publish_interval_s: float = 2.0  # a workload's message is due this long after its last at the latest

    def __post_init__(self) -> None:
        if not min(self.window_s, self.bucket_s, self.stale_intervals, self.publish_interval_s) > 0:
            raise ValueError("window_s, bucket_s, stale_intervals and publish_interval_s must be positive")
        if self.max_window_s < self.window_s:
            raise ValueError("max_window_s must not be shorter than window_s")


@dataclass(slots=True)
class Wanted:
    """What a workload's policy asked for (a ``WindowRequest``), on this process's clock."""

    window_s: float
    recent_s: float | None
    until: float  # the request lapses then unless repeated
    covers_from: float  # before this the samples were dropped under a shorter window


# How long a request may hold without repetition.
TTL_MIN_S: Final = 1.0
TTL_MAX_S: Final = 3600.0
# Why a window request was not taken as asked (a metrics label: low cardinality).
CLAMPED: Final = "clamped"  # shorter than a bucket or longer than max_window_s: the nearest allowed
TOO_MANY: Final = "too_many_workloads"  # max_requests workloads already have a window of their own


@dataclass(slots=True)
class Tick:
    """When a workload's last message was built, and how many pods fresh then are unheard since."""

    at: float
    awaiting: int


class PodWindows(Rings):
    """Every workload's pods and the window each follows. Pure: ``now`` is a parameter."""

    def __init__(self, config: WindowConfig | None = None) -> None:
        self.config = config or WindowConfig()
        super().__init__(self._slots_for(self.config.window_s), self.config.bucket_s)
        self._half_bucket = 0.5 * self.config.bucket_s
        # workload -> its pods' ring length, where its window needs more than ``slots``.
        self._ring_slots: dict[WorkloadTuple, int] = {}
        self._span_slots = self.slots  # the longest of them (recounted as requests end)
        self._span_stale = False
        self.wanted: dict[WorkloadTuple, Wanted] = {}
        # workload -> pod -> the pod's number (no flat map of pods: memory is the budget).
        self.workloads: dict[WorkloadTuple, dict[str, int]] = {}
        # Every workload's tick, oldest message first: the front is the next deadline.
        self.ticks: dict[WorkloadTuple, Tick] = {}
        # Workloads whose tick completed since the shell last took them (an ordered set).
        self.complete: dict[WorkloadTuple, None] = {}
        self._early: list[tuple[float, WorkloadTuple]] = []  # (due, workload): complete within a bucket

    def _slots_for(self, window_s: float) -> int:
        """A window (now - w, now] touches at most ceil(w / b) + 1 buckets."""
        return math.ceil(window_s / self.config.bucket_s) + 1

    @property
    def span_s(self) -> float:
        """The longest window a workload asks for now: older samples are of no use."""
        return (self._span_slots - 1) * self.config.bucket_s

    def window_of(self, workload: WorkloadTuple) -> float:
        wanted = self.wanted.get(workload)
        return self.config.window_s if wanted is None else wanted.window_s

    def request(
        self, workload: WorkloadTuple, window_s: float, recent_s: float | None, now: float, ttl_s: float
    ) -> tuple[Wanted | None, str]:
        """A policy's window for ``workload`` until ``now + ttl_s`` (1 s to 1 h): what was
        taken (None: refused) and why it differs from what was asked ("": as asked)."""
        config = self.config
        window = min(max(window_s, config.bucket_s), config.max_window_s)
        recent = None if recent_s is None else min(max(recent_s, config.bucket_s), window)
        why = CLAMPED if window != window_s or recent != recent_s else ""
        held = self.wanted.get(workload)
        if held is None and len(self.wanted) >= config.max_requests:
            return None, TOO_MANY
        before = self.window_of(workload)
        covers_from = now - before if window > before else -math.inf
        if held is not None:
            covers_from = max(covers_from, held.covers_from) if window > before else held.covers_from
        slots = self._slots_for(window)
        if slots > self.slots:
            self._ring_slots[workload] = slots  # its pods' rings follow as their next buckets open
            self._span_slots = max(self._span_slots, slots)
        elif self._ring_slots.pop(workload, None) is not None:
            self._span_stale = True
        ttl = min(max(ttl_s, TTL_MIN_S), TTL_MAX_S)
        taken = Wanted(window, recent, now + ttl, covers_from)
        self.wanted[workload] = taken
        return taken, why

    def _lapse(self, now: float) -> None:
        """Requests not repeated in time end: their workloads go back to the default window."""
        lapsed = [w for w, wanted in self.wanted.items() if wanted.until <= now]
        for workload in lapsed:
            del self.wanted[workload]
            if self._ring_slots.pop(workload, None) is not None:
                self._span_stale = True
        if self._span_stale:
            self._span_stale = False
            self._span_slots = max(self._ring_slots.values(), default=self.slots)

    def _new_pod(self, workload: WorkloadTuple, pod: str, bucket: int, ts: float) -> int:
        pid = self._alloc_pod(bucket, ts)
        members = self.workloads.get(workload)
        if members is None:
            members = self.workloads[workload] = {}
            # Complete at once, due a bucket later: the pods of one tick on other nodes come first.
            self.ticks[workload] = Tick(ts, 0)
        members[pod] = pid
        return pid

    def _hear(self, pid: int, workload: WorkloadTuple) -> None:
        """The pod's first sample since its workload's last message (a new pod's first)."""
        tick = self.ticks[workload]
        if self._unheard[pid] == AWAITED:
            tick.awaiting -= 1
        self._unheard[pid] = 0
        if tick.awaiting <= 0:
            self.complete[workload] = None

    def add_batch(self, batch: SampleBatch, at: float | None = None) -> None:
        """Add one validated batch at ``at`` (this process's clock; None: the batch's own time)."""
        ts = batch.ts if at is None else at
        if _compiled is not None:  # it hands the pods with (or wanting) rings of their own back
            _compiled.add_batch(self, batch, ts)
        else:
            self._add_batch_python(batch, ts)

    def _add_owner_python(
        self, batch: SampleBatch, g: GpuSample, o: GpuOwner, engine: Any, ts: float
    ) -> None:
        """One owner of ``batch`` through the Python loop, its pod already heard (the compiled
        loop's hand-back for a pod whose ring is, or is to be, its own): a workload that asks for
        a longer window pays the Python loop for its own pods alone."""
        if o.engine is not engine:
            o = replace(o, engine=engine)
        one = replace(batch, gpus=(replace(g, owners=(o,)),), engines=UNSET)
        self._add_batch_python(one, ts)

    def _add_batch_python(self, batch: SampleBatch, ts: float) -> None:
        """The hot path, kept flat (one record write per GPU owner); ``_loops.pyx`` is its
        compiled twin for the shared rings, and must stay byte for byte the same."""
        bucket = int(ts * self._inv_bucket)
        interval_s, slots, workloads = batch.interval_s, self.slots, self.workloads
        position = bucket % slots
        shared_ts, shared_ring, shared_engine = self._ts, self._ring, self._engine_ring
        lengths, own_rings, ring_slots = self._len, self._long, self._ring_slots
        # Only while some pod has or wants a ring of its own: else every ring is at the same place.
        reshaping = bool(ring_slots or own_rings)
        slot_ts, ring, engines, n, at_slot = shared_ts, shared_ring, shared_engine, slots, position
        opened, totals, last_seen, intervals = self._open, self._totals, self._last_seen, self._interval
        engine_ids, unheard = self._engine, self._unheard
        pack_into, unpack_from, size = RECORD.pack_into, RECORD.unpack_from, RECORD.size
        per_pod = TOTALS_RECORD.size  # bytes: the totals are read and written as one struct
        pack_totals, unpack_totals = TOTALS_RECORD.pack_into, TOTALS_RECORD.unpack_from
        # Engine signals once per pod (an older collector's ride on each owner instead).
        pod_engines = {e.pod_uid: e.signals for e in batch.engines} if batch.engines else None
        for g in batch.gpus:
            util = g.util
            owners = g.owners
            if util is None or not owners or g.health != HEALTH_OK:
                continue
            sm_active = g.sm_active
            fb_used = g.fb_used_mib
            fb_free = g.fb_free_mib
            power = g.power_w
            if power is not None and power > HUGE:
                power = HUGE
            framebuffer = fb_used + fb_free if fb_used is not None and fb_free is not None else 0.0
            for o in owners:
                if o.ready is False:  # loading its model: the decider counts it missing
                    continue
                w = o.workload
                workload = (o.namespace, w.kind, w.name)
                members = workloads.get(workload)
                pid = None if members is None else members.get(o.pod)
                if pid is None:
                    pid = self._new_pod(workload, o.pod, bucket, ts)
                if unheard[pid]:  # once per pod per message: the rest of its samples pass here
                    self._hear(pid, workload)
                engine = o.engine or (pod_engines.get(o.pod_uid) if pod_engines else None)
                eid = engine_ids[pid]
                if engine and eid == NO_ENGINE:
                    eid = self._new_engine(pid)
                sm_util = o.sm_util
                mem = o.fb_used_mib
                if mem is None:
                    mem = fb_used
                ratio = None
                if mem is not None:
                    if mem > HUGE:
                        mem = HUGE
                    if framebuffer > 0.0:
                        ratio = mem * 100.0 / framebuffer
                        if ratio > 100.0:
                            ratio = 100.0
                current = opened[pid]
                if not reshaping:
                    base = pid * slots
                else:
                    n = lengths[pid]
                    if bucket > current:
                        want = ring_slots.get(workload, slots)
                        if want != n:  # its workload's window changed: follow it as a new bucket opens
                            self._reshape(pid, want)
                            n = want
                    if n == slots:
                        slot_ts, ring, engines = shared_ts, shared_ring, shared_engine
                        base, at_slot = pid * slots, position
                    else:
                        slot_ts, ring, engines = own_rings[pid]
                        base, at_slot = 0, bucket % n
                slot = base + at_slot
                if bucket == current:
                    # The open bucket again (a pod on several GPUs, a burst): add to its record.
                    off = slot * size
                    old = unpack_from(ring, off)
                    if old[6] < COUNT_MAX:  # a bucket this full is a flood: keep its mean
                        pack_into(
                            ring,
                            off,
                            old[0] + util,
                            old[1] + (sm_active or 0.0),
                            old[2] + (sm_util or 0.0),
                            old[3] + (ratio or 0.0),
                            old[4] + (mem or 0.0),
                            old[5] + (power or 0.0),
                            old[6] + 1,
                            old[7] + (sm_active is not None),
                            old[8] + (sm_util is not None),
                            old[9] + (ratio is not None),
                            old[10] + (mem is not None),
                            old[11] + (power is not None),
                        )
                        if ts > slot_ts[slot]:
                            slot_ts[slot] = ts
                    if engine:
                        eoff = eid * n if engines is shared_engine else 0
                        self._engine_merge(engines, eoff + at_slot, engine)
                elif bucket > current:
                    # A newer bucket opens: the open one joins the totals, the slot's old bucket leaves them.
                    if current >= 0:  # (_fold, inlined: this runs once per pod per bucket)
                        closing = base + current % n
                        if slot_ts[closing] != EMPTY:
                            t = pid * per_pod
                            # Twelve sums spelled out: a third cheaper than map(add, ...), the same values.
                            a, r = unpack_totals(totals, t), unpack_from(ring, closing * size)
                            pack_totals(
                                totals,
                                t,
                                a[0] + r[0],
                                a[1] + r[1],
                                a[2] + r[2],
                                a[3] + r[3],
                                a[4] + r[4],
                                a[5] + r[5],
                                a[6] + r[6],
                                a[7] + r[7],
                                a[8] + r[8],
                                a[9] + r[9],
                                a[10] + r[10],
                                a[11] + r[11],
                            )
                            if eid != NO_ENGINE:
                                eoff = eid * n if engines is shared_engine else 0
                                self._engine_fold(eid, engines, eoff + current % n)
                    if slot_ts[slot] != EMPTY:
                        self._evict_slot(pid, at_slot, None if engines is shared_engine else self._rings(pid))
                    pack_into(
                        ring,
                        slot * size,
                        util,
                        sm_active or 0.0,
                        sm_util or 0.0,
                        ratio or 0.0,
                        mem or 0.0,
                        power or 0.0,
                        1,
                        sm_active is not None,
                        sm_util is not None,
                        ratio is not None,
                        mem is not None,
                        power is not None,
                    )
                    slot_ts[slot] = ts
                    opened[pid] = bucket
                    if eid != NO_ENGINE:
                        eoff = eid * n if engines is shared_engine else 0
                        self._engine_open(engines, eoff + at_slot, engine)
                else:
                    self._add_late(
                        pid, at_slot, bucket, ts, (util, sm_active, sm_util, ratio, mem, power), engine
                    )
                if ts >= last_seen[pid]:
                    last_seen[pid] = ts
                    intervals[pid] = interval_s

    def _capacity_change(self, members: dict[str, int], cutoff: float) -> float | None:
        """When a pod joined the others within the window: its first sample's time, else None.
        Pods that joined within two buckets of each other are one capacity."""
        joined = self._joined
        times = [joined[pid] for pid in members.values()]
        newest = max(times)
        if newest <= cutoff or newest - min(times) < 2.0 * self.config.bucket_s:
            return None
        return newest
