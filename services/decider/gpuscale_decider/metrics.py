"""The decider's Prometheus series: its own counters and the per-workload gauges dashboards read."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from gpuscale.metrics import ServiceMetrics
from gpuscale.subjects import WorkloadKey
from gpuscale.wire import Action, WorkloadMetrics

# Where one GPUScaler's failure was caught (the label of gpuscale_decider_evaluation_errors_total).
STAGE_MESSAGE = "message"  # evaluating on a metrics message
STAGE_TICK = "tick"  # evaluating on the tick
STAGE_WINDOW = "window_request"
STAGE_ACTION = "action_report"
STAGE_SAVE = "state_save"
STAGE_RETIRE = "retire"  # removing what a workload no GPUScaler targets left in the buckets
STAGES = (STAGE_MESSAGE, STAGE_TICK, STAGE_WINDOW, STAGE_ACTION, STAGE_SAVE, STAGE_RETIRE)


class _WorkloadSeries:
    """One workload's labelled gauges, looked up once (``labels()`` is costly; this runs per evaluation)."""

    def __init__(
        self, m: DeciderMetrics, key: WorkloadKey, targets: Mapping[str, float], bounds: tuple[int, int]
    ) -> None:
        self.labels = labels = (key.namespace, key.kind, key.name)
        self.targets = dict(targets)
        self.bounds = bounds
        self.current = m.replicas_current.labels(*labels)
        self.desired = m.replicas_desired.labels(*labels)
        self.counts: tuple[int, int] | None = None  # (current, desired) as last set
        m.replicas_min.labels(*labels).set(bounds[0])
        m.replicas_max.labels(*labels).set(bounds[1])
        # Created when a value arrives and removed when it goes: no series rather than a stale one.
        self.values: dict[str, Any] = {}
        for metric, target in targets.items():
            m.metric_target.labels(*labels, metric).set(target)


