"""Per-GPUScaler windows: each workload is averaged over the window
its policy asked for, within the aggregator's ``max_window_s``; the message
says which window it carries; a longer window than was kept says what it
covers (``since``); requests lapse without repetition. And each pod's means
over a recent span where the policy asked for them."""

from __future__ import annotations

import pytest

from gpuscale.codec import encode_raw
from gpuscale.wire import UNSET, WorkloadMetrics
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import CLAMPED, TOO_MANY, WindowConfig

from .aggregator_builders import NOW, batch, gpu, owner

BERT = ("default", "Deployment", "bert")
LLAMA = ("default", "Deployment", "llama")


def feed(
    agg: Aggregator,
    start: float,
    values: list[float],
    *,
    pod: str = "bert-1",
    workload: str = "bert",
    engine: list[float] | None = None,
) -> None:
    """One batch a second from ``start``: the pod's gpu_util (and requests_waiting)."""
    node = f"node-{pod}"
    for i, util in enumerate(values):
        ts = start + i
        extra = None if engine is None else {"name": "vllm", "requests_waiting": engine[i]}
        b = batch(
            gpu(0, owner(pod, workload, engine=extra), util=util, node=node), node=node, ts=ts, seq=int(ts)
        )
        assert agg.ingest(encode_raw(b), now=ts, subject_node=node).status == "accepted"


def message(agg: Aggregator, now: float, name: str = "bert") -> WorkloadMetrics:
    (m,) = [m for m in agg.snapshot(now) if m.name == name]
    return m


def test_a_workload_is_averaged_over_the_window_its_policy_asked_for() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0))
    agg.store.request(BERT, 10.0, None, NOW, 60.0)
    # 20 s at 20 %, then 10 s at 80 %: the last 10 s are all 80.
    feed(agg, NOW + 1, [20.0] * 20 + [80.0] * 10)
    feed(agg, NOW + 1, [20.0] * 20 + [80.0] * 10, pod="llama-1", workload="llama")
    now = NOW + 30.5
    bert = message(agg, now)
    assert bert.window_s == 10.0
    assert bert.averages["gpu_util"] == pytest.approx(80.0)
    # The other workload keeps the aggregator's own window: (20 x 20 + 80 x 10) / 30.
    llama = message(agg, now, "llama")
    assert llama.window_s == 30.0
    assert llama.averages["gpu_util"] == pytest.approx(40.0)
    assert bert.since is UNSET
    assert llama.since is UNSET


def test_a_window_longer_than_the_rings_grows_them_and_keeps_every_bucket() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    feed(agg, NOW + 1, [float(i) for i in range(25)])  # 0..24, within the 30 s ring
    slots = agg.store.slots
    agg.store.request(BERT, 120.0, None, NOW + 25.5, 600.0)
    assert agg.store.span_s >= 120.0
    feed(agg, NOW + 26, [float(i) for i in range(25, 100)])  # 25..99
    # The workload's own pod grew its ring; the shared length did not change.
    assert agg.store.ring_of(BERT, "bert-1") == 121
    assert agg.store.slots == slots
    now = NOW + 100.5
    m = message(agg, now)
    assert m.window_s == 120.0
    # Every sample since the start is still there: the mean of 0..99.
    assert m.averages["gpu_util"] == pytest.approx(49.5)


def test_a_longer_window_than_was_kept_says_where_its_averages_start() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0))
    feed(agg, NOW + 1, [50.0] * 60)  # a minute under the 30 s window: only the last 30 s are kept
    asked_at = NOW + 60.5
    agg.store.request(BERT, 60.0, None, asked_at, 120.0)
    m = message(agg, asked_at + 1.0)
    assert m.window_s == 60.0
    assert m.since == pytest.approx(asked_at - 30.0)
    # Once the window has passed that point, the averages cover it all again.
    feed(agg, NOW + 61, [50.0] * 40)
    assert message(agg, NOW + 100.5).since is UNSET


def test_a_shorter_window_drops_what_it_no_longer_covers() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0))
    feed(agg, NOW + 1, [10.0] * 25 + [90.0] * 5)
    assert message(agg, NOW + 30.5).averages["gpu_util"] == pytest.approx((10 * 25 + 90 * 5) / 30)
    agg.store.request(BERT, 5.0, None, NOW + 30.5, 60.0)
    m = message(agg, NOW + 30.6)
    assert (m.window_s, m.averages["gpu_util"]) == (5.0, pytest.approx(90.0))
    assert m.since is UNSET


def test_a_request_lapses_without_repetition_and_the_default_window_returns() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0))
    agg.store.request(BERT, 10.0, 3.0, NOW, 20.0)
    feed(agg, NOW + 1, [50.0] * 25)
    assert message(agg, NOW + 19.5).window_s == 10.0
    m = message(agg, NOW + 25.5)
    assert m.window_s == 30.0
    assert m.recent_s is UNSET
    assert BERT not in agg.store.wanted


