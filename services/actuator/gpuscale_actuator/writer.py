"""One target's write: read its scale, PATCH the count under the lease, retry what the API server fails."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio.client import ApiClient

from gpuscale.kube import (
    Conflict,
    Forbidden,
    KubeError,
    NotFound,
    ScaleClient,
    ScaleState,
    retry_with_backoff,
)
from gpuscale.leader import LeaderElector
from gpuscale.logging import OncePerKey
from gpuscale.wire import Decision, Outcome, ScaleTargetRef
from gpuscale_actuator.core.plan import StepKind, plan_step
from gpuscale_actuator.metrics import ActuatorMetrics
from gpuscale_actuator.settings import ActuatorSettings


@dataclass(frozen=True, slots=True)
class Result:
    outcome: Outcome | None  # None: the target was at the desired count, nothing to report
    replicas_before: int | None
    replicas_after: int | None
    error: str | None
    uid: str | None = None


class RetryLater(Exception):
    """The API server stayed unavailable through the retries, or the lease went: try again."""


class ScaleWriter:
    """Reads and PATCHes targets' ``/scale``; fenced by the lease."""

    def __init__(
        self,
        api: ApiClient,
        settings: ActuatorSettings,
        elector: LeaderElector,
        stop: asyncio.Event,
        metrics: ActuatorMetrics,
        log: Any,
        once: OncePerKey,
    ) -> None:
        self.scale = ScaleClient(api)
        self.settings = settings
        self.elector = elector
        self.stop = stop
        self.metrics = metrics
        self.log = log
        self.once = once

    async def apply(self, desired: Decision) -> Result:
        """Bring the target's replicas to ``desired``: what happened, or RetryLater."""
        ref = desired.target
        try:
            for attempt in (1, 2):
                state, uid = await self._read(ref)
                step = plan_step(
                    desired, current_replicas=state.replicas, dry_run=self.settings.dry_run, attempt=attempt
                )
                if step.kind == StepKind.REPORT:
                    error = step.why if step.outcome is not None else None
                    return Result(step.outcome, state.replicas, state.replicas, error, uid=uid)
                assert step.replicas is not None  # a PATCH step carries its count
                try:
                    after = await self._patch(ref, step.replicas, state)
                except Conflict as e:
                    self.log.info("patch_conflict", decision_id=desired.id, attempt=attempt, error=e.message)
                    continue
                return Result(step.outcome or Outcome.APPLIED, state.replicas, after.replicas, None, uid=uid)
            return Result(
                Outcome.FAILED,
                None,
                None,
                "409 Conflict twice: the target keeps changing under us; tried again at the next resync",
            )
        except NotFound as e:
            return Result(Outcome.FAILED, None, None, f"target {ref} not found: {e.message}")
        except Forbidden as e:
            error = f"missing RBAC permission: {e.missing_permission}"
            if self.once.first("forbidden", e.missing_permission):
                self.log.error("rbac_permission_missing", permission=e.missing_permission, target=str(ref))
            return Result(Outcome.FAILED, None, None, error)
        except KubeError as e:
            if e.retryable:
                raise RetryLater(str(e)) from None
            return Result(Outcome.FAILED, None, None, f"API server refused: {e}")

    async def _retrying(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        def on_retry(e: KubeError, attempt: int, delay: float) -> None:
            self.metrics.kube_retries.labels(error=type(e).__name__).inc()
            self.log.info("kube_retry", error=str(e)[:200], attempt=attempt, delay_s=round(delay, 3))

        return await retry_with_backoff(
            fn, attempts=6, base_s=0.2, cap_s=5.0, stop=self.stop, on_retry=on_retry
        )

    async def _read(self, ref: ScaleTargetRef) -> tuple[ScaleState, str | None]:
        """The target's /scale and its uid (for the Event): never the object, which its team may fill to MiBs."""
        state: ScaleState = await self._retrying(functools.partial(self.scale.get, ref))
        return state, state.uid or None

    async def _patch(self, ref: ScaleTargetRef, replicas: int, state: ScaleState) -> ScaleState:
        if not self.elector.is_leader:
            # Fencing: the lease went while converging; the new leader resyncs.
            raise RetryLater("lost the lease before the PATCH")
        started = time.perf_counter()
        after: ScaleState = await self._retrying(
            functools.partial(self.scale.patch_replicas, ref, replicas, state.resource_version)
        )
        self.metrics.patch_latency.observe(time.perf_counter() - started)
        return after
