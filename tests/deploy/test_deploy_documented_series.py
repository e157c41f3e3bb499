"""Every gpuscale series a reader is told about exists as written.

The docs and manifests (alert rules, the dashboard, runbooks, the security notes) name
series as ``gpuscale_x_total{label="value"}``. Each name must be one a service exports,
each label one that metric has (or one Prometheus adds to every target), and, where a
service births every value of a label at 0 when it starts (a closed set, as the alerts
need), each value one of those: an alert or a query on a value nobody exports is silent.

docs/BENCHMARKS.md and CHANGELOG.md are histories: they name what existed then.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gpuscale_collector.engine_scraper import EngineMetrics

from .deploy_support import DEPLOY, REPO
from .service_pages import BUILDERS, started

# Labels Prometheus adds to every scraped series (target labels; the collector's relabelled node).
TARGET_LABELS = {"namespace", "pod", "service", "endpoint", "instance", "job", "container", "node"}
HISTORIES = {"BENCHMARKS.md"}
SERIES = re.compile(r"\b(gpuscale_[a-z0-9_]+)\{([^}]*)\}")
# ``label="v"``, ``label=~"a|b"``, ``label=v`` (prose), or a bare ``label`` (prose: ``{kind,reason}``).
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:(=~|!=|!~|=)\s*\"?([^\",}]*)\"?)?")
# Series made by a collector of their own (no registry entry until there is something to say).
SOURCE_NAME = re.compile(r"\"(gpuscale_[a-z0-9_]+)\"")


def _documents() -> list[Path]:
    docs = [p for p in (REPO / "docs").glob("*.md") if p.name not in HISTORIES]
    return sorted(
        [
            *docs,
            REPO / "README.md",
            *REPO.glob("services/*/README.md"),
            *DEPLOY.rglob("*.y*ml"),
            *DEPLOY.rglob("*.json"),
        ]
    )


def _registries() -> list[CollectorRegistry]:
    registries = [started(service) for service in BUILDERS]
    engine = CollectorRegistry()
    EngineMetrics(engine)  # the collector's engine scraper, registered once its backend starts
    return [*registries, engine]


def _exported() -> tuple[dict[str, set[str]], dict[tuple[str, str], set[str]]]:
    """Series name -> its label names; (series name, label) -> the values born at start."""
    labels: dict[str, set[str]] = {}
    values: dict[tuple[str, str], set[str]] = {}
    for registry in _registries():
        for name, collector in registry._names_to_collectors.items():
            labels.setdefault(name, set()).update(getattr(collector, "_labelnames", ()))
        for family in registry.collect():
            for sample in family.samples:
                labels.setdefault(sample.name, set()).update(sample.labels)
                for label, value in sample.labels.items():
                    values.setdefault((sample.name, label), set()).add(value)
    return labels, values


def _source_names() -> set[str]:
    names: set[str] = set()
    for root in ("services", "shared"):
        for source in (REPO / root).rglob("*.py"):
            names.update(SOURCE_NAME.findall(source.read_text()))
    return names


def _mentions() -> list[tuple[str, str, str]]:
    """(where, series name, the text between its braces) for every series a document names."""
    found = []
    for path in _documents():
        text = path.read_text().replace('\\"', '"')  # the dashboard's JSON escapes its quotes
        for match in SERIES.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append((f"{path.relative_to(REPO)}:{line}", match.group(1), match.group(2)))
    return found


def test_every_documented_series_is_exported_with_its_labels_and_values() -> None:
    labels, values = _exported()
    own_collectors = _source_names()
    problems = []
    mentions = _mentions()
    assert len(mentions) > 20, "the scan finds the rules', the dashboard's and the docs' series"
    for where, name, body in mentions:
        if name.endswith("_"):  # shell-style ``gpuscale_workload_replicas_{current,desired}``
            problems += [
                f"{where}: {name}{part.strip()} is on no gpuscale /metrics"
                for part in body.split(",")
                if name + part.strip() not in labels
            ]
            continue
        if name not in labels:
            if name not in own_collectors:
                problems.append(f"{where}: {name} is on no gpuscale /metrics")
            continue
        for label, op, value in MATCHER.findall(body.replace("\\|", "|")):
            if label not in labels[name] | TARGET_LABELS:
                problems.append(f"{where}: {name} has no label {label}")
                continue
            born = values.get((name, label))
            if not op or born is None or op.startswith("!") or "$" in value or "..." in value:
                continue
            for one in value.split("|"):
                if one and one not in born:
                    problems.append(
                        f"{where}: {name}{{{label}={one!r}}} is never exported (values: {sorted(born)})"
                    )
    assert problems == []


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('{kind="decisions",reason="not_jetstream"}', "a kind and reason no service counts"),
        ('{outcome="exploded"}', "an outcome the actuator never reports"),
    ],
)
def test_the_check_sees_a_value_nobody_exports(body: str, why: str) -> None:
    labels, values = _exported()
    name = "gpuscale_messages_rejected_total" if "kind" in body else "gpuscale_actuator_outcomes_total"
    matched = MATCHER.findall(body)
    assert all(label in labels[name] for label, _, _ in matched)
    assert any(value not in values[(name, label)] for label, _, value in matched), why
