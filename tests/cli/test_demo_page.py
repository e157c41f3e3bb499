"""The demo's web page in headless Chromium: it loads, draws the charts and updates."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import tempfile

import pytest

from gpuscale_cli.demo import ui
from gpuscale_cli.demo.observer import DemoState
from gpuscale_cli.demo.report import DecisionRecord, TimelinePoint

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        CHROMIUM is None,
        reason="Debian's chromium is not installed on this machine (apt-get install chromium)",
    ),
]


def _dump_dom(url: str) -> str:
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory() as profile:
        result = subprocess.run(
            [
                CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                f"--user-data-dir={profile}", "--virtual-time-budget=4000", "--dump-dom", url,
            ],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout


def _points(dom: str, chart: str) -> int:
    match = re.search(rf'id="{chart}"[^>]*data-points="(\d+)"', dom) or re.search(
        rf'data-points="(\d+)"[^>]*id="{chart}"', dom
    )
    assert match, f"{chart} not in page"
    return int(match.group(1))


def _add_seconds(state: DemoState, start: int, stop: int) -> None:
    for t in range(start, stop):
        load = 30.0 if t < 20 else 90.0
        replicas = 1 if t < 35 else 2
        state.record.timeline.append(TimelinePoint(float(t), load, replicas, replicas, load / replicas))


async def test_page_loads_draws_charts_and_updates() -> None:
    state = DemoState("step")
    state.workload, state.target = "default/bert-intent-detection", 70.0
    _add_seconds(state, 0, 30)
    runner, port = await ui.start(state, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{port}/"
        first = await asyncio.to_thread(_dump_dom, url)
        assert "default/bert-intent-detection" in first
        assert _points(first, "chart-load-0") == 30
        assert _points(first, "chart-util-0") == 60  # the average and the target line
        assert _points(first, "chart-replicas-0") == 90  # needed, current, desired
        assert 'class="decision"' not in first
        assert 'id="workload-1"' not in first  # one workload: one section, no comparison

        _add_seconds(state, 30, 60)
        state.record.decisions.append(
            DecisionRecord(
                33.0,
                0.0,
                1,
                2,
                "gpu_util 90.0 over target 70 (ratio 1.29) on 1 of 1 pods: ceil(1 × 1.29) = 2",
                "d-1",
            )
        )
        second = await asyncio.to_thread(_dump_dom, url)
        assert _points(second, "chart-load-0") == 60
        assert second.count('class="decision"') == 1
        assert "ceil(1 × 1.29) = 2" in second
    finally:
        await runner.cleanup()


async def test_the_llm_profile_shows_both_workloads_side_by_side() -> None:
    """``--profile llm``: the queue-scaled and the util-scaled workload, each with its
    own charts and decisions, and one chart comparing their replicas with the need."""
    state = DemoState("llm")
    for key, metric, target in (
        ("default/llm-queue", "requests_waiting", 4.0),
        ("default/llm-util", "gpu_util", 70.0),
    ):
        view = state.view(key)
        view.metric, view.target = metric, target
        for t in range(40):
            load = 60.0 if t < 10 else 260.0
            waiting = 0.0 if t < 12 else 9.0
            view.record.timeline.append(
                TimelinePoint(float(t), load, 1 if t < 20 else 4, 4, 100.0, waiting, waiting)
            )
    state.views["default/llm-queue"].record.decisions.append(
        DecisionRecord(
            15.0, 0.0, 1, 4, "requests_waiting 9.0 over target 4 (ratio 2.25) on 1 of 1 pods", "d-q"
        )
    )
    runner, port = await ui.start(state, "127.0.0.1", 0)
    try:
        dom = await asyncio.to_thread(_dump_dom, f"http://127.0.0.1:{port}/")
    finally:
        await runner.cleanup()
    assert "default/llm-queue · scaled on requests_waiting" in dom
    assert "default/llm-util · scaled on gpu_util" in dom
    assert _points(dom, "chart-load-0") == _points(dom, "chart-load-1") == 40
    # requests_waiting: its average, the target, and gpu_util beside it.
    assert _points(dom, "chart-util-0") == 120
    assert _points(dom, "chart-util-1") == 80
    assert _points(dom, "chart-compare") == 120  # needed and both workloads' replicas
    assert dom.count('class="decision"') == 1
    assert "requests_waiting 9.0 over target 4" in dom
