"""One metric's replica count from the target's pods: HPA's replica calculator.

Purely computational. A port of ``calcPlainMetricReplicas`` and ``groupPods``
in Kubernetes' ``pkg/controller/podautoscaler/replica_calculator.go`` for a
``Pods`` metric, with the same arithmetic (values in milli-units, the average
truncated as Go's integer division does, the ratio and ``ceil`` in float64),
so the answer is HPA's on every input:

- pods come from the target's selector (the shell's pod watch);
- a pod being deleted, or Failed, is ignored;
- a Pending pod is *unready*: left out, and counted as 0 when the ratio says
  scale up;
- a Running pod without a fresh value is *missing*: counted at the target when
  the ratio is below 1, as 0 when above 1, not at all when exactly 1;
- if counting them lands within the tolerance or reverses the direction, keep
  the current count; so does a count that moves against the new ratio.

One rule is gpuscale's own and is a policy choice (``spec.notReadyPods``):
HPA counts a not-Ready pod's value for a ``Pods`` metric; by default
(``Missing``) gpuscale counts such a pod as missing instead, because a GPU pod
loading its model reports 0 % and would halve the average.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import msgspec

from gpuscale.policy import NotReadyPods, milli_value
from gpuscale_decider.core.demand import UNITS, Demand


class Phase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod of the target as the pod lister sees it."""

    name: str
    phase: str
    ready: bool = True
    deleting: bool = False  # metadata.deletionTimestamp is set
    unschedulable: bool = False  # Pending, not to be placed now: no node fits it, or it is gated


class Tolerances(msgspec.Struct, frozen=True):
    """KEP-4951: the ratio is "close enough" within ``[1 - down, 1 + up]``."""

    down: float
    up: float

    def within(self, ratio: float) -> bool:
        return (1.0 - self.down) <= ratio <= (1.0 + self.up)


class Rule(StrEnum):
    """Which branch of the calculation gave the result."""

    NO_VALUE = "no_value"  # an error: the metric cannot be computed
    WITHIN = "within"  # no missing/unready pods to count, ratio within tolerance
    RATIO = "ratio"  # ceil(ratio × ready pods)
    FILLED_WITHIN = "filled_within"  # with the missing/unready pods counted: within tolerance
    FILLED_REVERSES = "filled_reverses"  # ... the direction flips
    FILLED_WRONG_WAY = "filled_wrong_way"  # ... the count moves against the new ratio
    FILLED_RATIO = "filled_ratio"  # ceil(new ratio × counted pods)


class PodGroups(msgspec.Struct, frozen=True):
    """``groupPods``: where each pod of the target stands for this metric."""

    ready: int  # with a value that counts
    unready: int  # Pending
    missing: int  # running without a fresh value (or not Ready, with notReadyPods: Missing)
    ignored: int  # being deleted, or Failed
    not_ready_with_value: int  # not Ready pods that do have a value (the policy choice applies)


def group_pods(
    pods: Sequence[PodView], values: Mapping[str, float], not_ready: NotReadyPods
) -> tuple[PodGroups, dict[str, float]]:
    """The groups, and the values that count (ready pods only)."""
    counted: dict[str, float] = {}
    unready = missing = ignored = not_ready_with_value = 0
    failed, pending = Phase.FAILED, Phase.PENDING  # an enum member's lookup costs more than the test
    for pod in pods:
        if pod.deleting or pod.phase == failed:
            ignored += 1
            continue
        if pod.phase == pending:
            unready += 1
            continue
        value = values.get(pod.name)
        if value is None:
            missing += 1
            continue
        if not pod.ready:
            not_ready_with_value += 1
            if not_ready is NotReadyPods.MISSING:
                missing += 1
                continue
        counted[pod.name] = value
    groups = PodGroups(len(counted), unready, missing, ignored, not_ready_with_value)
    return groups, counted


# A value as a Kubernetes quantity's ``MilliValue()``: rounded up, so a positive target
# is never 0 milli-units (the ratio divides by it), bounded for values past any real metric.
milli = milli_value


