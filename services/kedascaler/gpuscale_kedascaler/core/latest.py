"""The latest window averages per workload, and what may be served from them. Pure.

Only fresh readings are served, judged on arrival time (docs/ARCHITECTURE.md#wire-contract)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final, Protocol

from gpuscale.subjects import WorkloadKey
from gpuscale.wire import MetricValues

from .query import ScalerQuery, ValueKind, WorkloadQuery

# Kept this long after their last message, so that "stale" can name the age;
# then forgotten (a deleted workload does not stay in memory).
FORGET_AFTER_MIN_S: Final = 300.0

NO_METRICS: Final = "no_metrics"
STALE: Final = "stale"
NO_FRESH_PODS: Final = "no_fresh_pods"
METRIC_NOT_REPORTED: Final = "metric_not_reported"


class MetricsMessage(Protocol):
    """What is read from a ``gpuscale.v1.metrics`` message (wire contract v1)."""

    @property
    def namespace(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def ts(self) -> float: ...
    @property
    def window_s(self) -> float: ...
    @property
    def averages(self) -> MetricValues: ...
    @property
    def pods_fresh(self) -> int: ...
    @property
    def pods_stale(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Snapshot:
    averages: dict[str, float]
    pods_fresh: int
    pods_stale: int
    window_s: float
    ts: float  # the sender's clock: order within one sender, display
    received_at: float  # ours: freshness


@dataclass(frozen=True, slots=True)
class Reading:
    query: WorkloadQuery
    value: float  # what is served: the average, or the average × fresh pods
    average: float
    pods_fresh: int
    window_s: float
    received_at: float
    age_s: float


class Unavailable(Exception):
    """No fresh value to serve; ``reason`` is low-cardinality (a metrics label)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class LatestMetrics:
    def __init__(self, max_age_s: float, max_workloads: int = 100_000) -> None:
        if max_age_s <= 0:
            raise ValueError("max_age_s must be > 0")
        self.max_age_s = max_age_s
        self.max_workloads = max_workloads
        self.forget_after_s = max(FORGET_AFTER_MIN_S, 10 * max_age_s)
        self._latest: dict[WorkloadKey, Snapshot] = {}

    def __len__(self) -> int:
        return len(self._latest)

    def observe(self, message: MetricsMessage, received_at: float) -> bool:
        """Keep the message as its workload's latest; False when it is older than the one kept
        (a reordered message from the same sender), which then stays. Only a kept message of a
        known age can refuse one: after this clock was set back past its arrival (an NTP step
        on a node, the sender's clock stepping with it), a new message is not "reordered"."""
        key = WorkloadKey(message.namespace, message.kind, message.name)
        previous = self._latest.get(key)
        if (
            previous is not None
            and message.ts < previous.ts
            and 0.0 <= received_at - previous.received_at <= self.max_age_s
        ):
            return False
        if previous is None and len(self._latest) >= self.max_workloads:
            self.expire(received_at)
            if len(self._latest) >= self.max_workloads:  # bounded: drop the oldest arrival
                oldest = min(self._latest, key=lambda k: self._latest[k].received_at)
                del self._latest[oldest]
        self._latest[key] = Snapshot(
            averages=message.averages.to_dict(),
            pods_fresh=message.pods_fresh,
            pods_stale=message.pods_stale,
            window_s=message.window_s,
            ts=message.ts,
            received_at=received_at,
        )
        return True

    def expire(self, now: float) -> int:
        """Forget workloads silent for ``forget_after_s``, and those that arrived more than that
        after ``now`` (this clock was set back: their age is unknown, so they are never served,
        and a workload still publishing is kept again by its next message); how many went."""
        old = [k for k, s in self._latest.items() if abs(now - s.received_at) > self.forget_after_s]
        for key in old:
            del self._latest[key]
        return len(old)

    def snapshot(self, key: WorkloadKey) -> Snapshot | None:
        return self._latest.get(key)

    def fresh_workloads(self, now: float) -> list[WorkloadKey]:
        return sorted(
            (k for k, s in self._latest.items() if self._age(s, now) <= self.max_age_s and s.pods_fresh > 0),
            key=str,
        )

    @staticmethod
    def _age(snapshot: Snapshot, now: float) -> float:
        """Seconds since it arrived; infinite where the clock was set back past its arrival
        (its age is unknown: read as 0, a snapshot would pass for current for the skew)."""
        age = now - snapshot.received_at
        return age if age >= 0.0 else math.inf

    def read(self, query: WorkloadQuery, now: float) -> Reading:
        """The query's value now, or Unavailable saying why there is none."""
        key = query.workload
        snapshot = self._latest.get(key)
        if snapshot is None:
            known = sorted(f"{k.kind}/{k.name}" for k in self._latest if k.namespace == key.namespace)[:10]
            hint = f"; workloads seen in {key.namespace}: {', '.join(known)}" if known else ""
            raise Unavailable(
                NO_METRICS,
                f"no gpuscale metrics for {key} (nothing received in the last "
                f"{self.forget_after_s:g} s; is the workload's name right, and are its pods on "
                f"gpuscale collector nodes?){hint}",
            )
        age = self._age(snapshot, now)
        if age == math.inf:
            raise Unavailable(
                STALE,
                f"this clock was set back {snapshot.received_at - now:.1f} s past the arrival of the "
                f"metrics of {key}: their age is unknown; not served as current",
            )
        if age > self.max_age_s:
            raise Unavailable(
                STALE,
                f"the metrics of {key} are {age:.1f} s old (limit {self.max_age_s:g} s): the "
                "aggregator is not publishing them; not served as current",
            )
        if snapshot.pods_fresh <= 0:
            raise Unavailable(
                NO_FRESH_PODS,
                f"{key} has no pod with fresh GPU samples in its {snapshot.window_s:g} s window "
                f"({snapshot.pods_stale} stale)",
            )
        average = snapshot.averages.get(query.metric)
        if average is None:
            reported = ", ".join(sorted(snapshot.averages)) or "none"
            raise Unavailable(
                METRIC_NOT_REPORTED,
                f"{key} does not report {query.metric} (it reports: {reported}); sm_active needs "
                "Hopper or newer GPUs, sm_util per-process attribution",
            )
        value = average * snapshot.pods_fresh if query.value is ValueKind.TOTAL else average
        return Reading(
            query=query,
            value=value,
            average=average,
            pods_fresh=snapshot.pods_fresh,
            window_s=snapshot.window_s,
            received_at=snapshot.received_at,
            age_s=age,
        )

    def is_active(self, query: ScalerQuery, now: float) -> bool:
        """KEDA's activity: the value is above the activation target (Unavailable as read)."""
        return self.read(query.query, now).value > query.activation_target
