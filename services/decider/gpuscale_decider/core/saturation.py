"""gpuscale's own rules on top of HPA's replica calculation (:mod:`.replicas`),
each said in the reason when it changes the result; the user's statement of them
is docs/GPUSCALER.md#beyond-hpa-pinned-metrics-and-queues. Purely computational.

- **A pinned metric understates demand.** When every counted pod's recent means
  sit at the ceiling (Knative's panic window), the step is taken on them and
  sized by the engines' flows (``ceiling × A / C``) or queues (``(R + W) / R``):
  the fewest pods that carry that demand within the tolerance. Only upward, and
  still through HPA's missing-pod rules, stabilization, the rate policies and
  ``maxReplicas``.
- **A scale-down holds on the level now**: judged on a pod's recent mean where
  that is above its window mean.
- **A backlog is not demand.** A pinned pod that finishes more than arrives counts
  at its share of what arrives; one that serves all that arrives counts at its
  recent mean. Neither ever causes a scale-down.
- **A queue is a stock, not a rate.** A scale-up on it waits for the pods already
  starting, unless the flows say the capacity requested is short; a falling queue
  asks for nothing more; a growing one is judged on its recent mean.
- **What arrives sizes a queue's step where its level cannot yet**, and the flows
  never lower what the level asks for.
- **A queue within its target keeps the pods that serve what arrives**, at the
  capacity a queue last measured (:func:`queue_capacity`), for ``CAPACITY_KEPT_S``
  at most; never a scale-up on that memory.

The scale-down holds after a capacity change are :func:`.evaluation._scale_down_held`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Final

from gpuscale.policy import CEILINGS, PINNED_SHARE, NotReadyPods
from gpuscale_decider.core.replicas import (
    Basis,
    MetricProposal,
    PodView,
    Tolerances,
    count_pods,
    fmt_ago,
    fmt_value,
    group_pods,
    metric_proposal,
)

# The most a queue may multiply a pinned pod's demand by (the rate policies and
# maxReplicas bound the step anyway; this keeps a wild gauge's arithmetic finite).
MAX_QUEUE_FACTOR: Final = 100.0
# Keeps a count computed from wild but finite flows finite (maxReplicas bounds it anyway).
MAX_REPLICAS_ARITHMETIC: Final = 1e9
# Sizing by flows needs this many requests finished per pod over the recent span:
# fewer are too few to measure a rate by (a scrape counts whole requests).
MIN_FINISHED: Final = 3.0
# Queues: stocks that grow for as long as capacity is short.
WAITING: Final = "requests_waiting"
QUEUES: Final = frozenset({WAITING})
# A queue is falling when its recent mean is this much below its window's (a drain
# slower than the tolerance is still a drain: the capacity serving it is enough).
FALLING: Final = 0.02
# After a capacity change, a queue's trend shows once its averages span this many recent spans.
TREND_SPANS: Final = 2.0
# How long a queue's measured capacity keeps the pods that serve what arrives: a pod's
# capacity moves with the request mix, and only a queue measures it again. Older, it
# lets a scale-down go one pod at a time (a queue that forms then measures it anew).
CAPACITY_KEPT_S: Final = 600.0


@dataclass(frozen=True, slots=True)
class Remembered:
    """A queue's capacity measured earlier (:func:`queue_capacity`), and how long ago."""

    per_pod: float  # requests/s a pod with a queue finished
    age_s: float


@dataclass(frozen=True, slots=True)
class Signals:
    """What the step may use beyond the window means, per metric and fresh pod."""

    recent: Mapping[str, Mapping[str, float]]  # metric -> pod -> mean over the last recent_s
    recent_s: float | None
    span_s: float | None = None  # the window's averages start this long ago (a capacity change)
    capacity: Remembered | None = None  # of the queue, as last measured, and how long ago


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What HPA's calculation of one metric took, to compute it again on other values."""

    values: Mapping[str, float]  # the window means of the fresh pods
    signals: Signals
    pods: Sequence[PodView]
    current: int
    tolerances: Tolerances
    not_ready: NotReadyPods

    def counted(self) -> list[str]:
        """The pods whose values count (HPA's ready pods)."""
        return sorted(group_pods(self.pods, self.values, self.not_ready)[1])

    def again(self, proposal: MetricProposal, values: Mapping[str, float]) -> MetricProposal:
        """HPA's calculation of the same metric on other per-pod values."""
        return metric_proposal(
            proposal.name, proposal.target, values, self.pods, self.current, self.tolerances, self.not_ready
        )


