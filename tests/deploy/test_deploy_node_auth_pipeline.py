"""With node-bound collectors the real services still close the scaling loop.

nats-server runs deploy/'s auth.conf and the node-auth component's callout;
gpuscale nats-auth runs as its own process with its ServiceAccount's RBAC;
each collector logs in with its pod's projected token (a file, as the
kubelet writes it); the aggregator, decider and actuator with their
passwords. Any refused login or publish shows up in the nats-server log and
fails the test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client import AppsV1Api

from gpuscale.kube import new_api_client
from gpuscale_cli.demo.processes import ProcessGroup

from ..k8s_objects import gpu_workload, gpuscaler
from ..waiting import eventually_while_running
from .deploy_support import run_gpuscale_setup
from .node_auth_support import ADMIN_TOKEN, NODES, SERVICE_PASSWORD, NodeAuthWorld, node_auth_world

pytestmark = [pytest.mark.integration, pytest.mark.slow]

NAMESPACE, NAME = "default", "bert-intent-detection"
WINDOW_S = 3


@pytest.fixture
async def pipeline(tmp_path: Path) -> AsyncIterator[tuple[NodeAuthWorld, ProcessGroup]]:
    async with node_auth_world(tmp_path) as world:
        await world.sim.create(gpu_workload(NAME, namespace=NAMESPACE, image="bert:1"))
        await world.sim.create(
            gpuscaler(
                NAME,
                namespace=NAMESPACE,
                max_replicas=4,
                metrics=[{"name": "gpu_util", "target": 60}],
                window=f"{WINDOW_S}s",
            )
        )
        admin = world.sim.write_kubeconfig(tmp_path / "admin-services.kubeconfig", ADMIN_TOKEN)
        group = ProcessGroup(tmp_path, env={"POD_NAMESPACE": "gpuscale"})
        try:
            # The decider's init container: the streams and buckets, as the one user that may.
            await run_gpuscale_setup(world.role_url("setup"), window_s=WINDOW_S)
            auth = group.start(
                "nats-auth", "nats-auth",
                "--nats-url", f"nats://nats-auth:{SERVICE_PASSWORD}@127.0.0.1:{world.nats.port}",
                "--issuer-seed-file", str(world.issuer_seed_file),
                "--kubeconfig", str(world.kubeconfig),
                "--http-port", "0",
            )  # fmt: skip
            for role, extra in (
                ("actuator", ("--kubeconfig", str(admin))),
                ("decider", ("--kubeconfig", str(admin))),
                ("aggregator", ("--window", str(WINDOW_S), "--publish-interval", "1")),
            ):
                group.start(role, role, "--nats-url", world.role_url(role), "--http-port", "0", *extra)
            # Collectors that start first are refused until nats-auth answers (and retry): start
            # them after it, so that any refusal in the nats-server log below is a real one.
            await eventually_while_running(
                group, lambda: "auth_callout_serving" in auth.tail(20), 30, "nats-auth serving"
            )
            for i, node in enumerate(NODES):
                pod = f"gpuscale-collector-{i}"
                await world.pod(pod, node)
                token_file = tmp_path / f"{pod}.token"
                token_file.write_text(world.token(pod))
                group.start(
                    f"collector-{node}", "collector",
                    "--nats-url", world.url,
                    "--nats-token-file", str(token_file),
                    "--backend", "sim", "--sim-source", "kube-sim", "--kubeconfig", str(admin),
                    "--node-name", node, "--interval", "0.5", "--http-port", "0",
                )  # fmt: skip
            yield world, group
        finally:
            await asyncio.to_thread(group.stop_all)


def _refusals(world: NodeAuthWorld) -> list[str]:
    markers = ("Violation", "authentication error", "Auth callout service returned an error")
    return [
        line
        for line in world.nats_log.read_text(errors="replace").splitlines()
        if any(m in line for m in markers)
    ]


async def test_the_pipeline_scales_with_node_bound_collectors(
    pipeline: tuple[NodeAuthWorld, ProcessGroup],
) -> None:
    world, group = pipeline
    api = await new_api_client(world.sim.kubeconfig_path)
    try:
        apps = AppsV1Api(api)

        async def scaled_up() -> bool:
            scale = await apps.read_namespaced_deployment_scale(NAME, NAMESPACE)
            return int(scale.spec.replicas) >= 2

        def explain() -> str:
            return "nats-server refusals:\n" + "\n".join(_refusals(world)[:10])

        world.sim.set_load(NAMESPACE, NAME, 150)  # one pod at 100 % against a target of 60
        await eventually_while_running(
            group, scaled_up, WINDOW_S + 45, "a scale-up with node-bound collectors", explain=explain
        )
    finally:
        await api.close()
    authorized: list[Any] = [
        line for c in group.children if c.name == "nats-auth" for line in c.tail(400).splitlines()
        if "collector_authorized" in line
    ]  # fmt: skip
    assert len(authorized) == len(NODES), authorized
    assert _refusals(world) == []
