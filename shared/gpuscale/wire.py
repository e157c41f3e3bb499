"""Wire contract v1 (DESIGN.md §3): typed messages and their validation.

Purely computational: values in, values out. Encoding to bytes lives in
:mod:`gpuscale.codec`, the only module that knows msgpack. Every ``from_wire``
takes the decoded map and ``now`` (unix seconds) and either returns a typed
message or raises :class:`WireError` with a short, bounded ``code`` (used as a
metrics label) and a human ``detail``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

WIRE_VERSION: Final = 1
# A clock skew allowance: producers' clocks may run ahead, but not by this much.
MAX_FUTURE_SKEW_S: Final = 60.0

METRIC_NAMES: Final = (
    "gpu_util",
    "sm_active",
    "sm_util",
    "gpu_mem_used_ratio",
    "gpu_mem_used_mib",
    "power_w",
)

ACTION_OUTCOMES: Final = (
    "applied",
    "skipped_stale",
    "skipped_dry_run",
    "conflict_retried",
    "failed",
    "refused",
)


class WireError(ValueError):
    """A message that breaks the contract. ``code`` is low-cardinality."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


# --- field readers -----------------------------------------------------------
# Small, fast checks: the aggregator runs these ~100k times a second.


def _get(m: dict[Any, Any], key: str, where: str) -> Any:
    try:
        return m[key]
    except KeyError:
        raise WireError("missing_field", f"{where}{key} is missing") from None


def _str(m: dict[Any, Any], key: str, where: str = "", *, empty_ok: bool = False) -> str:
    v = _get(m, key, where)
    if type(v) is not str:
        raise WireError("wrong_type", f"{where}{key} must be a string, got {type(v).__name__}")
    if not v and not empty_ok:
        raise WireError("out_of_range", f"{where}{key} must not be empty")
    return v


def _int(m: dict[Any, Any], key: str, where: str = "", *, minimum: int = 0) -> int:
    v = _get(m, key, where)
    if type(v) is not int:
        raise WireError("wrong_type", f"{where}{key} must be an integer, got {type(v).__name__}")
    if v < minimum:
        raise WireError("out_of_range", f"{where}{key} must be >= {minimum}, got {v}")
    return v


def _check_number(v: Any, key: str, where: str, lo: float | None, hi: float | None) -> float:
    t = type(v)
    if t is not float and t is not int:
        raise WireError("wrong_type", f"{where}{key} must be a number, got {t.__name__}")
    f = float(v)
    if not math.isfinite(f):
        raise WireError("not_finite", f"{where}{key} must be finite, got {f}")
    if (lo is not None and f < lo) or (hi is not None and f > hi):
        raise WireError("out_of_range", f"{where}{key}={f} outside [{lo}, {hi}]")
    return f


def _num(
    m: dict[Any, Any], key: str, where: str = "", lo: float | None = None, hi: float | None = None
) -> float:
    return _check_number(_get(m, key, where), key, where, lo, hi)


def _opt_num(
    m: dict[Any, Any], key: str, where: str = "", lo: float | None = None, hi: float | None = None
) -> float | None:
    v = _get(m, key, where)
    if v is None:
        return None
    return _check_number(v, key, where, lo, hi)


def _opt_str(m: dict[Any, Any], key: str, where: str = "") -> str | None:
    v = _get(m, key, where)
    if v is None:
        return None
    if type(v) is not str:
        raise WireError("wrong_type", f"{where}{key} must be a string or null")
    return v


def _map(m: dict[Any, Any], key: str, where: str = "") -> dict[Any, Any]:
    v = _get(m, key, where)
    if type(v) is not dict:
        raise WireError("wrong_type", f"{where}{key} must be a map, got {type(v).__name__}")
    return v


def _list(m: dict[Any, Any], key: str, where: str = "") -> list[Any]:
    v = _get(m, key, where)
    if type(v) is not list:
        raise WireError("wrong_type", f"{where}{key} must be a list, got {type(v).__name__}")
    return v


def _ts(m: dict[Any, Any], key: str, now: float, where: str = "") -> float:
    ts = _num(m, key, where, lo=0.0)
    if ts > now + MAX_FUTURE_SKEW_S:
        raise WireError(
            "future_timestamp",
            f"{where}{key}={ts:.3f} is {ts - now:.1f} s ahead of now (limit {MAX_FUTURE_SKEW_S:.0f} s)",
        )
    return ts


