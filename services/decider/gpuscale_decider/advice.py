"""From a planned decision to the wire, and shadow mode's advice out (to
``gpuscale.v1.advice.<ns>.<kind>.<name>``, kept for ``gpuscale shadow-report``)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from gpuscale.logging import get_logger
from gpuscale.metrics import ServiceMetrics
from gpuscale.wire import Decision
from gpuscale_decider.core.reconcile import PlannedDecision
from gpuscale_decider.metrics import DeciderMetrics
from gpuscale_decider.registry import Workload

Publish = Callable[[Decision], Awaitable[None]]


def wire_decision(w: Workload, planned: PlannedDecision, now: float) -> Decision:
    return Decision(
        id=planned.id,
        ts=now,
        namespace=w.key.namespace,
        kind=w.key.kind,
        name=w.key.name,
        from_replicas=planned.from_replicas,
        to_replicas=planned.to_replicas,
        reason=planned.reason,
        inputs=planned.inputs,
        api_version=w.ref.api_version,
    )


async def nowhere(_: Decision) -> None:
    """Advice with no subject to go to (in-process runs without NATS)."""


class Advisor:
    """Publishes shadow mode's advice: one lost is logged and counted, never retried."""

    def __init__(self, metrics: ServiceMetrics, m: DeciderMetrics, publish: Publish) -> None:
        self.metrics, self.m, self.publish = metrics, m, publish
        self.log = get_logger(component="decider")

    async def advise(self, w: Workload, planned: PlannedDecision, now: float) -> None:
        advice = wire_decision(w, planned, now)
        try:
            await self.publish(advice)
        except Exception as e:  # noqa: BLE001 - NATS away: the status still says what gpuscale would do
            self.m.publish_failures.inc()
            self.log.warning("advice_publish_failed", target=str(w.key), error=f"{type(e).__name__}: {e}")
            return
        self.metrics.messages_out.labels(kind="advice").inc()
        self.log.info(
            "advice_published",
            workload=str(w.key),
            gpuscaler=w.scaler.key,
            from_replicas=advice.from_replicas,
            to_replicas=advice.to_replicas,
        )
