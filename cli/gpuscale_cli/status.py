"""``gpuscale status``: one line per scaled workload, like ``kubectl get hpa``.

Reads the live NATS subjects (metrics as they are published, the last
decision per workload from the GPUSCALE_DECISIONS stream) and, where
Kubernetes is reachable, the GPUScaler objects and their status.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuscale import codec, subjects
from gpuscale.logging import configure
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, drain, jetstream
from gpuscale.settings import CommonSettings, option, path, seconds
from gpuscale.subjects import WorkloadKey
from gpuscale.wire import Decision, WireError, WorkloadMetrics

COLUMNS = ("NAMESPACE", "NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "LAST DECISION")


@dataclass(frozen=True)
class StatusSettings(CommonSettings):
    kubeconfig: Path | None = option(
        None,
        "--kubeconfig",
        env="KUBECONFIG",
        parse=path,
        help="read GPUScaler objects from this cluster too",
    )
    listen_s: float = option(
        3.0,
        "--listen",
        env="GPUSCALE_STATUS_LISTEN",
        parse=seconds,
        help="how long to listen for metrics (they come every publish interval)",
    )
    watch: bool = option(
        False, "--watch", parse=lambda v: v == "true", is_flag=True, help="refresh until Ctrl-C"
    )
    interval_s: float = option(
        2.0, "--interval", env="GPUSCALE_STATUS_INTERVAL", parse=seconds, help="refresh period with --watch"
    )


@dataclass
class WorkloadView:
    key: WorkloadKey
    scaler: str | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    targets: dict[str, float] = field(default_factory=dict)
    min_replicas: int | None = None
    max_replicas: int | None = None
    replicas: int | None = None
    decision: Decision | None = None


def _num(v: float) -> str:
    return f"{v:.0f}" if abs(v - round(v)) < 0.05 else f"{v:.1f}"


def _age(seconds_ago: float) -> str:
    s = max(0, int(seconds_ago))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h"


def targets_text(view: WorkloadView) -> str:
    """``83/70`` per metric (``<unknown>/70`` without fresh metrics), comma-separated like HPA."""
    names = list(view.targets) or list(view.metrics)
    if not names:
        return "<unknown>"
    parts = []
    for name in names:
        current = _num(view.metrics[name]) if name in view.metrics else "<unknown>"
        target = _num(view.targets[name]) if name in view.targets else "?"
        parts.append(f"{current}/{target}")
    return ", ".join(parts)


def render_table(views: list[WorkloadView], now: float) -> str:
    """Purely computational: the table as ``kubectl get`` prints it."""
    rows = [COLUMNS]
    for v in sorted(views, key=lambda v: (v.key.namespace, v.key.name)):
        last = "<none>"
        if v.decision is not None:
            last = f"{v.decision.from_replicas}→{v.decision.to_replicas} {_age(now - v.decision.ts)} ago: {v.decision.reason}"
        rows.append(
            (
                v.key.namespace,
                v.scaler or v.key.name,
                f"{v.key.kind}/{v.key.name}",
                targets_text(v),
                "<unset>" if v.min_replicas is None else str(v.min_replicas),
                "<unset>" if v.max_replicas is None else str(v.max_replicas),
                "<unknown>" if v.replicas is None else str(v.replicas),
                last,
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "   " + r[-1] for r in rows
    )


async def _last_decisions(nc: NATS, now: float) -> dict[WorkloadKey, Decision]:
    js = jetstream(nc)
    found: dict[WorkloadKey, Decision] = {}
    try:
        info = await js.stream_info(subjects.DECISIONS_STREAM, subjects_filter=subjects.DECISIONS_ALL)
    except Exception:  # noqa: BLE001 - no stream yet means no decision yet
        return found
    for subject in info.state.subjects or {}:
        with contextlib.suppress(Exception):
            raw = await js.get_last_msg(subjects.DECISIONS_STREAM, subject)
            decision = codec.decode(raw.data or b"", Decision, now)
            found[subjects.parse_workload(subject, "decisions")] = decision
    return found


async def _scalers(kubeconfig: Path | None) -> list[dict[str, Any]]:
    if kubeconfig is None:
        return []
    from kubernetes_asyncio.client import CustomObjectsApi

    from gpuscale.kube import new_api_client  # only when asked: keeps status light without a cluster

    api = await new_api_client(kubeconfig)
    try:
        listing = await CustomObjectsApi(api).list_cluster_custom_object(
            "gpuscale.io", "v1alpha1", "gpuscalers"
        )
        items: list[dict[str, Any]] = listing.get("items", [])
        return items
    finally:
        await api.close()


async def collect(settings: StatusSettings, nc: NATS) -> list[WorkloadView]:
    views: dict[WorkloadKey, WorkloadView] = {}

    def view(key: WorkloadKey) -> WorkloadView:
        return views.setdefault(key, WorkloadView(key))

    async def on_metrics(msg: Any) -> None:
        with contextlib.suppress(WireError):
            m = codec.decode(msg.data, WorkloadMetrics, time.time())
            view(WorkloadKey(m.namespace, m.kind, m.name)).metrics = m.averages.to_dict()

    sub = await nc.subscribe(subjects.METRICS_ALL, cb=on_metrics)
    scaler_task = asyncio.create_task(_scalers(settings.kubeconfig))
    decisions = await _last_decisions(nc, time.time())
    await asyncio.sleep(settings.listen_s)
    await sub.unsubscribe()
    try:
        scalers = await scaler_task
    except Exception as e:  # noqa: BLE001 - Kubernetes is optional here; say so and go on with NATS alone
        print(f"gpuscale status: GPUScaler objects not read ({type(e).__name__}: {e})", file=sys.stderr)
        scalers = []
    for key, decision in decisions.items():
        v = view(key)
        v.decision = decision
        targets = decision.inputs.get("targets")
        if isinstance(targets, dict):
            v.targets = {str(k): float(t) for k, t in targets.items() if isinstance(t, int | float)}
    for obj in scalers:
        spec, status, meta = obj.get("spec", {}), obj.get("status") or {}, obj["metadata"]
        ref = spec.get("scaleTargetRef", {})
        v = view(WorkloadKey(meta["namespace"], ref.get("kind", "Deployment"), ref.get("name", meta["name"])))
        v.scaler = meta["name"]
        v.targets = {
            m["name"]: float(m["target"]) for m in spec.get("metrics", []) if "name" in m and "target" in m
        }
        v.min_replicas = spec.get("minReplicas")
        v.max_replicas = spec.get("maxReplicas")
        v.replicas = status.get("currentReplicas")
        if not v.metrics:
            v.metrics = {
                m["name"]: float(m["current"])
                for m in status.get("currentMetrics", [])
                if m.get("current") is not None
            }
    return list(views.values())


async def _run(settings: StatusSettings) -> int:
    metrics = ServiceMetrics("status")
    try:
        nc = await asyncio.wait_for(connect(settings.nats_url, metrics, name="gpuscale-status"), 10)
    except Exception as e:  # noqa: BLE001 - any failure to connect is the same answer for a CLI
        print(
            f"gpuscale status: cannot reach NATS at {','.join(settings.nats_url)}: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return 1
    try:
        while True:
            views = await collect(settings, nc)
            table = (
                render_table(views, time.time())
                if views
                else "No workloads seen (no metrics, decisions or GPUScalers)."
            )
            if settings.watch and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[J")
            print(table, flush=True)
            if not settings.watch:
                return 0
            await asyncio.sleep(settings.interval_s)
    finally:
        await drain(nc)


def main(settings: StatusSettings) -> int:
    configure("status", "warning")
    try:
        return asyncio.run(_run(settings))
    except KeyboardInterrupt:
        return 0
