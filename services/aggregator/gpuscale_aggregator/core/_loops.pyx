# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=False
"""The window's two hot loops compiled: ``PodWindows._add_batch_python`` (a batch into the
rings) and ``WindowStore._message_python`` (a workload's message), over the same packed buffers,
byte for byte the same writes and values.

For the pods whose ring is in the shared buffers; a pod that has or wants a ring of its own
(its workload's policy asked for a longer window) is handed to the Python loop, alone. A record
is ``<6f6B`` (RECORD), the totals 12 doubles per pod: this module reads and writes them in place, and calls back into Python for what is rare (a new pod or
engine, an eviction out of order, a late sample, engine records and means, recent means, a pod
leaving). Pure: the times are parameters.
"""

import sys

from cpython.array cimport array
from cpython.bytearray cimport PyByteArray_AS_STRING
from libc.string cimport memcpy

from gpuscale.wire import HEALTH_OK, NO_METRICS, UNSET, MetricValues, PodMetrics, WorkloadMetrics

from .records import COUNT_MAX as _COUNT_MAX, EMPTY as _EMPTY, ENGINE_RECORD as _ENGINE_RECORD
from .records import HUGE as _HUGE, KV as _KV, N_ENGINE as _N_ENGINE, N_METRICS as _N_METRICS
from .records import NO_ENGINE as _NO_ENGINE, RECORD as _RECORD, TOTALS as _TOTALS
from .rings import AWAITED as _AWAITED, UNAWAITED as _UNAWAITED

# The layout this file spells out; records.py checks the catalog, this checks the bytes. An
# ImportError leaves the Python loops to run.
if sys.byteorder != "little":
    raise ImportError("the compiled loops read the records' little-endian floats as native ones")
if _RECORD.format != "<6f6B" or _RECORD.size != 30 or _N_METRICS != 6 or _TOTALS != 12:
    raise ImportError("the compiled add_batch spells out a record layout that has changed")
if _ENGINE_RECORD.format != "<5f5B" or _N_ENGINE != 5 or _KV != 2:
    raise ImportError("the compiled recent means spell out an engine record layout that has changed")
if _COUNT_MAX != 255 or _EMPTY != 0.0 or _NO_ENGINE != -1 or (_AWAITED, _UNAWAITED) != (1, 2):
    raise ImportError("the compiled add_batch spells out constants that have changed")

# pods.LOOPS_CONTRACT: what these loops do for their callers (a module without it is left unused).
CONTRACT = 2

cdef enum:
    SIZE = 30  # RECORD.size
    COUNTS = 24  # where the counts start in a record
    PER_POD = 12  # doubles of totals per pod
    ESIZE = 25  # ENGINE_RECORD.size
    ECOUNTS = 20  # where an engine record's counts start
cdef double HUGE = _HUGE


cdef inline float _f32(const char* rec, int i) noexcept nogil:
    cdef float v
    memcpy(&v, rec + 4 * i, 4)
    return v


cdef inline void _put(char* rec, int i, double v) noexcept nogil:
    cdef float f = <float>v  # as struct's 'f': the double rounded to nearest
    memcpy(rec + 4 * i, &f, 4)


cdef struct Buffers:
    double* slot_ts
    char* ring
    double* totals
    long long* opened
    long long* oldest
    double* last_seen
    double* intervals
    long long* engine_ids
    char* unheard
    long long* lengths


cdef inline void _point(Buffers* b, object windows) except *:
    """Where the shared buffers are now (they move when they grow: after a new pod or engine)."""
    b.slot_ts = (<array>windows._ts).data.as_doubles
    b.ring = PyByteArray_AS_STRING(windows._ring)
    b.totals = (<array>windows._totals).data.as_doubles
    b.opened = (<array>windows._open).data.as_longlongs
    b.oldest = (<array>windows._oldest).data.as_longlongs
    b.last_seen = (<array>windows._last_seen).data.as_doubles
    b.intervals = (<array>windows._interval).data.as_doubles
    b.engine_ids = (<array>windows._engine).data.as_longlongs
    b.unheard = PyByteArray_AS_STRING(windows._unheard)
    b.lengths = (<array>windows._len).data.as_longlongs