@dataclass(frozen=True, slots=True)
class _Flows:
    """The pods' engine flows over the recent span (requests/s), where sent."""

    arrival: Mapping[str, float]
    completion: Mapping[str, float]
    span_s: float

    @classmethod
    def of(cls, signals: Signals) -> _Flows:
        return cls(
            signals.recent.get("request_arrival_rate", {}),
            signals.recent.get("request_completion_rate", {}),
            signals.recent_s or 0.0,
        )

    def __bool__(self) -> bool:
        return bool(self.arrival) and bool(self.completion)

    def measured(self, pod: str) -> bool:
        """Both flows sent, over enough finished requests to tell a rate."""
        return pod in self.arrival and self.completion.get(pod, 0.0) * self.span_s >= MIN_FINISHED

    def sent_arrivals(self, pods: Sequence[str]) -> bool:
        """Every one of ``pods`` sent what arrives at it."""
        return all(pod in self.arrival for pod in pods)

    def arriving(self, pods: Sequence[str]) -> float:
        """Requests/s arriving at ``pods`` together (each must have sent its arrivals)."""
        return sum(self.arrival[pod] for pod in pods)

    def means(self, pods: Sequence[str]) -> tuple[float, float]:
        """Arrivals and completions per pod over ``pods`` (each must have sent both)."""
        n = len(pods)
        return self.arriving(pods) / n, sum(self.completion[pod] for pod in pods) / n


def adjust(
    proposal: MetricProposal,
    values: Mapping[str, float],
    signals: Signals,
    pods: Sequence[PodView],
    current: int,
    tolerances: Tolerances,
    not_ready: NotReadyPods,
) -> MetricProposal:
    """The proposal with gpuscale's saturation and queue rules applied, or as it was."""
    if proposal.replicas is None or proposal.groups is None:
        return proposal
    if signals.recent_s is None:
        return proposal
    inputs = _Inputs(values, signals, pods, current, tolerances, not_ready)
    if proposal.name in QUEUES:
        return _queue(proposal, inputs)  # judges a growing queue on its recent mean itself
    if proposal.name in CEILINGS:
        pinned = _pinned(proposal, inputs)
        proposal = pinned if pinned is not proposal else _draining(proposal, inputs)
    return _rising(proposal, inputs)


def _rising(proposal: MetricProposal, inputs: _Inputs) -> MetricProposal:
    """A scale-down must hold on the level now as well as on the window's."""
    current, signals = inputs.current, inputs.signals
    if proposal.replicas is None or proposal.replicas >= current:
        return proposal
    name = proposal.name
    recent = signals.recent.get(name, {})
    if not recent:
        return proposal
    counted = inputs.counted()
    if not counted or any(pod not in recent for pod in counted):
        return proposal
    higher = [pod for pod in counted if recent[pod] > inputs.values[pod]]
    if not higher:
        return proposal
    values = dict(inputs.values)
    for pod in higher:
        values[pod] = recent[pod]
    judged = inputs.again(proposal, values)
    if judged.replicas is None or judged.replicas <= proposal.replicas:
        return proposal
    now = sum(recent[p] for p in counted) / len(counted)
    why = (
        f"{name} is higher now than over the window on {count_pods(len(higher))} ({fmt_value(now)} "
        f"over the last {signals.recent_s or 0.0:g} s against {fmt_value(proposal.usage or 0.0)}): "
        "the load is rising, and a scale-down must hold on the level now"
    )
    if judged.replicas >= current:
        return _keep(proposal, current, why)
    return replace(
        proposal, replicas=judged.replicas, calculated=proposal.replicas, note=_joined(proposal.note, why)
    )


