"""Every service's /metrics passes ``promtool check metrics``, and the failure series the
alerts read are there at 0 from the start.

Each service's page is its registry as the service builds it (the shared ServiceMetrics plus
the service's own metrics class); the collector's is its live page over HTTP, from the sim
backend, with dcgm-exporter's families. Accepted lints, inherited from dcgm-exporter's names
that dashboards query verbatim: the camelCase label ``modelName``, and on ``DCGM_FI_*``
counters the missing ``_total`` and the word ``counter`` in ``DCGM_FI_DEV_PCIE_REPLAY_COUNTER``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re

import aiohttp
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.http import ServiceHttp
from gpuscale.metrics import SUBJECT_REASONS, ServiceMetrics
from gpuscale.runtime import ServiceContext
from gpuscale.settings import build
from gpuscale.wire import ERROR_CODES, Outcome
from gpuscale_actuator.app import REJECT_REASONS
from gpuscale_collector.app import Collector
from gpuscale_collector.settings import CollectorSettings
from gpuscale_kubesim import KubeSim

from ..actuator.actuator_harness import running_actuator, settings_for
from ..waiting import eventually
from .promtool_support import run_promtool
from .service_pages import BUILDERS, READS, started

# The inherited lints: dcgm-exporter's label modelName, its counters' names.
CAMEL_CASE_LABEL = "label names should be written in 'snake_case' not 'camelCase'"
# dcgm-exporter's counters keep its names (DCGM_FI_DEV_PCIE_REPLAY_COUNTER, ..._ENERGY_CONSUMPTION).
DCGM_NAME_LINTS = (
    'counter metrics should have "_total" suffix',
    "metric name should not include type 'counter'",
)
INHERITED_CAMEL_CASE = {"modelName"}


def _problems(page: bytes) -> list[str]:
    result = run_promtool("check", "metrics", stdin=page)
    problems = [line.strip() for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert result.returncode == 0 or problems, result
    return problems


def _not_inherited(page: bytes, problems: list[str]) -> list[str]:
    families = {f.name: f for f in text_string_to_metric_families(page.decode())}
    left = []
    for problem in problems:
        name, _, lint = problem.partition(" ")
        family = families.get(name) or families.get(name.removesuffix("_total"))
        if lint == CAMEL_CASE_LABEL and family is not None:
            camel = {k for s in family.samples for k in s.labels if re.search(r"[a-z][A-Z]", k)}
            if camel and camel <= INHERITED_CAMEL_CASE:
                continue
        if lint in DCGM_NAME_LINTS and name.startswith("DCGM_FI_"):
            continue
        left.append(problem)
    return left


@pytest.mark.parametrize("service", sorted(BUILDERS))
def test_promtool_finds_nothing_on_a_services_page(service: str) -> None:
    page = generate_latest(started(service))
    assert _not_inherited(page, _problems(page)) == []


def test_the_accepted_lints_are_only_the_inherited_ones() -> None:
    page = (
        b"# HELP gpuscale_x_total A counter.\n# TYPE gpuscale_x_total counter\n"
        b'gpuscale_x_total{podName="a"} 1.0\n'
        b"# HELP gpuscale_y A counter without _total.\n# TYPE gpuscale_y counter\ngpuscale_y 1.0\n"
        b"# HELP DCGM_FI_DEV_GPU_UTIL Util.\n# TYPE DCGM_FI_DEV_GPU_UTIL gauge\n"
        b'DCGM_FI_DEV_GPU_UTIL{modelName="H100"} 1.0\n'
        b"# HELP DCGM_FI_DEV_PCIE_REPLAY_COUNTER Retries.\n# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter\n"
        b"DCGM_FI_DEV_PCIE_REPLAY_COUNTER 1.0\n"
    )
    left = _not_inherited(page, _problems(page))
    assert [p.split(" ")[0] for p in left] == ["gpuscale_x_total", "gpuscale_y"], left


async def _collector_page() -> bytes:
    settings = build(
        CollectorSettings,
        {
            "node_name": "node-a",
            "backend": "sim",
            "sim_gpus": "2",
            "interval_s": "0.1",
            "http_port": "0",
            "nats_url": "nats://127.0.0.1:1",  # nothing listens: the page does not need NATS
        },
        environ={},
    )
    metrics = ServiceMetrics("collector")
    http = ServiceHttp(metrics, host="127.0.0.1", port=0)
    await http.start()
    ctx = ServiceContext("collector", settings, metrics, http)
    collector = Collector(ctx)
    task = asyncio.create_task(collector.run())
    try:
        await eventually(lambda: collector.last_batch is not None, 30, "the collector's first batch")
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{http.port}/metrics") as resp,
        ):
            assert resp.status == 200
            return await resp.read()
    finally:
        ctx.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(task, 10.0)
        await http.stop()


async def test_promtool_finds_nothing_on_the_collectors_live_page_but_dcgm_exporters_names() -> None:
    page = await _collector_page()
    assert b"DCGM_FI_DEV_GPU_UTIL{" in page
    assert _not_inherited(page, _problems(page)) == []


# --- the failure series the alerts read, at 0 from the start ---------------------------


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    return None


def test_an_actuators_failed_outcome_is_at_0_before_its_first_decision() -> None:
    registry = started("actuator")
    for outcome in Outcome:
        assert _value(registry, "gpuscale_actuator_outcomes_total", outcome=outcome.value) == 0, outcome


@pytest.mark.parametrize("service", sorted(READS))
def test_every_rejection_a_service_can_count_is_at_0_from_the_start(service: str) -> None:
    registry = started(service)
    for kind, extra in READS[service].items():
        for reason in (*ERROR_CODES, *SUBJECT_REASONS, *extra):
            value = _value(registry, "gpuscale_messages_rejected_total", kind=kind, reason=reason)
            assert value == 0, f"{service}: {kind}/{reason} is {value}"


async def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


FAILED = ("gpuscale_actuator_outcomes_total", (("outcome", "failed"),))


@pytest.mark.integration
async def test_leader_and_standby_actuators_serve_their_failures_at_0_before_any_decision(
    nats_server: EmbeddedNats, kube_sim: KubeSim
) -> None:
    leader_settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, identity="actuator-a")
    standby_settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, identity="actuator-b")
    async with running_actuator(leader_settings) as a:
        await eventually(lambda: a.metric("gpuscale_actuator_leader") == 1, 30, "a leader")
        async with running_actuator(standby_settings) as b:
            for actuator in (a, b):
                assert actuator.ctx is not None
                page = await _scrape(actuator.ctx.http.port)
                assert page[FAILED] == 0
                for reason in (*ERROR_CODES, *REJECT_REASONS):
                    key = ("gpuscale_messages_rejected_total", (("kind", "desired"), ("reason", reason)))
                    assert page[key] == 0, reason
            # The standby, the next leader, has its series at 0 already: its first failure is seen.
            assert b.metric("gpuscale_actuator_leader") == 0
