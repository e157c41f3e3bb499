"""NVIDIA's own files judge the collector's /metrics (simulated GPUs, real HTTP):
every panel of dcgm-exporter's Grafana dashboard finds its metrics and labels, and
every default counter of dcgm-exporter is served with its type and HELP, or named
in docs/DCGM.md with the reason it cannot be.

The files are dcgm-exporter's, copied unchanged with their commit and licence in
tests/fixtures/dcgm/."""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import promql_parser
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "dcgm"
DASHBOARD = FIXTURES / "dcgm-exporter-dashboard.json"
COUNTERS = FIXTURES / "dcgm-exporter.default-counters.csv"
TABLE = ROOT / "docs" / "DCGM.md"
# Labels Prometheus adds to every series of a scrape target; not on any /metrics page.
TARGET_LABELS = {"instance", "job"}


def default_counters() -> list[tuple[str, str, str]]:
    """(DCGM field, Prometheus type or "label", HELP) of each uncommented csv line."""
    rows = []
    with COUNTERS.open(newline="") as f:
        for row in csv.reader(f):
            if not row or row[0].lstrip().startswith("#"):
                continue
            name, kind, help_text = (cell.strip() for cell in (row[0], row[1], ",".join(row[2:])))
            rows.append((name, kind, help_text))
    return rows


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))


def selectors(expr: Any) -> Iterator[tuple[str, set[str]]]:
    """(metric name, label names) of every vector selector in a parsed PromQL tree."""
    if isinstance(expr, promql_parser.VectorSelector):
        yield expr.name, {m.name for m in expr.matchers.matchers}
        return
    if isinstance(expr, promql_parser.AggregateExpr) and expr.modifier is not None:
        yield "", set(expr.modifier.labels)
    for attr in ("lhs", "rhs", "expr", "param", "vector_selector"):
        child = getattr(expr, attr, None)
        if child is not None and not isinstance(child, str | int | float):
            yield from selectors(child)
    for arg in getattr(expr, "args", None) or ():
        yield from selectors(arg)


def dashboard_queries() -> tuple[int, list[tuple[str, str, set[str]]]]:
    """(panels with a query, [(where, metric, labels)]) from every panel and template variable."""
    doc = json.loads(DASHBOARD.read_text())
    uses: list[tuple[str, str, set[str]]] = []
    with_query = 0
    for panel in panels(doc["panels"]):
        exprs = [t["expr"] for t in panel.get("targets", []) if t.get("expr")]
        with_query += bool(exprs)
        for expr in exprs:
            # Grafana's variables become what Grafana sends: a regex matching the chosen values.
            promql = re.sub(r"\$\{?\w+\}?", ".+", expr)
            for metric, labels in selectors(promql_parser.parse(promql)):
                uses.append((panel["title"], metric, labels))
    for variable in doc.get("templating", {}).get("list", []):
        found = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", str(variable.get("query", "")))
        if found:
            uses.append((f"${variable['name']}", found[1], {found[2]}))
    return with_query, uses


async def scrape(url: str) -> tuple[str, dict[str, Any]]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return text, {f.name: f for f in text_string_to_metric_families(text)}


async def sim_metrics(kit: Any) -> tuple[str, dict[str, Any]]:
    settings = kit.settings(backend="sim", sim_gpus=2, sim_source="constant:70")
    async with kit.running(settings) as rc:
        await kit.wait_for(lambda: rc.collector.seq >= 2, what="two ticks")
        return await scrape(rc.url)


async def test_nvidias_dashboard_finds_every_metric_and_label_of_its_8_panels(kit: Any) -> None:
    _, families = await sim_metrics(kit)
    with_query, uses = dashboard_queries()
    assert with_query == 8
    shown = set()
    for where, metric, labels in uses:
        if not metric:  # an aggregation's by/without labels: on the metric it aggregates
            assert labels <= TARGET_LABELS | {"gpu", "UUID", "Hostname", "modelName"}, (where, labels)
            continue
        assert metric in families, (where, metric)
        assert families[metric].samples, (where, metric)
        for sample in families[metric].samples:
            missing = labels - TARGET_LABELS - set(sample.labels)
            assert not missing, (where, metric, missing)
        shown.add(where)
    assert len({w for w in shown if not w.startswith("$")}) == 8


async def test_every_default_counter_is_served_as_dcgm_exporter_serves_it(kit: Any) -> None:
    text, families = await sim_metrics(kit)
    table = TABLE.read_text()
    for name, kind, help_text in default_counters():
        row = re.search(rf"^\| `{name}` \|[^\n]*$", table, re.MULTILINE)
        assert row, f"{name} has no row in docs/DCGM.md"
        if kind == "label":
            util = families["DCGM_FI_DEV_GPU_UTIL"].samples
            assert all(s.labels.get(name) for s in util), name
            continue
        if name not in families:
            # Not served: the table must say so and why.
            assert "| no |" in row[0], f"{name} is neither served nor documented as impossible"
            continue
        family = families[name]
        assert family.samples, name
        assert (family.type, family.documentation) == (kind, help_text), name
        # dcgm-exporter's exact name: a counter without the _total suffix.
        assert f"# TYPE {name} {kind}\n" in text, name
        assert re.search(rf"^{name}\{{", text, re.MULTILINE), name


async def test_sm_active_says_it_is_a_ratio(kit: Any) -> None:
    _, families = await sim_metrics(kit)
    family = families["DCGM_FI_PROF_SM_ACTIVE"]
    assert "(in %)" not in family.documentation
    assert "ratio" in family.documentation
    assert all(0.0 <= s.value <= 1.0 for s in family.samples)
