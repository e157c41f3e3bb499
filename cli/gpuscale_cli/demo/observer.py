"""What the demo watches, read-only: the NATS subjects, kube-sim's cluster and the GPUScalers."""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio.client import ApiClient, CustomObjectsApi

from gpuscale import codec, subjects
from gpuscale.aio import sleep_unless_stopped
from gpuscale.catalog import METRICS
from gpuscale.logging import get_logger
from gpuscale.natsio import NATS
from gpuscale.wire import Action, Decision, MetricValues, WireError, WorkloadMetrics
from gpuscale_cli.demo.report import (
    ActionRecord,
    DecisionRecord,
    Followed,
    Limits,
    RunRecord,
    TimelinePoint,
    timeline_json,
)

GROUP, VERSION, PLURAL = "gpuscale.io", "v1alpha1", "gpuscalers"
# What a decision's value may be (``inputs.averages_basis``): named so on every screen.
BASES = ("window mean", "estimated demand", "estimated demand and window means")


def decision_basis(metric: str, inputs: dict[str, Any]) -> tuple[float | None, str]:
    """The value a decision used for ``metric`` and what it is; "" where the decider did
    not say (an older one): shown unnamed rather than named wrongly."""
    averages = inputs.get("averages")
    value = averages.get(metric) if isinstance(averages, dict) else None
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return None, ""
    said = inputs.get("averages_basis")
    basis = said.get(metric) if isinstance(said, dict) else None
    return float(value), basis if isinstance(basis, str) and basis in BASES else ""


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


