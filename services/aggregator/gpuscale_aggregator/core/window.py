"""Sliding time windows per workload and pod: the aggregator's maths.

What one batch adds, per (GPU, owner) of a healthy GPU, to the owner's pod:

- ``gpu_util``: the GPU's ``util`` (device duty cycle; every owner of a shared
  GPU sees the whole device's value, as dcgm-exporter reports it);
- ``sm_active``: the GPU's ``sm_active`` where present (Hopper and newer);
- ``sm_util``: the owner's ``sm_util`` where attributed per process;
- ``gpu_mem_used_mib``: the owner's ``fb_used_mib`` when attributed per
  process, else the GPU's ``fb_used_mib``;
- ``gpu_mem_used_ratio``: that memory over the GPU's framebuffer
  (``fb_used + fb_free``) × 100;
- ``power_w``: the GPU's ``power_w`` (power cannot be split per process).

and, where the owner carries its pod's inference-engine gauges (``engine``):
``requests_waiting``, ``requests_running``, ``kv_cache_usage``,
``request_arrival_rate`` and ``request_completion_rate`` (a per-pod value, the
same on each of the pod's GPU entries, so the mean over them is that value).

GPUs whose ``health`` is not ``ok`` contribute nothing (not even
``last_seen``: a pod whose only GPU is lost goes stale, which the decider
treats as a missing pod). A GPU without owners feeds no workload. An owner
whose pod is not ready (loading its model) contributes nothing: the decider
counts it as missing (its ``spec.notReadyPods: Missing``, gpuscale's default;
HPA would count the 0 % a loading pod reports).

Semantics of the window (the table tests pin each one down):

- The window at ``now`` is the half-open interval ``(now - window_s, now]`` of
  sample timestamps (the collector's ``ts``). A sample exactly on the lower
  edge, ``ts == now - window_s``, is *out*.
- Buckets are ``bucket_s`` wide (default 1 s, the collector's interval).
  Samples of one pod that fall into the same bucket are merged; a bucket leaves
  the window when its *newest* sample does. With one sample per pod per bucket
  (the normal case) the edge is exact to the sample; with several, a bucket may
  hold up to ``bucket_s`` of older history until its newest sample leaves.
- Per pod and metric: the mean over the pod's GPUs and samples in the window.
- A pod is *stale* when its newest sample is older than ``stale_intervals``
  (3) of its collector's sample intervals: ``now - last_seen > 3 × interval_s``.
  A pod is *dropped* when it has no sample left in the window; a workload is
  forgotten when it has no pod left.
- Warm-up: when a pod joins a workload within the window (its first sample
  comes two buckets or more after the others' first: a scale-up's pod became
  ready), the samples of the workload's other pods from before it leave early:
  measured on fewer pods, they are no evidence of the per-pod load after, and a
  30 s mean of both asks for a pod the load never needed. The message says
  where its averages start (``since``) until the window has passed the change.
  A stale pod keeps its window.
- Per workload and metric: the mean over FRESH pods that have a value for that
  metric (as HPA averages ``Pods`` metrics). Stale pods are listed in ``pods``
  with their window values and ``last_seen`` and counted in ``pods_stale``, but
  are not averaged: the decider applies HPA's missing-pods rule to them.

Shape of the state (memory is what bounds a fleet, so it is packed): each pod
has a number, and a ring of ``slots`` buckets (enough for every bucket a window
can touch) in flat buffers shared by all pods: per bucket the newest sample
time (a double) and one 30-byte record of six sums (float32: sample values
keep 7 significant digits) and six counts (a byte each; a bucket stops taking
a pod's samples at 255, far above 8 GPUs at 10 Hz); per pod the running totals
of its *closed* buckets (doubles) and which bucket is *open* (the newest).
Samples of the open bucket (a pod on several GPUs, a burst) only add to its
record; when a newer bucket opens, the old one is folded into the totals; a
publish adds the open record to the totals and divides. Totals add and
subtract exactly the stored float32 values, so they do not drift. Nothing is
allocated per sample and nothing in the window is an object the garbage
collector walks. A pod's number and ring are reused once its newest sample has
left the window.

The engine metrics live beside it in the same shape, only for pods that ever
sent one (most GPU workloads have no inference engine, and memory is the
budget): such a pod gets an engine number, and a second ring of 25-byte
records (five float32 sums, five byte counts) whose buckets are the pod's
buckets (the same slot, time and lifetime), and engine totals that are folded
and evicted with the GPU record's.

A window longer than the default (a policy's ``window_s``, up to
``max_window_s``) is paid for by its own workload only: each of its pods gets
a ring of its own of the length asked (times, records and engine records,
outside the shared buffers), and goes back to the shared ring when the
request lapses or shortens. A pod is re-laid lazily, when its next bucket
opens (a request costs nothing per pod; the pods of other workloads are never
touched), keeping its newest buckets; one re-lay copies at most three runs of
its ring. A pod that leaves (its samples have left the window) gives its own
ring back.
"""

from __future__ import annotations

import math
import operator
import struct
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from operator import add
from typing import Any, Final

from gpuscale.policy import CEILINGS, PINNED_SHARE
from gpuscale.wire import (
    HEALTH_OK,
    METRIC_NAMES,
    NO_METRICS,
    UNSET,
    EngineSignals,
    MetricValues,
    PodMetrics,
    SampleBatch,
    WorkloadMetrics,
)

# The metrics the window computes, in the order its hot loops spell them out,
# percentages first. gpuscale.wire may know more (a metric another component
# produces): the window leaves those absent until it is taught them.
WINDOW_METRICS: Final = (
    "gpu_util",
    "sm_active",
    "sm_util",
    "gpu_mem_used_ratio",
    "gpu_mem_used_mib",
    "power_w",
)
# The inference engine's gauges, in a ring of their own for the pods that have them.
ENGINE_METRICS: Final = (
    "requests_waiting",
    "requests_running",
    "kv_cache_usage",
    "request_arrival_rate",
    "request_completion_rate",
)
if METRIC_NAMES[: len(WINDOW_METRICS) + len(ENGINE_METRICS)] != WINDOW_METRICS + ENGINE_METRICS:
    raise ImportError(
        f"gpuscale.wire's metrics begin {METRIC_NAMES}; the window computes {WINDOW_METRICS + ENGINE_METRICS}"
    )
