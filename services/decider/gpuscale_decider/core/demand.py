"""The demand model: one estimate per pod and metric, in the metric's own units.

Purely computational. HPA's calculation (:mod:`.replicas`) then runs once on
these estimates, with its tolerance, missing-pod rules, stabilization and rate
policies untouched. docs/GPUSCALER.md#the-demand-model states this table for users;
docs/ARCHITECTURE.md derives it.

A serving replica is a queue: requests arrive at λ a second, wait in the pod's
own queue (W of them) for a slot, and finish at C a second, at most μ, the
pod's service rate, which it reaches once requests wait. λ and C are the
window's means of the engine's rates (the window says how long a load must
last to count); W is the queue at its latest level (its mean over the recent
span: a stock is read where it is now). A pod is asked to serve what arrives,
and its backlog within one window, less the backlog the policy tolerates (that
of the pods asked for and still starting too: they take their share once ready; one the
scheduler has no node for, or a scheduling gate holds, is not starting).
Where a pod's queue stands over a queue target, λ is the larger of the window's
mean and the recent span's: the queue is the stock of what arrived beyond what
was served, so it shows the newer arrivals have lasted (the window would
otherwise average them with the time before a step, and ask late). A served
metric reads λ over the window the user set, except on a pod with a queue: it is
at its limit, so what arrives beyond it is read over the recent span too, less
one standard error of the count of random arrivals over those seconds at the pods
with a queue together (a few seconds' rate is noisy; what it shows beyond its noise
is not, and the noise is that of the sum the decision rests on). A scale-down holds
on what arrives now too: where the workload's recent arrivals, less two standard
errors of their count, exceed the window's, each estimate is held up to what that
share of the pod's recent arrivals asks, at most the target (a rise alone adds no pod).

=======  ============================================  ===========================================  ==========================
kind     metrics                                       estimate                                     why
=======  ============================================  ===========================================  ==========================
served   gpu_util, sm_active, sm_util,                 value/C × λ + (value/C × W/window − room)⁺   the metric per request/s
         kv_cache_usage, requests_running                                                           served (utilization law,
                                                                                                    Little's law) times what
                                                                                                    is asked; ``room`` is the
                                                                                                    headroom the target keeps
                                                                                                    below a ceiling (100 − target
                                                                                                    for a %, none for running):
                                                                                                    it serves that much backlog;
                                                                                                    just after a pod joined,
                                                                                                    λ is read up to C on a pod
                                                                                                    without a queue (it fills);
                                                                                                    on a pod with a queue, λ is
                                                                                                    also read over the recent
                                                                                                    span, less one standard
                                                                                                    error of the queued pods'
                                                                                                    count (1/√count of it)
queue    requests_waiting                              target × (λ/ρ + (W − target)⁺/window) / μ   a pod is one server with
                                                                                                    random arrivals (M/M/1):
                                                                                                    its mean queue is
                                                                                                    ρ²/(1 − ρ) at ρ = λ/μ, so a
                                                                                                    target holds it at the ρ
                                                                                                    where that is ``target``;
                                                                                                    past the target, λ is also
                                                                                                    read over the recent span
level    the memory and power metrics; any metric      value                                        HPA's: no model of the
         whose pod's engine sends no rates                                                          metric, or nothing to
                                                                                                    apply it to
=======  ============================================  ===========================================  ==========================

μ is measured on a pod with a queue (it finishes all it can); failing that it
is the larger of the last measurement (remembered) and what the utilization
law bounds it by (``C × 100 / gpu_util``: a GPU cannot be more than all busy).
With no engine rates every estimate is the value, and the answer is HPA's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import lru_cache
from typing import Final

import msgspec

from gpuscale.catalog import ARRIVAL, CATALOG, COMPLETION, DemandKind
from gpuscale.policy import MetricTarget
from gpuscale_decider.core.observation import Observation

# Each metric's row of the table, from the catalog (a metric's demand kind is part of its entry).
DEMAND: Final[Mapping[str, DemandKind]] = {
    m.name: m.demand for m in CATALOG if m.demand is not DemandKind.LEVEL
}
QUEUES: Final = frozenset(name for name, kind in DEMAND.items() if kind is DemandKind.QUEUE)
# Metrics that cannot read above this: a target below it keeps headroom that serves a backlog.
CEILINGS: Final[Mapping[str, float]] = {m.name: m.ceiling for m in CATALOG if m.ceiling is not None}
# The unit an estimate is told in (an estimate is no reading of the metric: GPU-% may pass 100).
UNITS: Final[Mapping[str, str]] = {m.name: m.estimate_unit or str(m.unit) for m in CATALOG}
WAITING: Final = "requests_waiting"
BUSY: Final = "gpu_util"
# A rate needs this many requests finished per pod over its span: a scrape counts whole requests.
MIN_FINISHED: Final = 3.0
# The utilization law needs the GPU this busy: below, a percent of noise moves μ by tens of percent.
MIN_BUSY: Final = 5.0
# A pod is at its service rate while at least one request waits.
QUEUED: Final = 1.0
# Standard errors of a few seconds' count of arrivals taken off what is read: one where a queue
# already shows the pods are at their limit; two for a rise that nothing else confirms (real
# arrivals come in bursts beyond a Poisson count's noise: the bound, not the rate, is held).
QUEUED_ERRORS: Final = 1.0
RISEN_ERRORS: Final = 2.0


class ServiceRate(msgspec.Struct, frozen=True):
    """μ, requests/s one pod finishes at its limit, and how it is known."""

    per_pod: float
    measured: bool  # on a pod with a queue now; else remembered or bounded by the utilization law
    how: str = "measured on a pod with a queue"


class Demand(msgspec.Struct, frozen=True):
    """One metric's per-pod estimates, and what they rest on (for the reason)."""

    values: Mapping[str, float]  # pod -> estimate (the value itself where not estimated)
    estimated: int  # pods whose value is an estimate
    arriving: float = 0.0  # mean over the estimated pods: λ, W, C (requests/s, requests, requests/s)
    waiting: float = 0.0
    served: float = 0.0
    rate: ServiceRate | None = None  # the queue's μ
    held: float = 1.0  # the queue's ρ: the share of μ its target holds a pod at
    recent_s: float | None = None  # the recent span, where its arrivals were read
    unrated: int = 0  # pods with a reading but no rates yet, left out as missing
    read_now: bool = False  # λ read over the recent span: a queue stood
    held_up: bool = False  # the workload's arrivals rose: the recent ones held estimates up

    def said(self, name: str) -> str:
        """What the estimate rests on, as the reason tells it ("" where none was made)."""
        if not self.estimated:
            return ""
        flows = f"{fmt(self.arriving)} requests/s arriving"
        queue = DEMAND.get(name) is DemandKind.QUEUE
        notes = []
        if self.read_now:
            why = "the queue is over its target" if queue else "less a count's noise: a queue stands"
            notes.append(f"the last {self.recent_s:g} s, {why}")
        if self.held_up:
            notes.append(f"more over the last {self.recent_s:g} s: estimates held up to the target at most")
        if notes:
            flows += f" ({'; '.join(notes)})"
        if self.waiting >= QUEUED / 2:
            flows += f" and {fmt(self.waiting)} waiting"
        if queue and self.rate is not None:
            return (
                f"{flows} per pod; a pod serves {fmt(self.rate.per_pod)}/s at its limit, {self.rate.how},"
                f" held {self.held:.0%} busy for the target's queue"
            )
        return f"{flows}, {fmt(self.served)}/s served per pod"