def _pinned(proposal: MetricProposal, inputs: _Inputs) -> MetricProposal:
    signals, current = inputs.signals, inputs.current
    name, ceiling = proposal.name, CEILINGS[proposal.name]
    recent = signals.recent.get(name, {})
    if not recent or max(recent.values()) < PINNED_SHARE * ceiling:
        return proposal  # the common case, decided without grouping the pods again
    counted = inputs.counted()
    if not counted or any(recent.get(pod, 0.0) < PINNED_SHARE * ceiling for pod in counted):
        return proposal
    level = fmt_value(sum(recent[p] for p in counted) / len(counted))
    span = f"{signals.recent_s:g} s"
    groups = proposal.groups
    if groups is not None and groups.unready + groups.missing:
        # Pods of the target are starting: the capacity asked for is on its way (a
        # queue that grows meanwhile is the start-up's backlog, not new demand), so
        # no further step unless the flows, rates the backlog does not swell, say it
        # is short; but pods pinned now are no reason to scale down either.
        short = _short_while_starting(proposal, inputs, counted, groups.unready + groups.missing)
        if short is not None:
            return short
        if (proposal.replicas or 0) >= current:
            return proposal
        return _keep(
            proposal,
            current,
            f"{name} pinned at its ceiling on every serving pod ({level} over the last {span}) while "
            f"{count_pods(groups.unready + groups.missing)} start: no scale-down",
        )
    factors, sized_by = _demand_factors(counted, signals)
    # Sized: the pod serves all it can (the ceiling) and is asked for factor times that.
    demand = {pod: ceiling * factors[pod] if factors else recent[pod] for pod in counted}
    pinned = replace(inputs.again(proposal, demand), basis=Basis.ESTIMATE if factors else Basis.RECENT)
    within = ""
    if factors and pinned.replicas is not None and pinned.usage is not None:
        # The factor is an estimate from a few seconds of requests: ask for the fewest pods at
        # which it is within the tolerance (where HPA's own ratio would then hold), not for a
        # pod more whenever it reads a few percent high.
        fewest = _fewest_within(len(counted) * pinned.usage, proposal.target, inputs.tolerances)
        if fewest < pinned.replicas:
            pinned = replace(pinned, replicas=fewest, calculated=pinned.replicas)
            within = f"; {count_pods(fewest)} carry it within the tolerance of the target"
    if pinned.replicas is None or pinned.replicas <= (proposal.replicas or 0):
        return proposal
    note = (
        f"{name} pinned at its ceiling on every counted pod ({level} over the last {span}; the window's "
        f"mean {fmt_value(proposal.usage or 0.0)} understates demand)"
    )
    if sized_by:
        note += f"; {sized_by}"
    return replace(pinned, note=note + within)


def _short_while_starting(
    proposal: MetricProposal, inputs: _Inputs, counted: Sequence[str], starting: int
) -> MetricProposal | None:
    """The step the pinned pods' flows ask for beyond the capacity requested, while
    pods of the target start; None where they ask for no more, or cannot say.

    On a ramp the load passes what was requested while those pods load their
    model (20 s): waiting for them put each step a start-up late (the ramp
    trace's 2 → 3 came 22 s after 3 were needed). A pinned pod's flows measure
    the load itself (A / C times what it serves), not the backlog the start-up
    leaves, so they may ask for more meanwhile; the queue's stock may not."""
    flows = _Flows.of(inputs.signals)
    if not flows or not all(flows.measured(pod) for pod in counted):
        return None
    name, ceiling, target = proposal.name, CEILINGS[proposal.name], proposal.target
    factors = _flow_factors(counted, flows)
    demand = sum(ceiling * factors[pod] for pod in counted)
    fewest = _fewest_within(demand, target, inputs.tolerances)
    if fewest <= max(inputs.current, proposal.replicas or 0):
        return None
    a, c = flows.means(counted)
    note = (
        f"{name} pinned at its ceiling on every serving pod while {count_pods(starting)} start, and the "
        f"engines' flows say the capacity requested is short: {fmt_value(a)} requests/s arrive per pod and "
        f"{fmt_value(c)}/s finish, so what arrives at the serving pods is {fmt_value(demand)} of {name}, "
        f"which {count_pods(fewest)} carry within the tolerance of the target"
    )
    return replace(proposal, replicas=fewest, calculated=proposal.replicas, note=note)


