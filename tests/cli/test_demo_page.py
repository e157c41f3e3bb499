"""The demo's web page in headless Chromium: it loads, draws the charts and updates,
and a person can read it at 1400 and 800 px wide (ticks, units, lines apart, the
decisions table full width). Set GPUSCALE_SCREENSHOT_DIR to keep the screenshots."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
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
        assert _points(first, "chart-util-0") == 90  # the window mean, the recent mean, the target
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
    # requests_waiting: its window and recent means, the target, and gpu_util beside it.
    assert _points(dom, "chart-util-0") == 160
    assert _points(dom, "chart-util-1") == 120
    assert _points(dom, "chart-compare") == 120  # needed and both workloads' replicas
    assert dom.count('class="decision"') == 1
    assert "requests_waiting 9.0 over target 4" in dom


# --- read as a person reads it: the laid-out page, at two widths ------------------------

WIDTHS = (1400, 800)
ESTIMATE_REASON = (
    "gpu_util: estimated demand 235.7 GPU-% over target 70 (ratio 3.37) on 1 of 1 pod: ceil(1 × 3.37) = 4; "
    "gpu_util pinned at its ceiling on every counted pod (100.0 over the last 3 s; the window's mean 48.2 "
    "understates demand); the engines' flows size the step: 13.3 requests/s arrive per pod and 5.6/s finish"
)
# Everything the test reads, in one evaluation (the page redraws every second).
MEASURE = """JSON.stringify((() => {
  const q = (root, s) => Array.from(root.querySelectorAll(s));
  const box = e => { const r = e.getBoundingClientRect(); return {left: r.left, right: r.right, width: r.width}; };
  const charts = q(document, "svg.chart").filter(s => s.getBoundingClientRect().width > 0).map(s => ({
    id: s.id,
    xticks: q(s, ".tick-x").map(t => ({text: t.textContent, ...box(t)})),
    yticks: q(s, ".tick-y").map(t => t.textContent),
    xlabel: (s.querySelector(".axis-x") || {}).textContent,
    ylabel: (s.querySelector(".axis-y") || {}).textContent,
    series: Object.fromEntries(q(s, "path.series").map(p => [p.classList[1].slice(7), {
      stroke: p.getAttribute("stroke"), width: +p.getAttribute("stroke-width"),
      dash: p.getAttribute("stroke-dasharray"), d: p.getAttribute("d")}])),
    markers: q(s, ".marker title").map(t => t.textContent),
  }));
  const text = id => (document.getElementById(id) || {}).textContent;
  return {
    charts: charts,
    table: box(document.getElementById("table-decisions-0")),
    section: box(document.getElementById("workload-0")),
    rows: q(document, "tr.decision").map(r => q(r, "td").map(c => c.textContent)),
    util: text("stat-util-0"), recent: text("stat-recent-0"), used: text("stat-used-0"),
    scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
    // Legends and figures that run out of their card, under the next one.
    spilled: q(document, ".card .legend span, .card .stat").filter(e =>
      e.getBoundingClientRect().right > e.closest(".card").getBoundingClientRect().right + 1).map(e => e.textContent),
    height: document.documentElement.scrollHeight,
  };
})())"""


class Page:
    """One tab of a headless Chromium, driven over the DevTools protocol."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        while True:
            msg = await self.ws.receive_json(timeout=60)
            if msg.get("id") == call_id:
                assert "error" not in msg, msg["error"]
                result: dict[str, Any] = msg.get("result", {})
                return result

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return result["result"].get("value")

    async def wait_for(self, expression: str, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not await self.evaluate(expression):
            assert time.monotonic() < deadline, f"the page never got to: {expression}"
            await asyncio.sleep(0.2)


@contextlib.asynccontextmanager
async def chromium_page() -> AsyncIterator[Page]:
    assert CHROMIUM is not None
    # Chromium's helpers may still write the profile as it is removed (a killed browser's children
    # exit after it, later on a busy machine): what is left is a temporary directory's leftovers.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        proc = await asyncio.create_subprocess_exec(
            CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--hide-scrollbars",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank",
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            port_file = Path(profile) / "DevToolsActivePort"
            deadline = time.monotonic() + 60
            while not (port_file.exists() and port_file.read_text().count("\n") >= 1):
                assert proc.returncode is None, "chromium exited"
                assert time.monotonic() < deadline, "chromium did not start"
                await asyncio.sleep(0.1)
            port = int(port_file.read_text().split()[0])
            async with aiohttp.ClientSession() as http:
                async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
                    tab = next(t for t in await resp.json() if t["type"] == "page")
                async with http.ws_connect(tab["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    yield Page(ws)
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()


def _step_run() -> DemoState:
    """Two minutes of the demo's step: 30 GPU-% of load, 200 from 15 s; replicas that
    catch up and then sit on the desired count; two decisions, one on an estimate."""
    state = DemoState("step")
    state.workload, state.target = "default/bert-intent-detection", 70.0
    view = state.primary
    view.recent_s, view.window_s = 3.0, 30.0
    recents: list[float] = []
    for t in range(120):
        load = 30.0 if t < 15 else 200.0
        replicas = 1 if t < 20 else 3 if t < 45 else 4
        desired = 1 if t < 18 else 3 if t < 40 else 4
        recents.append(min(100.0, load / replicas))
        window = round(sum(recents[-30:]) / len(recents[-30:]), 2)
        view.record.timeline.append(
            TimelinePoint(float(t), load, replicas, desired, window, None, None, recents[-1])
        )
    view.record.decisions += [
        DecisionRecord(
            18.0, 0.0, 1, 3,
            "gpu_util recent mean 100.0 over target 70 (ratio 1.43) on 1 of 1 pod: ceil(1 × 1.43) = 2; ...",
            "d-1", 100.0, "recent mean",
        ),
        DecisionRecord(40.0, 0.0, 3, 4, ESTIMATE_REASON, "d-2", 235.7, "estimated demand"),
    ]  # fmt: skip
    return state


async def _look(page: Page, url: str, width: int, shots: Path) -> dict[str, Any]:
    await page.call(
        "Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False
    )
    await page.call("Page.navigate", url=url)
    await page.wait_for(
        "document.querySelectorAll('tr.decision').length == 2 && "
        "document.querySelectorAll('#chart-replicas-0 .tick-x').length > 2"
    )
    seen: dict[str, Any] = json.loads(await page.evaluate(MEASURE))
    await page.call(
        "Emulation.setDeviceMetricsOverride",
        width=width,
        height=seen["height"],
        deviceScaleFactor=1,
        mobile=False,
    )
    shot = await page.call("Page.captureScreenshot", format="png")
    (shots / f"demo-page-{width}.png").write_bytes(base64.b64decode(shot["data"]))
    return seen


@pytest.mark.parametrize("width", WIDTHS)
async def test_a_person_can_read_the_page_at_each_width(width: int, tmp_path: Path) -> None:
    shots = Path(os.environ.get("GPUSCALE_SCREENSHOT_DIR") or tmp_path)
    await asyncio.to_thread(shots.mkdir, parents=True, exist_ok=True)
    runner, port = await ui.start(_step_run(), "127.0.0.1", 0)
    try:
        async with chromium_page() as page:
            seen = await _look(page, f"http://127.0.0.1:{port}/", width, shots)
    finally:
        await runner.cleanup()
    charts = {c["id"]: c for c in seen["charts"]}
    assert set(charts) == {"chart-load-0", "chart-util-0", "chart-replicas-0"}
    for chart in charts.values():
        # Time runs along every chart in whole seconds since the start, ticks apart.
        ticks = chart["xticks"]
        assert len(ticks) >= 3, ticks
        assert all(re.fullmatch(r"\d+", t["text"]) for t in ticks), ticks
        assert [int(t["text"]) for t in ticks] == sorted(int(t["text"]) for t in ticks)
        assert int(ticks[-1]["text"]) >= 119
        assert all(a["right"] < b["left"] for a, b in itertools.pairwise(ticks)), "tick labels overlap"
        assert chart["xlabel"] == "time since the demo started (s)"
        assert re.search(r"\(.+\)$", chart["ylabel"]), f"no unit on {chart['id']}'s axis: {chart['ylabel']}"
    assert charts["chart-load-0"]["ylabel"] == "load (GPU-%)"
    assert charts["chart-util-0"]["ylabel"] == "gpu_util (%)"
    replicas = charts["chart-replicas-0"]
    assert replicas["ylabel"] == "replicas (pods)"
    assert replicas["yticks"]
    assert all(re.fullmatch(r"\d+", t) for t in replicas["yticks"]), replicas["yticks"]
    # Current, desired and needed lie on one another most of the run: each is drawn apart.
    lines = replicas["series"]
    assert lines["current"]["d"] != "M0 0"
    assert lines["desired"]["d"] != "M0 0"
    looks = {
        name: (s["stroke"], s["width"], s["dash"])
        for name, s in lines.items()
        if name in ("current", "desired", "needed")
    }
    assert len(set(looks.values())) == 3, looks
    assert lines["needed"]["width"] > lines["current"]["width"] > lines["desired"]["width"]
    assert lines["desired"]["dash"] not in ("none", "", None)
    # What decided is what the page shows: the last decision's value, named, and a mark per decision.
    assert seen["used"] == "on estimated demand 235.7 at 40 s"
    assert seen["util"] == "50.0 / 70"
    assert seen["recent"] == "recent mean (last 3 s) 50.0"
    assert sorted(charts["chart-util-0"]["markers"]) == [
        "1 → 3 on recent mean 100.0",
        "3 → 4 on estimated demand 235.7",
    ]
    assert seen["rows"][0][:3] == ["40", "3 → 4", "estimated demand 235.7"]
    assert seen["rows"][0][3] == ESTIMATE_REASON
    # The decisions table spans the workload's width; nothing runs off the side.
    assert seen["table"]["width"] >= 0.95 * seen["section"]["width"], (seen["table"], seen["section"])
    assert seen["scrollWidth"] <= seen["innerWidth"]
    assert seen["spilled"] == []
