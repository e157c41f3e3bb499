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

GPUs whose ``health`` is not ``ok`` contribute nothing (not even
``last_seen``: a pod whose only GPU is lost goes stale, which the decider
treats as a missing pod). A GPU without owners feeds no workload. An owner
whose pod is not ready (loading its model) contributes nothing: it is missing,
as HPA counts unready pods.

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
- Per workload and metric: the mean over FRESH pods that have a value for that
  metric (as HPA averages ``Pods`` metrics). Stale pods are listed in ``pods``
  with their window values and ``last_seen`` and counted in ``pods_stale``, but
  are not averaged: the decider applies HPA's missing-pods rule to them.

Shape of the state (memory is what bounds a fleet, so it is packed): each pod
has a number, and a ring of ``slots`` buckets (enough for every bucket a window
can touch) in a few flat arrays shared by all pods: the newest sample time per
bucket, the sum and the count per bucket and metric, the running totals over
the ring. A sample costs a few array updates, a publish one division per pod
and metric; nothing is allocated per sample and nothing in the window is an
object the garbage collector walks. A pod's number and ring are reused once its
newest sample has left the window.
"""

from __future__ import annotations

import math
import sys
from array import array
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

from gpuscale.wire import (
    HEALTH_OK,
    METRIC_NAMES,
    UNSET,
    MetricValues,
    PodMetrics,
    SampleBatch,
    WorkloadMetrics,
)

N_METRICS: Final = len(METRIC_NAMES)
# Index of each metric in the sums/counts of a bucket.
GPU_UTIL, SM_ACTIVE, SM_UTIL, MEM_RATIO, MEM_MIB, POWER_W = range(N_METRICS)
_PERCENT: Final = frozenset(("gpu_util", "sm_active", "sm_util", "gpu_mem_used_ratio"))
# Upper bound per metric (running sums may leave 100.0000000001 behind; the
# contract rejects values out of range: published values are pinned).
_CAPS: Final = tuple(100.0 if name in _PERCENT else sys.float_info.max for name in METRIC_NAMES)
# After this many evictions a pod's running totals are recomputed from its
# buckets, so floating-point drift from add/subtract cannot accumulate.
_RESUM_EVERY: Final = 512
# Samples per metric in one bucket of one pod: 65,535 (8 GPUs at 10 Hz is 80).
_COUNT_TYPE: Final = "H"
_COUNT_MAX: Final = 65_535
_EMPTY: Final = 0.0  # a bucket's newest sample time when it holds nothing

# A pod inside its workload: (namespace, workload kind, workload name, pod).
PodKey = tuple[str, str, str, str]
# (namespace, workload kind, workload name)
WorkloadTuple = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class WindowConfig:
    window_s: float = 30.0
    bucket_s: float = 1.0
    stale_intervals: float = 3.0

    def __post_init__(self) -> None:
        if not self.window_s > 0 or not self.bucket_s > 0 or not self.stale_intervals > 0:
            raise ValueError("window_s, bucket_s and stale_intervals must be positive")


class WindowStore:
    """Every workload's pods and their windows. Pure: ``now`` is a parameter.

    ``pods`` maps a pod to its number (one dict lookup per pod per batch);
    ``workloads`` indexes the same numbers by workload, touched only when a pod
    comes or goes.
    """

    def __init__(self, config: WindowConfig | None = None) -> None:
        self.config = config or WindowConfig()
        self._inv_bucket = 1.0 / self.config.bucket_s
        # A window (now - w, now] touches at most ceil(w / b) + 1 buckets.
        self.slots = math.ceil(self.config.window_s / self.config.bucket_s) + 1
        self.pods: dict[PodKey, int] = {}
        self.workloads: dict[WorkloadTuple, dict[str, int]] = {}
        self._free: list[int] = []
        self._capacity = 0
        self._names: dict[str, str] = {}  # one copy of each namespace/kind/name string
        # Per pod × slot:
        self._ts = array("d")  # newest sample time in the bucket; _EMPTY: nothing
        # Per pod × slot × metric:
        self._sums = array("d")
        self._counts = array(_COUNT_TYPE)
        # Per pod:
        self._totals = array("d")  # sums then counts over the ring, 2 × N_METRICS
        self._last_seen = array("d")
        self._interval = array("d")
        self._oldest = array("q")  # lowest bucket index that may still be in the ring
        self._newest = array("q")  # highest bucket index in the ring
        self._evictions = array("L")

    # --- pods ------------------------------------------------------------------

    def _new_pod(self, key: PodKey) -> int:
        names = self._names
        if len(names) > 100_000:  # bounded, like every cache fed by senders
            names.clear()
        namespace = names.setdefault(key[0], key[0])
        kind = names.setdefault(key[1], key[1])
        name = names.setdefault(key[2], key[2])
        key = (namespace, kind, name, key[3])
        if self._free:
            pid = self._free.pop()
        else:
            pid = self._capacity
            self._capacity += 1
            self._ts.extend(array("d", bytes(8 * self.slots)))
            self._sums.extend(array("d", bytes(8 * self.slots * N_METRICS)))
            self._counts.extend(array(_COUNT_TYPE, bytes(2 * self.slots * N_METRICS)))
            self._totals.extend(array("d", bytes(8 * 2 * N_METRICS)))
            self._last_seen.append(0.0)
            self._interval.append(1.0)
            self._oldest.append(0)
            self._newest.append(0)
            self._evictions.append(0)
        self._last_seen[pid] = 0.0
        self._interval[pid] = 1.0
        self._oldest[pid] = sys.maxsize
        self._newest[pid] = -1
        self._evictions[pid] = 0
        self.pods[key] = pid
        workload = (namespace, kind, name)
        members = self.workloads.get(workload)
        if members is None:
            members = self.workloads[workload] = {}
        members[key[3]] = pid
        return pid

    def _free_pod(self, workload: WorkloadTuple, pod: str, pid: int) -> None:
        """Its ring is already empty (every bucket evicted): only the number goes back."""
        self.pods.pop((workload[0], workload[1], workload[2], pod), None)
        t = pid * 2 * N_METRICS
        self._totals[t : t + 2 * N_METRICS] = array("d", bytes(8 * 2 * N_METRICS))
        self._free.append(pid)

    # --- ingest -------------------------------------------------------------------

    def add_batch(self, batch: SampleBatch) -> None:
        """Add one validated batch (the hot path: kept flat on purpose)."""
        ts = batch.ts
        bucket = int(ts * self._inv_bucket)
        interval_s = batch.interval_s
        pods = self.pods
        add = self._add
        for g in batch.gpus:
            util = g.util
            owners = g.owners
            if util is None or not owners or g.health != HEALTH_OK:
                continue
            sm_active = g.sm_active
            fb_used = g.fb_used_mib
            fb_free = g.fb_free_mib
            power = g.power_w
            framebuffer = fb_used + fb_free if fb_used is not None and fb_free is not None else 0.0
            for o in owners:
                if o.ready is False:  # loading its model: missing, as HPA counts unready pods
                    continue
                w = o.workload
                key = (o.namespace, w.kind, w.name, o.pod)
                pid = pods.get(key)
                if pid is None:
                    pid = self._new_pod(key)
                mem = o.fb_used_mib
                if mem is None:
                    mem = fb_used
                ratio = None
                if mem is not None and framebuffer > 0.0:
                    ratio = mem * 100.0 / framebuffer
                    if ratio > 100.0:
                        ratio = 100.0
                add(pid, bucket, ts, interval_s, util, sm_active, o.sm_util, ratio, mem, power)

    def _add(
        self,
        pid: int,
        bucket: int,
        ts: float,
        interval_s: float,
        util: float,
        sm_active: float | None,
        sm_util: float | None,
        ratio: float | None,
        mem: float | None,
        power: float | None,
    ) -> None:
        """One (GPU, owner) sample into the pod's bucket."""
        slot = pid * self.slots + bucket % self.slots
        slot_ts = self._ts
        held = slot_ts[slot]
        if held != _EMPTY:
            held_bucket = int(held * self._inv_bucket)
            if held_bucket > bucket:
                # The slot already holds a bucket a whole ring newer: this sample
                # is older than the window at that bucket's time. It can only come
                # from a sender whose clock went back by more than a window.
                return
            if held_bucket < bucket:
                self._evict_slot(pid, slot)
                held = _EMPTY
        sums = self._sums
        counts = self._counts
        totals = self._totals
        m = slot * N_METRICS
        t = pid * 2 * N_METRICS
        c = t + N_METRICS
        if held == _EMPTY:
            slot_ts[slot] = ts
            sums[m] = util
            counts[m] = 1
            for i, v in ((1, sm_active), (2, sm_util), (3, ratio), (4, mem), (5, power)):
                if v is None:
                    sums[m + i] = 0.0
                    counts[m + i] = 0
                else:
                    sums[m + i] = v
                    counts[m + i] = 1
                    totals[t + i] += v
                    totals[c + i] += 1.0
            if bucket > self._newest[pid]:
                self._newest[pid] = bucket
            if bucket < self._oldest[pid]:
                self._oldest[pid] = bucket
        else:
            if ts > held:
                slot_ts[slot] = ts
            if counts[m] == _COUNT_MAX:  # a bucket this full is a flood: keep its mean
                return
            sums[m] += util
            counts[m] += 1
            for i, v in ((1, sm_active), (2, sm_util), (3, ratio), (4, mem), (5, power)):
                if v is not None:
                    sums[m + i] += v
                    counts[m + i] += 1
                    totals[t + i] += v
                    totals[c + i] += 1.0
        totals[t] += util
        totals[c] += 1.0
        if ts >= self._last_seen[pid]:
            self._last_seen[pid] = ts
            self._interval[pid] = interval_s

    def _evict_slot(self, pid: int, slot: int) -> None:
        """Take one bucket out of the pod's running totals and empty it."""
        sums = self._sums
        counts = self._counts
        totals = self._totals
        m = slot * N_METRICS
        t = pid * 2 * N_METRICS
        for i in range(N_METRICS):
            n = counts[m + i]
            if n:
                totals[t + i] -= sums[m + i]
                totals[t + N_METRICS + i] -= n
        self._ts[slot] = _EMPTY
        self._evictions[pid] += 1

    def _evict(self, pid: int, cutoff: float) -> bool:
        """Drop the pod's buckets whose newest sample is at or before ``cutoff``,
        oldest first; False when nothing is left."""
        slots = self.slots
        base = pid * slots
        slot_ts = self._ts
        inv = self._inv_bucket
        oldest = self._oldest[pid]
        newest = self._newest[pid]
        while oldest <= newest:
            slot = base + oldest % slots
            held = slot_ts[slot]
            if held != _EMPTY and int(held * inv) == oldest:
                if held > cutoff:
                    break
                self._evict_slot(pid, slot)
            oldest += 1
        self._oldest[pid] = oldest
        if oldest > newest:
            return False
        if self._evictions[pid] >= _RESUM_EVERY:
            self._resum(pid)
        return True

    def _resum(self, pid: int) -> None:
        self._evictions[pid] = 0
        fresh = [0.0] * (2 * N_METRICS)
        sums = self._sums
        counts = self._counts
        for slot in range(pid * self.slots, (pid + 1) * self.slots):
            if self._ts[slot] != _EMPTY:
                m = slot * N_METRICS
                for i in range(N_METRICS):
                    fresh[i] += sums[m + i]
                    fresh[N_METRICS + i] += counts[m + i]
        t = pid * 2 * N_METRICS
        self._totals[t : t + 2 * N_METRICS] = array("d", fresh)

    # --- time passing and reading ----------------------------------------------

    def expire(self, now: float) -> None:
        """Forget what has left the window: buckets, then empty pods and workloads."""
        for _ in self.iter_messages(now, build=False):
            pass

    def snapshot(self, now: float) -> list[WorkloadMetrics]:
        """Expire, then one metrics message per workload that still has pods."""
        return [m for _, m in self.iter_messages(now) if m is not None]

    def iter_messages(
        self, now: float, *, build: bool = True
    ) -> Iterator[tuple[WorkloadTuple, WorkloadMetrics | None]]:
        """Workload by workload: expire, then its metrics message. A caller may
        yield to its event loop between steps; ingesting meanwhile is safe (this
        iterates over a copy)."""
        cutoff = now - self.config.window_s
        for workload, members in list(self.workloads.items()):
            gone = [pod for pod, pid in members.items() if not self._evict(pid, cutoff)]
            for pod in gone:
                self._free_pod(workload, pod, members.pop(pod))
            if not members:
                self.workloads.pop(workload, None)
                continue
            yield workload, (self._message(workload, members, now) if build else None)

    def _message(self, workload: WorkloadTuple, members: dict[str, int], now: float) -> WorkloadMetrics:
        stale_after = self.config.stale_intervals
        totals = self._totals
        pods_out: list[PodMetrics] = []
        sums = [0.0] * N_METRICS
        counts = [0] * N_METRICS
        fresh = stale = 0
        for pod in sorted(members):
            pid = members[pod]
            t = pid * 2 * N_METRICS
            values: list[float | object] = []
            for i in range(N_METRICS):
                count = totals[t + N_METRICS + i]
                if count > 0.5:  # counts are whole numbers held as floats
                    v = totals[t + i] / count
                    cap = _CAPS[i]
                    values.append(0.0 if v < 0.0 else (cap if v > cap else v))
                else:
                    values.append(UNSET)
            last_seen = self._last_seen[pid]
            pods_out.append(PodMetrics(pod, MetricValues(*values), last_seen))  # type: ignore[arg-type]  # UNSET marks an absent metric
            if now - last_seen > stale_after * self._interval[pid]:
                stale += 1
                continue
            fresh += 1
            for i, value in enumerate(values):
                if value is not UNSET:
                    sums[i] += value  # type: ignore[operator]  # a float: UNSET is excluded above
                    counts[i] += 1
        averages: list[float | object] = []
        for i in range(N_METRICS):
            if counts[i]:
                v = sums[i] / counts[i]
                averages.append(0.0 if v < 0.0 else (_CAPS[i] if v > _CAPS[i] else v))
            else:
                averages.append(UNSET)
        return WorkloadMetrics(
            namespace=workload[0],
            kind=workload[1],
            name=workload[2],
            ts=now,
            window_s=self.config.window_s,
            pods=tuple(pods_out),
            averages=MetricValues(*averages),  # type: ignore[arg-type]  # UNSET marks an absent metric
            pods_fresh=fresh,
            pods_stale=stale,
        )

    # --- sizes for /metrics ---------------------------------------------------

    @property
    def workload_count(self) -> int:
        return len(self.workloads)

    @property
    def pod_count(self) -> int:
        return len(self.pods)

    @property
    def bucket_count(self) -> int:
        """Buckets holding samples (walks every ring: tests and tools)."""
        return sum(
            1
            for pid in self.pods.values()
            for slot in range(pid * self.slots, (pid + 1) * self.slots)
            if self._ts[slot] != _EMPTY
        )
