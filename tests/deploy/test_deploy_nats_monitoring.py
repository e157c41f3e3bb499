"""NATS's monitoring port stays inside its pod: /connz, /subsz and /accountz name
every user, node connection and inbox without a login, so no Service publishes it, nats-server
binds it to loopback, and the probes ask it from inside the container."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from .deploy_support import (
    COMPOSE_FILE,
    DEPLOY,
    NATS_MAIN_CONF,
    NODE_AUTH_OVERLAY,
    OVERLAYS,
    Obj,
    find,
    of_kind,
    render,
)

MONITOR_PORT = 8222
RENDERINGS = {
    "deploy": DEPLOY,
    "base": DEPLOY / "base",
    **{overlay: DEPLOY / overlay for overlay in OVERLAYS},
    "node-auth": NODE_AUTH_OVERLAY,
    "keda-scaler": DEPLOY / "examples" / "with-keda-scaler",
}


def _nats_container(objects: list[Obj]) -> Obj:
    (container,) = (
        c
        for c in find(objects, "StatefulSet", "nats")["spec"]["template"]["spec"]["containers"]
        if c["name"] == "nats"
    )
    return container


@pytest.mark.parametrize("where", list(RENDERINGS))
def test_no_service_exposes_the_nats_monitoring_port(where: str) -> None:
    objects = render(RENDERINGS[where])
    for service in of_kind(objects, "Service"):
        for port in service["spec"].get("ports") or []:
            assert MONITOR_PORT not in (port.get("port"), port.get("targetPort")), service["metadata"]["name"]
            assert port.get("targetPort") != "monitor", service["metadata"]["name"]
    container = _nats_container(objects)
    assert MONITOR_PORT not in [p["containerPort"] for p in container.get("ports") or []]


@pytest.mark.parametrize("where", ["base", "node-auth"])
def test_the_nats_probes_ask_the_loopback_from_inside_the_container(where: str) -> None:
    container = _nats_container(render(RENDERINGS[where]))
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert "httpGet" not in container[probe], probe  # the kubelet would knock on the pod IP
        command = container[probe]["exec"]["command"]
        assert command[0] == "wget"
        assert command[-1].startswith(f"http://127.0.0.1:{MONITOR_PORT}/healthz"), probe


@pytest.mark.parametrize(
    "conf", [NATS_MAIN_CONF, DEPLOY / "compose" / "nats.conf"], ids=["cluster", "compose"]
)
def test_nats_server_binds_monitoring_to_loopback(conf: Path) -> None:
    (http,) = re.findall(r"^\s*http(?:_port)?\s*:\s*(\S+)", conf.read_text(), re.MULTILINE)
    assert http == f"127.0.0.1:{MONITOR_PORT}"
    assert not re.search(r"^\s*(https|http_port|monitor_port)\s*:", conf.read_text(), re.MULTILINE)


def test_compose_publishes_no_monitoring_port() -> None:
    nats = yaml.safe_load(COMPOSE_FILE.read_text())["services"]["nats"]
    assert not any(str(MONITOR_PORT) in str(port) for port in nats.get("ports") or [])
