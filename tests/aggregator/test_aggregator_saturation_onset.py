"""Saturation onset, told the moment it is true. The decider's pinned rule
steps a workload up once every counted pod's recent means (the last ``recent_s``, 3 s
by default) read gpu_util at 95 % of its ceiling or more. That evidence is complete
when the last bucket holding an unpinned sample leaves the recent span of every
fresh pod: a moment no batch marks (at 1 Hz it falls on the third pinned sample,
give or take the milliseconds a batch travels). The core says when it is due
(``next_onset``), the shell wakes then, and the core checks again
(``confirm_onsets``): a workload still pinned is ``saturated`` and published at
once, instead of at the next 2 s tick. The demo's first step waited up to 3 s for it.

The expected moments come from how the recent means are read (the buckets whose
newest sample is within ``recent_s`` of now, the half-open span of docs/ARCHITECTURE.md#algorithm's
windows), not from this code: each test also reads the message the decider would
get at that moment and checks that its recent means are the pinned ones the rule
needs, and a moment earlier that they are not."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuscale.codec import encode_raw
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import MAX_PENDING_CHANGES, WindowConfig

from .aggregator_builders import NOW, batch, gpu, owner

W = 30.0
RECENT = 3.0
BERT = ("default", "Deployment", "bert")
EARLY = 1e-6  # a moment before: the span still holds what it is about to lose


class Feeder:
    """Batches in the order called, each pod on a node named after it unless told."""

    def __init__(self, agg: Aggregator) -> None:
        self.agg = agg
        self.seq: dict[str, int] = {}

    def __call__(
        self, t: float, *gpus: tuple[str, float], node: str | None = None, workload: str = "bert"
    ) -> None:
        node = node or f"node-{gpus[0][0]}"
        self.seq[node] = self.seq.get(node, -1) + 1
        b = batch(
            *(gpu(i, owner(pod, workload), util=util, node=node) for i, (pod, util) in enumerate(gpus)),
            node=node,
            ts=NOW + t,
            seq=self.seq[node],
        )
        assert self.agg.ingest(encode_raw(b), now=NOW + t, subject_node=node).status == "accepted"


def asked(agg: Aggregator, recent_s: float | None = RECENT, workload: tuple[str, str, str] = BERT) -> None:
    """The decider's window request: a 30 s window and its recent span."""
    taken, _ = agg.store.request(workload, W, recent_s, NOW, ttl_s=600.0)
    assert taken is not None


def due(agg: Aggregator) -> float | None:
    """When the next onset is due, from the test's zero."""
    at = agg.store.next_onset()
    return None if at is None else round(at - NOW, 6)


def told_at(agg: Aggregator, t: float) -> list[tuple[str, str, str]]:
    """The shell woken at ``t``: what the core now says is saturated."""
    agg.store.confirm_onsets(NOW + t)
    return agg.take_saturated()


def recent_util(agg: Aggregator, t: float) -> dict[str, float | None]:
    """Each pod's recent gpu_util in the message the decider would get at ``t``."""
    m = agg.message_of(BERT, NOW + t)
    assert m is not None
    return {p.pod: (p.recent.gpu_util or None) if p.recent else None for p in m.pods}


def pinned_at(agg: Aggregator, t: float) -> bool:
    return all(v is not None and v >= 95.0 for v in recent_util(agg, t).values())


def test_one_pod_is_saturated_once_its_last_unpinned_sample_leaves_the_span() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    for t in range(10):
        send(t, ("a-1", 30.0))
    assert due(agg) is None
    send(10, ("a-1", 100.0))  # a run begins; the 30 of t=9 leaves the last 3 s at 12
    send(11, ("a-1", 100.0))
    assert due(agg) == 12.0
    assert told_at(agg, 12.0 - EARLY) == []
    assert not pinned_at(agg, 12.0 - EARLY)
    assert told_at(agg, 12.0) == [BERT]  # before the sample of t=12 arrives
    assert pinned_at(agg, 12.0)
    assert due(agg) is None


def test_told_once_per_run_and_again_after_the_pod_reads_below_the_pinned_level() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    send(0, ("a-1", 30.0))
    for t in (1, 2):
        send(t, ("a-1", 100.0))
    assert told_at(agg, 3.0) == [BERT]
    for t in (3, 4, 5):
        send(t, ("a-1", 100.0))
        assert told_at(agg, t + 0.5) == []
    send(6, ("a-1", 94.9))
    send(7, ("a-1", 100.0))
    assert due(agg) == 9.0
    assert told_at(agg, 9.0) == [BERT]


def test_a_run_that_ends_before_it_is_due_tells_nothing() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    send(0, ("a-1", 30.0))
    send(1, ("a-1", 100.0))
    assert due(agg) == 3.0
    send(2, ("a-1", 50.0))
    assert told_at(agg, 3.0) == []
    assert due(agg) is None


