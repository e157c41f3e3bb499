"""The catalog of metrics is the one place a metric is declared: the wire's maps, the
aggregator's layout, the decider's demand table, the CRD and the user's table follow it."""

from __future__ import annotations

import re
from pathlib import Path

import msgpack
import pytest
import yaml

from gpuscale import catalog
from gpuscale.catalog import CATALOG, GPU_METRICS, METRIC_NAMES, POD_METRICS, DemandKind, Scope
from gpuscale.codec import Reader, encode
from gpuscale.wire import EngineSignals, MetricValues, WireError, WorkloadMetrics
from gpuscale_aggregator.core import records
from gpuscale_decider.core import demand

from .wire_factories import NOW, metrics

REPO = Path(__file__).resolve().parents[2]
GPUSCALER_DOC = REPO / "docs" / "GPUSCALER.md"


def test_the_wire_maps_have_one_field_per_catalog_entry_in_its_order() -> None:
    assert MetricValues.__struct_fields__ == METRIC_NAMES
    assert EngineSignals.__struct_fields__ == ("name", *POD_METRICS)
    assert METRIC_NAMES == GPU_METRICS + POD_METRICS


@pytest.mark.parametrize("metric", CATALOG, ids=lambda m: m.name)
def test_each_metric_carries_its_range_on_the_wire(metric: catalog.Metric) -> None:
    reader = Reader(WorkloadMetrics)

    def averages(value: float) -> bytes:
        payload = msgpack.unpackb(encode(metrics()))
        payload["averages"] = {metric.name: value}
        return bytes(msgpack.packb(payload))

    assert reader.decode(averages(100.0), NOW).averages[metric.name] == 100.0
    with pytest.raises(WireError):
        reader.decode(averages(-1.0), NOW)
    if metric.ceiling is None:
        assert reader.decode(averages(1e6), NOW).averages[metric.name] == 1e6
    else:
        with pytest.raises(WireError):
            reader.decode(averages(metric.ceiling + 0.5), NOW)


def test_the_users_table_is_the_catalogs() -> None:
    assert catalog.docs_table() in GPUSCALER_DOC.read_text(), (
        "docs/GPUSCALER.md's table of metrics differs from gpuscale.catalog: paste catalog.docs_table()"
    )


def test_the_demand_table_names_each_metric_under_its_kind() -> None:
    section = GPUSCALER_DOC.read_text().split("### The demand model", 1)[1]
    rows = dict(re.findall(r"^\| (served|queue|level) \| ([^|]+) \|", section, re.MULTILINE))
    for metric in CATALOG:
        named = metric.name in re.findall(r"`([a-z_]+)`", rows[metric.demand.value])
        if metric.name in (catalog.ARRIVAL, catalog.COMPLETION):
            continue  # the rates are the model's inputs; as targets they are levels
        assert named, f"docs/GPUSCALER.md's demand table: {metric.name} is not in the {metric.demand} row"
    assert {m.name: m.demand for m in CATALOG if m.demand is not DemandKind.LEVEL} == demand.DEMAND


def test_the_crd_offers_exactly_the_catalogs_metrics() -> None:
    for crd in (
        REPO / "deploy/cluster/crd-gpuscaler.yaml",
        REPO / "kubesim/gpuscale_kubesim/crds/gpuscaler.yaml",
    ):
        schema = yaml.safe_load(crd.read_text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        name = schema["properties"]["spec"]["properties"]["metrics"]["items"]["properties"]["name"]
        assert tuple(name["enum"]) == METRIC_NAMES, crd


def test_the_window_stores_the_catalogs_metrics_per_gpu_and_per_pod() -> None:
    assert tuple(m.name for m in CATALOG if m.scope is Scope.GPU) == records.WINDOW_METRICS
    assert tuple(m.name for m in CATALOG if m.scope is Scope.POD) == records.ENGINE_METRICS
    assert records.ENGINE_METRICS[records.KV] == "kv_cache_usage"


def test_an_estimate_is_told_in_its_metrics_unit() -> None:
    assert demand.UNITS["gpu_util"] == "GPU-%"
    assert demand.UNITS["requests_waiting"] == "requests"
    assert set(demand.CEILINGS) == {m.name for m in CATALOG if m.unit is catalog.Unit.PERCENT}
