"""The pure cores read no clock and run no loop: ``now`` is passed in.

import-linter keeps I/O packages (asyncio among them) out of every ``*/core``; ruff's banned-api
cannot be scoped to a folder, so this test reads each core module's syntax tree for the calls
that read the wall or monotonic clock.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE_ROOTS = ("services", "shared", "kubesim", "cli")

# What a core may not touch: the clocks of ``time`` and the "now" constructors of ``datetime``.
TIME_CLOCKS = frozenset(
    {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "process_time"}
)
DATETIME_NOWS = frozenset({"now", "utcnow", "today"})
LOOP_MODULES = frozenset({"asyncio", "trio", "anyio"})


def core_modules() -> list[Path]:
    found = [
        path
        for top in SOURCE_ROOTS
        for path in (ROOT / top).rglob("*.py")
        if "core" in path.relative_to(ROOT).parts[:-1] and "__pycache__" not in path.parts
    ]
    return sorted(found)


def _dotted(node: ast.expr) -> str | None:
    """``a.b.c`` as a string, or None for anything that is not a plain name chain."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    parts.append(node.id)
    return ".".join(reversed(parts))


def clock_reads(source: str, filename: str = "<core>") -> list[str]:
    """Every clock read, clock import or event-loop import in ``source``, as ``file:line: what``."""
    tree = ast.parse(source, filename)
    # Local names bound to the modules and classes that own a clock, resolved to their real names.
    aliases: dict[str, str] = {}
    found: list[str] = []

    def flag(node: ast.AST, what: str) -> None:
        found.append(f"{filename}:{getattr(node, 'lineno', 0)}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for name in node.names:
                root = name.name.split(".")[0]
                if root in LOOP_MODULES:
                    flag(node, f"imports {name.name}")
                if root in ("time", "datetime"):
                    aliases[name.asname or root] = name.name if name.asname else root
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            root = node.module.split(".")[0]
            if root in LOOP_MODULES:
                flag(node, f"imports from {node.module}")
            for name in node.names:
                if node.module == "time" and name.name in TIME_CLOCKS:
                    flag(node, f"imports time.{name.name}")
                if node.module == "datetime" and name.name in ("datetime", "date"):
                    aliases[name.asname or name.name] = f"datetime.{name.name}"

    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        owner = _dotted(node.value)
        if owner is None:
            continue
        head, _, rest = owner.partition(".")
        if head not in aliases:
            continue
        real = aliases[head] + (f".{rest}" if rest else "")
        if real == "time" and node.attr in TIME_CLOCKS:
            flag(node, f"reads time.{node.attr}")
        elif real in ("datetime.datetime", "datetime.date") and node.attr in DATETIME_NOWS:
            flag(node, f"reads {real}.{node.attr}")
    return sorted(set(found))


def test_every_core_module_is_found_in_every_service() -> None:
    services = {
        path.relative_to(ROOT).parts[1]
        for path in core_modules()
        if path.relative_to(ROOT).parts[0] == "services"
    }
    on_disk = {p.name for p in (ROOT / "services").iterdir() if (p / f"gpuscale_{p.name}" / "core").is_dir()}
    assert on_disk, "no service has a core folder: the search looks in the wrong place"
    assert services == on_disk


def test_no_core_module_reads_a_clock_or_imports_an_event_loop() -> None:
    reads = [
        read
        for path in core_modules()
        for read in clock_reads(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))
    ]
    assert not reads, "a pure core takes `now` as a parameter:\n" + "\n".join(reads)


def test_the_check_sees_every_spelling_of_a_clock_read() -> None:
    source = "\n".join(
        [
            "import time",
            "import time as t",
            "import datetime as dt",
            "from datetime import datetime, date as d",
            "from time import monotonic",
            "import asyncio",
            "from asyncio import sleep",
            "a = time.time()",
            "b = t.perf_counter()",
            "c = dt.datetime.now(dt.UTC)",
            "e = datetime.utcnow()",
            "f = d.today()",
        ]
    )
    assert set(clock_reads(source, "core.py")) == {
        "core.py:5: imports time.monotonic",
        "core.py:6: imports asyncio",
        "core.py:7: imports from asyncio",
        "core.py:8: reads time.time",
        "core.py:9: reads time.perf_counter",
        "core.py:10: reads datetime.datetime.now",
        "core.py:11: reads datetime.datetime.utcnow",
        "core.py:12: reads datetime.date.today",
    }


def test_what_a_core_may_do_with_time_is_not_flagged() -> None:
    source = "\n".join(
        [
            "import datetime as dt",
            "from datetime import datetime",
            "x = dt.datetime.fromtimestamp(0, dt.UTC)",
            "y = datetime.fromisoformat('2024-01-01T00:00:00+00:00')",
            "def step(now: float) -> float:",
            "    return now + 1.0",
        ]
    )
    assert clock_reads(source) == []
