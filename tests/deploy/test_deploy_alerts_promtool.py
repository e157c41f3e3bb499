"""deploy/monitoring's alerts run through Prometheus' own rule engine (``promtool test
rules``): each alert fires when it should and stays quiet when it should not, a first
failure included, after a start, a restart or a leader change.

The cases are in tests/deploy/promtool/*_test.yaml; this test writes the PrometheusRule's
groups to the rules file they name. Annotations are checked by ``promtool check rules``
(their templates) and by test_deploy_prometheus_rules.py (their runbooks), so the cases
state labels only.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from .deploy_support import DEPLOY, REPO, find, render
from .promtool_support import run_promtool

CASES = REPO / "tests" / "deploy" / "promtool"
RULES_FILE = "gpuscale.rules.yaml"


def _groups() -> list[dict[str, Any]]:
    rule = find(render(DEPLOY / "monitoring"), "PrometheusRule", "gpuscale")
    groups: list[dict[str, Any]] = rule["spec"]["groups"]
    return groups


def _alerts() -> set[str]:
    return {r["alert"] for g in _groups() for r in g["rules"] if "alert" in r}


def _case_files() -> list[Path]:
    return sorted(CASES.glob("*_test.yaml"))


def _write_rules(directory: Path, *, annotations: bool) -> Path:
    groups = _groups()
    if not annotations:
        groups = [
            {**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]}
            for g in groups
        ]
    path = directory / RULES_FILE
    path.write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    return path


def test_promtool_finds_the_rules_valid(tmp_path: Path) -> None:
    rules = _write_rules(tmp_path, annotations=True)
    result = run_promtool("check", "rules", str(rules))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_alerts())} rules found" in result.stdout


@pytest.mark.parametrize("case_file", _case_files(), ids=lambda p: p.name)
def test_every_alert_case_passes_in_promtool(case_file: Path, tmp_path: Path) -> None:
    _write_rules(tmp_path, annotations=False)
    shutil.copy(case_file, tmp_path / case_file.name)
    result = run_promtool("test", "rules", case_file.name, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def _expectations() -> dict[str, tuple[int, int]]:
    """Per alert: how many evaluations expect it firing, and how many expect it quiet."""
    seen: dict[str, tuple[int, int]] = {}
    for path in _case_files():
        doc = yaml.safe_load(path.read_text())
        assert doc["rule_files"] == [RULES_FILE], path.name
        for test in doc["tests"]:
            for check in test.get("alert_rule_test", []):
                firing, quiet = seen.get(check["alertname"], (0, 0))
                if check.get("exp_alerts"):
                    firing += 1
                else:
                    quiet += 1
                seen[check["alertname"]] = (firing, quiet)
    return seen


def test_every_alert_has_a_case_firing_and_a_case_quiet() -> None:
    seen = _expectations()
    assert set(seen) <= _alerts(), f"cases for alerts that do not exist: {set(seen) - _alerts()}"
    for alert in sorted(_alerts()):
        firing, quiet = seen.get(alert, (0, 0))
        assert firing > 0, f"{alert}: no case where it fires"
        assert quiet > 0, f"{alert}: no case where it stays quiet"
