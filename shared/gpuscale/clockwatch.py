"""Senders' clock offsets on ``/metrics`` and in the log, read at scrape time (off the hot path)."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Final

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gpuscale.clocks import SenderClocks
from gpuscale.logging import get_logger

OFFSET_WARN_S: Final = 2.0


class ClockWatch(Collector):
    """``name{label=sender}``: each sender's usual ``arrival - ts`` in seconds
    (positive: its clock is behind this process's, or its messages take that
    long to arrive)."""

    def __init__(
        self,
        clocks: SenderClocks,
        registry: CollectorRegistry,
        *,
        name: str,
        documentation: str,
        label: str,
        shift: Callable[[], float] | None = None,
    ) -> None:
        """``shift``: added to every offset shown, where arrivals are read on a
        clock other than the wall one (the aggregator's steady window clock: the
        wall clock minus it), so an offset stays the sender's from the wall."""
        self.clocks = clocks
        self.shift = shift
        self.name = name
        self.documentation = documentation
        self.label = label
        self._warned: set[str] = set()
        self._log = get_logger(component="clocks")
        registry.register(self)

    def _offsets(self) -> Iterator[tuple[Hashable, float]]:
        shift = self.shift() if self.shift is not None else 0.0
        for sender, offset in self.clocks:
            yield sender, offset + shift

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(self.name, self.documentation, labels=[self.label])
        for sender, offset in self._offsets():
            family.add_metric([str(sender)], offset)
        yield family

    def describe(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily(self.name, self.documentation, labels=[self.label])

    def check(self) -> None:
        """Log the senders that crossed the bound since the last check, either way."""
        offsets = {str(sender): offset for sender, offset in self._offsets()}
        now_off: set[str] = set()
        for name, offset in offsets.items():
            if abs(offset) > OFFSET_WARN_S:
                now_off.add(name)
                if name not in self._warned:
                    self._log.warning(
                        "clock_offset_large",
                        **{self.label: name},
                        offset_s=round(offset, 3),
                        bound_s=OFFSET_WARN_S,
                        detail="its messages are placed by arrival; check its time sync (chrony, NTP)",
                    )
        for name in self._warned - now_off:
            back = offsets.get(name)
            if back is not None:  # still speaking, back within the bound
                self._log.info("clock_offset_back", **{self.label: name}, offset_s=round(back, 3))
        self._warned = now_off
