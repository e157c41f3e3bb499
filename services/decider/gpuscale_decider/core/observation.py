"""What one reconcile step reads: the scale target and the newest metrics of its workload."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

import msgspec

from gpuscale.wire import UNSET, WorkloadMetrics


class Target(msgspec.Struct, frozen=True):
    """What the shell read of the scale target."""

    replicas: int | None = None  # the scale subresource's spec.replicas; None: not read
    selector: str = ""  # its status.selector
    error: str = ""  # why it could not be read
    conflict: str | None = None  # another controller that scales it ("HorizontalPodAutoscaler ns/x")


@dataclass(frozen=True, slots=True)
class Observation:
    """The newest metrics message for the workload, as the step needs it.

    ``received_at`` is on the decider's own clock: freshness is judged on one
    clock, never by comparing with the sender's ``ts`` (``sent_at``)."""

    received_at: float
    sent_at: float
    window_s: float
    values: Mapping[str, Mapping[str, float]]  # metric -> fresh pod -> value
    averages: Mapping[str, float]  # the aggregator's averages over fresh pods
    pods_fresh: int
    pods_stale: int
    # Seconds the averages cover when shorter than the window: a pod joined the
    # workload then, and the aggregator dropped what was measured before.
    span_s: float | None = None
    # metric -> fresh pod -> mean over the last recent_s, where the aggregator sent them.
    recent: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    recent_s: float | None = None


def observation_of(
    message: WorkloadMetrics, received_at: float, reads: Collection[str], recent_reads: Collection[str]
) -> Observation:
    """The fresh pods' values by metric, of the metrics the step ``reads`` (and of
    ``recent_reads`` among the recent means). A producer that marks each pod
    ``fresh`` is followed; for one that does not, the ``pods_fresh`` most
    recently seen pods are the fresh ones (the aggregator calls a pod stale
    when its newest sample is too old, so freshness follows ``last_seen``)."""
    pods = message.pods
    fresh = (
        pods
        if message.pods_fresh >= len(pods)  # the usual case: every pod listed is fresh
        else sorted(pods, key=lambda p: p.last_seen, reverse=True)[: message.pods_fresh]
    )
    values: dict[str, dict[str, float]] = {}
    recent: dict[str, dict[str, float]] = {}
    for pod in fresh:
        for metric in reads:
            value = getattr(pod.values, metric)  # a catalog name: a field of MetricValues
            if value is not UNSET:
                values.setdefault(metric, {})[pod.pod] = value
        if pod.recent is not UNSET:
            for metric in recent_reads:
                value = getattr(pod.recent, metric)
                if value is not UNSET:
                    recent.setdefault(metric, {})[pod.pod] = value
    return Observation(
        received_at,
        message.ts,
        message.window_s,
        values,
        message.averages.to_dict(),
        message.pods_fresh,
        message.pods_stale,
        _span(message),
        recent,
        None if message.recent_s is UNSET else message.recent_s,
    )


def _span(message: WorkloadMetrics) -> float | None:
    """Seconds the averages cover when ``since`` says they are shorter than the
    window. A ``since`` at or before the window's start says nothing (the
    contract sends it only after it), so it holds no scale-down back; one after
    ``ts`` is read as no span at all."""
    if message.since is UNSET or message.ts - message.since >= message.window_s:
        return None
    return max(0.0, message.ts - message.since)


def same_window(observed_s: float, wanted_s: float) -> bool:
    """The metrics were averaged over the policy's window (to a millisecond's rounding)."""
    return abs(observed_s - wanted_s) <= 1e-3 * max(1.0, wanted_s)
