"""``KubeSim``: the simulator as a Python object, for tests and the demo.

async with KubeSim(port=0, scenario="empty", startup_delay_s=0.2) as sim:
    client = await gpuscale.kube.new_api_client(sim.kubeconfig_path)
    await sim.create({...})                 # seed objects directly
    sim.faults.add("PATCH", r"/scale$", status=409, count=1)
    sim.set_load("default", "bert", 180)    # GPU-percent, or a profile
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml
from aiohttp import web

from gpuscale.logging import get_logger
from gpuscale.simfeed import NODE_GPUS_PATH
from gpuscale_kubesim.apiserver import authn
from gpuscale_kubesim.apiserver.errors import ApiError, bad_request
from gpuscale_kubesim.apiserver.faults import Faults
from gpuscale_kubesim.apiserver.resources import ResourceDef
from gpuscale_kubesim.apiserver.selectors import label_selector as parse_labels
from gpuscale_kubesim.apiserver.server import ApiServer, error_response
from gpuscale_kubesim.apiserver.store import Store
from gpuscale_kubesim.cluster import ClusterPlayer, scenarios
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster.podnet import LoopbackNetwork, PodServers

Obj = dict[str, Any]


def profile_from(value: Any) -> loadmod.Profile:
    """A number, a profile word, ``constant:N``, a list of {t, load}, or a YAML/JSON file of one."""
    if isinstance(value, loadmod.Profile):
        return value
    if isinstance(value, list):
        return loadmod.from_points("points", value)
    if isinstance(value, str) and (value.endswith((".yaml", ".yml", ".json")) or Path(value).is_file()):
        path = Path(value)
        if not path.is_file():
            raise ValueError(f"no load profile file {value!r}")
        return loadmod.from_points(path.name, yaml.safe_load(path.read_text()))
    if isinstance(value, int | float | str):
        return loadmod.parse_profile(value)
    raise ValueError(f"cannot read a load profile from {value!r}")


class KubeSim:
    def __init__(
        self,
        port: int = 0,
        scenario: str = "empty",
        *,
        host: str = "127.0.0.1",
        startup_delay_s: float = 20.0,
        window_s: float = 30.0,
        termination_delay_s: float = 2.0,
        tokens: dict[str, Any] | None = None,
        nodes: int | None = None,
        gpus_per_node: int = 8,
        profile: Any = "step",
        speed: float = 1.0,
        seed: int | None = None,
        kubeconfig_path: Path | str | None = None,
        kubeconfig_token: str | None = None,
        advertise_url: str | None = None,
        bookmark_interval_s: float = 10.0,
        history: int = 1000,
        token_node_info: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.scenario = scenario
        self.window_s = window_s  # the built-in scenarios' GPUScaler window
        self.nodes = nodes if nodes is not None else (4 if scenario in ("demo", "demo-llm") else 2)
        self.gpus_per_node = gpus_per_node
        self.profile = profile
        self.rng = random.Random(seed)  # noqa: S311 - simulated noise, not security
        self.faults = Faults()
        self.store = Store(history=history, pod_grace_s=termination_delay_s, rng=self.rng)
        # Pod IPs on the loopback range: inference-server pods serve /metrics there.
        self.network = LoopbackNetwork(random.Random(seed))  # noqa: S311 - an address block
        self.cluster = ClusterPlayer(
            self.store,
            startup_delay_s=startup_delay_s,
            termination_delay_s=termination_delay_s,
            speed=speed,
            rng=self.rng,
            network=self.network,
        )
        self.pod_servers = PodServers(self.cluster, self.network)
        self.cluster.kubelets.listening = self.pod_servers.listening  # Ready once it serves
        self.tokens = tokens
        self.api = ApiServer(
            self.store,
            self.faults,
            tokens=tokens,
            bookmark_interval_s=bookmark_interval_s,
            token_node_info=token_node_info,
        )
        self._kubeconfig_given = Path(kubeconfig_path) if kubeconfig_path is not None else None
        self.kubeconfig_path: Path = self._kubeconfig_given or Path("kubeconfig-not-written")
        self._advertise_url = advertise_url
        self._kubeconfig_token = kubeconfig_token if kubeconfig_token is not None else _admin_token(tokens)
        self._tmpdir: tempfile.TemporaryDirectory[str] | None = None
        self._runner: web.AppRunner | None = None
        self._stop = asyncio.Event()
        self._player: asyncio.Task[None] | None = None
        self._pod_serving: asyncio.Task[None] | None = None
        self.url = ""
        self.log = get_logger(component="kube-sim")

    # --- life cycle -------------------------------------------------------------

    async def __aenter__(self) -> KubeSim:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        for obj in scenarios.scenario_objects(self.scenario, self.nodes, self.gpus_per_node, self.window_s):
            try:
                await self.create(obj)
            except ApiError as e:
                if e.reason != "AlreadyExists":
                    raise
        if self.scenario == "demo":
            self.set_load(scenarios.DEMO_NAMESPACE, scenarios.DEMO_WORKLOAD, self.profile)
        elif self.scenario == "demo-llm":  # both on the same trace
            for name in scenarios.LLM_WORKLOADS:
                self.set_load(scenarios.DEMO_NAMESPACE, name, self.profile)
        # The scenario's workloads were running before the simulation began.
        self.cluster.settle(self.cluster.now())
        app = self.api.build_app(self._add_sim_routes)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        sockets = getattr(site._server, "sockets", None)  # the bound port when 0 was asked for
        if sockets:
            self.port = int(sockets[0].getsockname()[1])
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.host in ("0.0.0.0", "::"):  # noqa: S104 - comparing, not binding
            host = "127.0.0.1"
        self.url = f"http://{host}:{self.port}"
        self._write_kubeconfig()
        self._stop.clear()
        self._player = asyncio.create_task(self.cluster.run(self._stop))
        await self.pod_servers.start()
        self._pod_serving = asyncio.create_task(self.pod_servers.run(self._stop))
        self.log.info(
            "kube_sim_listening", url=self.url, kubeconfig=str(self.kubeconfig_path), scenario=self.scenario
        )

    async def stop(self) -> None:
        self._stop.set()
        self.api.stopping.set()
        self.store.close_watchers()
        for task in (self._player, self._pod_serving):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._player = self._pod_serving = None
        await self.pod_servers.close()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._tmpdir is not None:
            self._tmpdir.cleanup()
            self._tmpdir = None

    # --- kubeconfig -------------------------------------------------------------

    def kubeconfig(self, token: str | None = None) -> Obj:
        user: Obj = {"token": token} if token else {}
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "kube-sim", "cluster": {"server": self._advertise_url or self.url}}],
            "users": [{"name": "kube-sim", "user": user}],
            "contexts": [
                {
                    "name": "kube-sim",
                    "context": {"cluster": "kube-sim", "user": "kube-sim", "namespace": "default"},
                }
            ],
            "current-context": "kube-sim",
            "preferences": {},
        }

    def write_kubeconfig(self, path: Path | str, token: str | None = None) -> Path:
        """A kubeconfig for this server, authenticating with ``token`` (if any). Written whole, then
        renamed into place: a client that waits for the file never reads it half written."""
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        partial.write_text(yaml.safe_dump(self.kubeconfig(token), sort_keys=False))
        partial.replace(target)
        return target

    def _write_kubeconfig(self) -> None:
        if self._kubeconfig_given is None:
            self._tmpdir = tempfile.TemporaryDirectory(prefix="kube-sim-")
            self.kubeconfig_path = Path(self._tmpdir.name) / "kubeconfig"
        self.write_kubeconfig(self.kubeconfig_path, self._kubeconfig_token)

    # --- seeding and inspection -------------------------------------------------

    def resource(self, api_version: str, kind: str) -> ResourceDef:
        rd = self.store.registry.by_kind(api_version, kind)
        if rd is None:
            raise ApiError(404, f'no kind "{kind}" is registered for version "{api_version}"', "NotFound")
        return rd

    async def create(self, obj: Obj) -> Obj:
        """Create an object as ``kubectl create`` would (namespace from metadata, default "default")."""
        rd = self.resource(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        namespace = (obj.get("metadata") or {}).get("namespace") if rd.namespaced else None
        return self.store.create(rd, namespace or ("default" if rd.namespaced else None), obj)

    def get(self, api_version: str, kind: str, name: str, namespace: str | None = "default") -> Obj:
        rd = self.resource(api_version, kind)
        return self.store.get(rd, namespace if rd.namespaced else None, name)

    def list_objects(
        self, api_version: str, kind: str, namespace: str | None = None, label_selector: str | None = None
    ) -> list[Obj]:
        rd = self.resource(api_version, kind)
        items, _ = self.store.list(rd, namespace, parse_labels(label_selector))
        return items

    def create_token(
        self,
        namespace: str,
        service_account: str,
        *,
        pod: str | None = None,
        audiences: tuple[str, ...] = (),
        expiration_s: int = authn.DEFAULT_EXPIRATION_S,
        issued_at: float | None = None,
    ) -> str:
        """A ServiceAccount token as a TokenRequest (``kubectl create token``) makes it, bound
        to ``pod`` if given, which is what a pod's projected token volume holds. Tests may ask
        for a short ``expiration_s`` or an ``issued_at`` in the past (the API refuses < 600 s)."""
        spec: Obj = {"expirationSeconds": expiration_s}
        if audiences:
            spec["audiences"] = list(audiences)
        if pod is not None:
            spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Pod", "name": pod}
        answer = authn.token_request(
            self.store,
            self.api.token_signer,
            namespace,
            service_account,
            {"apiVersion": authn.API_VERSION, "kind": "TokenRequest", "spec": spec},
            self.store.clock() if issued_at is None else issued_at,
            node_info=self.api.token_node_info,
            min_expiration_s=1,
        )
        token: str = answer["status"]["token"]
        return token

    def pods(self, namespace: str = "default", label_selector: str | None = None) -> list[Obj]:
        return self.list_objects("v1", "Pod", namespace, label_selector)

    def set_load(self, namespace: str, workload_name: str, profile_or_value: Any) -> None:
        """The workload's load (GPU-percent) from now on: a number, a profile name, points or a file."""
        self.cluster.set_load(namespace, workload_name, profile_from(profile_or_value))

    def load_of(self, namespace: str, name: str) -> float:
        return self.cluster.load_of(namespace, name)

    def node_gpus(self, node: str) -> Obj:
        """The simulated-GPU feed of ``node`` (:class:`gpuscale.simfeed.NodeGpus`) as JSON."""
        return self.cluster.node_gpus(node).to_json()

    # --- /sim/v1 ----------------------------------------------------------------

    def _add_sim_routes(self, app: web.Application) -> None:
        app.router.add_get(NODE_GPUS_PATH, self._sim_node_gpus)
        app.router.add_get("/sim/v1/workloads", self._sim_workloads)
        app.router.add_put("/sim/v1/workloads/{namespace}/{name}/load", self._sim_set_load)
        app.router.add_get("/sim/v1/faults", self._sim_faults_list)
        app.router.add_post("/sim/v1/faults", self._sim_faults_add)
        app.router.add_delete("/sim/v1/faults", self._sim_faults_clear)

    async def _sim_node_gpus(self, request: web.Request) -> web.Response:
        try:
            return web.json_response(self.node_gpus(request.match_info["node"]))
        except ApiError as e:
            return error_response(e)

    async def _sim_workloads(self, _request: web.Request) -> web.Response:
        return web.json_response({"workloads": self.cluster.workloads()})

    async def _sim_set_load(self, request: web.Request) -> web.Response:
        try:
            body = await _json_object(request)
            value = body.get("profile", body.get("load"))
            if value is None:
                raise bad_request('give {"profile": "step|spike|diurnal|constant:N"} or {"load": number}')
            try:
                self.set_load(request.match_info["namespace"], request.match_info["name"], value)
            except ValueError as e:
                raise bad_request(str(e)) from None
        except ApiError as e:
            return error_response(e)
        ns, name = request.match_info["namespace"], request.match_info["name"]
        return web.json_response({"namespace": ns, "name": name, "load": self.load_of(ns, name)})

    async def _sim_faults_list(self, _request: web.Request) -> web.Response:
        return web.json_response({"faults": self.faults.describe()})

    async def _sim_faults_add(self, request: web.Request) -> web.Response:
        try:
            body = await _json_object(request)
            try:
                fault = self.faults.add(
                    body.get("method"),
                    str(body["path_regex"]),
                    status=body.get("status"),
                    count=body.get("count", 1),
                    delay_s=float(body.get("delay_s", 0.0)),
                )
            except (KeyError, ValueError, TypeError) as e:
                raise bad_request(f"a fault needs path_regex and valid status/count/delay_s: {e}") from None
        except ApiError as e:
            return error_response(e)
        return web.json_response(fault.describe(), status=201)

    async def _sim_faults_clear(self, _request: web.Request) -> web.Response:
        self.faults.clear()
        return web.json_response({"faults": []})


async def _json_object(request: web.Request) -> Obj:
    try:
        body = json.loads(await request.read() or b"{}")
    except json.JSONDecodeError as e:
        raise bad_request(f"the request body is not valid JSON: {e}") from None
    if not isinstance(body, dict):
        raise bad_request("the request body must be a JSON object")
    return body


def _admin_token(tokens: dict[str, Any] | None) -> str | None:
    """The kubeconfig's token: the first one with full access, if tokens are checked."""
    if not tokens:
        return None
    for token, grant in tokens.items():
        if grant is None:
            return token
    return None
