"""deploy/monitoring's PrometheusRule: the alerts parse, read metrics the services
really export (with labels they really have), and send the reader to runbooks
that exist.

Expressions are parsed with promql-parser (a port of Prometheus' own parser),
metric names come from the services' metric registries, the same objects their
/metrics serve. Prometheus' promtool runs the alerts themselves in
test_deploy_alerts_promtool.py.
"""

from __future__ import annotations

import re
from types import SimpleNamespace
from typing import Any

import promql_parser
import pytest
import yaml
from prometheus_client import CollectorRegistry

from gpuscale.metrics import ServiceMetrics
from gpuscale_actuator.app import ActuatorMetrics
from gpuscale_aggregator.app import AggregatorMetrics
from gpuscale_collector.prom import CollectorMetrics
from gpuscale_decider.core.conditions import ConditionType, Reason
from gpuscale_decider.metrics import DeciderMetrics

from .deploy_support import DEPLOY, REPO, Obj, find, render

# Labels Prometheus adds to every scraped series (target labels of a ServiceMonitor).
TARGET_LABELS = {"namespace", "pod", "service", "endpoint", "instance", "job", "container"}
SEVERITIES = {"critical", "warning", "info"}


def _labelnames(registry: CollectorRegistry) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    # prometheus_client keeps each metric's label names on the collector; a labelled
    # metric without children has no samples to read them from.
    for name, collector in registry._names_to_collectors.items():
        out[name] = set(getattr(collector, "_labelnames", ()))
    return out


def exported_metrics() -> dict[str, set[str]]:
    """Every metric name any gpuscale service serves on /metrics, with its labels."""
    names: dict[str, set[str]] = {}
    for service in ("collector", "aggregator", "decider", "actuator"):
        base = ServiceMetrics(service)
        if service == "decider":
            DeciderMetrics(base)
        elif service == "actuator":
            ActuatorMetrics(base)
        elif service == "aggregator":
            AggregatorMetrics(SimpleNamespace(metrics=base))  # type: ignore[arg-type]  # it reads ctx.metrics only
        else:
            CollectorMetrics(base.registry)
        for name, labels in _labelnames(base.registry).items():
            names.setdefault(name, set()).update(labels)
    return names


def _rules() -> list[Obj]:
    rule = find(render(DEPLOY), "PrometheusRule", "gpuscale")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def _selectors(expr: str) -> list[Any]:
    found: list[Any] = []

    def visit(node: Any) -> None:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        elif isinstance(node, promql_parser.MatrixSelector):
            found.append(node.vector_selector)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


def _grouping_labels(expr: str) -> set[str]:
    labels: set[str] = set()

    def visit(node: Any) -> None:
        modifier = getattr(node, "modifier", None)
        if isinstance(node, promql_parser.AggregateExpr) and modifier is not None:
            labels.update(modifier.labels)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return labels


def test_the_rule_is_installed_with_the_monitoring_kustomization() -> None:
    rule = find(render(DEPLOY / "monitoring"), "PrometheusRule", "gpuscale")
    assert rule["metadata"]["namespace"] == "gpuscale"
    names = [g["name"] for g in rule["spec"]["groups"]]
    assert len(names) == len(set(names))


def test_the_alerts_an_on_call_engineer_needs_are_there() -> None:
    alerts = {r["alert"] for r in _rules()}
    assert {
        "GPUScalerNoMetrics",  # no metrics
        "GPUScalerAtMaxReplicas",  # stuck at max
        "GPUScalerConflictingController",  # another autoscaler on the target
        "GPUScaleActuatorFailing",  # the actuator fails
        "GPUScalerRescaleFailing",
        "GPUScaleActuatorNoLeader",
    } <= alerts


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r["alert"])
def test_every_alert_is_complete(rule: Obj) -> None:
    assert re.fullmatch(r"GPUScale[A-Za-z]+", rule["alert"])
    assert re.fullmatch(r"\d+[smh]", rule["for"])
    assert rule["labels"]["severity"] in SEVERITIES
    annotations = rule["annotations"]
    assert {"summary", "description", "runbook"} <= set(annotations)
    doc, _, anchor = annotations["runbook"].partition("#")
    text = (REPO / doc).read_text()
    anchors = {_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}
    assert anchor in anchors, f"{annotations['runbook']}: no such section"


