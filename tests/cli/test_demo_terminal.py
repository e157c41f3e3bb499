"""The demo's terminal view: a frame fits 80×24 with its title and address on top,
the load bar has one fixed scale, and a decision's age is never negative."""

from __future__ import annotations

import re

from gpuscale_cli.demo import terminal
from gpuscale_cli.demo.observer import DemoState
from gpuscale_cli.demo.report import ActionRecord, DecisionRecord, Limits, TimelinePoint

URL = "http://127.0.0.1:8080/"
LONG_REASON = (
    "gpu_util: estimated demand 235.7 GPU-% over target 70 (ratio 3.37) on 1 of 1 pod: ceil(1 × 3.37) = 4; "
    "gpu_util pinned at its ceiling on every counted pod (100.0 over the last 3 s; the window's mean 48.2 "
    "understates demand); the engines' flows size the step"
)


def llm_run(seconds: int = 60, decided_at: float = 30.0) -> DemoState:
    """The llm profile's two workloads, each with a long reason and an action."""
    state = DemoState("llm")
    for key, metric, target in (
        ("default/llm-queue", "requests_waiting", 4.0),
        ("default/llm-util", "gpu_util", 70.0),
    ):
        view = state.view(key)
        view.metric, view.target, view.ready, view.recent_s = metric, target, 2, 3.0
        view.record.limits = Limits(1, 10)
        for t in range(seconds):
            view.record.timeline.append(TimelinePoint(float(t), 260.0, 2, 4, 99.0, 9.0, 9.0, 12.0))
        view.record.decisions.append(
            DecisionRecord(decided_at, 0.0, 2, 4, LONG_REASON, "d-1", 235.7, "estimated demand")
        )
        view.record.actions.append(ActionRecord(decided_at + 0.2, 0.0, "d-1", "applied", 2, 4, None))
    return state  # fmt: skip


def test_two_workloads_fit_80_by_24_with_the_title_and_address_on_top() -> None:
    frame = terminal.render(llm_run(), 42.0, 120.0, URL)
    lines = frame.split("\n")
    assert len(lines) <= 23  # the 24th holds the cursor: nothing scrolls
    assert max(len(line) for line in lines) <= 80, max(lines, key=len)
    assert lines[0] == "gpuscale demo · profile llm · t=42s/120s"
    assert lines[1] == f"web page: {URL}"
    assert sum(line.startswith("default/llm-") for line in lines) == 2  # both workloads shown
    assert any(line.endswith("…") for line in lines)  # the long reason is cut, not wrapped


def test_a_smaller_terminal_keeps_the_title_and_address() -> None:
    lines = terminal.render(llm_run(), 42.0, None, URL, size=(60, 10)).split("\n")
    assert len(lines) <= 9
    assert max(len(line) for line in lines) <= 60
    assert lines[0].startswith("gpuscale demo · profile llm")
    assert lines[1] == f"web page: {URL}"


def test_the_load_bar_has_a_fixed_scale_of_100_per_pod() -> None:
    """200 GPU-% of load on a workload of at most 10 pods fills a fifth of the bar,
    whatever the largest load seen was."""
    state = llm_run()
    view = state.views["default/llm-util"]
    view.record.timeline.append(TimelinePoint(60.0, 200.0, 3, 3, 66.0))
    for max_load_seen in (200.0, 900.0):
        view.max_load = max_load_seen
        line = next(
            line
            for line in terminal.render(state, 60.0, None, URL).split("\n")[12:]
            if line.startswith("load")
        )
        bar = re.search(r"[█·]+", line)
        assert bar is not None
        assert bar.group().count("█") == 6, line  # 200 / 1000 of 30
        assert "of 1000 (10 pods × 100)" in line


def test_a_decision_newer_than_the_last_poll_is_just_now_never_negative() -> None:
    """The decision's time and the view's are one clock (the state's); a decision that
    arrives after the last poll was drawn as "(-0s ago)"."""
    frame = terminal.render(llm_run(seconds=30, decided_at=29.6), 31.0, None, URL)
    assert "-0s" not in frame
    assert "ago)" not in frame.replace("just now", "")
    assert "decided   2 → 4 on estimated demand 235.7 (just now)" in frame
    later = terminal.render(llm_run(seconds=60, decided_at=29.6), 61.0, None, URL)
    assert "(29 s ago)" in later


def test_the_metric_line_names_window_and_recent_means() -> None:
    frame = terminal.render(llm_run(), 42.0, None, URL)
    assert "gpu_util  window mean 99.0 · recent mean 12.0 (last 3 s) · target 70" in frame
    assert "requests_waiting window mean 9.0 · recent mean 12.0 (last 3 s) · target 4" in frame
