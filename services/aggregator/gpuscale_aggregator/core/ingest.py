"""From a node batch's bytes to the windows: decoding, ordering, bookkeeping (the pure core).

A batch is placed on this process's clock (its arrival, corrected by its node's usual offset), so
a node's clock offset can neither make it stale nor pin a window. Per source, a ``seq`` at or below
the last accepted one is a duplicate or out of order, unless the batch is clearly newer (a
collector restart: ``seq_reset``).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import KW_ONLY, dataclass
from typing import Final

from gpuscale.clocks import SenderClocks
from gpuscale.codec import Reader, UnknownSink
from gpuscale.wire import SampleBatch, WireError, WorkloadMetrics

from .window import WindowConfig, WindowStore, WorkloadTuple

ACCEPTED: Final = "accepted"
SEQ_RESET: Final = "seq_reset"  # accepted: its seq went back, but it is clearly newer (a collector restart)
REJECTED: Final = "rejected"  # failed validation; ``reason`` holds the WireError code
DUPLICATE: Final = "duplicate"
OUT_OF_ORDER: Final = "out_of_order"
TOO_OLD: Final = "too_old"  # whole batch before the window: nothing to add
NODE_MISMATCH: Final = "node_mismatch"


@dataclass(slots=True, eq=False, repr=False)
class IngestResult:
    status: str
    _: KW_ONLY
    reason: str = ""
    detail: str = ""
    node: str = ""
    samples: int = 0
    rejected_gpus: tuple[tuple[int, WireError], ...] = ()
    seq_reset: bool = False

    def __repr__(self) -> str:
        return f"IngestResult({self.status!r}, reason={self.reason!r}, node={self.node!r}, samples={self.samples})"


def mismatch_detail(node: str, subject_node: str | None) -> str:
    return f"payload node {node!r} on the subject of node {subject_node!r}"


class SeqTracker:
    """The last accepted (seq, ts) per source."""

    def __init__(self) -> None:
        self._last: dict[Hashable, tuple[int, float]] = {}

    def check(self, source: Hashable, seq: int, ts: float, interval_s: float) -> str:
        """ACCEPTED, SEQ_RESET, DUPLICATE or OUT_OF_ORDER; records what it accepts."""
        last = self._last.get(source)
        if last is None or seq > last[0]:
            self._last[source] = (seq, ts)
            return ACCEPTED
        if ts > last[1] + 0.5 * interval_s:
            self._last[source] = (seq, ts)
            return SEQ_RESET
        return DUPLICATE if seq == last[0] else OUT_OF_ORDER

    def forget_before(self, cutoff: float) -> list[Hashable]:
        """Sources silent since ``cutoff`` are forgotten (bounded memory); which."""
        gone = [s for s, (_, ts) in self._last.items() if ts <= cutoff]
        for s in gone:
            del self._last[s]
        return gone

    def __len__(self) -> int:
        return len(self._last)


class Aggregator:
    def __init__(self, config: WindowConfig | None = None, *, on_unknown: UnknownSink | None = None) -> None:
        """``on_unknown``: told once per field or metric name a newer producer sends."""
        self.store = WindowStore(config)
        self.sequences = SeqTracker()
        self.clocks = SenderClocks()
        self.reader = Reader(SampleBatch, on_unknown=on_unknown)

    def ingest(
        self, data: bytes, now: float, *, subject_node: str | None = None, source: Hashable | None = None
    ) -> IngestResult:
        """One batch as it came off the wire at ``now``. ``subject_node``: its subject's node token
        (checked against the payload); ``source``: the ordering key (default: the node)."""
        try:
            batch, rejected_gpus = self.reader.read(data, now)
        except WireError as e:
            return IngestResult(REJECTED, reason=e.code, detail=e.detail, node=subject_node or "")
        status = self.ingest_batch(batch, now, subject_node=subject_node, source=source)
        if status == NODE_MISMATCH:
            detail = mismatch_detail(batch.node, subject_node)
            return IngestResult(status, reason=status, detail=detail, node=subject_node or "")
        if status in (ACCEPTED, SEQ_RESET):
            return IngestResult(
                ACCEPTED,
                node=batch.node,
                samples=len(batch.gpus),
                rejected_gpus=tuple(rejected_gpus),
                seq_reset=status == SEQ_RESET,
            )
        return IngestResult(status, node=batch.node)

    def ingest_batch(
        self,
        batch: SampleBatch,
        now: float,
        *,
        subject_node: str | None = None,
        source: Hashable | None = None,
    ) -> str:
        """One validated batch (see :meth:`ingest`): ACCEPTED or SEQ_RESET (in the window), else
        NODE_MISMATCH, TOO_OLD, DUPLICATE or OUT_OF_ORDER (not)."""
        node = batch.node
        if subject_node is not None and node != subject_node:
            return NODE_MISMATCH
        at = self.clocks.at(node, batch.ts, now, batch.interval_s)
        if at <= now - self.store.span_s:
            return TOO_OLD
        verdict = self.sequences.check(node if source is None else source, batch.seq, at, batch.interval_s)
        if verdict in (DUPLICATE, OUT_OF_ORDER):
            return verdict
        self.store.add_batch(batch, at)
        return verdict

    def snapshot(self, now: float) -> list[WorkloadMetrics]:
        """Expire, then every workload's metrics message (tests, tools)."""
        return [m for _, m in self.iter_messages(now) if m is not None]

    def iter_messages(
        self, now: float, *, build: bool = True, wall_offset_s: float = 0.0
    ) -> Iterator[tuple[WorkloadTuple, WorkloadMetrics | None]]:
        """See :meth:`WindowStore.iter_messages`; also forgets silent sources."""
        for node in self.sequences.forget_before(now - self.store.span_s):
            if isinstance(node, str):
                self.clocks.forget(node)
        return self.store.iter_messages(now, build=build, wall_offset_s=wall_offset_s)

    def message_of(
        self, workload: WorkloadTuple, now: float, *, wall_offset_s: float = 0.0
    ) -> WorkloadMetrics | None:
        """One workload's message now, out of the publish cycle (None: no pod left)."""
        return self.store.message_of(workload, now, wall_offset_s)