class DeciderMetrics:
    def __init__(self, metrics: ServiceMetrics) -> None:
        self._series: dict[WorkloadKey, _WorkloadSeries] = {}
        r = metrics.registry
        metrics.reads(WorkloadMetrics.KIND)
        metrics.reads(Action.KIND)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, labels, registry=r)

        def gauge(name: str, doc: str, *labels: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        self.evaluations = counter("gpuscale_decider_evaluations_total", "Policy evaluations")
        self.evaluation_seconds = Histogram(
            "gpuscale_decider_evaluation_seconds",
            "Time from a metrics message's arrival to its evaluated result",
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1.0),
            registry=r,
        )
        self.decisions = counter("gpuscale_decider_decisions_total", "Decisions published", "direction")
        # Per-workload series for dashboards (deploy/grafana): bounded by the number of GPUScalers.
        workload = ("namespace", "kind", "name")
        self.workload_decisions = counter(
            "gpuscale_decisions_total", "Decisions published per workload", *workload, "direction"
        )
        self.metric_value = gauge(
            "gpuscale_workload_metric_value",
            "Window average of a policy metric over fresh pods",
            *workload,
            "metric",
        )
        self.metric_target = gauge(
            "gpuscale_workload_metric_target", "The policy's target for a metric", *workload, "metric"
        )
        self.replicas_current = gauge(
            "gpuscale_workload_replicas_current", "Replicas of the scale target", *workload
        )
        self.replicas_desired = gauge(
            "gpuscale_workload_replicas_desired", "Replicas the policy wants", *workload
        )
        self.replicas_min = gauge("gpuscale_workload_replicas_min", "The policy's minReplicas", *workload)
        self.replicas_max = gauge("gpuscale_workload_replicas_max", "The policy's maxReplicas", *workload)
        # As kube-state-metrics' kube_horizontalpodautoscaler_status_condition; deploy/monitoring's alerts read it.
        self.condition = gauge(
            "gpuscale_gpuscaler_status_condition",
            "A GPUScaler condition: 1 for its current status and reason",
            *("namespace", "gpuscaler", "condition", "status", "reason"),
        )
        self._conditions: dict[tuple[str, str], dict[str, tuple[str, str]]] = {}
        # The status last reported per GPUScaler: the same object again is not walked again.
        self._reported: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.evaluation_errors = counter(
            "gpuscale_decider_evaluation_errors_total",
            "Failures while handling one GPUScaler (its evaluation, window request, action report "
            "or state save), by stage; the others go on",
            "stage",
        )
        for stage in STAGES:
            self.evaluation_errors.labels(stage=stage)
        self.publish_failures = counter(
            "gpuscale_decider_publish_failures_total",
            "Decisions, advice and window requests that could not be published (NATS away)",
        )
        self.policies = gauge("gpuscale_decider_policies", "GPUScaler policies held", "state")
        self.invalid_policies = counter(
            "gpuscale_decider_invalid_policies_total",
            "Invalid GPUScaler objects seen, by the first bad field",
            "field",
        )
        self.unmatched = counter(
            "gpuscale_decider_metrics_without_policy_total",
            "Metrics messages for workloads no GPUScaler targets",
        )
        self.scale_read_failures = counter(
            "gpuscale_decider_scale_read_failures_total",
            "Failed reads of a target's scale subresource",
            "status",
        )
        self.status_writes = counter(
            "gpuscale_decider_status_writes_total", "GPUScaler status writes requested"
        )
        self.events = counter(
            "gpuscale_decider_events_total",
            "Events on GPUScalers, by result (recorded, duplicate, rate_limited, dropped, failed)",
            "result",
        )
        self.actions = counter(
            "gpuscale_decider_actions_total",
            "Action reports received on the desired counts this decider wrote, by outcome",
            "outcome",
        )

    def observe(
        self,
        key: WorkloadKey,
        targets: Mapping[str, float],
        averages: Mapping[str, float] | None,
        current: int,
        desired: int,
        bounds: tuple[int, int] = (1, 1),
    ) -> None:
        series = self._series.get(key)
        if series is None or series.targets != targets or series.bounds != bounds:
            old, series = series, _WorkloadSeries(self, key, targets, bounds)
            if old is not None:  # a metric the policy no longer has keeps no series: edits pile none up
                series.values = {m: child for m, child in old.values.items() if m in targets}
                self._remove_metrics(old.labels, [m for m in (*old.targets, *old.values) if m not in targets])
            self._series[key] = series
        if series.counts != (current, desired):  # a gauge's set takes a lock: only on a change
            series.counts = (current, desired)
            series.current.set(current)
            series.desired.set(desired)
        for metric in targets:
            value = None if averages is None else averages.get(metric)
            child = series.values.get(metric)
            if value is not None:
                if child is None:
                    child = series.values[metric] = self.metric_value.labels(*series.labels, metric)
                child.set(value)
            elif child is not None:
                del series.values[metric]
                with contextlib.suppress(KeyError):
                    self.metric_value.remove(*series.labels, metric)

    def conditions(self, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """The conditions of a status being written."""
        key = (namespace, name)
        if self._reported.get(key) is status:
            return
        self._reported[key] = status
        known = self._conditions.setdefault(key, {})
        for c in status.get("conditions") or ():
            if not isinstance(c, Mapping) or not isinstance(c.get("type"), str):
                continue
            now = (str(c.get("status", "Unknown")).lower(), str(c.get("reason") or ""))
            before = known.get(c["type"])
            if before == now:
                continue
            if before is not None:
                with contextlib.suppress(KeyError):
                    self.condition.remove(namespace, name, c["type"], *before)
            self.condition.labels(namespace, name, c["type"], *now).set(1)
            known[c["type"]] = now

    def forget_conditions(self, namespace: str | None = None, name: str | None = None) -> None:
        """A GPUScaler deleted, or (no arguments) every one: a former leader's are stale."""
        keys = list(self._conditions) if namespace is None else [(namespace, name or "")]
        if namespace is None:
            self._reported.clear()
        for key in keys:
            self._reported.pop(key, None)
            for type_, (status, reason) in self._conditions.pop(key, {}).items():
                with contextlib.suppress(KeyError):
                    self.condition.remove(*key, type_, status, reason)

    def forget(self, key: WorkloadKey, metrics: Iterable[str]) -> None:
        series = self._series.pop(key, None)
        values = (key.namespace, key.kind, key.name)
        if series is not None:  # the series made under an earlier spec too
            metrics = {*metrics, *series.targets, *series.values}
        for gauge in (self.replicas_current, self.replicas_desired, self.replicas_min, self.replicas_max):
            with contextlib.suppress(KeyError):
                gauge.remove(*values)
        for direction in ("up", "down"):  # else every target a GPUScaler ever named keeps a series
            with contextlib.suppress(KeyError):
                self.workload_decisions.remove(*values, direction)
        self._remove_metrics(values, metrics)

    def _remove_metrics(self, values: tuple[str, str, str], metrics: Iterable[str]) -> None:
        for metric in metrics:
            for gauge in (self.metric_value, self.metric_target):
                with contextlib.suppress(KeyError):
                    gauge.remove(*values, metric)
