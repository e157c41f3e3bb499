"""The Grafana dashboard: valid JSON, every query names a metric gpuscale
really exposes (the shared counters read from a live ServiceMetrics registry,
the decider's per-workload gauges by their agreed names, the collector's DCGM
names), every topic it promises has a panel, and the ConfigMap carries it."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from gpuscale.metrics import ServiceMetrics

from .deploy_support import DEPLOY, REPO, find, kubectl_path, render

DASHBOARD = DEPLOY / "grafana" / "gpuscale-dashboard.json"

# The decider's per-workload metrics (agreed names; the decider engineer exposes them).
DECIDER_METRICS = {
    "gpuscale_workload_metric_value",
    "gpuscale_workload_metric_target",
    "gpuscale_workload_replicas_current",
    "gpuscale_workload_replicas_desired",
    "gpuscale_decisions_total",
}
# dcgm-exporter's names, which the collector serves (docs/ARCHITECTURE.md#parts).
DCGM_METRICS = {
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
}
METRIC_NAME = re.compile(r"\b(gpuscale_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)\b")


SERIES_SUFFIXES = {"counter": ("_total",), "gauge": ("",), "histogram": ("_bucket", "_sum", "_count")}


def _shared_series_names() -> set[str]:
    """Every series name the shared registry of every service exposes (counters as _total, ...)."""
    registry = ServiceMetrics("dashboard-test").registry
    return {family.name + suffix for family in registry.collect() for suffix in SERIES_SUFFIXES[family.type]}


_DECLARED = re.compile(r"\b(Counter|Gauge|Histogram|Summary)\(\s*\"(gpuscale_[a-z0-9_]+)\"")


def _service_series_names() -> set[str]:
    """Series the services declare themselves (``Counter("gpuscale_...", ...)`` in their source)."""
    names: set[str] = set()
    for source in (REPO / "services").rglob("*.py"):
        for kind, name in _DECLARED.findall(source.read_text()):
            names.add(name)
            if kind == "Histogram":
                names |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
    return names


def _dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels() -> list[dict[str, Any]]:
    return [p for p in _dashboard()["panels"] if p["type"] != "row"]


def _expressions() -> list[str]:
    exprs = [t["expr"] for p in _panels() for t in p["targets"]]
    for variable in _dashboard()["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


def test_dashboard_is_well_formed() -> None:
    dashboard = _dashboard()
    assert dashboard["uid"]
    assert dashboard["title"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert {"datasource", "namespace", "workload"} <= variables
    for panel in _panels():
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]


def test_every_queried_metric_exists() -> None:
    known = _shared_series_names() | _service_series_names() | DECIDER_METRICS | DCGM_METRICS
    used = {name for expr in _expressions() for name in METRIC_NAME.findall(expr)}
    assert used, "the dashboard queries nothing"
    assert used - known == set()


def test_queries_have_balanced_brackets_and_known_variables() -> None:
    variables = {v["name"] for v in _dashboard()["templating"]["list"]}
    builtin = {"__rate_interval", "__range", "__interval"}
    for expr in _expressions():
        for open_, close in ("()", "{}", "[]"):
            assert expr.count(open_) == expr.count(close), expr
        for name in re.findall(r"\$(\w+)", expr):
            assert name in variables | builtin, f"${name} in {expr}"


@pytest.mark.parametrize(
    ("topic", "metrics"),
    [
        ("utilization vs target", {"gpuscale_workload_metric_value", "gpuscale_workload_metric_target"}),
        (
            "replicas current/desired",
            {"gpuscale_workload_replicas_current", "gpuscale_workload_replicas_desired"},
        ),
        ("decision rate and direction", {"gpuscale_decisions_total"}),
        ("aggregator throughput", {"gpuscale_messages_in_total", "gpuscale_messages_out_total"}),
        ("rejections", {"gpuscale_messages_rejected_total"}),
        ("NATS reconnects", {"gpuscale_nats_reconnects_total"}),
    ],
)
def test_every_promised_topic_has_a_panel(topic: str, metrics: set[str]) -> None:
    for panel in _panels():
        used = {n for t in panel["targets"] for n in METRIC_NAME.findall(t["expr"])}
        if metrics <= used:
            return
    pytest.fail(f"no panel shows {topic} ({sorted(metrics)})")


def test_the_configmap_wraps_the_dashboard_for_grafanas_sidecar() -> None:
    if kubectl_path() is None:
        pytest.skip("kubectl not found: cannot render deploy/grafana")
    config_map = find(render(DEPLOY / "grafana"), "ConfigMap", "gpuscale-grafana-dashboard")
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert config_map["data"] == {"gpuscale-dashboard.json": DASHBOARD.read_text()}