class Basis(StrEnum):
    """What the proposal's ``usage`` is: the reason names it, and a screen shows it so."""

    WINDOW = "window mean"  # HPA's: each counted pod's mean over the window
    ESTIMATE = "estimated demand"  # every counted pod's demand, estimated (core.demand)
    MIXED = "estimated demand and window means"  # some pods estimated, the rest at their window mean


def fmt_usage(name: str, usage: float, basis: Basis, unit: str = "") -> str:
    """The value a proposal used, named as what it is (a window mean stays HPA's bare wording)."""
    if basis is Basis.WINDOW:
        return f"{name} {fmt_value(usage)}"
    return f"{name}: {basis.value} {fmt_value(usage)}{' ' + unit if unit else ''}"


class MetricProposal(msgspec.Struct, frozen=True):
    """One metric's recommendation; :attr:`explanation` says why in words
    (built only when read: most evaluations are never shown)."""

    name: str
    target: float
    rule: Rule
    current: int
    replicas: int | None = None  # None: no valid value (``error`` says why)
    usage: float | None = None  # average over the counted pods, in the metric's unit
    ratio: float | None = None
    new_ratio: float | None = None  # with missing and unready pods counted
    groups: PodGroups | None = None
    counted: int = 0  # pods in the new ratio
    filled_missing_as: str = ""  # "at target" | "as 0" | "" (not filled)
    unready_as_zero: bool = False
    error: str = ""
    demand: Demand | None = None  # the estimates ``usage`` averages, where some were made

    @property
    def basis(self) -> Basis:
        """What ``usage`` is."""
        d = self.demand
        if d is None:
            return Basis.WINDOW
        return Basis.ESTIMATE if d.estimated == len(d.values) else Basis.MIXED

    @property
    def unit(self) -> str:
        """The unit of an estimate ("" for a window mean)."""
        return "" if self.demand is None else UNITS.get(self.name, "")

    @property
    def explanation(self) -> str:
        if self.replicas is None or self.ratio is None or self.usage is None or self.groups is None:
            return f"{self.name}: {self.error} (target {fmt_target(self.target)})"
        result = self.replicas
        g = self.groups
        ratio = self.ratio
        relation = "over" if ratio > 1.0 else "under" if ratio < 1.0 else "at"
        total = g.ready + g.missing + g.unready
        used = fmt_usage(self.name, self.usage, self.basis, self.unit)
        said = "" if self.demand is None else self.demand.said(self.name)
        if said:
            used += f" ({said})"
        head = (
            f"{used} {relation} target {fmt_target(self.target)} "
            f"(ratio {fmt_ratio(ratio)}) on {g.ready} of {count_pods(total)}"
        )
        if self.rule is Rule.WITHIN:
            return f"{head}: within tolerance, keep {self.current}"
        if self.rule is Rule.RATIO:
            left_out = f"; {count_pods(g.unready)} Pending left out" if g.unready else ""
            return f"{head}{left_out}: ceil({g.ready} × {fmt_ratio(ratio)}) = {result}"
        counted: list[str] = []
        unrated = 0 if self.demand is None else self.demand.unrated  # a reading, but no rates yet
        without = (
            "without samples" if not unrated else "without rates yet" if unrated >= g.missing else
            "without samples or rates yet"
        )  # fmt: skip
        if self.filled_missing_as:
            counted.append(f"{count_pods(g.missing)} {without} {self.filled_missing_as}")
        elif g.missing:
            counted.append(f"{count_pods(g.missing)} {without} not at all (ratio exactly 1)")
        if self.unready_as_zero:
            counted.append(f"{count_pods(g.unready)} Pending as 0")
        elif g.unready:
            counted.append(f"{count_pods(g.unready)} Pending not at all")
        new_ratio = self.new_ratio if self.new_ratio is not None else ratio
        head = f"{head}; counting {' and '.join(counted)}: ratio {fmt_ratio(new_ratio)}"
        if self.rule is Rule.FILLED_WITHIN:
            return f"{head}, within tolerance: keep {self.current}"
        if self.rule is Rule.FILLED_REVERSES:
            return f"{head}, which reverses the direction: keep {self.current}"
        proposed = math.ceil(new_ratio * self.counted)
        if self.rule is Rule.FILLED_WRONG_WAY:
            return (
                f"{head}: ceil({self.counted} × {fmt_ratio(new_ratio)}) = {proposed} goes the wrong way: "
                f"keep {self.current}"
            )
        return f"{head}: ceil({self.counted} × {fmt_ratio(new_ratio)}) = {result}"

    def __str__(self) -> str:
        return self.explanation