@lru_cache(maxsize=1024)
def metrics_read(policy: tuple[MetricTarget, ...]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """What an evaluation of ``policy`` reads: its metrics and the flows their estimates
    rest on, and of the recent means the queue and what it finishes (an observation keeps no more)."""
    names = [m.name for m in policy]
    if not any(name in DEMAND for name in names):
        return tuple(names), ()
    return tuple(dict.fromkeys([*names, ARRIVAL, COMPLETION, WAITING, BUSY])), (WAITING, COMPLETION, ARRIVAL)


def service_rate(observation: Observation, remembered: float | None) -> ServiceRate | None:
    """μ per pod: measured where pods have a queue now, else the larger of
    ``remembered`` and the utilization law's bound; None where neither says."""
    window, recent = observation.values, observation.recent
    waiting = recent.get(WAITING) or window.get(WAITING, {})
    completion = recent.get(COMPLETION) if WAITING in recent else window.get(COMPLETION)
    span = (observation.recent_s if WAITING in recent else None) or observation.window_s
    full = [
        c
        for pod, c in (completion or {}).items()
        if waiting.get(pod, 0.0) >= QUEUED and c * span >= MIN_FINISHED
    ]
    if full:
        measured = sum(full) / len(full)
        if math.isfinite(measured):
            return ServiceRate(measured, True)
    busy, served = window.get(BUSY, {}), window.get(COMPLETION, {})
    span = _span(observation)
    bounds = [
        c * 100.0 / busy[pod]
        for pod, c in served.items()
        if busy.get(pod, 0.0) >= MIN_BUSY and c * span >= MIN_FINISHED
    ]
    bound = max((b for b in bounds if math.isfinite(b)), default=0.0)
    if remembered and remembered >= bound:
        return ServiceRate(remembered, False, "as last measured")
    if bound > 0.0:
        return ServiceRate(bound, False, "as its GPU's utilization bounds it")
    return None


def demand(
    name: str, target: float, observation: Observation, rate: ServiceRate | None, starting: int = 0
) -> Demand:
    """Each fresh pod's estimate of ``name`` (its row of :data:`DEMAND`). ``starting``: pods
    asked for and not yet serving; they take their share of arrivals once ready, so what their
    target tolerates (a queue's target, a served metric's headroom) serves the backlog too."""
    values = observation.values.get(name, {})
    kind = DEMAND.get(name, DemandKind.LEVEL)
    if kind is DemandKind.LEVEL or (kind is DemandKind.QUEUE and rate is None):
        return Demand(values, 0)
    window, span = observation.window_s, _span(observation)
    arrival = observation.values.get(ARRIVAL, {})
    arrival_now = observation.recent.get(ARRIVAL, {})
    completion = observation.values.get(COMPLETION, {})
    waiting_now = observation.recent.get(WAITING) or observation.values.get(WAITING, {})
    queue = kind is DemandKind.QUEUE
    recent_s = observation.recent_s or window
    # The backlog a pod's target tolerates (a queue's target; a served metric's headroom below its
    # ceiling, none without one), and that of the pods starting, per pod here.
    tolerated = target if queue else max(0.0, CEILINGS.get(name, target) - target)
    room = tolerated * (1.0 + starting / max(1, len(values)))
    per_pod = rate.per_pod if rate is not None else math.nan  # read by a queue only, which has one
    busy = held_busy(target) if queue else math.nan

    def asking(arriving: float, cost: float, backlog: float) -> float:
        """The pod's estimate when ``arriving`` requests/s arrive (a queue's row, or a served
        metric's at ``cost`` per request/s)."""
        return target * (arriving / busy + backlog) / per_pod if queue else cost * arriving + backlog

    risen, at_limit = _recent_shares(arrival, arrival_now, waiting_now, recent_s)
    held_up = False
    out: dict[str, float] = {}
    estimated = 0
    arriving = waiting = served = 0.0
    unrated = 0
    recent = False  # some pod's λ was read over the recent span
    # A pod that joined within the window has no rates until its second scrape (a rate is a
    # difference of two); beside pods that have them its reading is no estimate: it is missing.
    joined = observation.span_s is not None and bool(arrival)
    for pod, value in values.items():
        lam, c = arrival.get(pod), completion.get(pod)
        if lam is None or c is None:
            if joined:
                unrated += 1
            else:
                out[pod] = value
            continue
        w = waiting_now.get(pod, 0.0)
        if queue:
            cost, backlog = math.nan, max(0.0, w - room) / window
            asked = lam
        elif c * span >= MIN_FINISHED:
            cost = value / c  # the metric per request/s served
            backlog = max(0.0, cost * w / window - room)
            # Just after a pod joined, arrivals beyond what a pod without a queue finishes are requests
            # starting: the new pod fills, and its rates (over the interval before a sample) lag its reading.
            asked = min(lam, c) if joined and w < QUEUED else lam
        else:
            out[pod] = value  # too few finished to tell what a request costs
            continue
        if queue and backlog > 0.0 and arrival_now.get(pod, lam) > lam:
            # A queue over its target shows the recent arrivals have lasted.
            asked = lam = arrival_now[pod]
            recent = True
        elif not queue and w >= QUEUED and (now := at_limit * arrival_now.get(pod, 0.0)) > lam:
            # A pod with a queue is at its limit: what arrives beyond it is read where it is now,
            # less the noise of the queued pods' count over a few seconds.
            asked = lam = now
            recent = True
        estimate = asking(asked, cost, backlog)
        if risen > 0.0 and estimate < target and (now := risen * arrival_now.get(pod, 0.0)) > asked:
            estimate, held_up = min(asking(now, cost, backlog), target), True  # more asked: a larger estimate
        if not math.isfinite(estimate):
            out[pod] = value
            continue
        out[pod] = estimate
        estimated += 1
        arriving += lam
        waiting += w
        served += c
    if not estimated:
        return Demand(values, 0)
    n = float(estimated)
    held, read_recent = (busy if queue else 1.0), (recent_s if recent or held_up else None)
    return Demand(
        out,
        estimated,
        arriving / n,
        waiting / n,
        served / n,
        rate,
        held,
        read_recent,
        unrated,
        recent,
        held_up,
    )


def _recent_shares(
    arrival: Mapping[str, float],
    arrival_now: Mapping[str, float],
    waiting_now: Mapping[str, float],
    span_s: float,
) -> tuple[float, float]:
    """The shares of the recent arrivals read as surely there, the noise being that of a sum
    (a decision rests on the workload's, √n times less noisy than each pod's):

    - over the workload, 1 − 2/√count where that is more than the window's mean shows (0: the
      arrivals have not risen beyond the noise of a few seconds' count): a scale-down holds on it;
    - over the pods with a queue, 1 − 1/√count: what they read beyond their limit."""
    now = window = queued = 0.0
    for pod, rate in arrival_now.items():
        before = arrival.get(pod)
        if before is None:
            continue
        now += rate
        window += before
        if waiting_now.get(pod, 0.0) >= QUEUED:
            queued += rate
    risen = _surely(now, span_s, RISEN_ERRORS)
    return (risen if risen * now > window else 0.0), _surely(queued, span_s, QUEUED_ERRORS)


def _surely(rate: float, span_s: float, errors: float) -> float:
    """The share of a rate counted over ``span_s`` that is beyond ``errors`` standard errors of a
    Poisson count (λ − e·√(λ/s) = λ·(1 − e/√count)): the least the arrivals show beyond the
    noise of a few seconds' requests."""
    count = rate * span_s
    return max(0.0, 1.0 - errors / math.sqrt(count)) if count > 0.0 else 0.0


def held_busy(target: float) -> float:
    """ρ at which one server with random arrivals and service (M/M/1) has ``target`` waiting
    on average: ρ²/(1 − ρ) = target. A queue is random: at ρ = 1 it has no mean, it grows."""
    return 2.0 / (1.0 + math.sqrt(1.0 + 4.0 / target))  # (√(T² + 4T) − T)/2, stable for any T > 0


def _span(observation: Observation) -> float:
    """Seconds the window's means cover (less than the window just after a capacity change)."""
    return observation.window_s if observation.span_s is None else max(observation.span_s, 1.0)


def fmt(v: float) -> str:
    return f"{v:.1f}"
