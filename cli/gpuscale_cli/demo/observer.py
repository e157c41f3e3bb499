"""What the demo watches: the NATS subjects, kube-sim's cluster and the GPUScaler.

It only reads. Each second it adds one point to the timeline of the watched
workload (the first GPUScaler it finds, the demo's ``bert-intent-detection``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from gpuscale import codec, subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.logging import get_logger
from gpuscale.natsio import NATS
from gpuscale.wire import Action, Decision, WireError, WorkloadMetrics
from gpuscale_cli.demo.report import ActionRecord, DecisionRecord, Limits, RunRecord, TimelinePoint

GROUP, VERSION, PLURAL = "gpuscale.io", "v1alpha1", "gpuscalers"


@dataclass
class DemoState:
    profile: str
    started: float = field(default_factory=time.time)
    record: RunRecord = field(init=False)
    workload: str | None = None  # "namespace/name"
    kind: str = "Deployment"
    target: float | None = None
    metric: str = "gpu_util"
    ready: int | None = None
    max_load: float = 0.0
    gpu_util_avg: float | None = None
    metrics_ts: float | None = None
    load: float | None = None
    replicas: int | None = None
    desired: int | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.record = RunRecord(self.profile, Limits(1, 10))

    @property
    def limits(self) -> Limits:
        return self.record.limits

    def t(self, ts: float) -> float:
        return round(ts - self.started, 3)

    def latest(self) -> TimelinePoint | None:
        return self.record.timeline[-1] if self.record.timeline else None

    def matches(self, namespace: str, name: str) -> bool:
        return self.workload == f"{namespace}/{name}"

    def as_json(self) -> dict[str, Any]:
        return {
            "profile": self.profile,
            "workload": self.workload,
            "metric": self.metric,
            "target": self.target,
            "limits": {"min": self.limits.min_replicas, "max": self.limits.max_replicas},
            "ready": self.ready,
            "conditions": self.conditions,
            "timeline": [
                {
                    "t": p.t,
                    "load": p.load,
                    "replicas": p.replicas,
                    "desired": p.desired,
                    "gpu_util_avg": p.gpu_util_avg,
                }
                for p in self.record.timeline
            ],
            "decisions": [d.to_json() for d in self.record.decisions[-50:]],
            "actions": [
                {
                    "t": a.t,
                    "outcome": a.outcome,
                    "before": a.replicas_before,
                    "after": a.replicas_after,
                    "error": a.error,
                }
                for a in self.record.actions[-50:]
            ],
        }


class Observer:
    def __init__(self, state: DemoState, nc: NATS, api: ApiClient, sim_url: str) -> None:
        self.state = state
        self.nc = nc
        self.custom = CustomObjectsApi(api)
        self.sim_url = sim_url.rstrip("/")
        self.log = get_logger(component="demo-observer")
        # Messages from newer producers: unknown names are ignored, said once each.
        self.metrics_reader = codec.Reader(WorkloadMetrics, on_unknown=self._unknown)
        self.decisions_reader = codec.Reader(Decision, on_unknown=self._unknown)
        self.actions_reader = codec.Reader(Action, on_unknown=self._unknown)

    def _unknown(self, kind: str, field: str) -> None:
        self.log.info("unknown_field_ignored", kind=kind, field=field)

    async def subscribe(self) -> None:
        await self.nc.subscribe(subjects.METRICS_ALL, cb=self._on_metrics)
        await self.nc.subscribe(subjects.DECISIONS_ALL, cb=self._on_decision)
        await self.nc.subscribe(subjects.ACTIONS_ALL, cb=self._on_action)

    async def _on_metrics(self, msg: Any) -> None:
        with contextlib.suppress(WireError):
            m = self.metrics_reader.decode(msg.data, time.time())
            if self.state.matches(m.namespace, m.name):
                self.state.gpu_util_avg = m.averages.get(self.state.metric)
                self.state.metrics_ts = m.ts

    async def _on_decision(self, msg: Any) -> None:
        with contextlib.suppress(WireError):
            d = self.decisions_reader.decode(msg.data, time.time())
            if self.state.matches(d.namespace, d.name):
                self.state.record.decisions.append(
                    DecisionRecord(self.state.t(d.ts), d.ts, d.from_replicas, d.to_replicas, d.reason, d.id)
                )

    async def _on_action(self, msg: Any) -> None:
        with contextlib.suppress(WireError):
            a = self.actions_reader.decode(msg.data, time.time())
            self.state.record.actions.append(
                ActionRecord(
                    self.state.t(a.ts),
                    a.ts,
                    a.decision_id,
                    a.outcome,
                    a.replicas_before,
                    a.replicas_after,
                    a.error,
                )
            )

    async def _read_scaler(self) -> None:
        listing = await self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        items = listing.get("items", [])
        if not items:
            return
        chosen = next(
            (i for i in items if self.state.matches(i["metadata"]["namespace"], i["metadata"]["name"])),
            items[0],
        )
        spec, status = chosen.get("spec", {}), chosen.get("status", {}) or {}
        meta = chosen["metadata"]
        ref = spec.get("scaleTargetRef", {})
        self.state.workload = f"{meta['namespace']}/{ref.get('name', meta['name'])}"
        self.state.kind = ref.get("kind", "Deployment")
        metrics = spec.get("metrics") or [{}]
        self.state.metric = metrics[0].get("name", "gpu_util")
        self.state.target = metrics[0].get("target")
        behavior = spec.get("behavior") or {}
        self.state.record.limits = Limits(
            int(spec.get("minReplicas", 1)),
            int(spec.get("maxReplicas", 10)),
            float((behavior.get("scaleUp") or {}).get("cooldownSeconds", 0) or 0),
            float((behavior.get("scaleDown") or {}).get("cooldownSeconds", 0) or 0),
        )
        self.state.desired = status.get("desiredReplicas")
        self.state.conditions = status.get("conditions") or []

    async def _read_cluster(self, http: aiohttp.ClientSession) -> None:
        async with http.get(f"{self.sim_url}/sim/v1/workloads") as resp:
            resp.raise_for_status()
            body = await resp.json()
        items = body.get("workloads", []) if isinstance(body, dict) else body
        for w in items:
            if self.state.workload is None or self.state.matches(w["namespace"], w["name"]):
                self.state.load = float(w["load"])
                self.state.max_load = max(self.state.max_load, self.state.load)
                self.state.replicas = int(w["replicas"])
                self.state.ready = int(w.get("ready_replicas", 0))
                return

    async def run(self, stop: asyncio.Event, period_s: float = 1.0) -> None:
        await self.subscribe()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while not stop.is_set():
                tick = time.time()
                for read in (self._read_scaler, lambda: self._read_cluster(http)):
                    try:
                        await read()
                    except Exception as e:  # noqa: BLE001 - a part may be restarting; the view shows gaps, not a crash
                        self.log.debug("demo_read_failed", error=f"{type(e).__name__}: {e}")
                fresh = self.state.metrics_ts is not None and tick - self.state.metrics_ts < 10
                desired = self.state.desired
                if desired is None and self.state.record.decisions:
                    desired = self.state.record.decisions[-1].to_replicas
                self.state.record.timeline.append(
                    TimelinePoint(
                        self.state.t(tick),
                        self.state.load,
                        self.state.replicas,
                        desired,
                        round(self.state.gpu_util_avg, 2)
                        if fresh and self.state.gpu_util_avg is not None
                        else None,
                    )
                )
                await sleep_unless_stopped(stop, max(0.0, period_s - (time.time() - tick)))
