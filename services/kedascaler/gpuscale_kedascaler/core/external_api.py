"""The Kubernetes external metrics API (``external.metrics.k8s.io/v1beta1``), as values. Pure."""

from __future__ import annotations

import datetime as dt
from typing import Any, Final

from gpuscale.labels import SelectorError, parse_selector
from gpuscale.names import is_dns1123_label

from .latest import NO_METRICS, Reading, Unavailable
from .query import QueryError, WorkloadQuery, all_external_metric_names, parse_external_metric, shown

GROUP: Final = "external.metrics.k8s.io"
VERSION: Final = "v1beta1"
GROUP_VERSION: Final = f"{GROUP}/{VERSION}"
BASE_PATH: Final = f"/apis/{GROUP_VERSION}"
VALUE_LIST_KIND: Final = "ExternalMetricValueList"

Obj = dict[str, Any]


def resource_list() -> Obj:
    """Discovery: what the aggregator's availability check and ``kubectl api-resources`` read."""
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {"name": name, "singularName": "", "namespaced": True, "kind": VALUE_LIST_KIND, "verbs": ["get"]}
            for name in all_external_metric_names()
        ],
    }


def api_group() -> Obj:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def api_group_list() -> Obj:
    group = api_group()
    del group["kind"], group["apiVersion"]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [group]}


def status(code: int, reason: str, message: str) -> Obj:
    """A ``Status`` failure body, as an API server answers."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.body = status(code, reason, message)


def parse_request(namespace: str, metric_name: str, label_selector: str | None) -> WorkloadQuery:
    """A value request as a query, or ApiError 400/404 with every problem in its message.
    Caller text is quoted cut short (:func:`~.query.shown`)."""
    if not is_dns1123_label(namespace):
        raise ApiError(400, "BadRequest", f"namespace {shown(namespace)} is not a Kubernetes namespace")
    if not label_selector or not label_selector.strip():
        raise ApiError(
            400,
            "BadRequest",
            f"{shown(metric_name)}: a labelSelector naming the workload is required: "
            "workload=<name>[,kind=Deployment|StatefulSet] (the HPA's metric.selector.matchLabels)",
        )
    try:
        selector = parse_selector(label_selector)
    except SelectorError as e:
        raise ApiError(400, "BadRequest", f"labelSelector {shown(label_selector)}: {str(e)[:200]}") from None
    labels: dict[str, str] = {}
    for requirement in selector.requirements:
        if requirement.op != "=" or len(requirement.values) != 1:
            raise ApiError(
                400,
                "BadRequest",
                f"labelSelector {shown(label_selector)}: only key=value terms name a workload "
                "(workload=<name>, kind=<Kind>)",
            )
        if requirement.key in labels:
            raise ApiError(
                400,
                "BadRequest",
                f"labelSelector {shown(label_selector)} names {requirement.key[:80]} twice",
            )
        labels[requirement.key] = next(iter(requirement.values))
    try:
        return parse_external_metric(namespace, metric_name, labels)
    except QueryError as e:
        unknown_metric = any(p.startswith("unknown metric") for p in e.problems)
        raise ApiError(
            404 if unknown_metric else 400, "NotFound" if unknown_metric else "BadRequest", str(e)
        ) from None


def quantity(value: float) -> str:
    """A value as a Kubernetes quantity string, to the milli-unit (``83.5`` -> ``83500m``)."""
    milli = round(value * 1000)
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def _timestamp(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def value_list(reading: Reading) -> Obj:
    """The ``ExternalMetricValueList`` of one fresh reading."""
    workload = reading.query.workload
    return {
        "kind": VALUE_LIST_KIND,
        "apiVersion": GROUP_VERSION,
        "metadata": {},
        "items": [
            {
                "metricName": reading.query.metric_name,
                "metricLabels": {"workload": workload.name, "kind": workload.kind},
                "timestamp": _timestamp(reading.received_at),
                "window": max(1, round(reading.window_s)),
                "value": quantity(reading.value),
            }
        ],
    }


def unavailable(e: Unavailable) -> ApiError:
    """No fresh value: 404 for a workload never seen, 503 (retry later) otherwise."""
    if e.reason == NO_METRICS:
        return ApiError(404, "NotFound", e.message)
    return ApiError(503, "ServiceUnavailable", e.message)
