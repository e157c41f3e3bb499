"""The terminal view: one frame rendered from the observer's state (pure), drawn in place.

A frame is cut to the terminal's size, so nothing scrolls away."""

from __future__ import annotations

import sys
from typing import TextIO

from gpuscale_cli.demo.observer import DemoState, WorkloadView
from gpuscale_cli.demo.report import NEEDED_PER_POD, needed_replicas

CLEAR = "\x1b[H\x1b[J"
SIZE = (80, 24)
BAR = 30
# A pod carries at most this much load (GPU-%): the load bar's scale is the most pods at it.
POD_FULL = 100.0


def _bar(value: float | None, full: float, width: int = BAR) -> str:
    if value is None or full <= 0:
        return " " * width
    filled = max(0, min(width, round(width * value / full)))
    return "█" * filled + "·" * (width - filled)


def _num(value: float | None, fmt: str = ".1f") -> str:
    return "—" if value is None else format(value, fmt)


def _ago(seconds: float) -> str:
    return "just now" if seconds < 1.0 else f"{seconds:.0f} s ago"


def _workload_lines(view: WorkloadView) -> list[str]:
    p = view.latest()
    lim = view.limits
    target_txt = "—" if view.target is None else f"{view.target:g}"
    lines = [
        f"{view.key} · {view.metric}, target {target_txt} · replicas {lim.min_replicas}..{lim.max_replicas}"
    ]
    if p is not None:
        full = lim.max_replicas * POD_FULL
        lines.append(
            f"load      {_num(p.load, '5.0f')} GPU-%  {_bar(p.load, full)}"
            f" of {full:.0f} ({lim.max_replicas} pods × {POD_FULL:.0f})"
        )
        window = p.gpu_util_avg if view.metric == "gpu_util" else p.metric_avg
        recent = "" if p.recent_avg is None else f" · recent mean {p.recent_avg:.1f}"
        if recent and view.recent_s:
            recent += f" (last {view.recent_s:g} s)"
        lines.append(f"{view.metric:<9} window mean {_num(window)}{recent} · target {target_txt}")
        if view.metric != "gpu_util":
            lines.append(f"gpu_util  window mean {_num(p.gpu_util_avg)} %")
        needed = (
            None
            if p.load is None
            else needed_replicas(p.load, NEEDED_PER_POD, lim.min_replicas, lim.max_replicas)
        )
        lines.append(
            f"replicas  {_num(p.replicas, 'd')} (ready {_num(view.ready, 'd')}) → desired {_num(p.desired, 'd')}"
            f" · needed {_num(needed, 'd')} (load ÷ {NEEDED_PER_POD:g})"
        )
    if view.record.decisions:
        d = view.record.decisions[-1]
        # On the state's clock (the timeline's), as the decision's own time is.
        ago = max(0.0, (p.t if p is not None else d.t) - d.t)
        used = "" if d.value is None else f" on {d.basis or 'a value of'} {d.value:.1f}"
        lines += [f"decided   {d.from_replicas} → {d.to_replicas}{used} ({_ago(ago)})", f"  {d.reason}"]
    counts = f"decisions {len(view.record.decisions)} · actions {len(view.record.actions)}"
    if view.record.actions:
        a = view.record.actions[-1]
        error = f" ({a.error})" if a.error else ""
        counts = f"last action {a.outcome} {a.replicas_before} → {a.replicas_after}{error} · {counts}"
    lines.append(counts)
    return lines


def _fit(line: str, width: int) -> str:
    return line if len(line) <= width else line[: width - 1] + "…"


def render(
    state: DemoState, now_t: float, duration_s: float | None, ui_url: str, size: tuple[int, int] = SIZE
) -> str:
    """One frame of at most ``size`` (columns, lines), less the line the cursor rests on."""
    width, height = size
    lines = [
        f"gpuscale demo · profile {state.profile} · t={now_t:.0f}s"
        + (f"/{duration_s:.0f}s" if duration_s else " (Ctrl-C to stop)"),
        f"web page: {ui_url}",
        "",
    ]
    views = state.followed()
    if not views:
        lines.append("waiting for the GPUScaler…")
    for i, view in enumerate(views):
        if i:
            lines.append("")
        lines += _workload_lines(view)
    return "\n".join(_fit(line, width) for line in lines[: max(2, height - 1)])


class TerminalView:
    """In place on a terminal; a line every ``plain_every_s`` otherwise (logs, CI)."""

    def __init__(self, stream: TextIO | None = None, plain_every_s: float = 10.0) -> None:
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()
        self.plain_every_s = plain_every_s
        self._last_plain = -plain_every_s

    def draw(self, frame: str, now_t: float) -> None:
        if self.tty:
            self.stream.write(CLEAR + frame + "\n")
        elif now_t - self._last_plain >= self.plain_every_s:
            self._last_plain = now_t
            compact = " | ".join(line.strip() for line in frame.splitlines()[3:7] if line.strip())
            self.stream.write(f"[t={now_t:5.0f}s] {compact}\n")
        self.stream.flush()