def check_envelope(obj: Any) -> dict[Any, Any]:
    """The outer shape every v1 payload shares: a map with ``v == 1``."""
    if type(obj) is not dict:
        raise WireError("not_a_map", f"payload must be a map, got {type(obj).__name__}")
    v = obj.get("v")
    if v is None:
        raise WireError("missing_field", "v is missing")
    if v != WIRE_VERSION or type(v) is not int:
        raise WireError("wrong_version", f"v={v!r}, this consumer speaks v{WIRE_VERSION}")
    return obj


# --- samples -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorkloadRef:
    kind: str
    name: str

    def to_wire(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name}

    @classmethod
    def from_wire(cls, m: Any, where: str = "workload.") -> WorkloadRef:
        if type(m) is not dict:
            raise WireError("wrong_type", f"{where[:-1]} must be a map")
        return cls(kind=_str(m, "kind", where), name=_str(m, "name", where))


@dataclass(frozen=True, slots=True)
class GpuOwner:
    """A pod (container) that holds a GPU, or a share of it."""

    namespace: str
    pod: str
    container: str
    pod_uid: str
    workload: WorkloadRef
    sm_util: float | None = None  # % for this owner when attributed per process
    fb_used_mib: float | None = None  # this owner's framebuffer, when known
    # The pod's Ready condition when the collector knows it (None: unknown).
    # A pod that is not ready (loading its model) counts as missing, as HPA
    # treats unready pods, rather than as a fresh pod at 0 %.
    ready: bool | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "pod": self.pod,
            "container": self.container,
            "pod_uid": self.pod_uid,
            "workload": self.workload.to_wire(),
            "sm_util": self.sm_util,
            "fb_used_mib": self.fb_used_mib,
            "ready": self.ready,
        }

    @classmethod
    def from_wire(cls, m: Any, where: str = "owner.") -> GpuOwner:
        if type(m) is not dict:
            raise WireError("wrong_type", f"{where[:-1]} must be a map")
        ready = m.get("ready")  # optional: producers before it omit it
        if ready is not None and type(ready) is not bool:
            raise WireError("wrong_type", f"{where}ready must be true, false or null")
        return cls(
            namespace=_str(m, "namespace", where),
            pod=_str(m, "pod", where),
            container=_str(m, "container", where, empty_ok=True),
            pod_uid=_str(m, "pod_uid", where, empty_ok=True),
            workload=WorkloadRef.from_wire(_get(m, "workload", where), where + "workload."),
            sm_util=_opt_num(m, "sm_util", where, 0.0, 100.0),
            fb_used_mib=_opt_num(m, "fb_used_mib", where, 0.0),
            ready=ready,
        )


HEALTH_OK: Final = "ok"


