"""The window's policy on the ingest side: which pod a sample feeds, in which window.

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

A window longer than the default (a policy's ``window_s``, up to
``max_window_s``) is paid for by its own workload only: each of its pods gets
a ring of its own of the length asked, and goes back to the shared ring when
the request lapses or shortens. A pod is re-laid lazily, when its next bucket
opens (a request costs nothing per pod; the pods of other workloads are never
touched), keeping its newest buckets. A pod that leaves (its samples have
left the window) gives its own ring back.

The storage is :class:`.rings.Rings`; what is published comes from :mod:`.window`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from operator import add
from typing import Final

from gpuscale.wire import HEALTH_OK, SampleBatch

from .records import (
    COUNT_MAX,
    EMPTY,
    HUGE,
    NO_ENGINE,
    PINNED_UTIL,
    RECORD,
    TOTALS_RECORD,
)
from .rings import Rings

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


class PodWindows(Rings):
    """Every workload's pods and the window each follows. Pure: ``now`` is a parameter.

    ``workloads`` maps a workload to its pods and each pod to its number in the
    rings (one lookup per GPU owner per batch, touched only when a pod comes or goes).
    """

    def __init__(self, config: WindowConfig | None = None) -> None:
        self.config = config or WindowConfig()
        # A window (now - w, now] touches at most ceil(w / b) + 1 buckets: the shared
        # rings' length; a workload whose policy asks for longer has rings of its own.
        super().__init__(self._slots_for(self.config.window_s), self.config.bucket_s)
        self._half_bucket = 0.5 * self.config.bucket_s
        # workload -> its pods' ring length, where its window needs more than ``slots``.
        self._ring_slots: dict[WorkloadTuple, int] = {}
        self._span_slots = self.slots  # the longest of them (recounted as requests end)
        self._span_stale = False
        self.wanted: dict[WorkloadTuple, Wanted] = {}
        # workload -> pod -> the pod's number (no flat map of pods: memory is the
        # budget, and a second lookup per GPU owner costs less than its keys).
        self.workloads: dict[WorkloadTuple, dict[str, int]] = {}
        # Capacity changes (a pod joined a workload: a scale-up's pod became ready) not yet
        # measured on every pod: workload -> the joining pod's first sample. Once every
        # fresh pod has been heard since, the workload is ``settled``: its next message is
        # the first that tells the per-pod load after the change, and the shell need not
        # wait for its tick to say so.
        self.changes: dict[WorkloadTuple, float] = {}
        self.settled: list[WorkloadTuple] = []
        # Saturation onset: per pod (in the rings), whether every sample since its last
        # gpu_util below the pinned level was pinned (a run), and when that last one was
        # (taken when a run begins: the pod's newest sample before it; a new pod's first
        # sample). Once every fresh pod of a workload is in a run, the workload's onset is
        # due when the last unpinned bucket leaves the recent span its policy asked for
        # (``onsets``: workload -> that time); then, checked again, it is ``saturated``:
        # the step a pinned metric asks for should not wait for the tick.
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

    # --- pods ------------------------------------------------------------------

    def _new_pod(self, workload: WorkloadTuple, pod: str, bucket: int, ts: float) -> int:
        pid = self._alloc_pod(bucket, ts)
        members = self.workloads.get(workload)
        if members is None:
            members = self.workloads[workload] = {}
        members[pod] = pid
        if 1 < len(members) <= MAX_FOLLOWED_PODS:
            held = self.changes.get(workload)
            if held is not None:
                self.changes[workload] = max(held, ts)
            elif len(self.changes) < MAX_PENDING_CHANGES:
                self.changes[workload] = ts
        return pid

    def _free_pod(self, workload: WorkloadTuple, pod: str, pid: int) -> None:
        """A pod whose samples have all left the window leaves its workload."""
        self._release_pod(pid)

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
        per_pod = TOTALS_RECORD.size  # bytes: the totals are read and written as one struct
        pack_totals = TOTALS_RECORD.pack_into
        unpack_totals = TOTALS_RECORD.unpack_from
        last_seen = self._last_seen
        intervals = self._interval
        pack_into = RECORD.pack_into
        unpack_from = RECORD.unpack_from
        size = RECORD.size
        engine_ids = self._engine
        changes = self.changes  # almost always empty: one truth test per owner
        half_bucket = self._half_bucket
        pinned = self._pinned
        pinned_util = PINNED_UTIL
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
                # Only a pod not heard since the change can settle it: each pod re-checks
                # its workload at most once per change, however many batches it sends.
                if changes and last_seen[pid] <= changes.get(workload, -math.inf) - half_bucket:
                    if touched is None:
                        touched = set()
                    touched.add(workload)
                engine = o.engine
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
                    # A newer bucket opens: the open one joins the totals; the slot's
                    # previous occupant (a bucket a ring older) leaves them.
                    if current >= 0:  # (_fold, inlined: this runs once per pod per bucket)
                        closing = base + current % n
                        if slot_ts[closing] != EMPTY:
                            t = pid * per_pod
                            pack_totals(
                                totals,
                                t,
                                *map(add, unpack_totals(totals, t), unpack_from(ring, closing * size)),
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
            if held != EMPTY and int(held * inv) == bucket and held > left:
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
