"""Node-bound collectors as deployed: a real nats-server running deploy/'s auth.conf with the
node-auth component's callout configuration, kube-sim issuing and reviewing ServiceAccount
tokens under the RBAC the component grants, and gpuscale nats-auth answering the callout."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aiohttp
import nats
from nats.aio.client import Client

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import inbox_prefix
from gpuscale.runtime import ServiceContext, run_async
from gpuscale_kubesim import KubeSim
from gpuscale_natsauth.app import serve
from gpuscale_natsauth.core.natsjwt import PREFIX_ACCOUNT, Signer, new_seed
from gpuscale_natsauth.settings import NatsAuthSettings

from ..k8s_objects import node_pod, service_account
from ..waiting import eventually, sample_value
from .deploy_support import (
    NATS_AUTH_CONF,
    NODE_AUTH_CONF,
    NODE_AUTH_OVERLAY,
    Obj,
    account_rules,
    nats_roles,
    render,
)

ROLES = tuple(nats_roles())
PASSWORDS = {role: f"{role}-pw-0123abcd" for role in ROLES}
SERVICE_PASSWORD = "nats-auth-pw-4567ef"  # noqa: S105 - a test's stand-in, not a credential
ADMIN_TOKEN = "admin-token-for-the-test"  # noqa: S105 - kube-sim's, not a credential
NAMESPACE = "gpuscale"
COLLECTOR_SA = "gpuscale-collector"
AUDIENCE = "nats.gpuscale.io"
NODES = ("gpu-node-1", "gpu-node-2")


def nats_environment(issuer_public_key: str) -> dict[str, str]:
    """What the StatefulSet gives nats-server: every role's password and the callout's."""
    env = {f"NATS_{role.upper()}_PASSWORD": pw for role, pw in PASSWORDS.items()}
    env["NATS_AUTH_ISSUER"] = issuer_public_key
    env["NATS_AUTH_SERVICE_PASSWORD"] = SERVICE_PASSWORD
    return env


def callout_nats(directory: Path, issuer_public_key: str, log: Path | None = None) -> EmbeddedNats:
    """A nats-server (not yet started) with the shipped auth.conf and node-auth.conf."""
    shutil.copy(NATS_AUTH_CONF, directory / "auth.conf")
    shutil.copy(NODE_AUTH_CONF, directory / "node-auth.conf")
    return EmbeddedNats(
        store_dir=str(directory),
        config_text="include auth.conf\ninclude node-auth.conf\n",
        log_file=str(log) if log else None,
    )


def start_with_environment(server: EmbeddedNats, env: dict[str, str]) -> None:
    saved = {name: os.environ.get(name) for name in env}
    os.environ.update(env)  # nats-server reads its variables from the environment it starts with
    try:
        server.start()
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@dataclass
class Session:
    """A NATS connection and the asynchronous errors the server sent it."""

    nc: Client
    errors: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        return [e for e in self.errors if "permissions violation" in e]


@dataclass
class NodeAuthWorld:
    nats: EmbeddedNats
    sim: KubeSim
    issuer: Signer
    issuer_seed_file: Path
    kubeconfig: Path  # gpuscale-nats-auth's ServiceAccount: the component's RBAC, nothing more
    nats_log: Path
    sessions: list[Session] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.nats.port}"

    def role_url(self, role: str) -> str:
        return f"nats://{role}:{PASSWORDS[role]}@127.0.0.1:{self.nats.port}"

    async def pod(self, name: str, node: str, service_account: str = COLLECTOR_SA) -> Obj:
        return await self.sim.create(
            node_pod(name, node, service_account=service_account, namespace=NAMESPACE)
        )

    def token(self, pod: str | None, *, service_account: str = COLLECTOR_SA, **kw: Any) -> str:
        """The pod's projected token, as the kubelet writes it for the collector."""
        return self.sim.create_token(
            NAMESPACE, service_account, pod=pod, audiences=kw.pop("audiences", (AUDIENCE,)), **kw
        )

    def settings(self, **overrides: Any) -> NatsAuthSettings:
        base = NatsAuthSettings(
            nats_url=(f"nats://nats-auth:{SERVICE_PASSWORD}@127.0.0.1:{self.nats.port}",),
            issuer_seed_file=self.issuer_seed_file,
            kubeconfig=self.kubeconfig,
            collector_namespace=NAMESPACE,
            http_port=0,
        )
        return replace(base, **overrides)

    async def login(self, *, token: str | None = None, role: str | None = None) -> Session:
        """Connect as a collector with ``token`` or as ``role`` with its password; raises on refusal."""
        errors: list[str] = []

        async def on_error(e: Exception) -> None:
            errors.append(str(e))

        url = self.role_url(role) if role else self.url
        nc = await nats.connect(
            url,
            inbox_prefix=inbox_prefix(role) if role else "_INBOX",  # as gpuscale.natsio.connect does
            token=token,
            error_cb=on_error,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=5,
        )
        session = Session(nc, errors)
        self.sessions.append(session)
        return session


