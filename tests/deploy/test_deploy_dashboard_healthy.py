"""The project's Grafana dashboard on a healthy pipeline: the failure panels show a line at 0,
not "No data". The panels' own queries are evaluated by Prometheus' engine (``promtool test
rules``' promql_expr_test) over the series each service serves when it starts, before any
failure: its own registry, as built by the service.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from gpuscale.wire import Outcome

from .deploy_support import DEPLOY
from .promtool_support import run_promtool
from .service_pages import started

DASHBOARD = DEPLOY / "grafana" / "gpuscale-dashboard.json"
FAILURE_SERIES = ("gpuscale_messages_rejected_total", "gpuscale_actuator_outcomes_total")


def _panel_exprs(title: str) -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    (panel,) = [p for p in dashboard["panels"] if p.get("title") == title]
    return [t["expr"].replace("$__rate_interval", "5m") for t in panel["targets"]]


def _series(service: str, registry: CollectorRegistry) -> list[dict[str, str]]:
    out = []
    for family in registry.collect():
        for sample in family.samples:
            if sample.name not in FAILURE_SERIES:
                continue
            labels = {
                **sample.labels,
                "job": f"gpuscale-{service}",
                "namespace": "gpuscale",
                "pod": f"{service}-0",
            }
            text = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            out.append({"series": f"{sample.name}{{{text}}}", "values": f"{sample.value:g}x15"})
    return out


def _healthy_pipeline() -> list[dict[str, str]]:
    series = []
    for service in ("collector", "aggregator", "decider", "actuator"):
        series += _series(service, started(service))
    return series


def _evaluate(tmp_path: Path, expr: str, expected: list[dict[str, Any]]) -> None:
    (tmp_path / "empty.rules.yaml").write_text("groups: []\n")
    case = {
        "rule_files": ["empty.rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": "a healthy pipeline, 10 minutes after start",
                "interval": "1m",
                "input_series": _healthy_pipeline(),
                "promql_expr_test": [{"expr": expr, "eval_time": "10m", "exp_samples": expected}],
            }
        ],
    }
    (tmp_path / "case.yaml").write_text(yaml.safe_dump(case, sort_keys=False))
    result = run_promtool("test", "rules", "case.yaml", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rejected_messages_shows_one_line_at_0_on_a_healthy_pipeline(tmp_path: Path) -> None:
    (expr,) = _panel_exprs("Rejected messages per second")
    _evaluate(tmp_path, expr, [{"labels": '{reason="none"}', "value": 0}])


def test_actuator_outcomes_shows_every_outcome_at_0_before_the_first_decision(tmp_path: Path) -> None:
    (expr,) = _panel_exprs("Actuator outcomes per minute")
    expected = [{"labels": f'{{outcome="{o.value}"}}', "value": 0} for o in Outcome]
    _evaluate(tmp_path, expr, expected)