def add_batch(object windows, object batch, double ts):
    """``windows.add_batch(batch, ts)``; the pods that have or want a ring of their own go
    through ``windows._add_owner_python``, in their turn."""
    cdef long long bucket = <long long>(ts * <double>windows._inv_bucket)
    cdef double interval_s = batch.interval_s
    cdef long long slots = windows.slots
    cdef long long position = bucket % slots
    if position < 0:
        position += slots  # Python's modulo
    cdef dict workloads = windows.workloads
    cdef Buffers b
    _point(&b, windows)
    cdef object pod_engines = None
    if batch.engines:
        pod_engines = {e.pod_uid: e.signals for e in batch.engines}
    cdef object g, owners, o, w, workload, members, pid_obj, engine, sm_active, sm_util, mem_obj
    cdef object fb_used, fb_free, power_obj, util_obj
    cdef double util, sm_active_v, sm_util_v, mem, ratio, power, framebuffer, fbu
    cdef bint has_sm_active, has_sm_util, has_mem, has_ratio, has_power, has_fb_used
    cdef long long pid, eid, current, slot, closing
    cdef char* rec
    cdef char* old
    cdef int i
    cdef double* tot
    cdef dict ring_slots = windows._ring_slots
    cdef bint reshaping = bool(ring_slots) or bool(windows._long)
    for g in batch.gpus:
        util_obj = g.util
        owners = g.owners
        if util_obj is None or not owners or g.health != HEALTH_OK:
            continue
        util = util_obj
        sm_active = g.sm_active
        has_sm_active = sm_active is not None
        sm_active_v = sm_active if has_sm_active else 0.0
        fb_used = g.fb_used_mib
        fb_free = g.fb_free_mib
        power_obj = g.power_w
        has_power = power_obj is not None
        power = power_obj if has_power else 0.0
        if power > HUGE:
            power = HUGE
        has_fb_used = fb_used is not None
        fbu = fb_used if has_fb_used else 0.0
        framebuffer = fbu + <double>fb_free if has_fb_used and fb_free is not None else 0.0
        for o in owners:
            if o.ready is False:  # loading its model: the decider counts it missing
                continue
            w = o.workload
            workload = (o.namespace, w.kind, w.name)
            members = workloads.get(workload)
            pid_obj = None if members is None else (<dict>members).get(o.pod)
            if pid_obj is None:
                pid = windows._new_pod(workload, o.pod, bucket, ts)
                _point(&b, windows)
            else:
                pid = pid_obj
            if b.unheard[pid]:
                windows._hear(pid, workload)
            engine = o.engine
            if not engine:
                engine = pod_engines.get(o.pod_uid) if pod_engines else None
            if reshaping and (b.lengths[pid] != slots or workload in ring_slots):
                windows._add_owner_python(batch, g, o, engine, ts)
                _point(&b, windows)
                continue
            eid = b.engine_ids[pid]
            if engine and eid == -1:
                eid = windows._new_engine(pid)
                _point(&b, windows)
            sm_util = o.sm_util
            has_sm_util = sm_util is not None
            sm_util_v = sm_util if has_sm_util else 0.0
            mem_obj = o.fb_used_mib
            if mem_obj is None:
                has_mem = has_fb_used
                mem = fbu
            else:
                has_mem = True
                mem = mem_obj
            has_ratio = False
            ratio = 0.0
            if has_mem:
                if mem > HUGE:
                    mem = HUGE
                if framebuffer > 0.0:
                    has_ratio = True
                    ratio = mem * 100.0 / framebuffer
                    if ratio > 100.0:
                        ratio = 100.0
            current = b.opened[pid]
            slot = pid * slots + position
            if bucket == current:
                # The open bucket again (a pod on several GPUs, a burst): add to its record.
                rec = b.ring + slot * SIZE
                if <unsigned char>rec[COUNTS] < 255:  # a bucket this full is a flood: keep its mean
                    _put(rec, 0, <double>_f32(rec, 0) + util)
                    _put(rec, 1, <double>_f32(rec, 1) + sm_active_v)
                    _put(rec, 2, <double>_f32(rec, 2) + sm_util_v)
                    _put(rec, 3, <double>_f32(rec, 3) + ratio)
                    _put(rec, 4, <double>_f32(rec, 4) + mem)
                    _put(rec, 5, <double>_f32(rec, 5) + power)
                    rec[COUNTS] = <char>(<unsigned char>rec[COUNTS] + 1)
                    rec[COUNTS + 1] = <char>(<unsigned char>rec[COUNTS + 1] + has_sm_active)
                    rec[COUNTS + 2] = <char>(<unsigned char>rec[COUNTS + 2] + has_sm_util)
                    rec[COUNTS + 3] = <char>(<unsigned char>rec[COUNTS + 3] + has_ratio)
                    rec[COUNTS + 4] = <char>(<unsigned char>rec[COUNTS + 4] + has_mem)
                    rec[COUNTS + 5] = <char>(<unsigned char>rec[COUNTS + 5] + has_power)
                    if ts > b.slot_ts[slot]:
                        b.slot_ts[slot] = ts
                if engine:
                    windows._engine_merge(windows._engine_ring, eid * slots + position, engine)
            elif bucket > current:
                # A newer bucket opens: the open one joins the totals, the slot's old bucket leaves them.
                if current >= 0:
                    closing = pid * slots + current % slots
                    if b.slot_ts[closing] != 0.0:
                        old = b.ring + closing * SIZE
                        tot = b.totals + pid * PER_POD
                        for i in range(6):
                            tot[i] = tot[i] + <double>_f32(old, i)
                            tot[6 + i] = tot[6 + i] + <double>(<unsigned char>old[COUNTS + i])
                        if eid != -1:
                            windows._engine_fold(eid, windows._engine_ring, eid * slots + current % slots)
                if b.slot_ts[slot] != 0.0:
                    windows._evict_slot(pid, position, None)
                rec = b.ring + slot * SIZE
                _put(rec, 0, util)
                _put(rec, 1, sm_active_v)
                _put(rec, 2, sm_util_v)
                _put(rec, 3, ratio)
                _put(rec, 4, mem)
                _put(rec, 5, power)
                rec[COUNTS] = 1
                rec[COUNTS + 1] = has_sm_active
                rec[COUNTS + 2] = has_sm_util
                rec[COUNTS + 3] = has_ratio
                rec[COUNTS + 4] = has_mem
                rec[COUNTS + 5] = has_power
                b.slot_ts[slot] = ts
                b.opened[pid] = bucket
                if eid != -1:
                    windows._engine_open(windows._engine_ring, eid * slots + position, engine)
            else:
                windows._add_late(
                    pid,
                    position,
                    bucket,
                    ts,
                    (
                        util_obj,
                        sm_active,
                        sm_util,
                        ratio if has_ratio else None,
                        mem if has_mem else None,
                        power if has_power else None,
                    ),
                    engine,
                )
            if ts >= b.last_seen[pid]:
                b.last_seen[pid] = ts
                b.intervals[pid] = interval_s