@dataclass(frozen=True, slots=True)
class GpuSample:
    """One GPU (or MIG device) at one tick. Values are None when ``health`` is
    not ``ok`` (a lost GPU publishes no values, never its last ones)."""

    uuid: str
    index: int
    model: str
    util: float | None
    mem_util: float | None
    fb_used_mib: float | None
    fb_free_mib: float | None
    temp_c: float | None
    power_w: float | None
    sm_active: float | None = None
    mig: str | None = None
    health: str = HEALTH_OK
    owners: tuple[GpuOwner, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {
            "uuid": self.uuid,
            "index": self.index,
            "model": self.model,
            "util": self.util,
            "mem_util": self.mem_util,
            "fb_used_mib": self.fb_used_mib,
            "fb_free_mib": self.fb_free_mib,
            "temp_c": self.temp_c,
            "power_w": self.power_w,
            "sm_active": self.sm_active,
            "mig": self.mig,
            "health": self.health,
            "owners": [o.to_wire() for o in self.owners],
        }

    @classmethod
    def from_wire(cls, m: Any, where: str = "gpu.") -> GpuSample:
        if type(m) is not dict:
            raise WireError("wrong_type", f"{where[:-1]} must be a map")
        health = _str(m, "health", where)
        owners_raw = _list(m, "owners", where)
        sample = cls(
            uuid=_str(m, "uuid", where),
            index=_int(m, "index", where),
            model=_str(m, "model", where, empty_ok=True),
            util=_opt_num(m, "util", where, 0.0, 100.0),
            mem_util=_opt_num(m, "mem_util", where, 0.0, 100.0),
            fb_used_mib=_opt_num(m, "fb_used_mib", where, 0.0),
            fb_free_mib=_opt_num(m, "fb_free_mib", where, 0.0),
            temp_c=_opt_num(m, "temp_c", where, -273.0, 1000.0),
            power_w=_opt_num(m, "power_w", where, 0.0),
            sm_active=_opt_num(m, "sm_active", where, 0.0, 100.0),
            mig=_opt_str(m, "mig", where),
            health=health,
            owners=tuple(GpuOwner.from_wire(o, where + "owners[].") for o in owners_raw),
        )
        if health == HEALTH_OK and sample.util is None:
            raise WireError("missing_field", f"{where}util is null on a healthy GPU")
        return sample


@dataclass(frozen=True, slots=True)
class SampleBatch:
    """One node's GPUs at one tick: ``gpuscale.v1.samples.<node>``."""

    node: str
    ts: float
    seq: int
    interval_s: float
    gpus: tuple[GpuSample, ...]
    # Entries dropped while parsing a sound batch, as (index, WireError).
    rejected_gpus: tuple[tuple[int, WireError], ...] = field(default=(), compare=False)

    KIND: ClassVar[str] = "samples"

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION,
            "node": self.node,
            "ts": self.ts,
            "seq": self.seq,
            "interval_s": self.interval_s,
            "gpus": [g.to_wire() for g in self.gpus],
        }

    @classmethod
    def from_wire(cls, obj: Any, now: float) -> SampleBatch:
        """Validate a batch. A bad GPU entry does not sink a sound batch: it is
        left out and reported in ``rejected_gpus``."""
        m = check_envelope(obj)
        node = _str(m, "node")
        ts = _ts(m, "ts", now)
        seq = _int(m, "seq")
        interval_s = _num(m, "interval_s", lo=0.001, hi=3600.0)
        gpus: list[GpuSample] = []
        rejected: list[tuple[int, WireError]] = []
        for i, g in enumerate(_list(m, "gpus")):
            try:
                gpus.append(GpuSample.from_wire(g))
            except WireError as e:
                rejected.append((i, e))
        return cls(node, ts, seq, interval_s, tuple(gpus), tuple(rejected))


# --- metrics -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PodMetrics:
    pod: str
    values: dict[str, float]  # metric name -> window mean
    last_seen: float

    def to_wire(self) -> dict[str, Any]:
        return {"pod": self.pod, "values": dict(self.values), "last_seen": self.last_seen}

    @classmethod
    def from_wire(cls, m: Any, now: float) -> PodMetrics:
        if type(m) is not dict:
            raise WireError("wrong_type", "pods[] must be a map")
        return cls(
            pod=_str(m, "pod", "pods[]."),
            values=_metric_values(_map(m, "values", "pods[]."), "pods[].values."),
            last_seen=_ts(m, "last_seen", now, "pods[]."),
        )


def _metric_values(m: dict[Any, Any], where: str) -> dict[str, float]:
    out: dict[str, float] = {}
    for k, v in m.items():
        if type(k) is not str or k not in METRIC_NAMES:
            raise WireError("unknown_metric", f"{where}{k!r} is not one of {', '.join(METRIC_NAMES)}")
        hi = 100.0 if k in ("gpu_util", "sm_active", "sm_util", "gpu_mem_used_ratio") else None
        out[k] = _check_number(v, k, where, 0.0, hi)
    return out


@dataclass(frozen=True, slots=True)
class WorkloadMetrics:
    """Windowed averages for one workload: ``gpuscale.v1.metrics.<ns>.<kind>.<name>``."""

    namespace: str
    kind: str
    name: str
    ts: float
    window_s: float
    pods: tuple[PodMetrics, ...]
    averages: dict[str, float]
    pods_fresh: int
    pods_stale: int

    KIND: ClassVar[str] = "metrics"

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION,
            "namespace": self.namespace,
            "kind": self.kind,
            "name": self.name,
            "ts": self.ts,
            "window_s": self.window_s,
            "pods": [p.to_wire() for p in self.pods],
            "averages": dict(self.averages),
            "pods_fresh": self.pods_fresh,
            "pods_stale": self.pods_stale,
        }

    @classmethod
    def from_wire(cls, obj: Any, now: float) -> WorkloadMetrics:
        m = check_envelope(obj)
        return cls(
            namespace=_str(m, "namespace"),
            kind=_str(m, "kind"),
            name=_str(m, "name"),
            ts=_ts(m, "ts", now),
            window_s=_num(m, "window_s", lo=0.001),
            pods=tuple(PodMetrics.from_wire(p, now) for p in _list(m, "pods")),
            averages=_metric_values(_map(m, "averages"), "averages."),
            pods_fresh=_int(m, "pods_fresh"),
            pods_stale=_int(m, "pods_stale"),
        )


