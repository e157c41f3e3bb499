"""Publishing the windows: one metrics message per workload, within the server's max_payload."""

from __future__ import annotations

from typing import Any, Final

from gpuscale import codec, subjects
from gpuscale.logging import LogThrottle, OncePerKey
from gpuscale.natsio import NATS
from gpuscale.subjects import WorkloadKey
from gpuscale.wire import WorkloadMetrics

from .metrics import AggregatorMetrics

DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024  # NATS' own default, until the server says


class MetricsPublisher:
    """Encodes and publishes one workload's message, within the server's max_payload."""

    def __init__(self, m: AggregatorMetrics, log: Any, throttle: LogThrottle, once: OncePerKey) -> None:
        self.m = m
        self.log = log
        self.throttle = throttle
        self.once = once
        self._subject_by_workload: dict[tuple[str, str, str], str] = {}

    async def publish(
        self, nc: NATS | None, workload: tuple[str, str, str], message: WorkloadMetrics
    ) -> bool | None:
        """Publish one workload's message: True, False (NATS refused it), None (too large)."""
        if nc is None:
            return False
        limit = nc.max_payload or DEFAULT_MAX_PAYLOAD
        data = codec.encode(message)
        if len(data) > limit:
            self._too_large(workload, message, len(data), limit)
            return None
        try:
            await nc.publish(self._metrics_subject(workload), data)
        except Exception as e:  # noqa: BLE001 - NATS away: the next cycle publishes fresh values
            if self.once.first("publish", type(e).__name__):
                self.log.warning("metrics_publish_failed", error=f"{type(e).__name__}: {e}")
            return False
        return True

    def _metrics_subject(self, workload: tuple[str, str, str]) -> str:
        subject = self._subject_by_workload.get(workload)
        if subject is None:
            if len(self._subject_by_workload) > 200_000:  # bounded, like the node cache
                self._subject_by_workload.clear()
            subject = self._subject_by_workload[workload] = subjects.metrics(WorkloadKey(*workload))
        return subject

    def _too_large(
        self, workload: tuple[str, str, str], message: WorkloadMetrics, size: int, limit: int
    ) -> None:
        """A message NATS would refuse: counted, and its workload named in the log."""
        self.m.too_large_total.inc()
        held = self.throttle.allow("too_large")
        if held is not None:
            self.log.error(
                "metrics_too_large",
                workload="/".join(workload),
                pods=len(message.pods),
                bytes=size,
                max_payload=limit,
                suppressed=held,
                detail="raise max_payload in nats.conf (NATS allows up to 64 MB; 8 MB is its advice)",
            )