def _fewest_within(demand: float, target: float, tolerances: Tolerances) -> int:
    """The fewest pods that carry ``demand`` (the metric summed over pods) within the
    tolerance of the target: where HPA's own ratio would then hold."""
    return math.ceil(demand / (target * (1.0 + tolerances.up)) - 1e-9)


def _flow_factors(counted: Sequence[str], flows: _Flows) -> dict[str, float]:
    """How many times what it serves each pinned pod is asked for, by its flows (measured)."""
    return {
        pod: min(MAX_QUEUE_FACTOR, max(1.0, flows.arrival[pod] / flows.completion[pod])) for pod in counted
    }


def _draining(proposal: MetricProposal, inputs: _Inputs) -> MetricProposal:
    """A scale-up asked for by pods whose window holds a backlog they are
    working off, or have worked off, is reconsidered on what they carry now."""
    current, signals = inputs.current, inputs.signals
    if (proposal.replicas or 0) <= current:
        return proposal  # only a scale-up is reconsidered: a backlog is no reason to scale down
    name, ceiling = proposal.name, CEILINGS[proposal.name]
    recent = signals.recent.get(name, {})
    flows = _Flows.of(signals)
    if not flows:
        return proposal  # engines without flows (or none): decided without grouping the pods again
    arrival, completion = flows.arrival, flows.completion
    values = dict(inputs.values)
    draining: list[str] = []  # pinned, finishing more than arrives
    drained: list[str] = []  # keeping up, reading less now than over the window
    for pod in inputs.counted():
        if pod not in recent or not flows.measured(pod):
            continue
        finished = completion[pod]
        if arrival[pod] > finished * (1.0 + inputs.tolerances.up):
            continue  # short of capacity: what its window holds is demand
        if recent[pod] >= PINNED_SHARE * ceiling and arrival[pod] < finished:
            share = ceiling * arrival[pod] / finished
            if share < values[pod]:
                values[pod] = share
                draining.append(pod)
        elif recent[pod] < values[pod]:
            values[pod] = recent[pod]
            drained.append(pod)
    if not draining and not drained:
        return proposal
    judged = inputs.again(proposal, values)
    if judged.replicas is None or judged.replicas >= (proposal.replicas or 0):
        return proposal
    everyone = len(draining) + len(drained) == len(inputs.counted())
    basis = Basis.ESTIMATE if draining else Basis.RECENT if everyone else Basis.MIXED
    judged = replace(judged, basis=basis)
    why = "; ".join(
        text
        for text in (
            _flows_said(draining, "pinned only by a backlog being worked off", flows),
            _flows_said(
                drained, f"serving all that arrives, with {name} lower now than over the window", flows
            ),
        )
        if text
    )
    why += ": judged on what they carry now"
    if (judged.replicas or 0) <= current:
        return _keep(proposal, current, why)
    return replace(judged, calculated=proposal.replicas, note=why)


def _flows_said(pods: Sequence[str], what: str, flows: _Flows) -> str:
    if not pods:
        return ""
    a, c = flows.means(pods)
    return (
        f"{count_pods(len(pods))} {what} ({fmt_value(a)} requests/s arrive, {fmt_value(c)}/s finish "
        f"over the last {flows.span_s:g} s)"
    )