def test_every_fresh_pod_must_be_pinned_over_its_span() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    for t in range(5):
        send(t, ("a-1", 30.0))
        send(t + 0.2, ("a-2", 30.0))
    send(5, ("a-1", 100.0))
    send(5.2, ("a-2", 60.0))
    send(6, ("a-1", 100.0))
    assert due(agg) is None  # a-2 is not in a run
    send(6.2, ("a-2", 100.0))
    assert due(agg) == 8.2  # a-2's 60 of 5.2 leaves last
    assert told_at(agg, 8.0) == []
    assert not pinned_at(agg, 8.2 - EARLY)
    send(7, ("a-1", 100.0))
    send(7.2, ("a-2", 100.0))
    send(8, ("a-1", 100.0))
    assert told_at(agg, 8.2) == [BERT]
    assert pinned_at(agg, 8.2)


def test_a_stale_pod_does_not_hold_the_onset_back() -> None:
    """The decider counts a silent pod as missing (0 on the way up), not as unpinned."""
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    send(0, ("a-2", 30.0))  # then silent: stale once 3 intervals have passed
    for t in range(5):
        send(t, ("a-1", 30.0))
    send(5, ("a-1", 100.0))
    assert due(agg) == 7.0
    send(6, ("a-1", 100.0))
    assert told_at(agg, 7.0) == [BERT]
    assert recent_util(agg, 7.0) == {"a-1": 100.0, "a-2": None}


def test_no_onset_where_no_policy_reads_recent_means() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    send(0, ("a-1", 30.0))
    for t in range(1, 6):
        send(t, ("a-1", 100.0))
    assert due(agg) is None
    asked(agg, recent_s=None)
    send(6, ("a-1", 30.0))
    for t in range(7, 12):
        send(t, ("a-1", 100.0))
    assert due(agg) is None


def test_a_pod_on_two_gpus_with_one_below_the_pinned_level_is_not_pinned() -> None:
    """Its recent mean is over both GPUs: one at 50 keeps it under 95."""
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    send(0, ("a-1", 30.0), ("a-1", 30.0))
    for t in range(1, 6):
        send(t, ("a-1", 100.0), ("a-1", 50.0))
    for t in range(6, 8):
        send(t, ("a-1", 50.0), ("a-1", 100.0))
    assert told_at(agg, 8.0) == []
    assert recent_util(agg, 7.0)["a-1"] == 75.0


def test_a_late_unpinned_sample_ends_the_run_and_the_next_is_dated_from_the_newest_before() -> None:
    """A sample from before the pod's newest (a collector's buffer flushed after an
    outage) is not where a run can be dated from: the next run counts from the pod's
    newest sample before it, a second later than need be at most, never earlier."""
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    send(0.9, ("a-1", 30.0), node="n1")
    send(1.9, ("a-1", 100.0), node="n1")
    send(2.9, ("a-1", 100.0), node="n1")
    assert due(agg) == 3.9
    send(1.5, ("a-1", 20.0), node="n2")  # a second node's sample, arriving late
    assert told_at(agg, 3.9) == []
    assert not pinned_at(agg, 3.9)  # the 20 of 1.5 sits in the bucket whose newest is 1.9
    send(3.9, ("a-1", 100.0), node="n1")
    assert due(agg) == 5.9
    assert pinned_at(agg, 5.9)
    assert told_at(agg, 5.9) == [BERT]


def test_a_pinned_sample_in_the_bucket_of_an_unpinned_one_keeps_that_bucket_in_the_span() -> None:
    """Samples 0.7 s apart (a collector's jitter) share a bucket now and then."""
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    send(9.1, ("a-1", 30.0))
    send(9.8, ("a-1", 100.0))  # bucket 9: a 30 and a 100, its newest at 9.8
    send(10.7, ("a-1", 100.0))
    assert due(agg) == 12.8
    send(11.6, ("a-1", 100.0))
    send(12.5, ("a-1", 100.0))
    assert not pinned_at(agg, 12.8 - EARLY)
    assert told_at(agg, 12.8) == [BERT]
    assert pinned_at(agg, 12.8)


def test_a_new_pod_has_no_span_before_its_first_sample() -> None:
    """A pod that has just become ready: its first pinned sample begins its span."""
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    send(0, ("a-1", 100.0))
    assert due(agg) == 3.0
    for t in (1, 2):
        send(t, ("a-1", 100.0))
    assert told_at(agg, 3.0) == [BERT]


def test_a_fresh_pod_silent_within_the_span_is_no_pinned_pod() -> None:
    """A collector on a 2 s interval: its pod stays fresh for 6 s, but a 3 s span may
    hold none of its samples, and the decider reads no recent mean as not pinned."""
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    for t in (0.0, 2.0):
        b = batch(
            gpu(0, owner("a-2"), util=30.0, node="slow"), node="slow", ts=NOW + t, seq=int(t), interval_s=2.0
        )
        agg.ingest(encode_raw(b), now=NOW + t, subject_node="slow")
    b = batch(gpu(0, owner("a-2"), util=100.0, node="slow"), node="slow", ts=NOW + 4.0, seq=4, interval_s=2.0)
    agg.ingest(encode_raw(b), now=NOW + 4.0, subject_node="slow")
    send(3, ("a-1", 30.0))
    send(4, ("a-1", 100.0))
    assert due(agg) == 6.0  # both runs: a-1's 30 of 3 and a-2's of 2 have left by 6
    send(5, ("a-1", 100.0))
    send(6, ("a-1", 100.0))
    # a-2's next sample is late: at 7.1 it has said nothing since 4.0.
    assert told_at(agg, 7.1) == []
    assert recent_util(agg, 7.1)["a-2"] is None


