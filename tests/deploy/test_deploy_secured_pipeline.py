"""The real services run with deploy/'s credentials and close the scaling loop.

NATS: each service logs in as its own user of deploy/'s auth.conf; any
subject or JetStream API call a service uses without a grant shows up in the
nats-server log as a "Violation" line, and the test fails naming it.

Kubernetes: kube-sim enforces, per ServiceAccount token, the rules that the
rendered RBAC of deploy/ binds to that ServiceAccount (Roles only in their
namespace); each service gets a kubeconfig with its own account's token, so
a call the RBAC does not allow is a 403, as in a real cluster.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from kubernetes_asyncio.client import AppsV1Api

from gpuscale import codec, natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.kube import new_api_client
from gpuscale_cli.demo.processes import ProcessGroup
from gpuscale_kubesim import KubeSim

from ..k8s_objects import gpu_workload, gpuscaler
from ..waiting import eventually_while_running
from .deploy_support import DEPLOY, NATS_AUTH_CONF, Obj, find, nats_roles, of_kind, render, run_gpuscale_setup

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROLES = tuple(nats_roles())
PASSWORDS = {role: f"{role}0123456789abcdef" for role in ROLES}
NAMESPACE, NAME = "default", "bert-intent-detection"
WINDOW_S = 3
NODES = ("gpu-node-1", "gpu-node-2")

SCENARIO = [
    gpu_workload(NAME, namespace=NAMESPACE, image="bert:1"),
    gpuscaler(
        NAME,
        namespace=NAMESPACE,
        max_replicas=4,
        metrics=[{"name": "gpu_util", "target": 60}],
        window=f"{WINDOW_S}s",
    ),
]


def _url(server: EmbeddedNats, role: str) -> str:
    return f"nats://{role}:{PASSWORDS[role]}@127.0.0.1:{server.port}"


def _violations(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if "Violation" in line]


@pytest.fixture
def secured_nats(tmp_path: Path) -> Iterator[tuple[EmbeddedNats, Path]]:
    store = tmp_path / "nats"
    store.mkdir()
    shutil.copy(NATS_AUTH_CONF, store / "auth.conf")
    log = tmp_path / "nats-server.log"
    server = EmbeddedNats(store_dir=str(store), config_text="include auth.conf\n", log_file=str(log))
    with pytest.MonkeyPatch.context() as mp:  # nats-server reads the passwords from its environment
        for role, password in PASSWORDS.items():
            mp.setenv(f"NATS_{role.upper()}_PASSWORD", password)
        server.start()
    try:
        yield server, log
    finally:
        server.close()


def _account_rules(objects: list[Obj]) -> dict[str, list[Obj]]:
    """ServiceAccount -> the rules its bindings give it (a Role's only in its namespace)."""
    rules: dict[str, list[Obj]] = {}
    for binding in of_kind(objects, "RoleBinding", "ClusterRoleBinding"):
        role = find(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for subject in binding["subjects"]:
            granted = rules.setdefault(subject["name"], [])
            for rule in role["rules"]:
                scoped = dict(rule)
                if binding["kind"] == "RoleBinding":
                    scoped["namespaces"] = [binding["metadata"]["namespace"]]
                granted.append(scoped)
    return rules


ADMIN_TOKEN = "admin-token-for-the-test"  # noqa: S105 - kube-sim's, not a credential


@pytest.fixture(params=["admin", "service-accounts"])
async def pipeline(
    request: pytest.FixtureRequest, secured_nats: tuple[EmbeddedNats, Path], tmp_path: Path
) -> AsyncIterator[tuple[KubeSim, Path, ProcessGroup]]:
    """kube-sim with RBAC per token; the services as processes, each with its NATS user and,
    in "service-accounts" mode, its own ServiceAccount's token."""
    server, _ = secured_nats
    accounts = _account_rules(render(DEPLOY / "base"))
    tokens: dict[str, Any] = {ADMIN_TOKEN: None}
    for account, rules in accounts.items():
        tokens[f"token-{account}"] = {"user": f"system:serviceaccount:gpuscale:{account}", "rules": rules}
    sim = KubeSim(
        port=0,
        scenario="empty",
        nodes=len(NODES),
        startup_delay_s=0.5,
        termination_delay_s=0.2,
        tokens=tokens,
        kubeconfig_path=tmp_path / "admin.kubeconfig",
        kubeconfig_token=ADMIN_TOKEN,
    )
    await sim.start()
    for obj in SCENARIO:
        await sim.create(obj)
    group = ProcessGroup(tmp_path)
    try:
        # The decider's init container: the streams and buckets, as the one user that may.
        await run_gpuscale_setup(_url(server, "setup"), window_s=WINDOW_S)

        def run_as(role: str) -> tuple[tuple[str, ...], dict[str, str]]:
            env = {"GPUSCALE_NATS_URL": _url(server, role), "POD_NAMESPACE": "gpuscale"}
            if role == "aggregator":
                return ("--http-port", "0"), env
            token = ADMIN_TOKEN if request.param == "admin" else f"token-gpuscale-{role}"
            kubeconfig = sim.write_kubeconfig(tmp_path / f"{role}.kubeconfig", token)
            return ("--kubeconfig", str(kubeconfig), "--http-port", "0"), env

        args, env = run_as("actuator")
        group.start("actuator", "actuator", *args, env=env)
        args, env = run_as("decider")
        group.start("decider", "decider", *args, env=env)
        args, env = run_as("aggregator")
        group.start(
            "aggregator", "aggregator", "--window", str(WINDOW_S), "--publish-interval", "1", *args, env=env
        )
        for node in NODES:
            args, env = run_as("collector")
            group.start(
                f"collector-{node}", "collector",
                "--backend", "sim", "--sim-source", "kube-sim", "--node-name", node, "--interval", "0.5", *args,
                env=env,
            )  # fmt: skip
        yield sim, sim.kubeconfig_path, group
    finally:
        await asyncio.to_thread(group.stop_all)
        await sim.stop()


DENIAL_MARKERS = ("forbidden", "rbac_permission_missing", "permissions violation", "authorization violation")


def _denial_lines(group: ProcessGroup) -> list[str]:
    return [
        f"{c.name}: {line}"
        for c in group.children
        for line in c.tail(400).splitlines()
        if any(marker in line.lower() for marker in DENIAL_MARKERS)
    ]


def _denials(group: ProcessGroup) -> str:
    lines = _denial_lines(group)
    return "\n".join(lines[:10]) if lines else "(none)"


def _refusals(group: ProcessGroup) -> Callable[[], str]:
    return lambda: f"refused by RBAC or NATS:\n{_denials(group)}"


async def test_the_services_scale_with_only_the_permissions_deploy_grants(
    secured_nats: tuple[EmbeddedNats, Path], pipeline: tuple[KubeSim, Path, ProcessGroup]
) -> None:
    server, nats_log = secured_nats
    sim, kubeconfig, group = pipeline

    # The log check can fail: a deliberate violation is seen (and is the only one allowed).
    async def ignore(_e: Exception) -> None:
        return None

    probe = await nats.connect(_url(server, "collector"), error_cb=ignore, allow_reconnect=False)
    await probe.publish(subjects.decisions(subjects.WorkloadKey("probe", "Deployment", "probe")), b"x")
    await natsio.flush(probe)
    await probe.close()

    async def probe_logged() -> bool:
        return any("probe" in line for line in _violations(nats_log))

    await eventually_while_running(
        group, probe_logged, 10, "the probe's violation in the nats-server log", explain=_refusals(group)
    )

    outcomes: list[str] = []

    async def on_action(msg: Any) -> None:
        outcomes.append(str(codec.decode_raw(msg.data).get("outcome")))

    observer = await nats.connect(_url(server, "observer"), error_cb=ignore, allow_reconnect=False)
    await observer.subscribe(subjects.ACTIONS_ALL, cb=on_action)
    api = await new_api_client(kubeconfig)
    try:
        apps = AppsV1Api(api)

        async def scaled_up() -> bool:
            scale = await apps.read_namespaced_deployment_scale(NAME, NAMESPACE)
            return int(scale.spec.replicas) >= 2

        async def applied() -> bool:
            return "applied" in outcomes or "conflict_retried" in outcomes

        sim.set_load(NAMESPACE, NAME, 150)  # one pod at 100 % against a target of 60
        await eventually_while_running(
            group, scaled_up, WINDOW_S + 45, "a scale-up through the secured NATS", explain=_refusals(group)
        )
        await eventually_while_running(
            group, applied, 15, "the actuator's action report", explain=_refusals(group)
        )
    finally:
        await api.close()
        await observer.close()

    unexpected = [line for line in _violations(nats_log) if "probe" not in line]
    assert unexpected == [], "\n".join(unexpected)
    assert _denial_lines(group) == []
