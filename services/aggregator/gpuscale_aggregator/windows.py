"""Window requests: the window each GPUScaler's policy asks its workload's samples be kept for."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import InitVar, dataclass
from typing import Any

from prometheus_client import Counter

from gpuscale import subjects
from gpuscale.codec import Reader, UnknownSink
from gpuscale.logging import LogThrottle, OncePerKey
from gpuscale.subjects import SubjectError, WorkloadKey
from gpuscale.wire import UNSET, WindowRequest, WireError

from .core.ingest import Aggregator
from .metrics import AggregatorMetrics


@dataclass
class WindowRequests:
    """Takes each request into the window store, within its bounds; rejects what does not decode."""

    core: Aggregator
    m: AggregatorMetrics
    messages_in: Counter
    reject: Callable[[str, str, str], None]
    log: Any
    throttle: LogThrottle
    once: OncePerKey
    on_unknown: InitVar[UnknownSink]

    def __post_init__(self, on_unknown: UnknownSink) -> None:
        self.reader = Reader(WindowRequest, on_unknown=on_unknown)

    def handle(self, subject: str, data: bytes, now: float, wall_offset_s: float) -> None:
        """A policy's window for its workload (decider -> aggregators). Never raises."""
        kind = WindowRequest.KIND
        self.messages_in.labels(kind=kind).inc()
        try:
            key = subjects.parse_workload(subject, kind)
        except SubjectError as e:
            self.reject("bad_subject", str(e), subject[:200])
            return
        try:
            request = self.reader.decode(data, now + wall_offset_s)
        except WireError as e:
            self.reject(e.code, e.detail, str(key))
            return
        workload = (request.namespace, request.kind, request.name)
        if WorkloadKey(*workload) != key:
            self.reject("subject_mismatch", f"payload for {'/'.join(workload)} on {subject}", str(key))
            return
        store = self.core.store
        before = store.wanted.get(workload)
        recent = None if request.recent_s is UNSET else request.recent_s
        taken, why = store.request(workload, request.window_s, recent, now, request.ttl_s)
        self.m.window_requests.labels(result=why or "as_asked").inc()
        self.m.windowed.set(len(store.wanted))
        self.m.span.set(store.span_s)
        if taken is None:
            held = self.throttle.allow("window", why)
            if held is not None:
                self.log.warning("window_request_refused", workload=str(key), reason=why, suppressed=held)
            return
        changed = before is None or (before.window_s, before.recent_s) != (taken.window_s, taken.recent_s)
        # Logged per workload and value, once: a flip-flopping sender cannot flood the log.
        if changed and self.once.first("window", str(key), str(taken.window_s), str(taken.recent_s)):
            self.log.info(
                "window_applied",
                workload=str(key),
                window_s=taken.window_s,
                recent_s=taken.recent_s,
                asked_window_s=request.window_s,
                clamped=bool(why),
                max_window_s=store.config.max_window_s,
            )