# --- decisions and actions ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class Decision:
    """A change of replicas the decider wants: ``gpuscale.v1.decisions.<ns>.<kind>.<name>``."""

    id: str
    ts: float
    namespace: str
    kind: str
    name: str
    from_replicas: int
    to_replicas: int
    reason: str
    inputs: dict[str, Any]
    # The target's scale subresource, so the actuator needs no policy lookup.
    api_version: str = "apps/v1"

    KIND: ClassVar[str] = "decisions"

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION,
            "id": self.id,
            "ts": self.ts,
            "namespace": self.namespace,
            "kind": self.kind,
            "name": self.name,
            "api_version": self.api_version,
            "from_replicas": self.from_replicas,
            "to_replicas": self.to_replicas,
            "reason": self.reason,
            "inputs": self.inputs,
        }

    @classmethod
    def from_wire(cls, obj: Any, now: float) -> Decision:
        m = check_envelope(obj)
        api_version = m.get("api_version", "apps/v1")
        if type(api_version) is not str or not api_version:
            raise WireError("wrong_type", "api_version must be a non-empty string")
        return cls(
            id=_str(m, "id"),
            ts=_ts(m, "ts", now),
            namespace=_str(m, "namespace"),
            kind=_str(m, "kind"),
            name=_str(m, "name"),
            from_replicas=_int(m, "from_replicas"),
            to_replicas=_int(m, "to_replicas"),
            reason=_str(m, "reason"),
            inputs=_map(m, "inputs"),
            api_version=api_version,
        )


@dataclass(frozen=True, slots=True)
class Action:
    """What the actuator did with a decision: ``gpuscale.v1.actions.<ns>.<kind>.<name>``."""

    decision_id: str
    ts: float
    outcome: str
    replicas_before: int | None
    replicas_after: int | None
    error: str | None = None
    # Where it happened; also in the subject, repeated so a payload stands alone.
    namespace: str = ""
    kind: str = ""
    name: str = ""

    KIND: ClassVar[str] = "actions"

    def to_wire(self) -> dict[str, Any]:
        return {
            "v": WIRE_VERSION,
            "decision_id": self.decision_id,
            "ts": self.ts,
            "outcome": self.outcome,
            "replicas_before": self.replicas_before,
            "replicas_after": self.replicas_after,
            "error": self.error,
            "namespace": self.namespace,
            "kind": self.kind,
            "name": self.name,
        }

    @classmethod
    def from_wire(cls, obj: Any, now: float) -> Action:
        m = check_envelope(obj)
        outcome = _str(m, "outcome")
        if outcome not in ACTION_OUTCOMES:
            raise WireError("out_of_range", f"outcome {outcome!r} not one of {', '.join(ACTION_OUTCOMES)}")
        before = _get(m, "replicas_before", "")
        after = _get(m, "replicas_after", "")
        return cls(
            decision_id=_str(m, "decision_id"),
            ts=_ts(m, "ts", now),
            outcome=outcome,
            replicas_before=None if before is None else _int(m, "replicas_before"),
            replicas_after=None if after is None else _int(m, "replicas_after"),
            error=_opt_str(m, "error"),
            namespace=_optional_text(m, "namespace"),
            kind=_optional_text(m, "kind"),
            name=_optional_text(m, "name"),
        )


def _optional_text(m: dict[Any, Any], key: str) -> str:
    """A string field added after v1 first shipped: absent reads as empty."""
    v = m.get(key, "")
    if type(v) is not str:
        raise WireError("wrong_type", f"{key} must be a string")
    return v


Message = SampleBatch | WorkloadMetrics | Decision | Action
