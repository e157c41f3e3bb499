"""``gpuscale doctor``: is the install working? One line per part, and what to do."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.js.errors import NotFoundError

from gpuscale import subjects
from gpuscale.logging import configure
from gpuscale.natsio import NATS, NatsUnreachable, connect_once, drain, jetstream, login_user
from gpuscale.settings import CommonSettings, kubeconfig_option, non_empty, option, seconds
from gpuscale.timefmt import parse_time

CREDENTIALS_SECRET = "gpuscale-nats-credentials"  # noqa: S105 - a Secret's name (deploy/base), not a password
CRD_APPLY = "kubectl apply -f deploy/cluster/crd-gpuscaler.yaml"


@dataclass(frozen=True)
class DoctorSettings(CommonSettings):
    kubeconfig: Path | None = kubeconfig_option(
        "the cluster to check (default: in-cluster config, else ~/.kube/config)"
    )
    namespace: str = option(
        "gpuscale",
        "--namespace",
        env="GPUSCALE_NAMESPACE",
        parse=non_empty,
        help="namespace of gpuscale's Leases and Secret (deploy/ installs into gpuscale)",
    )
    listen_s: float = option(
        5.0,
        "--listen",
        env="GPUSCALE_DOCTOR_LISTEN",
        parse=seconds,
        help="how long to listen for the collectors' samples and the aggregator's metrics",
    )


@dataclass(frozen=True)
class Check:
    part: str
    ok: bool
    detail: str
    remedy: str = ""


# --- judging what was read (purely computational) ----------------------------------


def judge_streams(present: set[str], wanted: Mapping[str, str]) -> Check:
    """``wanted``: stream name -> what it is called for a person."""
    missing = [label for name, label in wanted.items() if name not in present]
    if not missing:
        return Check("streams", True, f"{len(wanted)} JetStream streams and buckets present")
    return Check(
        "streams",
        False,
        f"missing: {', '.join(missing)}",
        "run `gpuscale setup --nats-url URL` as NATS's setup user (in Kubernetes: the gpuscale-setup Job)",
    )


def judge_lease(part: str, namespace: str, name: str, obj: Mapping[str, Any] | None, now: float) -> Check:
    logs = f"kubectl -n {namespace} get pods; kubectl -n {namespace} logs deploy/gpuscale-{part}"
    if obj is None:
        return Check(part, False, f"no Lease {namespace}/{name}: the {part} has never led", logs)
    spec = obj.get("spec") or {}
    holder = str(spec.get("holderIdentity") or "")
    if not holder:
        return Check(part, False, f"Lease {namespace}/{name} is released: no {part} leads", logs)
    renewed = parse_time(spec.get("renewTime"))
    duration = spec.get("leaseDurationSeconds")
    limit = 2 * float(duration) if isinstance(duration, int | float) and duration > 0 else 30.0
    if renewed is None or now - renewed > limit:
        ago = "never" if renewed is None else f"{now - renewed:.0f} s ago"
        return Check(part, False, f"Lease {namespace}/{name} held by {holder} but last renewed {ago}", logs)
    return Check(part, True, f"leading: {holder} (renewed {max(0.0, now - renewed):.0f} s ago)")


def judge_traffic(nodes: set[str], workloads: set[str], listen_s: float, namespace: str) -> list[Check]:
    collectors = (
        Check("collectors", True, f"samples from {len(nodes)} node(s)")
        if nodes
        else Check(
            "collectors",
            False,
            f"no samples heard in {listen_s:g} s",
            f"kubectl -n {namespace} get daemonset gpuscale-collector (it runs on GPU nodes only)",
        )
    )
    if workloads:
        aggregator = Check("aggregator", True, f"metrics for {len(workloads)} workload(s)")
    elif nodes:
        aggregator = Check(
            "aggregator",
            False,
            f"samples come in, but no metrics came out in {listen_s:g} s",
            f"kubectl -n {namespace} logs deploy/gpuscale-aggregator",
        )
    else:
        aggregator = Check(
            "aggregator",
            False,
            f"no metrics heard in {listen_s:g} s (nor any samples to make them from)",
            "get the collectors running first; the aggregator publishes only for workloads using GPUs",
        )
    return [collectors, aggregator]


def judge_workload(part: str, namespace: str, obj: Mapping[str, Any] | None, heard: Check) -> Check:
    """What was heard on NATS, else the readiness of the part's own pods (a NATS user that may
    not listen, such as setup, still gets an answer); ``heard`` when the cluster has no such object."""
    if heard.ok or obj is None:
        return heard
    status = obj.get("status") or {}
    kind = str(obj.get("kind") or "Deployment")
    if kind == "DaemonSet":
        ready, wanted = int(status.get("numberReady") or 0), int(status.get("desiredNumberScheduled") or 0)
    else:
        ready, wanted = int(status.get("readyReplicas") or 0), int(status.get("replicas") or 0)
    name = f"{kind} {namespace}/gpuscale-{part.rstrip('s')}"
    if ready > 0:
        return Check(
            part, True, f"{name}: {ready} of {wanted} pod(s) ready (their traffic not heard by this user)"
        )
    return Check(
        part,
        False,
        f"{name}: no pod ready ({heard.detail})",
        f"kubectl -n {namespace} describe {kind.lower()} gpuscale-{part.rstrip('s')}",
    )


def render(checks: list[Check]) -> str:
    width = max(len(c.part) for c in checks)
    lines = []
    for c in checks:
        line = f"{'OK' if c.ok else 'FAIL':<5} {c.part:<{width}}  {c.detail}"
        if not c.ok and c.remedy:
            line += f"\n{'':<5} {'':<{width}}  → {c.remedy}"
        lines.append(line)
    failed = sum(not c.ok for c in checks)
    lines.append(
        f"All {len(checks)} checks pass." if not failed else f"{failed} of {len(checks)} checks fail."
    )
    return "\n".join(lines)


# --- reading -----------------------------------------------------------------------


def _wanted() -> dict[str, str]:
    return {
        subjects.SAMPLES_STREAM: f"stream {subjects.SAMPLES_STREAM}",
        subjects.DECISIONS_STREAM: f"stream {subjects.DECISIONS_STREAM}",
        subjects.ADVICE_STREAM: f"stream {subjects.ADVICE_STREAM}",
        f"KV_{subjects.DECIDER_STATE_BUCKET}": f"bucket {subjects.DECIDER_STATE_BUCKET}",
        f"KV_{subjects.DESIRED.bucket}": f"bucket {subjects.DESIRED.bucket}",
    }


async def _streams(nc: NATS) -> Check:
    js = jetstream(nc, timeout_s=5.0)
    present: set[str] = set()
    try:
        await js.account_info()  # first: JetStream off, or this user not allowed, fails here once
        for name in _wanted():
            with contextlib.suppress(NotFoundError):
                await js.stream_info(name)
                present.add(name)
    except Exception as e:  # noqa: BLE001 - JetStream off, or this user may not ask
        return Check(
            "streams",
            False,
            f"JetStream does not answer ({type(e).__name__})",
            "start nats-server with JetStream (-js); in a cluster install, check as NATS's setup user "
            "(the one allowed the JetStream API)",
        )
    return judge_streams(present, _wanted())


async def _traffic(nc: NATS, settings: DoctorSettings) -> list[Check]:
    nodes: set[str] = set()
    workloads: set[str] = set()

    async def on_samples(msg: Any) -> None:
        with contextlib.suppress(Exception):
            nodes.add(subjects.parse_samples(msg.subject))

    async def on_metrics(msg: Any) -> None:
        workloads.add(msg.subject)

    subs = [
        await nc.subscribe(subjects.SAMPLES_ALL, cb=on_samples),
        await nc.subscribe(subjects.METRICS_ALL, cb=on_metrics),
    ]
    deadline = time.monotonic() + settings.listen_s
    while time.monotonic() < deadline and not (nodes and workloads):
        await asyncio.sleep(0.2)
    for sub in subs:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()
    return judge_traffic(nodes, workloads, settings.listen_s, settings.namespace)


async def _cluster(
    settings: DoctorSettings, nats_needs_credentials: bool, traffic: list[Check]
) -> list[Check]:
    """The cluster's checks; ``traffic`` (what NATS carried) is judged again by the pods' readiness."""
    from gpuscale.kube import ClusterConfigError, KubeError, NotFound, new_api_client, request_json

    try:
        api = await new_api_client(settings.kubeconfig)
    except ClusterConfigError as e:
        return [Check("cluster", False, e.cause, e.remedy)]
    ns = settings.namespace
    checks: list[Check] = []
    try:

        async def get(path: str) -> dict[str, Any] | None:
            try:
                return await request_json(api, "GET", path)
            except NotFound:
                return None

        try:
            crd = await get("/apis/gpuscale.io/v1alpha1/gpuscalers?limit=1")
        except KubeError as e:
            return [
                Check(
                    "cluster",
                    False,
                    f"the API server answered {e}",
                    "check the kubeconfig's server and credentials (kubectl cluster-info)",
                )
            ]
        except Exception as e:  # noqa: BLE001 - unreachable, TLS: the cause in one line
            return [
                Check(
                    "cluster",
                    False,
                    f"cannot reach the API server ({type(e).__name__}: {' '.join(str(e).split())[:160]})",
                    "check the kubeconfig's server address (kubectl cluster-info)",
                )
            ]
        checks.append(
            Check("crd", True, "GPUScaler CRD installed")
            if crd is not None
            else Check("crd", False, "the GPUScaler CRD is not installed", CRD_APPLY)
        )
        for i, heard in enumerate(traffic):
            kind = "daemonsets" if heard.part == "collectors" else "deployments"
            obj = await get(f"/apis/apps/v1/namespaces/{ns}/{kind}/gpuscale-{heard.part.rstrip('s')}")
            traffic[i] = judge_workload(heard.part, ns, obj, heard)
        now = time.time()
        for part in ("decider", "actuator"):
            name = f"gpuscale-{part}"
            obj = await get(f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{name}")
            checks.append(judge_lease(part, ns, name, obj, now))
        if nats_needs_credentials:
            secret = await get(f"/api/v1/namespaces/{ns}/secrets/{CREDENTIALS_SECRET}")
            checks.append(
                Check("credentials", True, f"Secret {ns}/{CREDENTIALS_SECRET} present")
                if secret is not None
                else Check(
                    "credentials",
                    False,
                    f"no Secret {ns}/{CREDENTIALS_SECRET}: the services cannot log in to NATS",
                    "create it as docs/DEPLOYING.md says (one random password per role)",
                )
            )
    finally:
        await api.close()
    return checks


async def diagnose(settings: DoctorSettings) -> list[Check]:
    checks: list[Check] = []
    nc: NATS | None = None
    try:
        nc = await connect_once(
            settings.nats_url,
            name="gpuscale-doctor",
            creds=settings.nats_creds,
            tls_ca=settings.nats_tls_ca,
        )
    except NatsUnreachable as e:
        checks.append(Check("nats", False, e.problem.detail, e.problem.remedy))
        checks.append(Check("streams", False, "not checked: NATS unreachable", "fix the nats line first"))
    traffic: list[Check] = []
    try:
        if nc is not None:
            url = nc.connected_url
            checks.append(
                Check("nats", True, f"reachable at {url.hostname}:{url.port}" if url else "reachable")
            )
            checks.append(await _streams(nc))
            traffic = await _traffic(nc, settings)
        needs_credentials = login_user(settings.nats_url) is not None or settings.nats_creds is not None
        cluster = await _cluster(settings, needs_credentials, traffic)
        checks.extend(traffic)
        checks.extend(cluster)
    finally:
        await drain(nc)
    return checks


async def _run(settings: DoctorSettings) -> int:
    checks = await diagnose(settings)
    print(render(checks), flush=True)
    return 0 if all(c.ok for c in checks) else 1


def main(settings: DoctorSettings) -> int:
    configure("doctor", "error")
    return asyncio.run(_run(settings))