def _demand_factors(counted: Sequence[str], signals: Signals) -> tuple[dict[str, float], str]:
    """How many times what it serves each pinned pod is asked for, and how that
    was read (for the reason); nothing when its engines say neither."""
    recent = signals.recent
    n = len(counted)
    flows = _Flows.of(signals)
    if all(flows.measured(pod) for pod in counted):
        factors = _flow_factors(counted, flows)
        a, c = flows.means(counted)
        return factors, (
            f"the engines' flows size the step: {fmt_value(a)} requests/s arrive per pod and "
            f"{fmt_value(c)}/s finish, {fmt_value(a / c)} times what they serve"
        )
    running = recent.get("requests_running", {})
    waiting = recent.get("requests_waiting", {})
    # A pod running less than one request is not at its concurrency limit: no sizing by it.
    if all(running.get(pod, 0.0) >= 1.0 and pod in waiting for pod in counted):
        factors = {
            pod: min(MAX_QUEUE_FACTOR, (running[pod] + waiting[pod]) / running[pod]) for pod in counted
        }
        r = sum(running[p] for p in counted) / n
        w = sum(waiting[p] for p in counted) / n
        return factors, (
            f"the engines' queues size the step: running {fmt_value(r)} + waiting {fmt_value(w)} "
            f"per pod is {fmt_value((r + w) / r)} times what they run"
        )
    return {}, ""


def _queue(proposal: MetricProposal, inputs: _Inputs) -> MetricProposal:
    signals, current, values = inputs.signals, inputs.current, inputs.values
    groups = proposal.groups
    assert groups is not None
    recent = signals.recent.get(proposal.name, {})
    counted = inputs.counted()
    if not counted or any(pod not in recent for pod in counted):
        return proposal
    now_level = sum(recent[pod] for pod in counted) / len(counted)
    window_level = sum(values[pod] for pod in counted) / len(counted)
    candidate = proposal
    if now_level > window_level:
        growing = replace(inputs.again(proposal, {p: recent[p] for p in counted}), basis=Basis.RECENT)
        if growing.replicas is not None and growing.replicas > (proposal.replicas or 0):
            candidate = replace(
                growing,
                note=(
                    f"the queue is growing: {fmt_value(now_level)} over the last {signals.recent_s:g} s "
                    f"against {fmt_value(window_level)} in the window, judged on the former"
                ),
            )
    served = _served_by(proposal.name, counted, inputs)
    if (candidate.replicas or 0) <= current:
        early = _passing_soon(proposal, counted, inputs, now_level, served)
        if early is None:
            return _kept_serving(candidate, counted, inputs)
        candidate = replace(
            candidate,
            replicas=early.pods,
            calculated=candidate.replicas,
            note=_joined(candidate.note, early.said),
        )
    starting = groups.unready + groups.missing
    if starting:
        if served is not None and served.pods > current:
            # The level's answer while pods start counts the start-up's backlog; the flows
            # are rates, which it does not swell: where they say the capacity requested is
            # short of what arrives, the step waits no start-up (a first step sized on the
            # seconds a burst began in would otherwise leave the queue growing for one).
            why = f"{count_pods(starting)} of the target starting, but {served.said}"
            return replace(
                candidate,
                replicas=served.pods,
                calculated=candidate.replicas,
                note=_joined(candidate.note, why),
            )
        return _keep(
            candidate,
            current,
            f"{count_pods(starting)} of the target starting: capacity already requested, "
            "the queue is judged again once they serve",
        )
    recent_s = signals.recent_s or 0.0
    if signals.span_s is not None and signals.span_s < TREND_SPANS * recent_s:
        return _keep(
            candidate,
            current,
            f"capacity changed {fmt_ago(signals.span_s)}: the backlog of before stays with the pods "
            f"that had it, the queue is judged once {TREND_SPANS * recent_s:g} s show where it goes",
        )
    if now_level < window_level * (1.0 - FALLING):
        if served is not None and served.pods > current:
            now_asks = inputs.again(proposal, {p: recent[p] for p in counted})
            if (now_asks.replicas or 0) <= current:
                # The queue is within its target now: the window's level is a backlog worked
                # off, not demand; what arrives needs more than the pods serve (a new burst).
                why = (
                    f"the queue is within its target now ({fmt_value(now_level)} over the last "
                    f"{recent_s:g} s, {fmt_value(window_level)} in the window: a backlog worked off), "
                    f"but {served.said}"
                )
                return replace(
                    candidate,
                    replicas=served.pods,
                    calculated=candidate.replicas,
                    note=_joined(candidate.note, why),
                )
            # Falling, yet what arrives needs more than the pods serve: the level falls
            # because requests give up, not because capacity drains it. The target decides.
            why = (
                f"the queue falls ({fmt_value(now_level)} over the last {recent_s:g} s, "
                f"{fmt_value(window_level)} in the window) only as requests give up: {served.said}"
            )
            return replace(candidate, note=_joined(candidate.note, why))
        return _keep(
            candidate,
            current,
            f"the queue is falling ({fmt_value(now_level)} over the last {recent_s:g} s, "
            f"{fmt_value(window_level)} in the window): the capacity serving it is enough",
        )
    if served is not None and served.pods > (candidate.replicas or 0):
        # Seen early, a queue's level is small while what arrives is not.
        why = f"the level so far understates what arrives: {served.said}"
        return replace(
            candidate, replicas=served.pods, calculated=candidate.replicas, note=_joined(candidate.note, why)
        )
    return candidate


