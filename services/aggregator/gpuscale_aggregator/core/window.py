"""Sliding windows per workload and pod: expiry, and the messages the aggregator publishes.

The window at ``now`` holds samples with ``now - window_s < ts <= now``, in ``bucket_s`` buckets
that leave with their newest sample. Per workload a metric is the mean over its FRESH pods (stale:
no sample for ``stale_intervals`` intervals). Samples from before a pod joined leave early (the
message's ``since``). A message is due when its tick is complete, or ``publish_interval_s`` after
its last one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from operator import add
from typing import Any

from gpuscale.wire import UNSET, MetricValues, PodMetrics, WorkloadMetrics

from .pods import (
    CLAMPED,
    TOO_MANY,
    TTL_MAX_S,
    TTL_MIN_S,
    PodWindows,
    Wanted,
    WindowConfig,
    WorkloadTuple,
    _compiled,
)
from .records import EMPTY, ENGINE_METRICS, KV, N_ENGINE, NO_ENGINE, RECORD, TOTALS_RECORD, WINDOW_METRICS
from .rings import AWAITED, UNAWAITED

__all__ = [
    "CLAMPED",
    "ENGINE_METRICS",
    "TOO_MANY",
    "TTL_MAX_S",
    "TTL_MIN_S",
    "WINDOW_METRICS",
    "Wanted",
    "WindowConfig",
    "WindowStore",
    "WorkloadTuple",
]


class WindowStore(PodWindows):
    """Every workload's pods and their windows, and the messages they make. Pure: ``now`` is a parameter."""

    def take_complete(self, now: float) -> list[WorkloadTuple]:
        """Workloads whose tick is complete and whose last message is a bucket old; those
        complete sooner wait for that (``next_due``)."""
        ticks, bucket_s, early = self.ticks, self.config.bucket_s, self._early
        due = []
        for workload in self.complete:
            tick = ticks.get(workload)
            if tick is not None:
                if tick.at + bucket_s <= now:
                    due.append(workload)
                else:
                    heapq.heappush(early, (tick.at + bucket_s, workload))
        self.complete.clear()
        while early and early[0][0] <= now:
            at, workload = heapq.heappop(early)
            tick = ticks.get(workload)
            if tick is not None and tick.at + bucket_s == at:  # no message since it completed
                due.append(workload)
        return list(dict.fromkeys(due))  # a new pod may complete it twice before it is due

    def take_overdue(self, now: float) -> list[WorkloadTuple]:
        """Workloads whose last message is ``publish_interval_s`` old (a pod fell silent)."""
        cutoff = now - self.config.publish_interval_s
        overdue = []
        for workload, tick in self.ticks.items():
            if tick.at > cutoff:
                break
            overdue.append(workload)
        return overdue

    def next_due(self) -> float | None:
        """When a message is due next, unless a tick completes sooner (None: no workload)."""
        deadline = next(iter(self.ticks.values())).at + self.config.publish_interval_s if self.ticks else None
        if self._early and (deadline is None or self._early[0][0] < deadline):
            return self._early[0][0]
        return deadline

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
        """Workload by workload: expire, then its metrics message (ingesting between steps is safe).
        ``wall_offset_s``: added to the times the messages carry, for receivers on the wall clock."""
        self._lapse(now)
        for workload, members in list(self.workloads.items()):
            message = self._expire_and_build(workload, members, now, build, wall_offset_s)
            if members:
                yield workload, message

    def message_of(
        self, workload: WorkloadTuple, now: float, wall_offset_s: float = 0.0
    ) -> WorkloadMetrics | None:
        """One workload's message out of the cycle (expiring its pods); None: no pod left."""
        members = self.workloads.get(workload)
        if members is None:
            return None
        return self._expire_and_build(workload, members, now, True, wall_offset_s)

    def _expire_and_build(
        self, workload: WorkloadTuple, members: dict[str, int], now: float, build: bool, wall_offset_s: float
    ) -> WorkloadMetrics | None:
        """Expire ``workload``'s pods (and the workload with its last), then its message if ``build``."""
        wanted = self.wanted.get(workload)
        if wanted is not None and wanted.until <= now:
            wanted = None  # lapsed (a cycle removes it; one workload's message only ignores it)
        window = self.config.window_s if wanted is None else wanted.window_s
        cutoff = now - window
        since = self._capacity_change(members, cutoff) if len(members) > 1 else None
        # Samples from before capacity grew say nothing of the per-pod load after; stale pods keep theirs.
        after = None if since is None else max(cutoff, since - self._half_bucket)
        if not build:
            self._expire(workload, members, cutoff, after)
            return None
        recent_s = None
        if wanted is not None:
            recent_s = wanted.recent_s
            if wanted.covers_from > cutoff and (since is None or wanted.covers_from > since):
                since = wanted.covers_from  # a longer window than was kept: say what it covers
        return self._message(workload, members, now, cutoff, after, since, window, recent_s, wall_offset_s)

    def _expire(
        self, workload: WorkloadTuple, members: dict[str, int], cutoff: float, after: float | None
    ) -> None:
        """Evict the pods' buckets before ``cutoff`` (``after``, for the pods heard since capacity
        grew); the pods left with none go, and the workload with its last."""
        oldest_of, opened, lengths = self._oldest, self._open, self._len
        slot_ts, slots, inv, evict = self._ts, self.slots, self._inv_bucket, self._evict
        gone = []
        for pod, pid in members.items():
            pod_cutoff = cutoff if after is None else self._cut_after_change(pid, cutoff, after)
            oldest = oldest_of[pid]
            if oldest < opened[pid] and lengths[pid] == slots:
                held = slot_ts[pid * slots + oldest % slots]
                if held > pod_cutoff and held != EMPTY and int(held * inv) == oldest:
                    continue  # its oldest bucket is in the window: nothing to evict (a cycle's usual case)
            if not evict(pid, pod_cutoff):
                gone.append(pod)
        if gone:
            self._release(workload, members, gone)

    def _cut_after_change(self, pid: int, cutoff: float, after: float) -> float:
        """Where a pod's window starts after a capacity change: ``after`` once it is heard since,
        one sample interval later once it has a sample from then (a sample describes the interval
        before it: the first after the change still partly covers the load before); the whole
        window for a pod not heard since (a stale pod keeps its samples)."""
        seen = self._last_seen[pid]
        if seen <= after:
            return cutoff
        clean = after + self._interval[pid]
        return clean if seen > clean else after

    def _release(self, workload: WorkloadTuple, members: dict[str, int], gone: list[str]) -> None:
        """Pods with nothing left in the window go (their numbers back in the order they joined)."""
        if len(gone) > 1:
            leaving = set(gone)
            gone = [pod for pod in members if pod in leaving]
        for pod in gone:
            self._release_pod(members.pop(pod))
        if not members:
            self.workloads.pop(workload, None)
            self.ticks.pop(workload, None)
            self.complete.pop(workload, None)

    def _message(
        self,
        workload: WorkloadTuple,
        members: dict[str, int],
        now: float,
        cutoff: float,
        after: float | None,
        since: float | None,
        window_s: float,
        recent_s: float | None,
        wall_offset_s: float,
    ) -> WorkloadMetrics | None:
        """See :meth:`_message_python`; compiled where the workload's pods' rings are in the
        shared buffers (another workload's longer window costs this one nothing)."""
        own = self._long
        if _compiled is not None and (not own or own.keys().isdisjoint(members.values())):
            message: WorkloadMetrics | None = _compiled.message(
                self, workload, members, now, cutoff, after, since, window_s, recent_s, wall_offset_s
            )
            return message
        return self._message_python(
            workload, members, now, cutoff, after, since, window_s, recent_s, wall_offset_s
        )

    def _message_python(
        self,
        workload: WorkloadTuple,
        members: dict[str, int],
        now: float,
        cutoff: float,
        after: float | None,
        since: float | None,
        window_s: float,
        recent_s: float | None,
        wall_offset_s: float,
    ) -> WorkloadMetrics | None:
        """Expiry as :meth:`_expire` and, in the same pass over the pods, the window means per pod
        (pinned to the contract's ranges) and per workload the mean over fresh pods; None: no pod
        left. Spelled out per metric: this runs for every pod every message; ``_loops.pyx`` is its
        compiled twin for the shared rings, and must stay byte for byte the same."""
        stale_after, slots, unset = self.config.stale_intervals, self.slots, UNSET
        totals, shared_ring, lengths, own_rings = self._totals, self._ring, self._len, self._long
        opened, last_seen, intervals = self._open, self._last_seen, self._interval
        engine_ids, unheard, evict = self._engine, self._unheard, self._evict
        size, unpack_from = RECORD.size, RECORD.unpack_from
        unpack_totals, per_pod = TOTALS_RECORD.unpack_from, TOTALS_RECORD.size  # one tuple, no slice
        pack_totals, oldest_of, evict_closed = TOTALS_RECORD.pack_into, self._oldest, self._evict_closed
        pods_out: list[PodMetrics] = []
        gone: list[str] = []
        fresh = stale = 0
        a0 = a1 = a2 = a3 = a4 = a5 = 0.0  # sums of fresh pods' means, and how many
        n0 = n1 = n2 = n3 = n4 = n5 = 0
        engine_sums: list[float] | None = None  # the same for the engine metrics, once a pod has them
        engine_counts = [0] * N_ENGINE
        no_engine = (unset,) * N_ENGINE
        for pod in sorted(members):
            pid = members[pod]
            seen = last_seen[pid]
            pod_cutoff = cutoff if after is None else self._cut_after_change(pid, cutoff, after)
            t = pid * per_pod
            eid = engine_ids[pid]
            current = opened[pid]
            oldest = oldest_of[pid]
            if oldest < current and eid == NO_ENGINE and not (own_rings and lengths[pid] != slots):
                # Rings._evict's common case: the totals are read once, for the means too.
                n, ring, base = slots, shared_ring, pid * slots
                pod_totals, evicted = evict_closed(pid, pod_cutoff, unpack_totals(totals, t))
                if evicted:
                    pack_totals(totals, t, *pod_totals)
                if oldest_of[pid] >= current and not evict(pid, pod_cutoff):  # the open bucket alone is left
                    gone.append(pod)
                    continue
            else:
                if not evict(pid, pod_cutoff):
                    gone.append(pod)
                    continue
                if own_rings and lengths[pid] != slots:
                    n = lengths[pid]
                    ring, base = own_rings[pid][1], 0
                else:
                    n, ring, base = slots, shared_ring, pid * slots
                pod_totals = unpack_totals(totals, t)
            # The closed buckets' totals plus the open bucket's record.
            s0, s1, s2, s3, s4, s5, c0, c1, c2, c3, c4, c5 = map(
                add, pod_totals, unpack_from(ring, (base + opened[pid] % n) * size)
            )
            v0: Any = (0.0 if s0 <= 0.0 else 100.0 if s0 >= 100.0 * c0 else s0 / c0) if c0 > 0.5 else unset
            v1: Any = (0.0 if s1 <= 0.0 else 100.0 if s1 >= 100.0 * c1 else s1 / c1) if c1 > 0.5 else unset
            v2: Any = (0.0 if s2 <= 0.0 else 100.0 if s2 >= 100.0 * c2 else s2 / c2) if c2 > 0.5 else unset
            v3: Any = (0.0 if s3 <= 0.0 else 100.0 if s3 >= 100.0 * c3 else s3 / c3) if c3 > 0.5 else unset
            v4: Any = (0.0 if s4 <= 0.0 else s4 / c4) if c4 > 0.5 else unset
            v5: Any = (0.0 if s5 <= 0.0 else s5 / c5) if c5 > 0.5 else unset
            engine_means = no_engine if eid == NO_ENGINE else self._engine_means(pid, eid)
            values = MetricValues(v0, v1, v2, v3, v4, v5, *engine_means)
            if recent_s is None:
                pods_out.append(PodMetrics(pod, values, seen + wall_offset_s))
            else:
                pods_out.append(
                    PodMetrics(pod, values, seen + wall_offset_s, self._recent(pid, now - recent_s))
                )
            if now - seen > stale_after * intervals[pid]:
                unheard[pid] = UNAWAITED
                stale += 1
                continue
            unheard[pid] = AWAITED
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
            if eid != NO_ENGINE:
                if engine_sums is None:
                    engine_sums = [0.0] * N_ENGINE
                for i, v in enumerate(engine_means):
                    if v is not unset:
                        engine_sums[i] += v
                        engine_counts[i] += 1
        if gone:
            self._release(workload, members, gone)
            if not members:
                return None
        tick = self.ticks.pop(workload)  # to the back: the front is the next deadline
        tick.at, tick.awaiting = now, fresh
        self.ticks[workload] = tick
        self.complete.pop(workload, None)
        averages = MetricValues(
            min(a0 / n0, 100.0) if n0 else unset,
            min(a1 / n1, 100.0) if n1 else unset,
            min(a2 / n2, 100.0) if n2 else unset,
            min(a3 / n3, 100.0) if n3 else unset,
            a4 / n4 if n4 else unset,
            a5 / n5 if n5 else unset,
            *(
                no_engine
                if engine_sums is None
                else (
                    (min(total / n, 100.0) if i == KV else total / n) if n else unset
                    for i, (total, n) in enumerate(zip(engine_sums, engine_counts, strict=True))
                )
            ),
        )
        return WorkloadMetrics(
            namespace=workload[0],
            kind=workload[1],
            name=workload[2],
            ts=now + wall_offset_s,
            window_s=window_s,
            pods=tuple(pods_out),
            averages=averages,
            pods_fresh=fresh,
            pods_stale=stale,
            source=self.config.source or UNSET,
            since=UNSET if since is None else since + wall_offset_s,
            recent_s=UNSET if recent_s is None else recent_s,
        )

    @property
    def workload_count(self) -> int:
        return len(self.workloads)

    @property
    def bucket_count(self) -> int:
        """Buckets holding samples (walks every ring: tests and tools)."""
        count = 0
        for members in self.workloads.values():
            for pid in members.values():
                slot_ts, _, _, base, _, n = self._rings(pid)
                count += sum(1 for slot in range(base, base + n) if slot_ts[slot] != EMPTY)
        return count

    def ring_slots_held(self) -> int:
        """Bucket places held by every pod's ring, shared or its own (tests and tools)."""
        return sum(self._len[pid] for members in self.workloads.values() for pid in members.values())

    def ring_of(self, workload: WorkloadTuple, pod: str) -> int:
        """The length of a pod's ring in buckets (tests and tools)."""
        return self._len[self.workloads[workload][pod]]
