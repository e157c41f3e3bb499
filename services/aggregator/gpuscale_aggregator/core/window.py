"""Sliding time windows per workload and pod: the aggregator's maths.

Shape of the state: workload -> pod -> a deque of time buckets. A bucket holds,
for each metric, the running sum and count of the values of that pod's GPUs
(and per-process shares) in the samples that fell into it; the pod also keeps
running totals over its buckets, so one sample costs a few additions and a
publish costs one division per pod and metric. Memory is O(pods × buckets per
window) and shrinks as time passes: nothing is kept for a pod once its newest
sample has left the window.

Semantics (the table tests pin each one down):

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
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import add as _plus
from operator import sub as _minus
from typing import Any, Final

from gpuscale.wire import METRIC_NAMES, WIRE_VERSION, WorkloadMetrics

N_METRICS: Final = len(METRIC_NAMES)
# Index of each metric in the sums/counts vectors (sums first, then counts).
GPU_UTIL, SM_ACTIVE, SM_UTIL, MEM_RATIO, MEM_MIB, POWER_W = range(N_METRICS)
_PERCENT = ("gpu_util", "sm_active", "sm_util", "gpu_mem_used_ratio")
# (index, name, upper bound) per metric, for the publish loop.
_METRICS: Final = tuple(
    (i, name, 100.0 if name in _PERCENT else float("inf")) for i, name in enumerate(METRIC_NAMES)
)
# After this many evictions a pod's running totals are recomputed from its
# buckets, so floating-point drift from add/subtract cannot accumulate.
_RESUM_EVERY: Final = 512

# A pod's contribution from one batch: (sum_0..sum_5, count_0..count_5).
Accumulator = Sequence[float]


def new_accumulator() -> list[float]:
    return [0.0] * (2 * N_METRICS)


# A pod inside its workload: (namespace, workload kind, workload name, pod).
# Plain tuples, not dataclasses: one is built per GPU owner on the hot path.
PodKey = tuple[str, str, str, str]
# (namespace, workload kind, workload name)
WorkloadTuple = tuple[str, str, str]


class PodWindow:
    """One pod's buckets and running totals. ``buckets`` entries are tuples
    (of atoms only, so the garbage collector stops tracking them):
    ``(bucket_index, newest_ts, (sum_0..sum_5, count_0..count_5))``; the
    inner tuple is the batch's own accumulator, stored without copying."""

    __slots__ = ("buckets", "evictions", "interval_s", "last_seen", "totals")

    def __init__(self) -> None:
        self.buckets: deque[tuple[Any, ...]] = deque()
        self.totals: list[float] = new_accumulator()
        self.last_seen = 0.0
        self.interval_s = 1.0
        self.evictions = 0

    def merge(self, bucket_index: int, ts: float, acc: Accumulator) -> None:
        """A sample for a bucket at or before the newest one: the same second
        again, or late (a collector restart, a reordered batch). Buckets stay
        sorted so eviction remains a pop from the left."""
        buckets = self.buckets
        pos = len(buckets)
        while pos > 0 and buckets[pos - 1][0] > bucket_index:
            pos -= 1
        if pos > 0 and buckets[pos - 1][0] == bucket_index:
            target = buckets[pos - 1]
            buckets[pos - 1] = (bucket_index, max(target[1], ts), tuple(map(_plus, target[2], acc)))
        else:
            buckets.insert(pos, (bucket_index, ts, acc))

    def evict(self, cutoff: float) -> None:
        """Drop buckets whose newest sample is at or before ``cutoff``."""
        buckets = self.buckets
        totals = self.totals
        while buckets and buckets[0][1] <= cutoff:
            old = buckets.popleft()
            totals = list(map(_minus, totals, old[2]))
            self.evictions += 1
        if not buckets:
            self.totals = new_accumulator()
        elif self.evictions >= _RESUM_EVERY:
            self.evictions = 0
            fresh = new_accumulator()
            for b in buckets:
                fresh = list(map(_plus, fresh, b[2]))
            self.totals = fresh
        else:
            self.totals = totals


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

    ``pods`` is flat (one dict lookup per pod per batch); ``workloads``
    indexes the same windows by workload, touched only when a pod comes or goes.
    """

    def __init__(self, config: WindowConfig | None = None) -> None:
        self.config = config or WindowConfig()
        self._inv_bucket = 1.0 / self.config.bucket_s
        self.pods: dict[PodKey, PodWindow] = {}
        self.workloads: dict[WorkloadTuple, dict[str, PodWindow]] = {}

    # --- ingest -------------------------------------------------------------

    def add_batch(self, contributions: Mapping[PodKey, Accumulator], ts: float, interval_s: float) -> None:
        """Add one batch's per-pod sums (the hot path: kept flat on purpose)."""
        bucket = int(ts * self._inv_bucket)
        pods = self.pods
        for key, acc in contributions.items():
            window = pods.get(key)
            if window is None:
                window = pods[key] = PodWindow()
                workload = (key[0], key[1], key[2])
                members = self.workloads.get(workload)
                if members is None:
                    members = self.workloads[workload] = {}
                members[key[3]] = window
            window.totals = list(map(_plus, window.totals, acc))
            if ts >= window.last_seen:
                window.last_seen = ts
                window.interval_s = interval_s
            buckets = window.buckets
            if not buckets or buckets[-1][0] < bucket:
                buckets.append((bucket, ts, acc))
            elif buckets[-1][0] == bucket:  # the same second again (faster collectors, bursts)
                tail = buckets[-1]
                buckets[-1] = (bucket, ts if ts > tail[1] else tail[1], tuple(map(_plus, tail[2], acc)))
            else:
                window.merge(bucket, ts, acc)

    # --- time passing and reading -------------------------------------------

    def expire(self, now: float) -> None:
        """Forget what has left the window: buckets, then empty pods and workloads."""
        for _ in self.iter_wire(now, build=False):
            pass

    def snapshot(self, now: float) -> list[WorkloadMetrics]:
        """Expire, then one metrics message per workload that still has pods."""
        return [WorkloadMetrics.from_wire(m, now) for _, m in self.iter_wire(now) if m is not None]

    def iter_wire(
        self, now: float, *, build: bool = True
    ) -> Iterator[tuple[WorkloadTuple, dict[str, Any] | None]]:
        """Workload by workload, the metrics message as its v1 wire map (what
        ``WorkloadMetrics.to_wire`` gives, built directly: this runs for every
        workload every publish interval). A caller may yield to its event loop
        between steps; ingesting meanwhile is safe (this iterates over a copy)."""
        cutoff = now - self.config.window_s
        for workload, members in list(self.workloads.items()):
            gone = []
            for pod, window in members.items():
                window.evict(cutoff)
                if not window.buckets:
                    gone.append(pod)
            for pod in gone:
                del members[pod]
                self.pods.pop((workload[0], workload[1], workload[2], pod), None)
            if not members:
                self.workloads.pop(workload, None)
                continue
            yield workload, (self._wire(workload, members, now) if build else None)

    def _wire(self, workload: WorkloadTuple, members: dict[str, PodWindow], now: float) -> dict[str, Any]:
        stale_after = self.config.stale_intervals
        pods_out: list[dict[str, Any]] = []
        sums = [0.0] * N_METRICS
        counts = [0] * N_METRICS
        fresh = stale = 0
        for pod in sorted(members):
            window = members[pod]
            totals = window.totals
            values: dict[str, float] = {}
            for i, name, cap in _METRICS:
                count = totals[N_METRICS + i]
                if count > 0.5:  # counts are whole numbers held as floats
                    v = totals[i] / count
                    # Running sums may leave -1e-13 or 100.0000000001 behind;
                    # the contract rejects values outside the range: pin them.
                    values[name] = 0.0 if v < 0.0 else (cap if v > cap else v)
            pods_out.append({"pod": pod, "values": values, "last_seen": window.last_seen})
            if now - window.last_seen > stale_after * window.interval_s:
                stale += 1
                continue
            fresh += 1
            for i, name, _ in _METRICS:
                value = values.get(name)
                if value is not None:
                    sums[i] += value
                    counts[i] += 1
        averages: dict[str, float] = {}
        for i, name, cap in _METRICS:
            if counts[i]:
                v = sums[i] / counts[i]
                averages[name] = 0.0 if v < 0.0 else (cap if v > cap else v)
        return {
            "v": WIRE_VERSION,
            "namespace": workload[0],
            "kind": workload[1],
            "name": workload[2],
            "ts": now,
            "window_s": self.config.window_s,
            "pods": pods_out,
            "averages": averages,
            "pods_fresh": fresh,
            "pods_stale": stale,
        }

    # --- sizes for /metrics ---------------------------------------------------

    @property
    def workload_count(self) -> int:
        return len(self.workloads)

    @property
    def pod_count(self) -> int:
        return len(self.pods)

    @property
    def bucket_count(self) -> int:
        return sum(len(w.buckets) for w in self.pods.values())
