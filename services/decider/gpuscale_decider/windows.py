"""Each GPUScaler's window, told to the aggregators (leader only): when the policy
appears or changes, every :data:`REPEAT_S` (a restarted aggregator learns it), and at
once when metrics arrive over another window. A request lapses after :data:`TTL_S`."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Final

from gpuscale.clocks import due
from gpuscale.logging import get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.subjects import WorkloadKey
from gpuscale.wire import WindowRequest
from gpuscale_decider.core.windows import WindowNeed, window_need
from gpuscale_decider.metrics import DeciderMetrics
from gpuscale_decider.registry import Workload

PublishWindow = Callable[[WindowRequest], Awaitable[None]]
REPEAT_S: Final = 15.0
TTL_S: Final = 60.0
# A metrics message on another window asks again, at most this often per target.
RETRY_S: Final = 2.0


async def nowhere(_: WindowRequest) -> None:
    """No aggregator to tell (in-process runs without NATS)."""


class WindowRequester:
    def __init__(
        self,
        metrics: ServiceMetrics,
        m: DeciderMetrics,
        publish: PublishWindow,
        on_error: Callable[[Workload, Exception], None] = lambda w, e: None,
    ) -> None:
        self.metrics, self.m, self.publish = metrics, m, publish
        self.on_error = on_error  # one workload's failure: told, and the others go on
        self._sent: dict[WorkloadKey, tuple[WindowNeed, float]] = {}
        self._failing = False
        self.log = get_logger(component="decider")

    async def tick(self, workloads: Iterable[Workload], now: float) -> None:
        """Tell what changed or is due again; forget targets without a policy."""
        present: set[WorkloadKey] = set()
        for w in workloads:
            present.add(w.key)
            try:
                need = window_need(w.scaler.spec)
                sent = self._sent.get(w.key)
                if sent is None or sent[0] != need or due(sent[1], now, REPEAT_S):
                    await self._send(w, need, now)
            except Exception as e:  # noqa: BLE001 - this GPUScaler's failure is its own
                self.on_error(w, e)
        for key in [k for k in self._sent if k not in present]:
            del self._sent[key]

    async def mismatch(self, w: Workload, now: float) -> None:
        """Metrics arrived over another window than the policy's: ask again now."""
        sent = self._sent.get(w.key)
        if sent is None or due(sent[1], now, RETRY_S):
            try:
                await self._send(w, window_need(w.scaler.spec), now)
            except Exception as e:  # noqa: BLE001 - this GPUScaler's failure is its own
                self.on_error(w, e)

    async def _send(self, w: Workload, need: WindowNeed, now: float) -> None:
        request = WindowRequest(
            ts=now,
            namespace=w.key.namespace,
            kind=w.key.kind,
            name=w.key.name,
            window_s=need.window_s,
            recent_s=need.recent_s,
            ttl_s=TTL_S,
        )
        self._sent[w.key] = (need, now)  # also when it fails: retried at the next repeat or mismatch
        try:
            await self.publish(request)
        except Exception as e:  # noqa: BLE001 - NATS away: the next tick tells again
            self.m.publish_failures.inc()
            if not self._failing:
                self._failing = True
                self.log.warning("window_request_failed", target=str(w.key), error=f"{type(e).__name__}: {e}")
            return
        if self._failing:
            self._failing = False
            self.log.info("window_requests_resumed")
        self.metrics.messages_out.labels(kind=WindowRequest.KIND).inc()
