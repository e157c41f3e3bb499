"""shadow-report's comparison, scenario by scenario: gpuscale's advice against
the live controller's changes, as a platform engineer reads them before cutting over."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuscale_cli.shadow.app import hpa_changes
from gpuscale_cli.shadow.compare import Advice, LiveChange, compare

T = 1_800_000_000.0
HPA = "HorizontalPodAutoscaler ml/bert"


def advice(dt: float, frm: int, to: int) -> Advice:
    return Advice(T + dt, frm, to)


def hpa(dt: float, replicas: int) -> LiveChange:
    return LiveChange(T + dt, replicas, HPA)


def test_scale_up_gpuscale_earlier_by_the_hpas_delay() -> None:
    """gpuscale advises 2 -> 4 at 0 s; the HPA gets there at 45 s."""
    report = compare(
        [advice(0, 2, 4), advice(50, 4, 4)], [hpa(45, 4)], end=T + 100, live_now=4, gpus_per_replica=1
    )
    assert report is not None
    (up,) = report.advised
    assert (up.from_replicas, up.to_replicas, up.reached_at, up.lead_s) == (2, 4, T + 45, 45)
    (live,) = report.live
    assert (live.from_replicas, live.to_replicas, live.source, live.lead_s) == (2, 4, HPA, 45)
    # 2 replicas more for 45 s, 1 GPU each: 90 GPU-seconds gpuscale would have spent.
    assert (report.extra_gpu_s, report.saved_gpu_s) == (90, 0)


def test_scale_up_in_steps_is_matched_where_the_live_count_reaches_the_advice() -> None:
    """The HPA climbs 2 -> 3 -> 4; the advice 2 -> 4 is reached at the second step."""
    report = compare([advice(0, 2, 4)], [hpa(15, 3), hpa(30, 4)], end=T + 60, live_now=4, gpus_per_replica=2)
    assert report is not None
    (up,) = report.advised
    assert up.lead_s == 30
    # The live 2 -> 3 step: gpuscale had asked for at least 3 since 0 s; 3 -> 4 too.
    assert [(m.to_replicas, m.lead_s) for m in report.live] == [(3, 15), (4, 30)]
    assert report.extra_gpu_s == 2 * (2 * 15 + 1 * 15)


def test_gpuscale_later_than_the_live_controller() -> None:
    """The HPA goes to 4 at 10 s; gpuscale, seeing 4, agrees only at 25 s (keep 4)."""
    report = compare(
        [advice(0, 2, 2), advice(25, 4, 4)], [hpa(10, 4)], end=T + 60, live_now=4, gpus_per_replica=1
    )
    assert report is not None
    assert report.advised[0].to_replicas == 4
    assert report.advised[0].lead_s == -15  # the advised count reached 4 at 25 s, the live at 10 s
    (live,) = report.live
    assert live.lead_s == -15
    assert (report.extra_gpu_s, report.saved_gpu_s) == (0, 2 * 15)


def test_a_scale_down_gpuscale_would_make_and_the_live_controller_never_does() -> None:
    """Idle at night: gpuscale would go 4 -> 1, the live controller stays at 4."""
    report = compare([advice(0, 4, 1)], [], end=T + 3600, live_now=4, gpus_per_replica=1)
    assert report is not None
    (down,) = report.advised
    assert (down.reached_at, down.lead_s) == (None, None)
    assert report.live == ()
    assert (report.extra_gpu_s, report.saved_gpu_s) == (0, 3 * 3600)
    assert report.net_gpu_s == -3 * 3600


def test_an_advice_withdrawn_before_the_live_count_reaches_it_is_never_reached() -> None:
    """gpuscale wants 6 for 20 s, then 3; the HPA reaches 6 only at 40 s."""
    report = compare(
        [advice(0, 3, 6), advice(20, 3, 3)], [hpa(40, 6)], end=T + 60, live_now=6, gpus_per_replica=1
    )
    assert report is not None
    up, back = report.advised
    assert (up.to_replicas, up.reached_at) == (6, None)
    # Back to the live count it had left: agreement again, neither earlier nor later.
    assert (back.to_replicas, back.reached_at, back.lead_s) == (3, T, None)
    (live_up,) = report.live
    assert live_up.reached_at is None  # gpuscale no longer asked for 6 when the HPA got there


def test_the_deciders_view_fills_in_changes_nobody_reported() -> None:
    """Events are kept an hour: older live changes come from the counts the decider saw."""
    report = compare(
        [advice(0, 2, 4), advice(30, 4, 4), advice(7200, 2, 2)],
        [],
        end=T + 7300,
        live_now=2,
        gpus_per_replica=1,
    )
    assert report is not None
    sources = [(m.from_replicas, m.to_replicas, m.source) for m in report.live]
    assert sources == [(2, 4, "seen by the decider"), (4, 2, "seen by the decider")]


def test_an_event_stands_over_the_deciders_stale_view_of_the_same_moment() -> None:
    """The decider read the scale just before the HPA's change landed: no phantom 4 -> 2 -> 4."""
    report = compare(
        [advice(0, 2, 4), advice(11, 2, 3), advice(13, 4, 4)],
        [hpa(10, 4)],
        end=T + 30,
        live_now=4,
        gpus_per_replica=1,
    )
    assert report is not None
    assert [(m.from_replicas, m.to_replicas) for m in report.live] == [(2, 4)]


def test_no_advice_no_report() -> None:
    assert compare([], [hpa(0, 3)], end=T, live_now=3, gpus_per_replica=1) is None


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("New size: 4; reason: cpu resource utilization (percentage of request) above target", 4),
        ("New size: 1; reason: All metrics below target", 1),
    ],
)
def test_the_hpa_controllers_rescale_events_are_read(message: str, expected: int) -> None:
    """pkg/controller/podautoscaler/horizontal.go: reason SuccessfulRescale, "New size: %d; reason: %s"."""
    event = {"reason": "SuccessfulRescale", "message": message, "lastTimestamp": "2027-01-15T08:00:00Z"}
    (change,) = hpa_changes(HPA, [event, {"reason": "FailedGetResourceMetric", "message": "New size: 9;"}])
    assert (change.replicas, change.source) == (expected, HPA)
    assert change.ts == datetime(2027, 1, 15, 8, 0, 0, tzinfo=UTC).timestamp()