cdef inline object _mean(double s, double c, bint percent, object unset):
    """A window mean as the message carries it: UNSET without samples, else at least 0.0 and,
    for a %, at most 100.0."""
    if c <= 0.5:
        return unset
    if s <= 0.0:
        return 0.0
    if percent and s >= 100.0 * c:
        return 100.0
    return s / c


cdef inline object _recent_mean(double s, double c, bint percent, object unset):
    """A recent mean (Rings._recent's expression): UNSET without samples, else s / c pinned."""
    if c <= 0.5:
        return unset
    cdef double v = s / c
    if percent and v > 100.0:
        return 100.0
    return v if v > 0.0 else 0.0


cdef object _recent(object windows, Buffers* b, long long pid, long long slots, double inv, double cutoff):
    """Rings._recent for a pod in the shared buffers: its means over its buckets whose newest
    sample is after ``cutoff``, summed newest first as the Python loop sums them."""
    cdef long long current = b.opened[pid]
    if current < 0:
        return NO_METRICS
    cdef long long eid = b.engine_ids[pid]
    cdef long long base = pid * slots, ebase = eid * slots
    cdef long long bucket = current, lowest = current + 1, k = 0, position
    cdef double held
    while bucket > current - slots:
        held = b.slot_ts[base + bucket % slots]
        if held != 0.0 and <long long>(held * inv) == bucket:
            if held <= cutoff:
                break
            lowest = bucket
            k += 1
        bucket -= 1
    cdef double sums[12]
    cdef double esums[10]
    cdef int i
    for i in range(12):
        sums[i] = 0.0
    for i in range(10):
        esums[i] = 0.0
    cdef bint first = True
    cdef char* rec
    cdef char* erec = PyByteArray_AS_STRING(windows._engine_ring)
    if k:
        bucket = current
        while bucket >= lowest:
            position = bucket % slots
            held = b.slot_ts[base + position]
            if held != 0.0 and <long long>(held * inv) == bucket:
                rec = b.ring + (base + position) * SIZE
                if first:  # the newest record as it is
                    for i in range(6):
                        sums[i] = <double>_f32(rec, i)
                        sums[6 + i] = <double>(<unsigned char>rec[COUNTS + i])
                    first = False
                else:
                    for i in range(6):
                        sums[i] = sums[i] + <double>_f32(rec, i)
                        sums[6 + i] = sums[6 + i] + <double>(<unsigned char>rec[COUNTS + i])
                if eid != -1:
                    rec = erec + (ebase + position) * ESIZE
                    for i in range(5):
                        esums[i] = esums[i] + <double>_f32(rec, i)
                        esums[5 + i] = esums[5 + i] + <double>(<unsigned char>rec[ECOUNTS + i])
            bucket -= 1
    cdef object unset = UNSET
    if eid == -1:
        return MetricValues(*[_recent_mean(sums[i], sums[6 + i], i < 4, unset) for i in range(6)])
    return MetricValues(
        *[_recent_mean(sums[i], sums[6 + i], i < 4, unset) for i in range(6)],
        *[_recent_mean(esums[i], esums[5 + i], i == 2, unset) for i in range(5)],
    )