def test_windows_outside_the_bounds_are_clamped_and_say_so() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=60.0, bucket_s=1.0))
    taken, why = agg.store.request(BERT, 600.0, 900.0, NOW, 60.0)
    assert taken is not None
    assert (taken.window_s, taken.recent_s, why) == (60.0, 60.0, CLAMPED)
    taken, why = agg.store.request(BERT, 0.1, None, NOW, 60.0)
    assert taken is not None
    assert (taken.window_s, why) == (1.0, CLAMPED)
    taken, why = agg.store.request(BERT, 20.0, 2.0, NOW, 60.0)
    assert taken is not None
    assert (taken.window_s, taken.recent_s, why) == (20.0, 2.0, "")


def test_the_number_of_workloads_with_a_window_of_their_own_is_bounded() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0, max_requests=2))
    assert agg.store.request(("a", "Deployment", "x"), 10.0, None, NOW, 60.0)[0] is not None
    assert agg.store.request(("b", "Deployment", "x"), 10.0, None, NOW, 60.0)[0] is not None
    assert agg.store.request(("c", "Deployment", "x"), 10.0, None, NOW, 60.0) == (None, TOO_MANY)
    # One already held may still change its window.
    taken, _ = agg.store.request(("a", "Deployment", "x"), 20.0, None, NOW, 60.0)
    assert taken is not None
    assert taken.window_s == 20.0


def test_recent_means_show_a_saturated_pod_before_the_window_does() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0))
    agg.store.request(BERT, 30.0, 3.0, NOW, 120.0)
    feed(agg, NOW + 1, [30.0] * 25 + [100.0] * 4, engine=[0.0] * 25 + [8.0, 16.0, 24.0, 32.0])
    m = message(agg, NOW + 29.5)
    (pod,) = m.pods
    assert m.recent_s == 3.0
    assert m.averages["gpu_util"] == pytest.approx((30 * 25 + 100 * 4) / 29)
    # The last 3 s: samples at +27, +28, +29 (the one at +26 is on the edge, out).
    assert pod.recent is not UNSET
    assert pod.recent["gpu_util"] == pytest.approx(100.0)
    assert pod.recent["requests_waiting"] == pytest.approx((16 + 24 + 32) / 3)
    # A workload whose policy asked for none gets no recent means.
    feed(agg, NOW + 1, [30.0] * 29, pod="llama-1", workload="llama")
    llama = message(agg, NOW + 29.5, "llama")
    assert llama.recent_s is UNSET
    assert llama.pods[0].recent is UNSET


def test_recent_means_of_a_pod_silent_for_longer_than_the_span_are_empty() -> None:
    agg = Aggregator(WindowConfig(window_s=30.0))
    agg.store.request(BERT, 30.0, 3.0, NOW, 120.0)
    feed(agg, NOW + 1, [60.0] * 10)
    (pod,) = message(agg, NOW + 20.5).pods
    assert pod.values["gpu_util"] == pytest.approx(60.0)
    assert pod.recent is not UNSET
    assert len(pod.recent) == 0


@pytest.mark.parametrize("grow_to", [31.0, 45.0, 299.0])
def test_growing_the_rings_keeps_every_running_total_exact(grow_to: float) -> None:
    """Several pods, engines, late samples: after a resize, window means equal the exact means."""
    agg = Aggregator(WindowConfig(window_s=30.0, max_window_s=300.0))
    values = [float((7 * i) % 97) for i in range(40)]
    feed(agg, NOW + 1, values, engine=[float(i % 5) for i in range(40)])
    feed(agg, NOW + 1, values[::-1], pod="bert-2")
    agg.store.request(BERT, grow_to, None, NOW + 40.5, 120.0)
    feed(agg, NOW + 41, values[:20], engine=[1.0] * 20)
    feed(agg, NOW + 41, values[20:], pod="bert-2")
    now = NOW + 60.5
    m = message(agg, now)
    # The 31-bucket ring held +10..+40 when it grew (no publish had evicted its oldest yet).
    first = max(now - grow_to, NOW + 9.5)
    series = values + values[:20]
    times = [NOW + 1 + i for i in range(60)]
    expected = [v for t, v in zip(times, series, strict=True) if t > first]
    pod1 = next(p for p in m.pods if p.pod == "bert-1")
    assert pod1.values["gpu_util"] == pytest.approx(sum(expected) / len(expected), rel=1e-5)
    engine = [float(i % 5) for i in range(40)] + [1.0] * 20
    expected_waiting = [v for t, v in zip(times, engine, strict=True) if t > first]
    assert pod1.values["requests_waiting"] == pytest.approx(sum(expected_waiting) / len(expected_waiting))
    pod2 = next(p for p in m.pods if p.pod == "bert-2")
    series2 = values[::-1] + values[20:]
    expected2 = [v for t, v in zip(times, series2, strict=True) if t > first]
    assert pod2.values["gpu_util"] == pytest.approx(sum(expected2) / len(expected2), rel=1e-5)