def _anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^a-z0-9 _-]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r["alert"])
def test_every_expression_parses_and_reads_exported_metrics_with_their_labels(rule: Obj) -> None:
    exported = exported_metrics()
    selectors = _selectors(rule["expr"])
    assert selectors, "an alert on no metric"
    for selector in selectors:
        name = selector.name
        assert name in exported, f"{name} is not on any gpuscale /metrics"
        known = exported[name] | TARGET_LABELS
        for matcher in selector.matchers.matchers:
            assert matcher.name in known, f"{name} has no label {matcher.name}"
    used_labels = _grouping_labels(rule["expr"])
    all_labels = set().union(*(exported[s.name] for s in selectors)) | TARGET_LABELS
    assert used_labels <= all_labels, f"grouping by {used_labels - all_labels}"


@pytest.mark.parametrize("rule", _rules(), ids=lambda r: r["alert"])
def test_condition_matchers_name_real_conditions_and_reasons(rule: Obj) -> None:
    conditions = {c.value for c in ConditionType}
    reasons = {r.value for r in Reason}
    for selector in _selectors(rule["expr"]):
        if selector.name != "gpuscale_gpuscaler_status_condition":
            continue
        for matcher in selector.matchers.matchers:
            values = set(matcher.value.split("|"))
            if matcher.name == "condition":
                assert values <= conditions, values
            elif matcher.name == "reason":
                assert values <= reasons, values
            elif matcher.name == "status":
                assert values <= {"true", "false", "unknown"}, values


def test_the_check_catches_a_metric_nobody_exports() -> None:
    assert "gpuscale_decider_decisions_totl" not in exported_metrics()
    with pytest.raises(ValueError, match="unclosed"):
        promql_parser.parse("sum(rate(gpuscale_decider_decisions_total[5m])")


# --- kube-state-metrics' view of the GPUScalers -------------------------------------------


def _schema_at(schema: dict[str, Any], path: list[str]) -> dict[str, Any] | None:
    for part in path:
        if schema.get("type") == "array":
            schema = schema["items"]
        props = schema.get("properties") or {}
        if part not in props:
            return None
        schema = props[part]
    return schema


def test_the_kube_state_metrics_config_reads_paths_the_crd_has() -> None:
    config = yaml.safe_load((DEPLOY / "monitoring" / "kube-state-metrics" / "gpuscaler-crs.yaml").read_text())
    assert config["kind"] == "CustomResourceStateMetrics"
    (resource,) = config["spec"]["resources"]
    assert resource["groupVersionKind"] == {
        "group": "gpuscale.io",
        "version": "v1alpha1",
        "kind": "GPUScaler",
    }
    crd = yaml.safe_load((DEPLOY / "cluster" / "crd-gpuscaler.yaml").read_text())
    root = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    names = {m["name"] for m in resource["metrics"]}
    assert {"status_condition", "current_replicas", "max_replicas"} <= names
    for metric in resource["metrics"]:
        gauge = metric["each"]["gauge"]
        target = _schema_at(root, gauge["path"])
        assert target is not None, f"{metric['name']}: {gauge['path']} is not in the CRD"
        item = target["items"] if target.get("type") == "array" else target
        for path in [*gauge.get("labelsFromPath", {}).values(), gauge.get("valueFrom")]:
            if path:
                assert _schema_at(item, path) is not None, f"{metric['name']}: {path}"
        if target.get("type") != "array":
            assert target["type"] == "integer", metric["name"]
    # Conditions' status is "True"/"False", which kube-state-metrics turns into 1/0.
    conditions = _schema_at(root, ["status", "conditions"])
    assert conditions is not None
    assert conditions["items"]["properties"]["status"]["enum"] == ["True", "False", "Unknown"]