def message(
    object windows,
    tuple workload,
    dict members,
    double now,
    double cutoff,
    object after,
    object since,
    object window_s,
    object recent_s,
    double wall_offset_s,
):
    """``windows._message_python(...)`` where the workload's pods' rings are in the shared buffers."""
    cdef double stale_after = windows.config.stale_intervals
    cdef long long slots = windows.slots
    cdef double inv = windows._inv_bucket
    cdef object unset = UNSET
    cdef Buffers b
    _point(&b, windows)
    cdef list pods_out = []
    cdef list gone = []
    cdef long long fresh = 0, stale = 0
    cdef double a[6]
    cdef long long n[6]
    cdef double pt[12]
    cdef double s_[6]
    cdef double c_[6]
    cdef int i
    for i in range(6):
        a[i] = 0.0
        n[i] = 0
    cdef object engine_sums = None
    cdef list engine_counts = [0] * _N_ENGINE
    cdef tuple no_engine = (unset,) * _N_ENGINE
    cdef object pod, engine_means, values, v
    cdef long long pid, eid, current, oldest, slot
    cdef double seen, pod_cutoff, held
    cdef bint evicted
    cdef char* rec
    cdef double* tot
    cdef list means
    for pod in sorted(members):
        pid = members[pod]
        seen = b.last_seen[pid]
        pod_cutoff = cutoff if after is None else windows._cut_after_change(pid, cutoff, after)
        eid = b.engine_ids[pid]
        current = b.opened[pid]
        oldest = b.oldest[pid]
        tot = b.totals + pid * PER_POD
        for i in range(12):
            pt[i] = tot[i]
        if oldest < current and eid == -1:
            # Rings._evict_closed: the closed buckets out of the totals, which the means then read.
            evicted = False
            while oldest < current:
                slot = pid * slots + oldest % slots
                held = b.slot_ts[slot]
                if held != 0.0 and <long long>(held * inv) == oldest:
                    if held > pod_cutoff:
                        break
                    rec = b.ring + slot * SIZE
                    for i in range(6):
                        pt[i] = pt[i] - <double>_f32(rec, i)
                        pt[6 + i] = pt[6 + i] - <double>(<unsigned char>rec[COUNTS + i])
                    b.slot_ts[slot] = 0.0
                    evicted = True
                oldest += 1
            b.oldest[pid] = oldest
            if evicted:
                for i in range(12):
                    tot[i] = pt[i]
            if oldest >= current and not windows._evict(pid, pod_cutoff):  # the open bucket alone is left
                gone.append(pod)
                continue
        else:
            if not windows._evict(pid, pod_cutoff):
                gone.append(pod)
                continue
            for i in range(12):
                pt[i] = tot[i]
        # The closed buckets' totals plus the open bucket's record.
        rec = b.ring + (pid * slots + b.opened[pid] % slots) * SIZE
        for i in range(6):
            s_[i] = pt[i] + <double>_f32(rec, i)
            c_[i] = pt[6 + i] + <double>(<unsigned char>rec[COUNTS + i])
        means = [_mean(s_[i], c_[i], i < 4, unset) for i in range(6)]
        engine_means = no_engine if eid == -1 else windows._engine_means(pid, eid)
        values = MetricValues(means[0], means[1], means[2], means[3], means[4], means[5], *engine_means)
        if recent_s is None:
            pods_out.append(PodMetrics(pod, values, seen + wall_offset_s))
        else:
            pods_out.append(
                PodMetrics(pod, values, seen + wall_offset_s, _recent(windows, &b, pid, slots, inv, now - recent_s))
            )
        if now - seen > stale_after * b.intervals[pid]:
            b.unheard[pid] = 2  # UNAWAITED
            stale += 1
            continue
        b.unheard[pid] = 1  # AWAITED
        fresh += 1
        for i in range(6):
            if c_[i] > 0.5:
                a[i] += <double>means[i]
                n[i] += 1
        if eid != -1:
            if engine_sums is None:
                engine_sums = [0.0] * _N_ENGINE
            for i, v in enumerate(engine_means):
                if v is not unset:
                    engine_sums[i] += v
                    engine_counts[i] += 1
    if gone:
        windows._release(workload, members, gone)
        if not members:
            return None
    ticks = windows.ticks
    tick = ticks.pop(workload)  # to the back: the front is the next deadline
    tick.at, tick.awaiting = now, fresh
    ticks[workload] = tick
    windows.complete.pop(workload, None)
    cdef list averages = []
    for i in range(6):
        if n[i] == 0:
            averages.append(unset)
        elif i < 4 and 100.0 < a[i] / n[i]:
            averages.append(100.0)
        else:
            averages.append(a[i] / n[i])
    if engine_sums is None:
        averages.extend(no_engine)
    else:
        for i in range(_N_ENGINE):
            count = engine_counts[i]
            if not count:
                averages.append(unset)
            else:
                v = engine_sums[i] / count
                averages.append(100.0 if i == _KV and 100.0 < v else v)
    return WorkloadMetrics(
        namespace=workload[0],
        kind=workload[1],
        name=workload[2],
        ts=now + wall_offset_s,
        window_s=window_s,
        pods=tuple(pods_out),
        averages=MetricValues(*averages),
        pods_fresh=fresh,
        pods_stale=stale,
        source=windows.config.source or unset,
        since=unset if since is None else since + wall_offset_s,
        recent_s=unset if recent_s is None else recent_s,
    )