@dataclass(frozen=True, slots=True)
class _Served:
    pods: int  # the fewest pods that serve what arrives with the tolerance to spare
    said: str


def _served_by(queue: str, counted: Sequence[str], inputs: _Inputs) -> _Served | None:
    """How many pods serve what arrives at a queue, where the engines' flows say;
    None where they cannot.

    A pod with a queue finishes all it can, C requests a second, so with ΣA
    arriving at the target's pods, ``ceil(ΣA × (1 + up tolerance) / C)`` pods
    serve them with the tolerance to spare and the queue drains. This raises a
    step the level sizes too small (seconds into a shortfall), and tells a
    level that falls only because requests give up from one that capacity
    drains. It never lowers what the level now asks for: the user's target is
    about the queue, and a queue at high utilization need not drain however
    the flows add up."""
    flows = _Flows.of(inputs.signals)
    if not flows or not flows.sent_arrivals(counted):
        return None
    capacity = _capacity(counted, inputs.signals.recent.get(queue, {}), flows)
    if capacity is None:
        return None
    pods = _serving(counted, flows, capacity, inputs.tolerances)
    if pods is None:
        return None
    return _Served(
        pods,
        f"{fmt_value(flows.arriving(counted))} requests/s arrive and a pod with a queue finishes "
        f"{fmt_value(capacity)}/s, so the capacity of {count_pods(pods)} serves them with the tolerance to spare",
    )


def queue_capacity(signals: Signals) -> float | None:
    """What a pod of the workload finishes a second at its limit: the mean flow
    out of the pods with a queue (at least one request waiting, so they finish
    all they can), over enough finished requests to tell a rate; None where no
    pod has a queue or the engines send no flows. Purely computational."""
    waiting = signals.recent.get(WAITING)
    if not waiting:
        return None
    flows = _Flows.of(signals)
    return _capacity(list(waiting), waiting, flows) if flows else None


def _capacity(pods: Sequence[str], waiting: Mapping[str, float], flows: _Flows) -> float | None:
    # Only a pod with a queue is at its limit: what it finishes is its capacity.
    full = [flows.completion[pod] for pod in pods if waiting.get(pod, 0.0) >= 1.0 and flows.measured(pod)]
    if not full:
        return None
    capacity = sum(full) / len(full)
    # Flows past the largest double (a broken engine): no arithmetic on them.
    return capacity if math.isfinite(capacity) else None


def _serving(counted: Sequence[str], flows: _Flows, capacity: float, tolerances: Tolerances) -> int | None:
    """The fewest pods that serve what arrives at the counted ones with the tolerance to spare."""
    arriving = flows.arriving(counted)
    if not math.isfinite(arriving):
        return None
    return math.ceil(min(arriving * (1.0 + tolerances.up) / capacity, MAX_REPLICAS_ARITHMETIC))


