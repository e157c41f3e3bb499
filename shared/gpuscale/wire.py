"""Wire contract v1 (docs/ARCHITECTURE.md#wire-contract): the typed messages, their limits in their types.

Every v1 payload is a MessagePack map; the msgspec Structs below are its one
definition. The contract's limits live in the field types (:data:`Percent` is
a float in [0, 100], names are non-empty and fit Kubernetes' lengths, an
outcome is one of :class:`Outcome`), so decoding *is* validating:
:mod:`gpuscale.codec`, the only module that turns bytes into these and back,
decodes straight into them. What a type cannot say is checked by each
message's ``check(now)`` after decoding (a timestamp against the receiver's
clock) and by :func:`unusable_gpus` (a healthy GPU without a value).

Compatibility within v1 (docs/UPGRADING.md): a producer may add optional
fields at any level and new metric names. A consumer ignores what it does not
know (Structs skip unknown keys; a metric map is a Struct too, so an unknown
metric name is one more unknown key) and uses the rest. Rejected is only what
is wrong: undecodable bytes, another version, a required field absent or of
the wrong type, an impossible value. A field whose null means "unknown" may
also be absent (absent reads as null).

Purely computational: no I/O, no clock (``now`` is a parameter), no
MessagePack (that is :mod:`gpuscale.codec`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Final

import msgspec
from msgspec import UNSET as UNSET  # re-exported: the aggregator marks absent metrics with it
from msgspec import Meta, Struct
from msgspec import UnsetType as UnsetType  # re-exported with UNSET

# The limits and the rejections live in their own modules; callers import the whole contract from here.
from gpuscale import catalog
from gpuscale.wire_limits import ERROR_CODES as ERROR_CODES
from gpuscale.wire_limits import HEALTH_OK as HEALTH_OK
from gpuscale.wire_limits import MAX_FUTURE_SKEW_S as MAX_FUTURE_SKEW_S
from gpuscale.wire_limits import MAX_GPUS_PER_NODE as MAX_GPUS_PER_NODE
from gpuscale.wire_limits import MAX_OWNERS_PER_GPU as MAX_OWNERS_PER_GPU
from gpuscale.wire_limits import MAX_PODS_PER_WORKLOAD as MAX_PODS_PER_WORKLOAD
from gpuscale.wire_limits import MAX_REQUESTED_WINDOW_S as MAX_REQUESTED_WINDOW_S
from gpuscale.wire_limits import WIRE_VERSION as WIRE_VERSION
from gpuscale.wire_limits import ApiVersion as ApiVersion
from gpuscale.wire_limits import Celsius as Celsius
from gpuscale.wire_limits import ContainerName as ContainerName
from gpuscale.wire_limits import Count as Count
from gpuscale.wire_limits import IntervalS as IntervalS
from gpuscale.wire_limits import KindName as KindName
from gpuscale.wire_limits import Namespace as Namespace
from gpuscale.wire_limits import NonNegative as NonNegative
from gpuscale.wire_limits import ObjectName as ObjectName
from gpuscale.wire_limits import OptionalKind as OptionalKind
from gpuscale.wire_limits import OptionalName as OptionalName
from gpuscale.wire_limits import OptionalNamespace as OptionalNamespace
from gpuscale.wire_limits import Percent as Percent
from gpuscale.wire_limits import PodUid as PodUid
from gpuscale.wire_limits import RequestedWindowS as RequestedWindowS
from gpuscale.wire_limits import SenderName as SenderName
from gpuscale.wire_limits import Text as Text
from gpuscale.wire_limits import Timestamp as Timestamp
from gpuscale.wire_limits import WindowS as WindowS
from gpuscale.wire_limits import WireError as WireError
from gpuscale.wire_rejections import classify as classify
from gpuscale.wire_rejections import rejection as rejection
from gpuscale.wire_rejections import unknown_fields as unknown_fields


class _Wire(Struct, frozen=True, gc=False):
    """Every wire shape: immutable, and untracked by the garbage collector
    (messages are trees, never cycles; the aggregator decodes 100,000 a second)."""


class _Message(_Wire, frozen=True, gc=False, tag_field="v", tag=WIRE_VERSION):
    """A top-level payload: ``v`` (the tag) is written first and checked on decode."""

    KIND: ClassVar[str]

    def to_wire(self) -> dict[str, Any]:
        """The payload as plain maps and lists, exactly as it is encoded (tools, tests, docs)."""
        payload: dict[str, Any] = _lists(msgspec.to_builtins(self))
        return payload


class OtherVersion(_Wire, frozen=True, gc=False, tag_field="v", tag=0):
    """Never sent. msgspec checks a tag only inside a union: decoding
    ``Message | OtherVersion`` makes ``v`` required and rejects any value but 1
    (a payload with ``v: 0`` decodes to this, and is rejected as another version)."""


def _lists(value: Any) -> Any:
    """Tuples as the lists MessagePack reads them back as."""
    if isinstance(value, dict):
        return {k: _lists(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_lists(v) for v in value]
    return value


def _not_ahead(ts: float, now: float, path: str) -> None:
    if ts > now + MAX_FUTURE_SKEW_S:
        raise WireError(
            "future_timestamp",
            f"{path}={ts:.3f} is {ts - now:.1f} s ahead of now (limit {MAX_FUTURE_SKEW_S:.0f} s)",
            path,
        )


# --- metric values ---------------------------------------------------------------


class _MetricMap(_Wire, frozen=True, gc=False):
    """A metric map (name -> value), one field per metric of :data:`gpuscale.catalog.CATALOG`
    with its limits in its type (a % is at most 100).

    A Struct, not a dict: a metric name this consumer does not know is an
    unknown key, skipped like any unknown field, so a producer may add metrics
    within v1 (docs/UPGRADING.md). An absent metric is ``UNSET`` and not
    written. Reads like a read-only mapping of the metrics present.
    """

    if TYPE_CHECKING:  # the fields are made from the catalog below; positional in its order

        def __init__(self, *values: float | UnsetType, **named: float | UnsetType) -> None: ...

    @classmethod
    def of(cls, values: Mapping[str, float]) -> MetricValues:
        """From a name -> value map; a name not in :data:`METRIC_NAMES` is a TypeError."""
        return MetricValues(**values)

    def to_dict(self) -> dict[str, float]:
        """The metrics present (an absent one is UNSET, which this leaves out)."""
        values: dict[str, float] = msgspec.to_builtins(self)
        return values

    def get(self, name: str, default: float | None = None) -> float | None:
        v = getattr(self, name, UNSET) if name in _METRIC_SET else UNSET
        return default if v is UNSET else v

    def __getitem__(self, name: str) -> float:
        v = self.get(name)
        if v is None:
            raise KeyError(name)
        return v

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.to_dict())

    def __len__(self) -> int:
        return len(self.to_dict())

    def items(self) -> Iterator[tuple[str, float]]:
        return iter(self.to_dict().items())


def _value_type(metric: catalog.Metric) -> Any:
    return Percent if metric.ceiling == 100.0 else NonNegative


if TYPE_CHECKING:
    MetricValues = _MetricMap
else:
    MetricValues = msgspec.defstruct(
        "MetricValues",
        [(m.name, _value_type(m) | UnsetType, UNSET) for m in catalog.CATALOG],
        bases=(_MetricMap,),
        module=__name__,
        frozen=True,
        gc=False,
    )

METRIC_NAMES: Final[tuple[str, ...]] = MetricValues.__struct_fields__
_METRIC_SET: Final = frozenset(METRIC_NAMES)
NO_METRICS: Final = MetricValues()


# --- samples -------------------------------------------------------------------


class WorkloadRef(_Wire, frozen=True, gc=False):
    kind: KindName
    name: ObjectName


EngineName = Annotated[str, Meta(min_length=1, max_length=63)]


class _EngineValues(_Wire, frozen=True, gc=False):
    """What the pod's inference server(s) said about demand, scraped by the
    collector from the pod's own metrics endpoint (added in v1): one field per
    per-pod metric of the catalog. Summed over the pod's engines (a pod may run
    several; a % is their mean); a value the engine does not expose is None (TGI
    has no KV-cache gauge). The rates are requests/s over the collector's last two
    scrapes: finished (the engines' finished-request counters) and arrived
    (finished plus the growth of waiting + running), None until two scrapes and
    after a reset."""

    name: EngineName  # which engines answered: vllm, sglang, tgi, triton (several joined by "+")

    if TYPE_CHECKING:  # the values are made from the catalog below

        def __init__(self, name: str, **values: float | None) -> None: ...


if TYPE_CHECKING:
    EngineSignals = _EngineValues
else:
    EngineSignals = msgspec.defstruct(
        "EngineSignals",
        [(name, _value_type(catalog.METRICS[name]) | None, None) for name in catalog.POD_METRICS],
        bases=(_EngineValues,),
        module=__name__,
        frozen=True,
        gc=False,
    )


class PodEngine(_Wire, frozen=True, gc=False):
    """One pod's engine signals, once per batch however many of the node's GPUs it holds."""

    pod_uid: Annotated[str, Meta(min_length=1, max_length=128)]  # as its owners name it: known, never empty
    signals: EngineSignals


class GpuOwner(_Wire, frozen=True, gc=False):
    """A pod (container) that holds a GPU, or a share of it."""

    namespace: Namespace
    pod: ObjectName
    container: ContainerName
    pod_uid: PodUid
    workload: WorkloadRef
    sm_util: Percent | None = None  # % for this owner when attributed per process
    fb_used_mib: NonNegative | None = None  # this owner's framebuffer, when known
    # The pod's Ready condition when the collector knows it (None: unknown).
    # A pod that is not ready (loading its model) counts as missing, as HPA
    # treats unready pods, rather than as a fresh pod at 0 %.
    ready: bool | None = None
    # The pod's engine signals as the previous release's collectors sent them, on every GPU
    # entry of the pod; read when the batch's ``engines`` has none for the pod.
    engine: EngineSignals | UnsetType | None = UNSET


class GpuSample(_Wire, frozen=True, gc=False, kw_only=True):
    """One GPU (or MIG device) at one tick. Values are None when ``health`` is
    not ``ok`` (a lost GPU publishes no values, never its last ones)."""

    uuid: Text
    index: Count
    model: str
    util: Percent | None
    mem_util: Percent | None
    fb_used_mib: NonNegative | None
    fb_free_mib: NonNegative | None
    temp_c: Celsius | None
    power_w: NonNegative | None
    sm_active: Percent | None = None  # SM activity from NVML GPM on Hopper and newer
    mig: str | None = None  # parent GPU uuid of a MIG device
    health: Text  # "ok", or the NVML error
    owners: Annotated[tuple[GpuOwner, ...], Meta(max_length=MAX_OWNERS_PER_GPU)]


class SampleBatch(_Message, frozen=True, gc=False, tag_field="v", tag=WIRE_VERSION):
    """One node's GPUs at one tick: ``gpuscale.v1.samples.<node>``."""

    node: ObjectName
    ts: Timestamp
    seq: Count
    interval_s: IntervalS
    gpus: Annotated[tuple[GpuSample, ...], Meta(max_length=MAX_GPUS_PER_NODE)]
    # Per pod, the engine signals scraped this tick (none: not scraped, no engine, or stale).
    engines: (
        Annotated[tuple[PodEngine, ...], Meta(max_length=MAX_GPUS_PER_NODE * MAX_OWNERS_PER_GPU)] | UnsetType
    ) = UNSET

    KIND: ClassVar[str] = "samples"

    def check(self, now: float) -> None:
        """What the types cannot say: ``ts`` against the receiver's clock, one engine entry a pod."""
        _not_ahead(self.ts, now, "$.ts")
        if self.engines and len({e.pod_uid for e in self.engines}) < len(self.engines):
            seen: set[str] = set()
            for i, e in enumerate(self.engines):
                if e.pod_uid in seen:
                    path = f"$.engines[{i}].pod_uid"
                    raise WireError("invalid", f"{path}={e.pod_uid!r} has an entry already", path)
                seen.add(e.pod_uid)


def unusable_gpus(batch: SampleBatch) -> list[tuple[int, WireError]]:
    """Entries of a decoded batch that break a rule across fields: a healthy GPU
    must have a value. The caller leaves them out; the rest of the batch stands."""
    out: list[tuple[int, WireError]] = []
    gpus = batch.gpus
    if None not in [g.util for g in gpus]:  # every batch pays this: one pass, no per-GPU branch
        return out
    for i, g in enumerate(gpus):
        if g.util is None and g.health == HEALTH_OK:
            path = f"$.gpus[{i}].util"
            out.append((i, WireError("missing_field", f"{path} is null on a healthy GPU", path)))
    return out


# --- metrics ---------------------------------------------------------------------


class PodMetrics(_Wire, frozen=True, gc=False):
    pod: ObjectName
    values: MetricValues  # window means
    last_seen: Timestamp
    # Added in v1: the means over the last ``recent_s`` of the
    # message, where the workload's policy asked for them (a metric pinned at
    # its ceiling shows there seconds before the window's mean catches up).
    recent: MetricValues | UnsetType = UNSET


class WorkloadMetrics(_Message, frozen=True, gc=False, tag_field="v", tag=WIRE_VERSION):
    """Windowed averages for one workload: ``gpuscale.v1.metrics.<ns>.<kind>.<name>``."""

    namespace: Namespace
    kind: KindName
    name: ObjectName
    ts: Timestamp
    window_s: WindowS
    pods: Annotated[tuple[PodMetrics, ...], Meta(max_length=MAX_PODS_PER_WORKLOAD)]
    averages: MetricValues  # mean over fresh pods, as HPA averages Pods metrics
    pods_fresh: Count
    pods_stale: Count
    # Which aggregator sent it (added in v1; absent from older ones): its readers
    # measure each sender's clock offset by it.
    source: SenderName | UnsetType = UNSET
    # Added in v1: set when the averages start later than ts - window_s, because a
    # pod joined the workload then (what was measured before is no evidence of the
    # per-pod load after it); the sender's clock, like ts.
    since: Timestamp | UnsetType = UNSET
    # Added in v1: the span of each pod's ``recent`` means, when sent.
    recent_s: WindowS | UnsetType = UNSET

    KIND: ClassVar[str] = "metrics"

    def check(self, now: float) -> None:
        _not_ahead(self.ts, now, "$.ts")
        limit = now + MAX_FUTURE_SKEW_S
        for i, p in enumerate(self.pods):
            if p.last_seen > limit:
                _not_ahead(p.last_seen, now, f"$.pods[{i}].last_seen")


# --- decisions and actions ---------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaleTargetRef:
    """What a scale subresource belongs to: a GPUScaler's ``scaleTargetRef``
    plus its namespace, and what a decision names."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    def reference(self) -> str:
        """``Deployment/bert``, as ``kubectl get hpa`` shows REFERENCE."""
        return f"{self.kind}/{self.name}"

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


DEFAULT_API_VERSION: Final = "apps/v1"


class Decision(_Message, frozen=True, gc=False, kw_only=True, tag_field="v", tag=WIRE_VERSION):
    """A change of replicas the decider wants: ``gpuscale.v1.decisions.<ns>.<kind>.<name>``."""

    id: Text
    ts: Timestamp
    namespace: Namespace
    kind: KindName
    name: ObjectName
    # The target's scale subresource, so the actuator needs no policy lookup.
    api_version: ApiVersion = DEFAULT_API_VERSION
    from_replicas: Count
    to_replicas: Count
    reason: Text
    inputs: dict[str, Any]  # metric averages, targets, pod counts, the recommendation list

    KIND: ClassVar[str] = "decisions"

    def check(self, now: float) -> None:
        _not_ahead(self.ts, now, "$.ts")

    @property
    def target(self) -> ScaleTargetRef:
        return ScaleTargetRef(self.api_version, self.kind, self.name, self.namespace)


class Outcome(StrEnum):
    """What the actuator did with a decision."""

    APPLIED = "applied"
    SKIPPED_STALE = "skipped_stale"
    SKIPPED_DRY_RUN = "skipped_dry_run"
    CONFLICT_RETRIED = "conflict_retried"
    FAILED = "failed"
    REFUSED = "refused"  # the target's GPUScaler does not allow it (the actuator's admission)


ACTION_OUTCOMES: Final = tuple(o.value for o in Outcome)


class Action(_Message, frozen=True, gc=False, tag_field="v", tag=WIRE_VERSION):
    """What the actuator did with a decision: ``gpuscale.v1.actions.<ns>.<kind>.<name>``."""

    decision_id: Text
    ts: Timestamp
    outcome: Outcome
    replicas_before: Count | None
    replicas_after: Count | None
    error: str | None = None
    # Where it happened; also in the subject, repeated so a payload stands alone.
    namespace: OptionalNamespace = ""
    kind: OptionalKind = ""
    name: OptionalName = ""

    KIND: ClassVar[str] = "actions"

    def check(self, now: float) -> None:
        _not_ahead(self.ts, now, "$.ts")


# --- what a policy needs of the aggregator ------------------------------------------


class WindowRequest(_Message, frozen=True, gc=False, tag_field="v", tag=WIRE_VERSION):
    """The averaging a GPUScaler needs for its target (decider -> aggregators):
    ``gpuscale.v1.windows.<ns>.<kind>.<name>``, on every policy change and
    every few seconds, so an aggregator that restarts learns it again. An
    aggregator averages the workload over ``window_s`` (and adds each pod's
    means over the last ``recent_s`` when set) until the requests stop
    coming, then goes back to its own ``--window``."""

    ts: Timestamp
    namespace: Namespace
    kind: KindName
    name: ObjectName
    window_s: RequestedWindowS
    recent_s: RequestedWindowS | UnsetType = UNSET
    # How long the request holds without being repeated (the sender repeats it well within).
    ttl_s: RequestedWindowS = 60.0

    KIND: ClassVar[str] = "windows"

    def check(self, now: float) -> None:
        _not_ahead(self.ts, now, "$.ts")
        if self.recent_s is not UNSET and self.recent_s > self.window_s:
            raise WireError(
                "out_of_range",
                f"$.recent_s={self.recent_s:g} is longer than $.window_s={self.window_s:g}",
                "$.recent_s",
            )


Message = SampleBatch | WorkloadMetrics | Decision | Action | WindowRequest
MESSAGE_TYPES: Final = (SampleBatch, WorkloadMetrics, Decision, Action, WindowRequest)