@dataclass
class WorkloadView:
    """One GPUScaler's workload as the demo follows it."""

    key: str  # "namespace/name" of the scale target
    profile: str
    kind: str = "Deployment"
    target: float | None = None
    metric: str = "gpu_util"
    ready: int | None = None
    max_load: float = 0.0
    gpu_util_avg: float | None = None
    metric_avg: float | None = None  # the GPUScaler's (first) metric
    requests_waiting_avg: float | None = None
    recent_avg: float | None = None  # the metric over the last ``recent_s`` only
    recent_s: float | None = None
    window_s: float | None = None
    metrics_ts: float | None = None
    load: float | None = None
    load_since: float | None = None  # the wall time kube-sim says the current level began
    replicas: int | None = None
    desired: int | None = None
    conditions: list[dict[str, Any]] = field(default_factory=list)
    record: RunRecord = field(init=False)

    def __post_init__(self) -> None:
        self.record = RunRecord(self.profile, Limits(1, 10))

    @property
    def limits(self) -> Limits:
        return self.record.limits

    def latest(self) -> TimelinePoint | None:
        return self.record.timeline[-1] if self.record.timeline else None

    def as_json(self) -> dict[str, Any]:
        return {
            "workload": self.key,
            "metric": self.metric,
            "unit": METRICS[self.metric].per_pod_unit if self.metric in METRICS else "per pod",
            "target": self.target,
            "window_s": self.window_s,
            "recent_s": self.recent_s,
            "limits": {"min": self.limits.min_replicas, "max": self.limits.max_replicas},
            "ready": self.ready,
            "conditions": self.conditions,
            "timeline": timeline_json(self.record),
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


@dataclass
class DemoState:
    """Every GPUScaler's workload the demo follows; the first is the primary one."""

    profile: str
    started: float = field(default_factory=time.time)
    views: dict[str, WorkloadView] = field(default_factory=dict)

    def t(self, ts: float) -> float:
        return round(ts - self.started, 3)

    def view(self, key: str) -> WorkloadView:
        """The view of ``key``, made when first asked for."""
        found = self.views.get(key)
        if found is None:
            found = self.views[key] = WorkloadView(key, self.profile)
        return found

    def find(self, namespace: str, name: str) -> WorkloadView | None:
        return self.views.get(f"{namespace}/{name}")

    @property
    def primary(self) -> WorkloadView:
        if not self.views:
            return self.view("")
        return next(iter(self.views.values()))

    # --- the primary workload ---------------------------------------------------------

    @property
    def workload(self) -> str | None:
        return self.primary.key or None if self.views else None

    @workload.setter
    def workload(self, key: str) -> None:
        view = self.views.pop("", None)
        self.views = {key: view or WorkloadView(key, self.profile), **self.views}
        self.views[key].key = key

    @property
    def record(self) -> RunRecord:
        return self.primary.record

    @property
    def target(self) -> float | None:
        return self.primary.target

    @target.setter
    def target(self, value: float | None) -> None:
        self.primary.target = value

    @property
    def metric(self) -> str:
        return self.primary.metric

    @property
    def limits(self) -> Limits:
        return self.primary.limits

    @property
    def gpu_util_avg(self) -> float | None:
        return self.primary.gpu_util_avg

    @property
    def ready(self) -> int | None:
        return self.primary.ready

    @property
    def max_load(self) -> float:
        return self.primary.max_load

    def latest(self) -> TimelinePoint | None:
        return self.primary.latest()

    def matches(self, namespace: str, name: str) -> bool:
        return f"{namespace}/{name}" in self.views

    def followed(self) -> list[WorkloadView]:
        """The workloads of the GPUScalers found, in the order found."""
        return [v for k, v in self.views.items() if k]

    def report(self) -> list[Followed]:
        """What the report names of each workload followed (the primary one when none was found)."""
        views = self.followed() or [self.primary]
        return [Followed(v.key, v.metric, v.target, v.record) for v in views]

    def as_json(self) -> dict[str, Any]:
        return {"profile": self.profile, "workloads": [v.as_json() for v in self.followed()]}


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
            view = self.state.find(m.namespace, m.name)
            if view is not None:
                view.gpu_util_avg = m.averages.get("gpu_util")
                view.metric_avg = m.averages.get(view.metric)
                view.requests_waiting_avg = m.averages.get("requests_waiting")
                # The pods' recent means, averaged as the window's are (over the pods that sent one).
                recent = [
                    p.recent[view.metric]
                    for p in m.pods
                    if isinstance(p.recent, MetricValues) and view.metric in p.recent
                ]
                view.recent_avg = _mean(recent)
                view.recent_s = m.recent_s if isinstance(m.recent_s, float | int) else None
                view.window_s = m.window_s
                view.metrics_ts = m.ts

    async def _on_decision(self, msg: Any) -> None:
        with contextlib.suppress(WireError):
            d = self.decisions_reader.decode(msg.data, time.time())
            view = self.state.find(d.namespace, d.name)
            if view is not None:
                value, basis = decision_basis(view.metric, d.inputs)
                view.record.decisions.append(
                    DecisionRecord(
                        self.state.t(d.ts), d.ts, d.from_replicas, d.to_replicas, d.reason, d.id, value, basis
                    )
                )

    async def _on_action(self, msg: Any) -> None:
        with contextlib.suppress(WireError):
            a = self.actions_reader.decode(msg.data, time.time())
            view = self.state.find(a.namespace, a.name) if a.name else None
            (view or self.state.primary).record.actions.append(
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

    async def _read_scalers(self) -> None:
        listing = await self.custom.list_cluster_custom_object(GROUP, VERSION, PLURAL)
        for item in sorted(
            listing.get("items", []), key=lambda i: i["metadata"].get("creationTimestamp", "")
        ):
            spec, status = item.get("spec", {}), item.get("status", {}) or {}
            meta = item["metadata"]
            ref = spec.get("scaleTargetRef", {})
            key = f"{meta['namespace']}/{ref.get('name', meta['name'])}"
            if not self.state.views or (len(self.state.views) == 1 and "" in self.state.views):
                self.state.workload = key
            view = self.state.view(key)
            view.kind = ref.get("kind", "Deployment")
            metrics = spec.get("metrics") or [{}]
            view.metric = metrics[0].get("name", "gpu_util")
            view.target = metrics[0].get("target")
            behavior = spec.get("behavior") or {}
            view.record.limits = Limits(
                int(spec.get("minReplicas", 1)),
                int(spec.get("maxReplicas", 10)),
                float((behavior.get("scaleUp") or {}).get("cooldownSeconds", 0) or 0),
                float((behavior.get("scaleDown") or {}).get("cooldownSeconds", 0) or 0),
            )
            view.desired = status.get("desiredReplicas")
            view.conditions = status.get("conditions") or []

    async def _read_cluster(self, http: aiohttp.ClientSession) -> None:
        async with http.get(f"{self.sim_url}/sim/v1/workloads") as resp:
            resp.raise_for_status()
            body = await resp.json()
        items = body.get("workloads", []) if isinstance(body, dict) else body
        for w in items:
            view = self.state.find(w["namespace"], w["name"])
            if view is None:
                continue
            view.load = float(w["load"])
            view.max_load = max(view.max_load, view.load)
            since = w.get("load_since")
            if isinstance(since, int | float) and math.isfinite(since) and since != view.load_since:
                # The step's own time, not the poll's (up to a second later): what the
                # report's times to adequate are measured from.
                view.load_since = since
                view.record.load_changes.append((self.state.t(since), view.load))
            view.replicas = int(w["replicas"])
            view.ready = int(w.get("ready_replicas", 0))

    def _record(self, view: WorkloadView, tick: float) -> None:
        fresh = view.metrics_ts is not None and tick - view.metrics_ts < 10
        desired = view.desired
        if desired is None and view.record.decisions:
            desired = view.record.decisions[-1].to_replicas

        def kept(value: float | None) -> float | None:
            return round(value, 2) if fresh and value is not None else None

        view.record.timeline.append(
            TimelinePoint(
                self.state.t(tick),
                view.load,
                view.replicas,
                desired,
                kept(view.gpu_util_avg),
                kept(view.metric_avg) if view.metric != "gpu_util" else None,
                kept(view.requests_waiting_avg),
                kept(view.recent_avg),
            )
        )

    async def run(self, stop: asyncio.Event, period_s: float = 1.0) -> None:
        await self.subscribe()
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
            while not stop.is_set():
                tick = time.time()
                for read in (self._read_scalers, lambda: self._read_cluster(http)):
                    try:
                        await read()
                    except Exception as e:  # noqa: BLE001 - a part may be restarting; the view shows gaps, not a crash
                        self.log.debug("demo_read_failed", error=f"{type(e).__name__}: {e}")
                for key, view in self.state.views.items():
                    if key:
                        self._record(view, tick)
                await sleep_unless_stopped(stop, max(0.0, period_s - (time.time() - tick)))