@contextlib.asynccontextmanager
async def node_auth_world(tmp_path: Path, *, token_node_info: bool = True) -> AsyncIterator[NodeAuthWorld]:
    issuer_seed = new_seed(PREFIX_ACCOUNT, os.urandom(32))
    issuer = Signer.from_seed(issuer_seed)
    seed_file = tmp_path / "issuer-seed"
    seed_file.write_text(issuer_seed + "\n")
    seed_file.chmod(0o400)
    store = tmp_path / "nats"
    store.mkdir()
    log = tmp_path / "nats-server.log"
    server = callout_nats(store, issuer.public_key, log)
    await asyncio.to_thread(start_with_environment, server, nats_environment(issuer.public_key))
    rules = account_rules(render(NODE_AUTH_OVERLAY))
    tokens: dict[str, Any] = {ADMIN_TOKEN: None}
    tokens["token-nats-auth"] = {
        "user": f"system:serviceaccount:{NAMESPACE}:gpuscale-nats-auth",
        "rules": rules["gpuscale-nats-auth"],
    }
    sim = KubeSim(
        port=0,
        scenario="empty",
        nodes=len(NODES),
        tokens=tokens,
        kubeconfig_path=tmp_path / "admin.kubeconfig",
        kubeconfig_token=ADMIN_TOKEN,
        token_node_info=token_node_info,
    )
    await sim.start()
    world = NodeAuthWorld(
        server,
        sim,
        issuer,
        seed_file,
        sim.write_kubeconfig(tmp_path / "nats-auth.kubeconfig", "token-nats-auth"),
        log,
    )
    try:
        await sim.create(service_account(COLLECTOR_SA, NAMESPACE))
        yield world
    finally:
        for session in world.sessions:
            with contextlib.suppress(Exception):
                await session.nc.close()
        await sim.stop()
        await asyncio.to_thread(server.close)


@dataclass
class RunningNatsAuth:
    task: asyncio.Task[int]
    ctx: ServiceContext

    def metric(self, name: str, **labels: str) -> float:
        return sample_value(self.ctx.metrics.registry, name, **labels)

    async def ready(self) -> bool:
        url = f"http://127.0.0.1:{self.ctx.http.port}/readyz"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            return resp.status == 200

    async def stop(self, timeout_s: float = 10.0) -> int:
        self.ctx.stop.set()
        return await asyncio.wait_for(self.task, timeout_s)


@contextlib.asynccontextmanager
async def running_nats_auth(settings: NatsAuthSettings) -> AsyncIterator[RunningNatsAuth]:
    """gpuscale nats-auth in this process, as the runtime runs it; yielded once it is ready."""
    holder: dict[str, ServiceContext] = {}

    async def wrapped(ctx: ServiceContext) -> None:
        holder["ctx"] = ctx
        await serve(ctx)

    task = asyncio.create_task(run_async("nats-auth", settings, wrapped, http_port=0))

    def started() -> bool:
        if task.done():  # not worth waiting for: say why at once
            raise RuntimeError(f"nats-auth stopped at start: {task.result()}")
        return "ctx" in holder

    await eventually(started, 20, "nats-auth to start")
    running = RunningNatsAuth(task, holder["ctx"])
    try:
        await eventually(running.ready, 20, "nats-auth ready (subscribed to the callout subject)")
        yield running
    finally:
        if not task.done():
            await running.stop()