def _usage_ratio(total_milli: int, count: int, target_milli: int) -> tuple[float, int]:
    """``GetMetricUsageRatio``: Go's integer division, then a float ratio."""
    usage = total_milli // count
    return usage / target_milli, usage


def metric_proposal(
    name: str,
    target: float,
    values: Mapping[str, float],
    pods: Sequence[PodView],
    current: int,
    tolerances: Tolerances,
    not_ready: NotReadyPods,
    demand: Demand | None = None,
) -> MetricProposal:
    """``calcPlainMetricReplicas`` for one metric. ``values`` holds the fresh
    pods' values of this metric (pod name -> value), or its ``demand`` estimates."""
    if not pods:
        return MetricProposal(
            name, target, Rule.NO_VALUE, current, error="no pods match the target's selector", demand=demand
        )
    groups, counted = group_pods(pods, values, not_ready)
    if not counted:
        why = "no fresh value from any running pod"
        if groups.unready:
            why += f" ({count_pods(groups.unready)} Pending)"
        elif groups.not_ready_with_value and not_ready is NotReadyPods.MISSING:
            why += f" ({count_pods(groups.not_ready_with_value)} not Ready yet)"
        return MetricProposal(name, target, Rule.NO_VALUE, current, groups=groups, error=why, demand=demand)

    target_milli = milli(target)
    total = sum(map(milli, counted.values()))
    ratio, usage_milli = _usage_ratio(total, len(counted), target_milli)
    usage = usage_milli / 1000.0
    scale_up_with_unready = groups.unready > 0 and ratio > 1.0

    if not scale_up_with_unready and groups.missing == 0:
        if tolerances.within(ratio):
            return MetricProposal(
                name, target, Rule.WITHIN, current, current, usage, ratio, groups=groups, demand=demand
            )
        replicas = math.ceil(ratio * groups.ready)
        return MetricProposal(
            name, target, Rule.RATIO, current, replicas, usage, ratio, groups=groups, demand=demand
        )

    count = len(counted)
    filled_as = ""
    if groups.missing:
        if ratio < 1.0:
            total += target_milli * groups.missing
            count += groups.missing
            filled_as = "at target"
        elif ratio > 1.0:
            count += groups.missing
            filled_as = "as 0"
    if scale_up_with_unready:
        count += groups.unready
    new_ratio, _ = _usage_ratio(total, count, target_milli)

    def propose(rule: Rule, replicas: int = current) -> MetricProposal:
        return MetricProposal(
            name,
            target,
            rule,
            current,
            replicas,
            usage,
            ratio,
            new_ratio,
            groups,
            count,
            filled_as,
            scale_up_with_unready,
            demand=demand,
        )

    if tolerances.within(new_ratio):
        return propose(Rule.FILLED_WITHIN)
    if (ratio < 1.0 < new_ratio) or (ratio > 1.0 > new_ratio):
        return propose(Rule.FILLED_REVERSES)
    replicas = math.ceil(new_ratio * count)
    if (new_ratio < 1.0 and replicas > current) or (new_ratio > 1.0 and replicas < current):
        return propose(Rule.FILLED_WRONG_WAY)
    return propose(Rule.FILLED_RATIO, replicas)


# --- numbers as people read them -------------------------------------------------


def fmt_value(v: float) -> str:
    return f"{v:.1f}"


def fmt_target(v: float) -> str:
    return f"{v:g}"


def fmt_ratio(v: float) -> str:
    return f"{v:.2f}"


def fmt_seconds(v: float) -> str:
    return f"{round(v, 1):g}" if v < 10.0 else f"{v:.0f}"


def count_pods(n: int) -> str:
    return f"{n} pod" if n == 1 else f"{n} pods"


def replicas_text(n: int) -> str:
    return f"{n} replica" if n == 1 else f"{n} replicas"