N_METRICS: Final = len(WINDOW_METRICS)
# Index of each metric in the sums/counts of a bucket and in a pod's totals.
GPU_UTIL, SM_ACTIVE, SM_UTIL, MEM_RATIO, MEM_MIB, POWER_W = range(N_METRICS)
# One bucket of one pod: six float32 sums, six uint8 counts.
_RECORD: Final = struct.Struct(f"<{N_METRICS}f{N_METRICS}B")
_EMPTY_RECORD: Final = (0.0,) * N_METRICS + (0,) * N_METRICS
_COUNT_MAX: Final = 255
# The contract bounds MiB and watts only by "finite"; a float32 sum of 255 values
# must stay finite, so values above this (no GPU has 1e30 MiB or W) are pinned here.
_HUGE: Final = 1e30
_EMPTY: Final = 0.0  # a bucket's newest sample time when it holds nothing
_TOTALS: Final = 2 * N_METRICS  # per pod: sums then counts over the ring
N_ENGINE: Final = len(ENGINE_METRICS)
_KV: Final = ENGINE_METRICS.index("kv_cache_usage")  # the one engine metric that is a %
# One bucket of one engine pod: each engine metric's sum (float32), then their counts.
_ENGINE_RECORD: Final = struct.Struct(f"<{N_ENGINE}f{N_ENGINE}B")
_EMPTY_ENGINE: Final = (0.0,) * N_ENGINE + (0,) * N_ENGINE
_ENGINE_TOTALS: Final = 2 * N_ENGINE
_NO_ENGINE: Final = -1
# A pod's gpu_util sample at or above this is pinned at the ceiling (the decider's rule).
_PINNED_UTIL: Final = PINNED_SHARE * CEILINGS["gpu_util"]

# (namespace, workload kind, workload name)
WorkloadTuple = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class WindowConfig:
    window_s: float = 30.0  # for workloads whose policy asked for nothing
    bucket_s: float = 1.0
    stale_intervals: float = 3.0
    source: str = ""  # names this aggregator in its messages (their ``source``); "": unnamed
    # The longest window a policy may ask for; the rings grow to what is asked, up to this.
    max_window_s: float = 300.0
    # How many workloads may have a window of their own (bounded memory against a flood).
    max_requests: int = 100_000

    def __post_init__(self) -> None:
        if not self.window_s > 0 or not self.bucket_s > 0 or not self.stale_intervals > 0:
            raise ValueError("window_s, bucket_s and stale_intervals must be positive")
        if self.max_window_s < self.window_s:
            raise ValueError("max_window_s must not be shorter than window_s")


@dataclass(slots=True)
class Wanted:
    """What a workload's policy asked for (a ``WindowRequest``), on this process's clock."""

    window_s: float
    recent_s: float | None
    until: float  # the request lapses then unless repeated
    # Before this the workload's samples were dropped under a shorter window: its
    # averages cover less than ``window_s`` until the window has passed it.
    covers_from: float


# How long a request may hold without repetition: a sender cannot pin a window for a day.
TTL_MIN_S: Final = 1.0
TTL_MAX_S: Final = 3600.0
# Why a window request was not taken as asked (a metrics label: low cardinality).
CLAMPED: Final = "clamped"  # shorter than a bucket or longer than max_window_s: the nearest allowed
TOO_MANY: Final = "too_many_workloads"  # max_requests workloads already have a window of their own
# Capacity changes followed at once, at most, and only in workloads of at most so many
# pods (the rest wait for the tick): what a batch can make the core re-check is bounded.
MAX_PENDING_CHANGES: Final = 256
MAX_FOLLOWED_PODS: Final = 64


