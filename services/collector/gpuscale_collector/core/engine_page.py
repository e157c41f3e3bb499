"""A pod's metrics page, cut down to the engine table's lines as text or as it streams in, within :class:`PageLimits`. Pure.

A page is a tenant's: what it may cost is bounded (docs/ARCHITECTURE.md#fault-model).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gpuscale_collector.core.engine_series import FINISHED, SERIES

# Lines the shell hands to the parser: the samples of these families and their
# TYPE lines (a sample line starts with its family's name: gauges have no suffix,
# counters ``_total`` or none). Of a histogram only ``_count``: its buckets are
# most of the page.
_LINE_PREFIXES: Final = (
    tuple(SERIES)
    + tuple(f"# TYPE {name}" for name in SERIES)
    + tuple(spec.family if spec.kind == "counter" else spec.sample for spec in FINISHED)
    + tuple(f"# TYPE {spec.family}" for spec in FINISHED)
)


def select_lines(text: str) -> str:
    """The lines of ``text`` of the families read here (and their TYPE lines), for the parser."""
    return "\n".join(line for line in text.splitlines() if line.startswith(_LINE_PREFIXES))


# --- what a page may cost ---------------------------------------------------------------

# Defaults, each far above what a real engine serves (tests/fixtures/engine_metrics).
DEFAULT_MAX_PAGE_BYTES: Final = 2**20
DEFAULT_MAX_PAGE_LINES: Final = 20_000
DEFAULT_MAX_SERIES: Final = 1_000
DEFAULT_MAX_SERIES_BYTES: Final = 2_048
DEFAULT_MAX_LABEL_BYTES: Final = 64 * 1024
# A net for parse costs the other bounds miss, never met by a page they accept (~9 ms idle;
# over 50 ms was seen on a node whose cores were all busy).
DEFAULT_PARSE_BUDGET_S: Final = 0.25
PAGE_REFUSALS: Final = ("too_large", "too_many_lines", "too_many_series", "label_bytes", "parse_time")


@dataclass(frozen=True, slots=True)
class PageLimits:
    """What one pod's page may cost: the page (bytes, lines), and what is kept of it
    for the parser (series, bytes of one series' line, bytes of them all)."""

    max_bytes: int = DEFAULT_MAX_PAGE_BYTES
    max_lines: int = DEFAULT_MAX_PAGE_LINES
    max_series: int = DEFAULT_MAX_SERIES
    max_series_bytes: int = DEFAULT_MAX_SERIES_BYTES
    max_label_bytes: int = DEFAULT_MAX_LABEL_BYTES


class PageRefused(Exception):
    """A page over one of its limits; ``reason`` is a bounded label (PAGE_REFUSALS)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail


_BYTE_PREFIXES: Final = tuple(p.encode() for p in _LINE_PREFIXES)
_LONGEST_PREFIX: Final = max(len(p) for p in _BYTE_PREFIXES)


class PageReader:
    """A page read as it streams in: only the lines :func:`select_lines` would keep
    are held, so memory does not grow with the page, and the page is refused at the
    first limit it passes. Bytes in, bytes out (the shell decodes what is kept)."""

    def __init__(self, limits: PageLimits) -> None:
        self.limits = limits
        self.size = 0
        self.lines = 0
        self.kept: list[bytes] = []
        self.kept_bytes = 0
        self._tail = b""  # the line the last chunk ended in
        self._skipping = False  # inside a long line that is not kept: drop it as it comes

    def feed(self, chunk: bytes) -> None:
        limits = self.limits
        self.size += len(chunk)
        if self.size > limits.max_bytes:
            raise PageRefused("too_large", f"more than {limits.max_bytes} bytes")
        if self._skipping:
            end = chunk.find(b"\n")
            if end < 0:
                return
            chunk = chunk[end + 1 :]
            self._skipping = False
            self._count(1)
        lines = (self._tail + chunk).split(b"\n")
        self._tail = lines.pop()
        self._count(len(lines))
        self._keep([line for line in lines if line.startswith(_BYTE_PREFIXES)])
        if len(self._tail) > max(limits.max_series_bytes, _LONGEST_PREFIX):
            if self._tail.startswith(_BYTE_PREFIXES):
                self._too_long()
            self._tail = b""
            self._skipping = True

    def finish(self) -> list[bytes]:
        """The kept lines, once the page has ended."""
        if self._tail and not self._skipping:
            self._count(1)
            if self._tail.startswith(_BYTE_PREFIXES):
                self._keep([self._tail])
        self._tail = b""
        return self.kept

    def _count(self, lines: int) -> None:
        self.lines += lines
        if self.lines > self.limits.max_lines:
            raise PageRefused("too_many_lines", f"more than {self.limits.max_lines} lines")

    def _keep(self, lines: list[bytes]) -> None:
        if not lines:
            return
        limits = self.limits
        if len(self.kept) + len(lines) > limits.max_series:
            raise PageRefused(
                "too_many_series", f"more than {limits.max_series} lines of the engine series read"
            )
        if max(map(len, lines)) > limits.max_series_bytes:
            self._too_long()
        self.kept_bytes += sum(map(len, lines))
        if self.kept_bytes > limits.max_label_bytes:
            raise PageRefused(
                "label_bytes", f"the engine series read hold more than {limits.max_label_bytes} bytes"
            )
        self.kept.extend(lines)

    def _too_long(self) -> None:
        raise PageRefused(
            "label_bytes", f"a line of an engine series longer than {self.limits.max_series_bytes} bytes"
        )
