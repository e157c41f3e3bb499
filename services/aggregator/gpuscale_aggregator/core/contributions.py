"""What one node batch adds to each pod's window, and a fast validating path.

Per (GPU, owner) of a healthy GPU the pod gets one value per metric:

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
treats as a missing pod). A GPU without owners feeds no workload.

:func:`fast_contributions` validates the decoded map directly and builds the
sums without creating the wire dataclasses (measured ~4× cheaper per GPU). It
is a conservative "surely valid" test: whenever it is not sure, it returns
``None`` and the caller runs :meth:`gpuscale.wire.SampleBatch.from_wire`, which
remains the single source of truth for rejection reasons. A property test
checks both paths agree.
"""

from __future__ import annotations

from collections.abc import Mapping
from operator import add as _plus
from typing import Any, Final

from gpuscale.wire import HEALTH_OK, MAX_FUTURE_SKEW_S, WIRE_VERSION, SampleBatch

from .window import N_METRICS, Accumulator, PodKey, new_accumulator

# Above this an int may not convert to float; let the full validator decide.
_BIG: Final = 1e300
# bool is not here on purpose: the contract rejects true/false as numbers.
_NUMBER: Final = frozenset((float, int))


def _add(
    acc: list[float],
    util: float,
    sm_active: float | None,
    fb_used: float | None,
    fb_free: float | None,
    power: float | None,
    owner_sm: float | None,
    owner_fb: float | None,
) -> None:
    n = N_METRICS
    acc[0] += util
    acc[n] += 1.0
    if sm_active is not None:
        acc[1] += sm_active
        acc[n + 1] += 1.0
    if owner_sm is not None:
        acc[2] += owner_sm
        acc[n + 2] += 1.0
    mem = owner_fb if owner_fb is not None else fb_used
    if mem is not None:
        acc[4] += mem
        acc[n + 4] += 1.0
        if fb_used is not None and fb_free is not None:
            total = fb_used + fb_free
            if total > 0.0:
                ratio = mem * 100.0 / total
                acc[3] += ratio if ratio < 100.0 else 100.0
                acc[n + 3] += 1.0
    if power is not None:
        acc[5] += power
        acc[n + 5] += 1.0


def contributions(batch: SampleBatch) -> dict[PodKey, tuple[float, ...]]:
    """Per pod, the sums and counts one validated batch adds."""
    out: dict[PodKey, list[float]] = {}
    for gpu in batch.gpus:
        if gpu.health != HEALTH_OK or gpu.util is None:
            continue
        for owner in gpu.owners:
            if owner.ready is False:  # loading its model: missing, as HPA counts unready pods
                continue
            key = (owner.namespace, owner.workload.kind, owner.workload.name, owner.pod)
            acc = out.get(key)
            if acc is None:
                acc = out[key] = new_accumulator()
            _add(
                acc,
                gpu.util,
                gpu.sm_active,
                gpu.fb_used_mib,
                gpu.fb_free_mib,
                gpu.power_w,
                owner.sm_util,
                owner.fb_used_mib,
            )
    return {key: tuple(acc) for key, acc in out.items()}


class FastBatch:
    """A batch the fast path found valid: header, sample count, pod sums."""

    __slots__ = ("contributions", "interval_s", "node", "samples", "seq", "ts")

    def __init__(
        self,
        node: str,
        ts: float,
        seq: int,
        interval_s: float,
        samples: int,
        contributions: Mapping[PodKey, Accumulator],
    ) -> None:
        self.node = node
        self.ts = ts
        self.seq = seq
        self.interval_s = interval_s
        self.samples = samples
        self.contributions = contributions