class WindowStore:
    """Every workload's pods and their windows. Pure: ``now`` is a parameter.

    ``pods`` maps a pod to its number (one dict lookup per pod per batch);
    ``workloads`` indexes the same numbers by workload, touched only when a pod
    comes or goes.
    """

    def __init__(self, config: WindowConfig | None = None) -> None:
        self.config = config or WindowConfig()
        self._inv_bucket = 1.0 / self.config.bucket_s
        self._half_bucket = 0.5 * self.config.bucket_s
        # A window (now - w, now] touches at most ceil(w / b) + 1 buckets: the shared
        # rings' length; a workload whose policy asks for longer has rings of its own.
        self.slots = self._slots_for(self.config.window_s)
        # workload -> its pods' ring length, where its window needs more than ``slots``.
        self._ring_slots: dict[WorkloadTuple, int] = {}
        self._span_slots = self.slots  # the longest of them (recounted as requests end)
        self._span_stale = False
        self.wanted: dict[WorkloadTuple, Wanted] = {}
        # workload -> pod -> the pod's number (no flat map of pods: memory is the
        # budget, and a second lookup per GPU owner costs less than its keys).
        self.workloads: dict[WorkloadTuple, dict[str, int]] = {}
        self._pod_count = 0
        self._free: list[int] = []
        self._capacity = 0
        # Per pod × slot:
        self._ts = array("d")  # newest sample time in the bucket; _EMPTY: nothing
        self._ring = bytearray()  # _RECORD per bucket
        # Per pod:
        self._totals = array("d")  # _TOTALS per pod: the closed buckets' sums and counts
        self._open = array("q")  # the open (newest) bucket's index, -1: none
        self._len = array("q")  # the ring's length: ``slots`` (shared buffers), else in ``_long``
        # pod -> its own ring (times, records, engine records: empty without an engine).
        self._long: dict[int, tuple[array[float], bytearray, bytearray]] = {}
        self._oldest = array("q")  # lowest bucket index that may still be in the ring
        self._last_seen = array("d")
        self._interval = array("d")
        self._joined = array("d")  # the pod's first sample in this life: when it came to serve
        self._engine = array("q")  # per pod: its engine number, _NO_ENGINE: none yet
        # Per engine number × slot, and per engine number:
        self._engine_ring = bytearray()  # _ENGINE_RECORD per bucket
        self._engine_totals = array("d")  # _ENGINE_TOTALS per engine pod
        self._engine_capacity = 0
        self._engine_free: list[int] = []
        # Capacity changes (a pod joined a workload: a scale-up's pod became ready) not yet
        # measured on every pod: workload -> the joining pod's first sample. Once every
        # fresh pod has been heard since, the workload is ``settled``: its next message is
        # the first that tells the per-pod load after the change, and the shell need not
        # wait for its tick to say so.
        self.changes: dict[WorkloadTuple, float] = {}
        self.settled: list[WorkloadTuple] = []
        # Saturation onset: per pod, whether every sample since its last gpu_util below
        # the pinned level was pinned (a run), and when that last one was (taken when a
        # run begins: the pod's newest sample before it; a new pod's first sample). Once
        # every fresh pod of a workload is in a run, the workload's onset is due when the
        # last unpinned bucket leaves the recent span its policy asked for (``onsets``:
        # workload -> that time); then, checked again, it is ``saturated``: the step a
        # pinned metric asks for should not wait for the tick.
        self._unpinned_at = array("d")
        self._pinned = bytearray()
        self.onsets: dict[WorkloadTuple, float] = {}
        self.onset_scheduled = False  # an onset was (re)scheduled since the shell last looked
        self.saturated: dict[WorkloadTuple, None] = {}  # in the order found; a set's lookups

    # --- what policies ask for ----------------------------------------------------

    def _slots_for(self, window_s: float) -> int:
        return math.ceil(window_s / self.config.bucket_s) + 1

    @property
    def span_s(self) -> float:
        """The longest window a workload asks for now: older samples are of no use."""
        return (self._span_slots - 1) * self.config.bucket_s

    def window_of(self, workload: WorkloadTuple) -> float:
        wanted = self.wanted.get(workload)
        return self.config.window_s if wanted is None else wanted.window_s

    def request(
        self,
        workload: WorkloadTuple,
        window_s: float,
        recent_s: float | None,
        now: float,
        ttl_s: float,
    ) -> tuple[Wanted | None, str]:
        """A policy's window for ``workload`` until ``now + ttl_s`` (1 s to 1 h): what was
        taken (None: refused) and why it differs from what was asked ("": as asked).
        A longer window than the workload had covers only what was kept, which
        the messages say (``since``) until the window has passed."""
        config = self.config
        why = ""
        window = min(max(window_s, config.bucket_s), config.max_window_s)
        if window != window_s:
            why = CLAMPED
        recent = None if recent_s is None else min(max(recent_s, config.bucket_s), window)
        if recent is not None and recent != recent_s:
            why = CLAMPED
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

    def _rings(self, pid: int) -> tuple[array[float], bytearray, bytearray, int, int, int]:
        """Where a pod's ring lies: its buckets' times, records and engine records,
        the index of its first bucket in the times and records, in the engine
        records, and its length."""
        n = self._len[pid]
        if n == self.slots:
            return self._ts, self._ring, self._engine_ring, pid * n, self._engine[pid] * n, n
        ts, ring, engine = self._long[pid]
        return ts, ring, engine, 0, 0, n

    def _reshape(self, pid: int, slots: int) -> None:
        """Re-lay one pod's ring for ``slots`` buckets (the shared length: back into
        the shared buffers), keeping its newest buckets; those that no longer fit
        leave its totals. A bucket's place is its index modulo the length, so the
        kept buckets (consecutive indices) move in at most three runs."""
        where = self._rings(pid)
        old_ts, old_ring, old_engine, base, ebase, n = where
        eid = self._engine[pid]
        size, esize, inv = _RECORD.size, _ENGINE_RECORD.size, self._inv_bucket
        current = self._open[pid]
        oldest = self._oldest[pid]
        keep_from = max(oldest, current - min(n, slots) + 1)
        for bucket in range(max(oldest, current - n + 1), keep_from):
            held = old_ts[base + bucket % n]
            if held != _EMPTY and int(held * inv) == bucket:
                self._evict_slot(pid, bucket % n, where)
        shared = slots == self.slots
        if shared:
            ts, ring, engine = self._ts, self._ring, self._engine_ring
            to, eto = pid * slots, eid * slots
            ts[to : to + slots] = array("d", bytes(8 * slots))
        else:
            ts, ring = array("d", bytes(8 * slots)), bytearray(size * slots)
            engine = bytearray(esize * slots if eid != _NO_ENGINE else 0)
            to = eto = 0
        bucket = keep_from
        while 0 <= bucket <= current:
            src, dst = bucket % n, bucket % slots
            run = min(current - bucket + 1, n - src, slots - dst)
            ts[to + dst : to + dst + run] = old_ts[base + src : base + src + run]
            ring[(to + dst) * size : (to + dst + run) * size] = old_ring[
                (base + src) * size : (base + src + run) * size
            ]
            if eid != _NO_ENGINE:
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

    # --- pods ------------------------------------------------------------------

    def _new_pod(self, workload: WorkloadTuple, pod: str, bucket: int, ts: float) -> int:
        if self._free:
            pid = self._free.pop()
        else:
            pid = self._capacity
            self._capacity += 1
            self._ts.extend(array("d", bytes(8 * self.slots)))
            self._ring.extend(bytes(_RECORD.size * self.slots))
            self._totals.extend(array("d", bytes(8 * _TOTALS)))
            self._open.append(-1)
            self._len.append(self.slots)
            self._oldest.append(0)
            self._last_seen.append(0.0)
            self._interval.append(1.0)
            self._joined.append(0.0)
            self._engine.append(_NO_ENGINE)
            self._unpinned_at.append(0.0)
            self._pinned.append(0)
        self._open[pid] = -1
        self._joined[pid] = ts
        self._pinned[pid] = 0
        self._oldest[pid] = bucket
        self._last_seen[pid] = 0.0
        self._interval[pid] = 1.0
        members = self.workloads.get(workload)
        if members is None:
            members = self.workloads[workload] = {}
        members[pod] = pid
        self._pod_count += 1
        if 1 < len(members) <= MAX_FOLLOWED_PODS:
            held = self.changes.get(workload)
            if held is not None:
                self.changes[workload] = max(held, ts)
            elif len(self.changes) < MAX_PENDING_CHANGES:
                self.changes[workload] = ts
        return pid

    def _free_pod(self, workload: WorkloadTuple, pod: str, pid: int) -> None:
        """Its ring is already empty (every bucket evicted): the number goes back, and
        a ring of its own is freed."""
        self._pod_count -= 1
        if self._len[pid] != self.slots:
            del self._long[pid]
            self._len[pid] = self.slots
        t = pid * _TOTALS
        self._totals[t : t + _TOTALS] = array("d", bytes(8 * _TOTALS))
        eid = self._engine[pid]
        if eid != _NO_ENGINE:
            self._engine[pid] = _NO_ENGINE
            self._engine_free.append(eid)
        self._free.append(pid)

    def _new_engine(self, pid: int) -> int:
        """The pod's engine number: a ring of empty records and zero totals."""
        if self._engine_free:
            eid = self._engine_free.pop()
        else:
            eid = self._engine_capacity
            self._engine_capacity += 1
            self._engine_ring.extend(bytes(_ENGINE_RECORD.size * self.slots))
            self._engine_totals.extend(array("d", bytes(8 * _ENGINE_TOTALS)))
        size = _ENGINE_RECORD.size * self.slots
        self._engine_ring[eid * size : (eid + 1) * size] = bytes(size)
        n = self._len[pid]
        if n != self.slots:  # a ring of its own: its engine records beside it
            ts, ring, _ = self._long[pid]
            self._long[pid] = (ts, ring, bytearray(_ENGINE_RECORD.size * n))
        t = eid * _ENGINE_TOTALS
        self._engine_totals[t : t + _ENGINE_TOTALS] = array("d", bytes(8 * _ENGINE_TOTALS))
        self._engine[pid] = eid
        return eid

    # --- ingest -------------------------------------------------------------------

    def add_batch(self, batch: SampleBatch, at: float | None = None) -> None:
        """Add one validated batch: the hot path, kept flat. Per GPU owner one
        record write: a new open bucket (folding the previous one into the
        totals) or a merge into the open one; late samples go to :meth:`_add_late`."""
        ts = batch.ts if at is None else at  # when it happened, on this process's clock
        bucket = int(ts * self._inv_bucket)
        interval_s = batch.interval_s
        slots = self.slots
        position = bucket % slots
        workloads = self.workloads
        shared_ts = self._ts
        shared_ring = self._ring
        shared_engine = self._engine_ring
        lengths = self._len
        own_rings = self._long
        ring_slots = self._ring_slots
        # Only while some workload asks for a longer window (or pods still hold one):
        # until then every ring is in the shared buffers, at the same place.
        reshaping = bool(ring_slots or own_rings)
        slot_ts, ring, engines, n, at_slot = shared_ts, shared_ring, shared_engine, slots, position
        opened = self._open
        totals = self._totals
        per_pod = _TOTALS
        last_seen = self._last_seen
        intervals = self._interval
        pack_into = _RECORD.pack_into
        unpack_from = _RECORD.unpack_from
        size = _RECORD.size
        engine_ids = self._engine
        changes = self.changes  # almost always empty: one truth test per owner
        half_bucket = self._half_bucket
        pinned = self._pinned
        pinned_util = _PINNED_UTIL
        touched: set[WorkloadTuple] | None = None
        begun: set[WorkloadTuple] | None = None  # workloads where a pod began a pinned run
        for g in batch.gpus:
            util = g.util
            owners = g.owners
            if util is None or not owners or g.health != HEALTH_OK:
                continue
            sm_active = g.sm_active
            fb_used = g.fb_used_mib
            fb_free = g.fb_free_mib
            power = g.power_w
            if power is not None and power > _HUGE:
                power = _HUGE
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
                # Only a pod not heard since the change can settle it: each pod re-checks
                # its workload at most once per change, however many batches it sends.
                if changes and last_seen[pid] <= changes.get(workload, -math.inf) - half_bucket:
                    if touched is None:
                        touched = set()
                    touched.add(workload)
                engine = o.engine
                eid = engine_ids[pid]
                if engine and eid == _NO_ENGINE:
                    eid = self._new_engine(pid)
                sm_util = o.sm_util
                mem = o.fb_used_mib
                if mem is None:
                    mem = fb_used
                ratio = None
                if mem is not None:
                    if mem > _HUGE:
                        mem = _HUGE
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
                    if old[6] < _COUNT_MAX:  # a bucket this full is a flood: keep its mean
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
                    # A newer bucket opens: the open one joins the totals; the slot's
                    # previous occupant (a bucket a ring older) leaves them.
                    if current >= 0:  # (_fold, inlined: this runs once per pod per bucket)
                        closing = base + current % n
                        if slot_ts[closing] != _EMPTY:
                            v = unpack_from(ring, closing * size)
                            t = pid * per_pod
                            totals[t] += v[0]
                            totals[t + 1] += v[1]
                            totals[t + 2] += v[2]
                            totals[t + 3] += v[3]
                            totals[t + 4] += v[4]
                            totals[t + 5] += v[5]
                            totals[t + 6] += v[6]
                            totals[t + 7] += v[7]
                            totals[t + 8] += v[8]
                            totals[t + 9] += v[9]
                            totals[t + 10] += v[10]
                            totals[t + 11] += v[11]
                            if eid != _NO_ENGINE:
                                eoff = eid * n if engines is shared_engine else 0
                                self._engine_fold(eid, engines, eoff + current % n)
                    if slot_ts[slot] != _EMPTY:
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
                    if eid != _NO_ENGINE:
                        eoff = eid * n if engines is shared_engine else 0
                        self._engine_open(engines, eoff + at_slot, engine)
                else:
                    self._add_late(
                        pid, at_slot, bucket, ts, (util, sm_active, sm_util, ratio, mem, power), engine
                    )
                if util < pinned_util:
                    if pinned[pid]:
                        pinned[pid] = 0
                elif not pinned[pid]:
                    self._run_begins(pid)
                    if begun is None:
                        begun = set()
                    begun.add(workload)
                if ts >= last_seen[pid]:
                    last_seen[pid] = ts
                    intervals[pid] = interval_s
        if touched is not None:
            for workload in touched:
                self._settle(workload, ts)
        if begun is not None:
            for workload in begun:
                self._schedule_onset(workload, ts)

    def _settle(self, workload: WorkloadTuple, now: float) -> None:
        """``workload``'s capacity change is settled once every fresh pod has a sample
        from after it (the same edge the averages start at: a tick's spread kept), or
        dropped when it is no change (pods starting together: one capacity)."""
        members = self.workloads.get(workload)
        since = None
        if members is not None and 1 < len(members) <= MAX_FOLLOWED_PODS:
            since = self._capacity_change(members, now - self.window_of(workload))
        if since is None or members is None:
            self.changes.pop(workload, None)
            return
        after = since - self._half_bucket
        stale_after = self.config.stale_intervals
        last_seen, intervals = self._last_seen, self._interval
        for pid in members.values():
            seen = last_seen[pid]
            if seen <= after and now - seen <= stale_after * intervals[pid]:
                return  # a fresh pod not heard since the change yet
        del self.changes[workload]
        self.settled.append(workload)

    def _onset_span(self, workload: WorkloadTuple, now: float) -> tuple[float, float] | None:
        """When ``workload``'s recent means read gpu_util pinned on every fresh pod, given
        that every fresh pod is in a run of pinned samples now: from the moment the newest
        unpinned bucket leaves the policy's ``recent_s`` (as :meth:`_recent` reads buckets:
        by their newest sample) until the first fresh pod falls silent within it (a pod
        with no recent means reads, to the decider, as not pinned). None where a fresh pod
        is not in a run, where no policy reads recent means, or past MAX_FOLLOWED_PODS
        pods (those wait for the tick)."""
        wanted = self.wanted.get(workload)
        members = self.workloads.get(workload)
        if wanted is None or wanted.recent_s is None or members is None or len(members) > MAX_FOLLOWED_PODS:
            return None
        stale_after, recent = self.config.stale_intervals, wanted.recent_s
        inv = self._inv_bucket
        last_seen, intervals = self._last_seen, self._interval
        pinned, unpinned_at = self._pinned, self._unpinned_at
        since, until = -math.inf, math.inf
        for pid in members.values():
            seen = last_seen[pid]
            if now - seen > stale_after * intervals[pid]:
                continue  # stale: the decider counts it missing, neither pinned nor not
            if not pinned[pid]:
                return None
            left = unpinned_at[pid]
            bucket = int(left * inv)
            slot_ts, _, _, base, _, n = self._rings(pid)
            held = slot_ts[base + bucket % n]
            if held != _EMPTY and int(held * inv) == bucket and held > left:
                left = held  # later pinned samples share its bucket: it leaves with the newest
            since = max(since, left + recent)
            until = min(until, seen + recent)
        return since, until

    def _run_begins(self, pid: int) -> None:
        """A pinned sample after an unpinned one (or a pod's first): a run begins. Its
        last unpinned sample is the pod's newest before this one (a late sample may have
        been older: then the run is dated later than it began, never earlier)."""
        self._pinned[pid] = 1
        seen = self._last_seen[pid]
        self._unpinned_at[pid] = seen if seen > 0.0 else self._joined[pid]

    def _schedule_onset(self, workload: WorkloadTuple, now: float) -> None:
        """After a batch in which a pod of ``workload`` began a run: if every fresh pod
        is in one, the workload's onset is due when the last unpinned bucket leaves the
        span (at most MAX_PENDING_CHANGES workloads wait at once). One walk of the
        workload's pods per batch, however many of its pods began a run in it."""
        span = self._onset_span(workload, now)
        if span is not None and (workload in self.onsets or len(self.onsets) < MAX_PENDING_CHANGES):
            self.onsets[workload] = span[0]
            self.onset_scheduled = True

    def next_onset(self) -> float | None:
        """The earliest onset due (the shell wakes then), None: none pending."""
        return min(self.onsets.values(), default=None)

    def confirm_onsets(self, now: float) -> None:
        """Onsets due by ``now``, checked again: a workload whose every fresh pod is
        still in its run, each heard within the span, is ``saturated`` (its message at
        ``now`` reads pinned recent means); one due later now (a pod joined in a run of
        its own, a pinned sample joined an unpinned bucket) is due again then; one
        where a run ended or a pod fell silent is dropped (the next run schedules it
        again)."""
        for workload, due in list(self.onsets.items()):
            if due > now:
                continue
            del self.onsets[workload]
            span = self._onset_span(workload, now)
            if span is None:
                continue
            since, until = span
            if since > now:
                self.onsets[workload] = since
            elif now < until:
                self.saturated[workload] = None

    # --- the engine ring (pods with an inference engine only) ---------------------------

    def _engine_open(self, engines: bytearray, eslot: int, engine: Any) -> None:
        """A new bucket's engine record: the owner's values, or nothing yet."""
        if engine:
            record = _engine_added(_EMPTY_ENGINE, _engine_values(engine))
            _ENGINE_RECORD.pack_into(engines, eslot * _ENGINE_RECORD.size, *record)
        else:
            _ENGINE_RECORD.pack_into(engines, eslot * _ENGINE_RECORD.size, *_EMPTY_ENGINE)

    def _engine_merge(self, engines: bytearray, eslot: int, engine: Any) -> None:
        """More values for the open bucket (the pod's other GPU entries carry the same)."""
        off = eslot * _ENGINE_RECORD.size
        old = _ENGINE_RECORD.unpack_from(engines, off)
        if max(old[N_ENGINE:]) >= _COUNT_MAX:
            return
        _ENGINE_RECORD.pack_into(engines, off, *_engine_added(old, _engine_values(engine)))

    def _engine_fold(self, eid: int, engines: bytearray, eslot: int) -> None:
        """The closing bucket's engine record joins the engine totals."""
        v = _ENGINE_RECORD.unpack_from(engines, eslot * _ENGINE_RECORD.size)
        t = eid * _ENGINE_TOTALS
        totals = self._engine_totals
        for i in range(_ENGINE_TOTALS):
            totals[t + i] += v[i]

    def _evict_slot(
        self,
        pid: int,
        position: int,
        where: tuple[array[float], bytearray, bytearray, int, int, int] | None = None,
    ) -> None:
        """Take one closed bucket (at ``position`` in the pod's ring, ``where`` it lies:
        :meth:`_rings`; None: in the shared buffers) out of the pod's totals and empty it."""
        eid = self._engine[pid]
        if where is None:  # (the publish cycle's common case: no tuple built)
            slot = pid * self.slots + position
            slot_ts = self._ts
            ring = self._ring
        else:
            slot_ts, ring = where[0], where[1]
            slot = where[3] + position
        if eid != _NO_ENGINE:
            if where is None:
                engines, eslot = self._engine_ring, eid * self.slots + position
            else:
                engines, eslot = where[2], where[4] + position
            e = _ENGINE_RECORD.unpack_from(engines, eslot * _ENGINE_RECORD.size)
            et = eid * _ENGINE_TOTALS
            engine_totals = self._engine_totals
            for i in range(_ENGINE_TOTALS):
                engine_totals[et + i] -= e[i]
        v = _RECORD.unpack_from(ring, slot * _RECORD.size)
        totals = self._totals
        t = pid * _TOTALS
        totals[t] -= v[0]
        totals[t + 1] -= v[1]
        totals[t + 2] -= v[2]
        totals[t + 3] -= v[3]
        totals[t + 4] -= v[4]
        totals[t + 5] -= v[5]
        totals[t + 6] -= v[6]
        totals[t + 7] -= v[7]
        totals[t + 8] -= v[8]
        totals[t + 9] -= v[9]
        totals[t + 10] -= v[10]
        totals[t + 11] -= v[11]
        slot_ts[slot] = _EMPTY

    def _add_late(
        self,
        pid: int,
        position: int,
        bucket: int,
        ts: float,
        values: tuple[float | None, ...],
        engine: Any = None,
    ) -> None:
        """A sample for a bucket older than the open one (a reordered batch, a
        collector restart): into its closed bucket (at ``position`` in the pod's
        ring), and so into the totals. A bucket a whole ring older than the open
        one, or a slot holding a bucket a whole ring newer, means this sample is
        older than the window: dropped (only a sender whose clock went back by
        more than a window sends such)."""
        where = self._rings(pid)
        slot_ts, ring, engines, base, ebase, n = where
        if bucket <= self._open[pid] - n:
            return
        slot = base + position
        held_ts = slot_ts[slot]
        if held_ts != _EMPTY:
            held = int(held_ts * self._inv_bucket)
            if held > bucket:
                return
            if held < bucket:
                self._evict_slot(pid, position, where)
        off = slot * _RECORD.size
        occupied = slot_ts[slot] != _EMPTY
        old = _RECORD.unpack_from(ring, off) if occupied else _EMPTY_RECORD
        if old[N_METRICS] >= _COUNT_MAX:
            return
        eid = self._engine[pid]
        if eid != _NO_ENGINE:
            self._engine_late(eid, engines, ebase + position, occupied, engine)
        sums = [s + (v or 0.0) for s, v in zip(old[:N_METRICS], values, strict=True)]
        counts = [c + (v is not None) for c, v in zip(old[N_METRICS:], values, strict=True)]
        _RECORD.pack_into(ring, off, *sums, *counts)
        new = _RECORD.unpack_from(ring, off)
        t = pid * _TOTALS
        totals = self._totals
        for i in range(_TOTALS):
            totals[t + i] += new[i] - old[i]
        if ts > slot_ts[slot]:
            slot_ts[slot] = ts
        if bucket < self._oldest[pid]:
            self._oldest[pid] = bucket

    def _engine_late(self, eid: int, engines: bytearray, eslot: int, occupied: bool, engine: Any) -> None:
        """A late sample's engine values into its closed bucket, and so into the totals."""
        off = eslot * _ENGINE_RECORD.size
        old = _ENGINE_RECORD.unpack_from(engines, off) if occupied else _EMPTY_ENGINE
        if max(old[N_ENGINE:]) >= _COUNT_MAX:
            return
        values = _engine_values(engine) if engine else _NO_ENGINE_VALUES
        _ENGINE_RECORD.pack_into(engines, off, *_engine_added(old, values))
        stored = _ENGINE_RECORD.unpack_from(engines, off)
        t = eid * _ENGINE_TOTALS
        for i in range(_ENGINE_TOTALS):
            self._engine_totals[t + i] += stored[i] - old[i]

    def _evict(self, pid: int, cutoff: float) -> bool:
        """Drop the pod's buckets whose newest sample is at or before ``cutoff``,
        oldest first; False when nothing is left."""
        slots = self.slots
        if not self._long or self._len[pid] == slots:  # (most pods: no tuple built)
            where = None
            slot_ts, base = self._ts, pid * slots
        else:
            where = self._rings(pid)
            slot_ts, base, slots = where[0], 0, where[5]
        inv = self._inv_bucket
        oldest = self._oldest[pid]
        current = self._open[pid]
        while oldest < current:
            slot = base + oldest % slots
            held = slot_ts[slot]
            if held != _EMPTY and int(held * inv) == oldest:
                if held > cutoff:
                    break
                self._evict_slot(pid, oldest % slots, where)
            oldest += 1
        self._oldest[pid] = oldest
        if oldest < current:
            return True
        # Only the open bucket may be left; it is not in the totals.
        slot = base + current % slots
        if slot_ts[slot] > cutoff:
            return True
        slot_ts[slot] = _EMPTY
        self._open[pid] = -1
        return False

    # --- time passing and reading ----------------------------------------------

    def expire(self, now: float) -> None:
        """Forget what has left the window: buckets, then empty pods and workloads."""
        for _ in self.iter_messages(now, build=False):
            pass

    def snapshot(self, now: float) -> list[WorkloadMetrics]:
        """Expire, then one metrics message per workload that still has pods."""
        return [m for _, m in self.iter_messages(now) if m is not None]

    def iter_messages(
        self, now: float, *, build: bool = True, wall_offset_s: float = 0.0
    ) -> Iterator[tuple[WorkloadTuple, WorkloadMetrics | None]]:
        """Workload by workload: expire, then its metrics message. A caller may
        yield to its event loop between steps; ingesting meanwhile is safe (this
        iterates over a copy). ``wall_offset_s``: added to the times the messages
        carry (``ts``, ``since``, ``last_seen``) where the window runs on a clock of
        its own and receivers compare them with their wall clocks."""
        self._lapse(now)
        self.settled.clear()  # every workload's message follows: none waits on its change
        self.saturated.clear()
        if self.changes:
            self._forget_changes(now)
        for workload, members in list(self.workloads.items()):
            message = self._expire_and_build(workload, members, now, build, wall_offset_s)
            if members:
                yield workload, message

    def message_of(
        self, workload: WorkloadTuple, now: float, wall_offset_s: float = 0.0
    ) -> WorkloadMetrics | None:
        """One workload's message out of the cycle (expiring its pods as a cycle
        would); None when it has no pod left."""
        members = self.workloads.get(workload)
        if members is None:
            return None
        return self._expire_and_build(workload, members, now, True, wall_offset_s)

    def _forget_changes(self, now: float) -> None:
        """Changes never settled (a pod went quiet) end when the window has passed them."""
        workloads = self.workloads
        for workload, joined_at in list(self.changes.items()):
            if workload not in workloads or joined_at <= now - self.window_of(workload):
                del self.changes[workload]

    def _expire_and_build(
        self, workload: WorkloadTuple, members: dict[str, int], now: float, build: bool, wall_offset_s: float
    ) -> WorkloadMetrics | None:
        """Expire ``workload``'s pods (a pod with nothing left leaves ``members``; the
        workload leaves with its last pod), then its message if ``build``."""
        wanted = self.wanted.get(workload)
        if wanted is not None and wanted.until <= now:
            wanted = None  # lapsed (a cycle removes it; one workload's message only ignores it)
        window = self.config.window_s if wanted is None else wanted.window_s
        cutoff = now - window
        since = self._capacity_change(members, cutoff) if len(members) > 1 else None
        if since is None:
            gone = [pod for pod, pid in members.items() if not self._evict(pid, cutoff)]
        else:
            # Samples from before the workload's capacity grew are no evidence of its
            # per-pod load after: they leave (a tick's spread across nodes kept), from
            # every pod heard since; a stale pod keeps its window, listed as before.
            after = max(cutoff, since - self._half_bucket)
            last_seen = self._last_seen
            gone = [
                pod
                for pod, pid in members.items()
                if not self._evict(pid, after if last_seen[pid] > after else cutoff)
            ]
        for pod in gone:
            self._free_pod(workload, pod, members.pop(pod))
        if not members:
            self.workloads.pop(workload, None)
            return None
        if not build:
            return None
        recent_s = None
        if wanted is not None:
            recent_s = wanted.recent_s
            if wanted.covers_from > cutoff and (since is None or wanted.covers_from > since):
                since = wanted.covers_from  # a longer window than was kept: say what it covers
        return self._message(workload, members, now, since, window, recent_s, wall_offset_s)

    def _capacity_change(self, members: dict[str, int], cutoff: float) -> float | None:
        """When a pod joined the others within the window (a scale-up's pod became
        ready, a replacement started serving): its first sample's time, else None.
        Pods that joined within two buckets of each other (an aggregator start, one
        tick seen from several nodes) are one capacity."""
        joined = self._joined
        times = [joined[pid] for pid in members.values()]
        newest = max(times)
        if newest <= cutoff or newest - min(times) < 2.0 * self.config.bucket_s:
            return None
        return newest

    def _message(
        self,
        workload: WorkloadTuple,
        members: dict[str, int],
        now: float,
        since: float | None = None,
        window_s: float | None = None,
        recent_s: float | None = None,
        wall_offset_s: float = 0.0,
    ) -> WorkloadMetrics:
        """The metrics message: per pod the window means (pinned to the contract's
        ranges: sums may leave 100.0000001 behind), per workload the mean over
        fresh pods. Spelled out per metric: this runs for every pod every cycle."""
        stale_after = self.config.stale_intervals
        totals = self._totals
        shared_ring = self._ring
        lengths = self._len
        own_rings = self._long
        opened = self._open
        last_seen = self._last_seen
        intervals = self._interval
        slots = self.slots
        size = _RECORD.size
        unpack_from = _RECORD.unpack_from
        unset = UNSET
        pods_out: list[PodMetrics] = []
        fresh = stale = 0
        a0 = a1 = a2 = a3 = a4 = a5 = 0.0  # sums of fresh pods' means, and how many
        n0 = n1 = n2 = n3 = n4 = n5 = 0
        engine_sums = [0.0] * N_ENGINE  # the same for the engine metrics
        engine_counts = [0] * N_ENGINE
        no_engine = (unset,) * N_ENGINE
        engine_ids = self._engine
        for pod in sorted(members):
            pid = members[pod]
            t = pid * _TOTALS
            if own_rings and lengths[pid] != slots:
                n = lengths[pid]
                ring, base = own_rings[pid][1], 0
            else:
                n, ring, base = slots, shared_ring, pid * slots
            # The closed buckets' totals plus the open bucket's record.
            s0, s1, s2, s3, s4, s5, c0, c1, c2, c3, c4, c5 = map(
                add, totals[t : t + _TOTALS], unpack_from(ring, (base + opened[pid] % n) * size)
            )
            v0: Any = (0.0 if s0 <= 0.0 else 100.0 if s0 >= 100.0 * c0 else s0 / c0) if c0 > 0.5 else unset
            v1: Any = (0.0 if s1 <= 0.0 else 100.0 if s1 >= 100.0 * c1 else s1 / c1) if c1 > 0.5 else unset
            v2: Any = (0.0 if s2 <= 0.0 else 100.0 if s2 >= 100.0 * c2 else s2 / c2) if c2 > 0.5 else unset
            v3: Any = (0.0 if s3 <= 0.0 else 100.0 if s3 >= 100.0 * c3 else s3 / c3) if c3 > 0.5 else unset
            v4: Any = (0.0 if s4 <= 0.0 else s4 / c4) if c4 > 0.5 else unset
            v5: Any = (0.0 if s5 <= 0.0 else s5 / c5) if c5 > 0.5 else unset
            eid = engine_ids[pid]
            engine_means = no_engine if eid == _NO_ENGINE else self._engine_means(pid, eid)
            seen = last_seen[pid]
            values = MetricValues(v0, v1, v2, v3, v4, v5, *engine_means)
            if recent_s is None:
                pods_out.append(PodMetrics(pod, values, seen + wall_offset_s))
            else:
                pods_out.append(
                    PodMetrics(pod, values, seen + wall_offset_s, self._recent(pid, now - recent_s))
                )
            if now - seen > stale_after * intervals[pid]:
                stale += 1
                continue
            fresh += 1
            if v0 is not unset:
                a0 += v0
                n0 += 1
            if v1 is not unset:
                a1 += v1
                n1 += 1
            if v2 is not unset:
                a2 += v2
                n2 += 1
            if v3 is not unset:
                a3 += v3
                n3 += 1
            if v4 is not unset:
                a4 += v4
                n4 += 1
            if v5 is not unset:
                a5 += v5
                n5 += 1
            if eid != _NO_ENGINE:
                for i, v in enumerate(engine_means):
                    if v is not unset:
                        engine_sums[i] += v
                        engine_counts[i] += 1
        averages = MetricValues(
            min(a0 / n0, 100.0) if n0 else unset,
            min(a1 / n1, 100.0) if n1 else unset,
            min(a2 / n2, 100.0) if n2 else unset,
            min(a3 / n3, 100.0) if n3 else unset,
            a4 / n4 if n4 else unset,
            a5 / n5 if n5 else unset,
            *(
                (min(total / n, 100.0) if i == _KV else total / n) if n else unset
                for i, (total, n) in enumerate(zip(engine_sums, engine_counts, strict=True))
            ),
        )
        return WorkloadMetrics(
            namespace=workload[0],
            kind=workload[1],
            name=workload[2],
            ts=now + wall_offset_s,
            window_s=self.config.window_s if window_s is None else window_s,
            pods=tuple(pods_out),
            averages=averages,
            pods_fresh=fresh,
            pods_stale=stale,
            source=self.config.source or UNSET,
            since=UNSET if since is None else since + wall_offset_s,
            recent_s=UNSET if recent_s is None else recent_s,
        )

    def _recent(self, pid: int, cutoff: float) -> MetricValues:
        """The pod's means over its buckets whose newest sample is after
        ``cutoff``, newest first (the last seconds: what a saturated pod shows
        before its window's mean does). Walks a few records; only for the
        workloads whose policy asked."""
        current = self._open[pid]
        if current < 0:
            return NO_METRICS
        slot_ts, ring, engines, base, ebase, slots = self._rings(pid)
        inv = self._inv_bucket
        sums = [0.0] * _TOTALS
        eid = self._engine[pid]
        esums = [0.0] * _ENGINE_TOTALS
        bucket = current
        while bucket > current - slots:
            slot = base + bucket % slots
            held = slot_ts[slot]
            if held != _EMPTY and int(held * inv) == bucket:
                if held <= cutoff:
                    break
                for i, v in enumerate(_RECORD.unpack_from(ring, slot * _RECORD.size)):
                    sums[i] += v
                if eid != _NO_ENGINE:
                    record = _ENGINE_RECORD.unpack_from(
                        engines, (ebase + bucket % slots) * _ENGINE_RECORD.size
                    )
                    for i, v in enumerate(record):
                        esums[i] += v
            bucket -= 1
        means: dict[str, float] = {}
        for i, name in enumerate(WINDOW_METRICS):
            count = sums[N_METRICS + i]
            if count > 0.5:
                value = max(0.0, sums[i] / count)
                means[name] = min(value, 100.0) if i <= MEM_RATIO else value
        for i, name in enumerate(ENGINE_METRICS):
            count = esums[N_ENGINE + i]
            if count > 0.5:
                value = max(0.0, esums[i] / count)
                means[name] = min(value, 100.0) if name == "kv_cache_usage" else value
        return MetricValues.of(means) if means else NO_METRICS

    def _engine_means(self, pid: int, eid: int) -> tuple[Any, ...]:
        """An engine pod's window means (closed buckets' totals plus the open
        bucket's record), UNSET where it sent none; pinned to the contract's ranges."""
        t = eid * _ENGINE_TOTALS
        _, _, engines, _, ebase, n = self._rings(pid)
        v = _ENGINE_RECORD.unpack_from(engines, (ebase + self._open[pid] % n) * _ENGINE_RECORD.size)
        totals = self._engine_totals
        means: list[Any] = []
        for i in range(N_ENGINE):
            total, count = totals[t + i] + v[i], totals[t + N_ENGINE + i] + v[N_ENGINE + i]
            if count <= 0.5:
                means.append(UNSET)
            elif total <= 0.0:
                means.append(0.0)
            elif i == _KV and total >= 100.0 * count:
                means.append(100.0)
            else:
                means.append(total / count)
        return tuple(means)

    # --- sizes for /metrics ---------------------------------------------------

    @property
    def workload_count(self) -> int:
        return len(self.workloads)

    @property
    def pod_count(self) -> int:
        return self._pod_count

    @property
    def own_ring_count(self) -> int:
        """Pods holding a ring of their own (their workload asked for a longer window)."""
        return len(self._long)

    @property
    def bucket_count(self) -> int:
        """Buckets holding samples (walks every ring: tests and tools)."""
        count = 0
        for members in self.workloads.values():
            for pid in members.values():
                slot_ts, _, _, base, _, n = self._rings(pid)
                count += sum(1 for slot in range(base, base + n) if slot_ts[slot] != _EMPTY)
        return count

    def ring_slots_held(self) -> int:
        """Bucket places held by every pod's ring, shared or its own (tests and tools)."""
        return sum(self._len[pid] for members in self.workloads.values() for pid in members.values())

    def ring_of(self, workload: WorkloadTuple, pod: str) -> int:
        """The length of a pod's ring in buckets (tests and tools)."""
        return self._len[self.workloads[workload][pod]]


_NO_ENGINE_VALUES: Final[tuple[float | None, ...]] = (None,) * N_ENGINE


# EngineSignals carries each engine metric under its own name.
_ENGINE_FIELDS: Final = operator.attrgetter(*ENGINE_METRICS)


def _engine_values(engine: EngineSignals) -> tuple[float | None, ...]:
    """An owner's engine values in ENGINE_METRICS' order, large counts and rates
    pinned so that a float32 sum of 255 stays finite."""
    return tuple(None if v is None else min(v, _HUGE) for v in _ENGINE_FIELDS(engine))


def _engine_added(old: tuple[Any, ...], values: tuple[float | None, ...]) -> tuple[float, ...]:
    """An engine record with one owner's values added: sums, then counts."""
    return (
        *(s + (v or 0.0) for s, v in zip(old[:N_ENGINE], values, strict=True)),
        *(c + (v is not None) for c, v in zip(old[N_ENGINE:], values, strict=True)),
    )
