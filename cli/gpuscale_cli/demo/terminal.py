"""The terminal view: one frame rendered from the observer's state (pure), drawn in place."""

from __future__ import annotations

import sys
from typing import TextIO

from gpuscale_cli.demo.observer import DemoState, WorkloadView

CLEAR = "\x1b[H\x1b[J"


def _bar(value: float | None, full: float, width: int = 30) -> str:
    if value is None or full <= 0:
        return " " * width
    filled = max(0, min(width, round(width * value / full)))
    return "█" * filled + "·" * (width - filled)


def _workload_lines(view: WorkloadView, now_t: float) -> list[str]:
    p = view.latest()
    target_txt = "—" if view.target is None else f"{view.target:g}"
    lines = [f"workload   {view.key}  (scaled on {view.metric}, target {target_txt})"]
    if p is not None:
        value = p.gpu_util_avg if view.metric == "gpu_util" else p.metric_avg
        shown = "—" if value is None else f"{value:5.1f}"
        full = 100.0 if view.metric in ("gpu_util", "kv_cache_usage") else max(2 * (view.target or 1.0), 1.0)
        lines += [
            f"load       {'—' if p.load is None else f'{p.load:6.1f}'} GPU-%  {_bar(p.load, max(view.max_load, 1.0))}",
            f"{view.metric:<10} {shown} / target {target_txt}  {_bar(value, full)}",
        ]
        if view.metric != "gpu_util":
            util = "—" if p.gpu_util_avg is None else f"{p.gpu_util_avg:5.1f}"
            lines.append(f"gpu_util   {util}  {_bar(p.gpu_util_avg, 100.0)}")
        lines.append(
            f"replicas   {p.replicas if p.replicas is not None else '—'} (ready {view.ready if view.ready is not None else '—'})"
            f" → desired {p.desired if p.desired is not None else '—'}   [min {view.limits.min_replicas}, max {view.limits.max_replicas}]"
        )
    if view.record.decisions:
        d = view.record.decisions[-1]
        lines += [
            f"last decision ({now_t - d.t:.0f}s ago): {d.from_replicas} → {d.to_replicas}",
            f"  {d.reason}",
        ]
    if view.record.actions:
        a = view.record.actions[-1]
        lines.append(
            f"last action: {a.outcome} {a.replicas_before} → {a.replicas_after}"
            + (f" ({a.error})" if a.error else "")
        )
    lines.append(f"decisions {len(view.record.decisions)} · actions {len(view.record.actions)}")
    return lines


def render(state: DemoState, now_t: float, duration_s: float | None, ui_url: str) -> str:
    lines = [
        f"gpuscale demo · profile {state.profile} · t={now_t:.0f}s"
        + (f"/{duration_s:.0f}s" if duration_s else " (Ctrl-C to stop)"),
        f"web page: {ui_url}",
        "",
    ]
    views = [v for k, v in state.views.items() if k]
    if not views:
        lines.append("workload   (waiting for the GPUScaler)")
    for i, view in enumerate(views):
        if i:
            lines.append("")
        lines += _workload_lines(view, now_t)
    return "\n".join(lines)


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
