"""The terminal view: one frame rendered from the observer's state (pure), drawn in place."""

from __future__ import annotations

import sys
from typing import TextIO

from gpuscale_cli.demo.observer import DemoState

CLEAR = "\x1b[H\x1b[J"


def _bar(value: float | None, full: float, width: int = 30) -> str:
    if value is None or full <= 0:
        return " " * width
    filled = max(0, min(width, round(width * value / full)))
    return "█" * filled + "·" * (width - filled)


def render(state: DemoState, now_t: float, duration_s: float | None, ui_url: str) -> str:
    p = state.latest()
    target = state.target
    lines = [
        f"gpuscale demo · profile {state.profile} · t={now_t:.0f}s"
        + (f"/{duration_s:.0f}s" if duration_s else " (Ctrl-C to stop)"),
        f"web page: {ui_url}",
        "",
        f"workload   {state.workload or '(waiting for the GPUScaler)'}",
    ]
    if p is not None:
        util = "—" if p.gpu_util_avg is None else f"{p.gpu_util_avg:5.1f}"
        target_txt = "—" if target is None else f"{target:.0f}"
        lines += [
            f"load       {'—' if p.load is None else f'{p.load:6.1f}'} GPU-%  {_bar(p.load, max(state.max_load, 1.0))}",
            f"gpu_util   {util} / target {target_txt}  {_bar(p.gpu_util_avg, 100.0)}",
            f"replicas   {p.replicas if p.replicas is not None else '—'} (ready {state.ready if state.ready is not None else '—'})"
            f" → desired {p.desired if p.desired is not None else '—'}   [min {state.limits.min_replicas}, max {state.limits.max_replicas}]",
        ]
    if state.record.decisions:
        d = state.record.decisions[-1]
        lines += [
            "",
            f"last decision ({now_t - d.t:.0f}s ago): {d.from_replicas} → {d.to_replicas}",
            f"  {d.reason}",
        ]
    if state.record.actions:
        a = state.record.actions[-1]
        lines.append(
            f"last action: {a.outcome} {a.replicas_before} → {a.replicas_after}"
            + (f" ({a.error})" if a.error else "")
        )
    lines.append(f"decisions {len(state.record.decisions)} · actions {len(state.record.actions)}")
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
