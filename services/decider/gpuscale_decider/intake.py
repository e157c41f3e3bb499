"""Messages in: decode, check that the subject names the payload's workload, count
and log what is refused, and watch (never obey) the aggregators' clocks."""

from __future__ import annotations

from typing import Final

from gpuscale.clocks import SenderClocks
from gpuscale.clockwatch import ClockWatch
from gpuscale.codec import Reader
from gpuscale.logging import LogThrottle, get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.subjects import SubjectError, WorkloadKey, parse_workload
from gpuscale.wire import Action, WireError, WorkloadMetrics

# Aggregators whose clocks are tracked: bounded so forged source names cannot grow the gauge.
MAX_AGGREGATORS: Final = 64
UNNAMED_AGGREGATOR: Final = "unnamed"  # one older than the source field
MAX_SUBJECTS: Final = 100_000  # parsed subjects kept: a flood of new ones cannot grow memory


class Intake:
    def __init__(self, metrics: ServiceMetrics) -> None:
        self.metrics = metrics
        # Fields a newer aggregator sends are skipped, counted and logged once per name.
        self._metrics_reader = Reader(WorkloadMetrics, on_unknown=metrics.unknown_field)
        self._actions_reader = Reader(Action, on_unknown=metrics.unknown_field)
        self._metrics_in = metrics.messages_in.labels(kind="metrics")
        self._subject_keys: dict[str, WorkloadKey] = {}
        self._throttle = LogThrottle()  # refused messages: by kind and reason, once a minute
        self.log = get_logger(component="decider")
        self.clocks = SenderClocks(max_senders=MAX_AGGREGATORS)
        self.clock_watch = ClockWatch(
            self.clocks,
            metrics.registry,
            name="gpuscale_decider_aggregator_clock_offset_seconds",
            documentation="Each aggregator's usual metrics arrival minus its ts (median of recent "
            "messages): its clock's offset from this decider's, plus transit",
            label="aggregator",
        )

    def metrics_message(
        self, subject: str, data: bytes, now: float
    ) -> tuple[WorkloadKey, WorkloadMetrics] | None:
        """A sound metrics message on its own workload's subject, or None (counted, logged)."""
        self._metrics_in.inc()
        try:
            m = self._metrics_reader.decode(data, now)
            key = WorkloadKey(m.namespace, m.kind, m.name)
            if self._subject_key(subject, "metrics") != key:
                raise WireError("subject_mismatch", f"payload names {key}, subject {subject}")
        except (WireError, SubjectError) as e:
            self._reject("metrics", subject, e)
            return None
        self.clocks.place(m.source or UNNAMED_AGGREGATOR, m.ts, now)
        return key, m

    def action_message(self, subject: str, data: bytes, now: float) -> tuple[WorkloadKey, Action] | None:
        try:
            action = self._actions_reader.decode(data, now)
            key = self._subject_key(subject, "actions")
        except (WireError, SubjectError) as e:
            self._reject("actions", subject, e)
            return None
        return key, action

    def _subject_key(self, subject: str, family: str) -> WorkloadKey:
        key = self._subject_keys.get(subject)
        if key is None:
            key = parse_workload(subject, family)
            if len(self._subject_keys) >= MAX_SUBJECTS:
                self._subject_keys.clear()
            self._subject_keys[subject] = key
        return key

    def _reject(self, kind: str, subject: str, e: WireError | SubjectError) -> None:
        reason = e.code if isinstance(e, WireError) else "bad_subject"
        self.metrics.messages_rejected.labels(kind=kind, reason=reason).inc()
        held = self._throttle.allow(kind, reason)
        if held is not None:
            self.log.warning(
                "message_rejected",
                kind=kind,
                subject=subject[:200],
                reason=reason,
                detail=str(e)[:300],
                suppressed=held,
            )