def fast_contributions(obj: Any, now: float) -> FastBatch | None:
    """Validate and sum in one pass; ``None`` means "ask the full validator"."""
    if type(obj) is not dict:
        return None
    try:
        v = obj["v"]
        node = obj["node"]
        ts = obj["ts"]
        seq = obj["seq"]
        interval_s = obj["interval_s"]
        gpus = obj["gpus"]
    except KeyError:
        return None
    if type(v) is not int or v != WIRE_VERSION or type(node) is not str or not node or type(gpus) is not list:
        return None
    if type(seq) is not int or seq < 0:
        return None
    t = type(ts)
    if not ((t is float or t is int) and 0.0 <= ts <= now + MAX_FUTURE_SKEW_S):
        return None
    t = type(interval_s)
    if not ((t is float or t is int) and 0.001 <= interval_s <= 3600.0):
        return None
    out: dict[PodKey, Accumulator] = {}
    for g in gpus:
        if type(g) is not dict:
            return None
        try:
            health = g["health"]
            owners = g["owners"]
            uuid = g["uuid"]
            index = g["index"]
            model = g["model"]
            util = g["util"]
            mem_util = g["mem_util"]
            fb_used = g["fb_used_mib"]
            fb_free = g["fb_free_mib"]
            temp = g["temp_c"]
            power = g["power_w"]
            sm_active = g["sm_active"]
            mig = g["mig"]
        except KeyError:
            return None
        # The checks of _pct/_nonneg/_temp/_text, inlined: calls cost more than the tests.
        if not (
            type(health) is str
            and health
            and type(owners) is list
            and type(uuid) is str
            and uuid
            and type(index) is int
            and index >= 0
            and type(model) is str
            and (mig is None or type(mig) is str)
            and (util is None or (type(util) in _NUMBER and 0.0 <= util <= 100.0))
            and (mem_util is None or (type(mem_util) in _NUMBER and 0.0 <= mem_util <= 100.0))
            and (sm_active is None or (type(sm_active) in _NUMBER and 0.0 <= sm_active <= 100.0))
            and (fb_used is None or (type(fb_used) in _NUMBER and 0.0 <= fb_used <= _BIG))
            and (fb_free is None or (type(fb_free) in _NUMBER and 0.0 <= fb_free <= _BIG))
            and (power is None or (type(power) in _NUMBER and 0.0 <= power <= _BIG))
            and (temp is None or (type(temp) in _NUMBER and -273.0 <= temp <= 1000.0))
        ):
            return None
        healthy = health == HEALTH_OK
        if healthy and util is None:
            return None
        for o in owners:
            if type(o) is not dict:
                return None
            try:
                namespace = o["namespace"]
                pod = o["pod"]
                container = o["container"]
                pod_uid = o["pod_uid"]
                workload = o["workload"]
                owner_sm = o["sm_util"]
                owner_fb = o["fb_used_mib"]
                kind = workload["kind"]
                name = workload["name"]
            except (KeyError, TypeError):
                return None
            if not (
                type(namespace) is str
                and namespace
                and type(pod) is str
                and pod
                and type(container) is str
                and type(pod_uid) is str
                and type(workload) is dict
                and type(kind) is str
                and kind
                and type(name) is str
                and name
                and (owner_sm is None or (type(owner_sm) in _NUMBER and 0.0 <= owner_sm <= 100.0))
                and (owner_fb is None or (type(owner_fb) in _NUMBER and 0.0 <= owner_fb <= _BIG))
            ):
                return None
            ready = o.get("ready")  # optional field: absent on older producers
            if ready is not None and type(ready) is not bool:
                return None
            if not healthy or ready is False:  # unready: missing, as HPA counts it
                continue
            # The six values and their counts (inlined _add: this runs per GPU owner).
            mem = owner_fb if owner_fb is not None else fb_used
            ratio = None
            if mem is not None and fb_used is not None and fb_free is not None:
                total = fb_used + fb_free
                if total > 0.0:
                    ratio = mem * 100.0 / total
                    if ratio > 100.0:
                        ratio = 100.0
            row = (
                util,
                0.0 if sm_active is None else sm_active,
                0.0 if owner_sm is None else owner_sm,
                0.0 if ratio is None else ratio,
                0.0 if mem is None else mem,
                0.0 if power is None else power,
                1.0,
                0.0 if sm_active is None else 1.0,
                0.0 if owner_sm is None else 1.0,
                0.0 if ratio is None else 1.0,
                0.0 if mem is None else 1.0,
                0.0 if power is None else 1.0,
            )
            key = (namespace, kind, name, pod)
            acc = out.get(key)
            if acc is None:
                out[key] = row
            else:
                out[key] = tuple(map(_plus, acc, row))
    return FastBatch(node, float(ts), seq, float(interval_s), len(gpus), out)