def test_the_tick_tells_every_workload_so_nothing_saturated_is_left_for_after_it() -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    send(0, ("a-1", 30.0))
    for t in (1, 2):
        send(t, ("a-1", 100.0))
    agg.store.confirm_onsets(NOW + 3.0)
    agg.snapshot(NOW + 3.0)
    assert agg.take_saturated() == []


def test_onsets_waiting_at_once_are_bounded() -> None:
    """Workloads flapping at the pinned level (a hostile collector) cost at most
    MAX_PENDING_CHANGES pending onsets; the rest wait for the tick."""
    agg = Aggregator(WindowConfig(window_s=W))
    send = Feeder(agg)
    for i in range(MAX_PENDING_CHANGES + 40):
        workload = ("default", "Deployment", f"w{i}")
        asked(agg, workload=workload)
        send(0, (f"w{i}-1", 30.0), workload=f"w{i}")
        send(1, (f"w{i}-1", 100.0), workload=f"w{i}")
    assert len(agg.store.onsets) == MAX_PENDING_CHANGES


# --- attacked: whatever the samples, an onset is told only when it is true -----------
# Samples of two pods from two nodes each, in any order (late ones included), with
# times on a tenth-of-a-second grid (so buckets are shared often) and values around
# the pinned level. The shell is played exactly: woken at each onset due before the
# next batch arrives. Whenever the core says saturated, the message the decider gets
# at that moment shows every fresh pod's recent gpu_util pinned.

_SAMPLE = st.tuples(
    st.sampled_from(["a-1", "a-2"]),
    st.sampled_from(["n1", "n2"]),
    st.integers(min_value=0, max_value=120).map(lambda tenths: tenths / 10),
    st.sampled_from([30.0, 94.9, 95.0, 100.0]),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_SAMPLE, min_size=1, max_size=40), st.sampled_from([1.0, 2.5, 3.0]))
def test_an_onset_is_told_only_when_the_message_shows_every_fresh_pod_pinned(
    samples: list[tuple[str, str, float, float]], recent_s: float
) -> None:
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg, recent_s=recent_s)
    seq: dict[str, int] = {}
    arrived = 0.0

    def wake_until(t: float) -> None:
        while (at := agg.store.next_onset()) is not None and at <= NOW + t:
            agg.store.confirm_onsets(at)
            if agg.take_saturated():
                m = agg.message_of(BERT, at)
                assert m is not None
                fresh = [p for p in m.pods if at - p.last_seen <= 3.0]
                assert fresh
                for p in fresh:
                    assert p.recent is not None
                    assert p.recent.gpu_util is not None
                    assert p.recent.gpu_util >= 95.0, (at - NOW, m)

    for pod, node_name, t, util in samples:
        arrived = max(arrived, t)  # arrivals in order; a sample's own time may be earlier
        wake_until(arrived)
        node = f"{node_name}-{pod}"
        seq[node] = seq.get(node, -1) + 1
        b = batch(gpu(0, owner(pod), util=util, node=node), node=node, ts=NOW + t, seq=seq[node])
        agg.ingest(encode_raw(b), now=NOW + arrived, subject_node=node)  # refused (out of order): no change
    wake_until(arrived + 10.0)


@pytest.mark.parametrize("phase", [0.0, 0.3, 0.999])
def test_a_step_at_one_hertz_is_told_three_seconds_after_its_last_unpinned_sample(phase: float) -> None:
    """The demo's step: whatever the sampling phase, the onset is due exactly when
    the recent mean first reads pinned, not a batch (up to a second) later."""
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    for k in range(10):
        send(k + phase, ("a-1", 30.0))
    send(10 + phase, ("a-1", 100.0))
    assert due(agg) == pytest.approx(12 + phase)
    assert not pinned_at(agg, 12 + phase - EARLY)
    assert told_at(agg, 12 + phase) == [BERT]


def test_pods_beginning_runs_in_one_batch_cost_one_look_at_their_workload() -> None:
    """A collector's credential could flap every pod of a workload at the pinned level,
    batch after batch: each batch makes the core walk the workload's pods once, not
    once per pod that began a run in it."""
    agg = Aggregator(WindowConfig(window_s=W))
    asked(agg)
    send = Feeder(agg)
    pods = [f"a-{i}" for i in range(8)]
    looks: list[float] = []
    span = agg.store._onset_span
    agg.store._onset_span = lambda workload, now: (looks.append(now), span(workload, now))[1]  # type: ignore[method-assign]
    for t in range(6):
        util = 100.0 if t % 2 else 30.0
        send(t, *((pod, util) for pod in pods), node="n1")
    assert looks == [NOW + 1, NOW + 3, NOW + 5]  # three batches began runs, one look each
