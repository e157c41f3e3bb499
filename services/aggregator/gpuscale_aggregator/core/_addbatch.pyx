# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=False
"""PodWindows.add_batch compiled: the same loop over the same packed buffers, byte for byte.

Only while no pod has or wants a ring of its own (every ring in the shared buffers); the Python
method does the rest. A record is ``<6f6B`` (RECORD), the totals 12 doubles per pod: this module
reads and writes them in place, and calls back into Python for what is rare (a new pod, a new
engine, an eviction, a late sample, engine records). Pure: ``ts`` is a parameter.
"""

from cpython.array cimport array
from cpython.bytearray cimport PyByteArray_AS_STRING
from libc.string cimport memcpy

from .records import COUNT_MAX as _COUNT_MAX, EMPTY as _EMPTY, HUGE as _HUGE, NO_ENGINE as _NO_ENGINE
from .records import N_METRICS as _N_METRICS, RECORD as _RECORD, TOTALS as _TOTALS

from gpuscale.wire import HEALTH_OK

# The layout this file spells out; records.py checks the catalog, this checks the bytes.
if _RECORD.format != "<6f6B" or _RECORD.size != 30 or _N_METRICS != 6 or _TOTALS != 12:
    raise ImportError("the compiled add_batch spells out a record layout that has changed")
if _COUNT_MAX != 255 or _EMPTY != 0.0 or _NO_ENGINE != -1:
    raise ImportError("the compiled add_batch spells out constants that have changed")

cdef enum:
    SIZE = 30  # RECORD.size
    COUNTS = 24  # where the counts start in a record
    PER_POD = 12  # doubles of totals per pod
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
    double* last_seen
    double* intervals
    long long* engine_ids
    char* unheard


cdef inline void _point(Buffers* b, object windows) except *:
    """Where the shared buffers are now (they move when they grow: after a new pod or engine)."""
    b.slot_ts = (<array>windows._ts).data.as_doubles
    b.ring = PyByteArray_AS_STRING(windows._ring)
    b.totals = (<array>windows._totals).data.as_doubles
    b.opened = (<array>windows._open).data.as_longlongs
    b.last_seen = (<array>windows._last_seen).data.as_doubles
    b.intervals = (<array>windows._interval).data.as_doubles
    b.engine_ids = (<array>windows._engine).data.as_longlongs
    b.unheard = PyByteArray_AS_STRING(windows._unheard)


def add_batch(object windows, object batch, double ts):
    """``windows.add_batch(batch, ts)`` where every ring is in the shared buffers."""
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
    cdef object fb_used, fb_free, power_obj, ratio_obj, util_obj
    cdef double util, sm_active_v, sm_util_v, mem, ratio, power, framebuffer, fbu
    cdef bint has_sm_active, has_sm_util, has_mem, has_ratio, has_power, has_fb_used
    cdef long long pid, eid, current, slot, closing, t
    cdef char* rec
    cdef char* old
    cdef int i
    cdef double* tot
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