def _kept_serving(proposal: MetricProposal, counted: Sequence[str], inputs: _Inputs) -> MetricProposal:
    """A scale-down on a queue stopped at the pods that serve what arrives, at
    the capacity a queue measured (:func:`queue_capacity`); as it was where
    nothing was measured or the engines send no arrivals.

    A queue reads 0 whenever capacity suffices, and HPA's ``ceil(n × 0 / target)``
    is the minimum: 3 pods serving 16 requests/s with no queue would be cut to
    1, the queue would come back, and the step be taken again. A scale-down
    stops at the pods that serve the arrivals, as the step up was sized, so the
    two agree on one count; as fewer arrive, fewer are kept, and with none
    arriving none are.

    A capacity measured more than CAPACITY_KEPT_S ago may no longer hold (the
    request mix moves it, and pods that serve all that arrives never queue to
    measure it again), so it keeps no count: the scale-down goes one pod at a
    time. Where the old capacity still holds, a queue forms one pod short and
    measures it anew; where the pods got faster, the steps go on. Let go to
    HPA's answer at once instead, a steady load fell to ``minReplicas`` every
    quarter of an hour, and its queue came back as many pods short."""
    remembered, current = inputs.signals.capacity, inputs.current
    if remembered is None or (proposal.replicas or 0) >= current:
        return proposal
    flows = _Flows.of(inputs.signals)
    if not flows.arrival or not flows.sent_arrivals(counted):
        return proposal
    pods = _serving(counted, flows, remembered.per_pod, inputs.tolerances)
    if pods is None:
        return proposal
    said = (
        f"the queue is within its target, and {fmt_value(flows.arriving(counted))} requests/s arrive; "
        f"a pod finished {fmt_value(remembered.per_pod)}/s when it last had a queue"
    )
    if remembered.age_s > CAPACITY_KEPT_S:
        pods = min(pods, current - 1)  # so never the keep below
        why = (
            f"{said}, {remembered.age_s / 60:.0f} min ago: too long ago to hold the count, so "
            f"{count_pods(pods)} are tried, and a queue that forms measures the capacity again"
        )
    else:
        why = (
            f"{said} ({remembered.age_s:.0f} s ago), so the capacity of {count_pods(pods)} serves "
            "them with the tolerance to spare"
        )
    if pods <= (proposal.replicas or 0):
        return proposal
    if pods >= current:
        return _keep(proposal, current, why)  # a memory is no reason to scale up: a queue is
    return replace(proposal, replicas=pods, calculated=proposal.replicas, note=_joined(proposal.note, why))


def _passing_soon(
    proposal: MetricProposal, counted: Sequence[str], inputs: _Inputs, level: float, served: _Served | None
) -> _Served | None:
    """``served`` (:func:`_served_by`), where a queue the level does not yet
    ask more for passes the target (with the tolerance) within the recent span at
    the rate the flows say it grows; else None.

    A queue is a stock: growing at 8 requests/s, its level reads 2.7 (HPA keeps 1)
    and one 2 s publish later 16 (HPA asks ceil(16/4) = 4, the backlog of those
    seconds counted as demand), while 3 pods serve what arrives. Sized by the
    flows when the crossing is seconds away, the step is the one the arrivals
    need. A level that rises slower, or stays within what the target allows, is
    the target's to answer, as HPA's."""
    recent_s = inputs.signals.recent_s
    if served is None or served.pods <= inputs.current or not recent_s:
        return None
    flows = _Flows.of(inputs.signals)
    growth = sum(flows.arrival[pod] - flows.completion.get(pod, 0.0) for pod in counted) / len(counted)
    ahead = level + growth * recent_s
    if not (growth > 0.0 and math.isfinite(ahead)) or ahead <= proposal.target * (1.0 + inputs.tolerances.up):
        return None
    return _Served(
        served.pods,
        f"the queue ({fmt_value(level)} over the last {recent_s:g} s) passes the target within "
        f"{recent_s:g} s at the rate it grows ({fmt_value(growth)} requests/s per pod): {served.said}",
    )


def _joined(note: str, why: str) -> str:
    return f"{note}; {why}" if note else why


def _keep(proposal: MetricProposal, current: int, why: str) -> MetricProposal:
    note = _joined(proposal.note, why)
    return replace(proposal, replicas=current, calculated=proposal.replicas, note=f"{note}: keep {current}")
