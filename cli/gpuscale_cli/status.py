"""``gpuscale status``: one line per scaled workload, like ``kubectl get hpa``."""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuscale import codec, subjects
from gpuscale.clocks import SenderClocks
from gpuscale.clockwatch import OFFSET_WARN_S
from gpuscale.logging import configure
from gpuscale.natsio import NATS, NatsUnreachable, connect_once, drain, jetstream
from gpuscale.settings import CommonSettings, kubeconfig_option, option, seconds
from gpuscale.subjects import SubjectError, WorkloadKey
from gpuscale.wire import Decision, SampleBatch, WireError, WorkloadMetrics
from gpuscale_cli.shown import shown

NODE_SAMPLES_HEARD = 5  # batches per node decoded for its clock offset
COLUMNS = ("NAMESPACE", "NAME", "REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "LAST DECISION")


@dataclass(frozen=True)
class StatusSettings(CommonSettings):
    kubeconfig: Path | None = kubeconfig_option("read GPUScaler objects from this cluster too")
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


@dataclass
class Clocks:
    """Senders' clocks as this machine sees them while it listens: aggregators
    by their metrics messages, nodes by their sample batches."""

    aggregators: SenderClocks = field(default_factory=SenderClocks)
    nodes: SenderClocks = field(default_factory=SenderClocks)

    def offsets(self) -> tuple[dict[str, float], dict[str, float]]:
        return (
            {str(k): v for k, v in self.aggregators},
            {str(k): v for k, v in self.nodes},
        )


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
    rows: list[tuple[str, ...]] = [COLUMNS]
    for v in sorted(views, key=lambda v: (v.key.namespace, v.key.name)):
        last = "<none>"
        if v.decision is not None:
            last = f"{v.decision.from_replicas}→{v.decision.to_replicas} {_age(now - v.decision.ts)} ago: {v.decision.reason}"
        rows.append(
            tuple(
                shown(cell)
                for cell in (
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
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    return "\n".join(
        "   ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "   " + r[-1] for r in rows
    )


def render_clocks(aggregators: dict[str, float], nodes: dict[str, float]) -> str:
    """Purely computational: each sender's offset (arrival here minus its ``ts``;
    positive: it is behind), judged against the median of all of them so that
    this machine's own clock does not count. Nodes are many: only those off by
    more than the bound are listed."""
    everyone = [*aggregators.values(), *nodes.values()]
    if not everyone:
        return "Clocks: no aggregator or node heard from."
    median = statistics.median(everyone)
    lines = [f"CLOCKS (offset from the median of {len(everyone)} senders; positive: behind)"]

    def line(kind: str, name: str, offset: float) -> str:
        off = offset - median
        mark = f"   more than {OFFSET_WARN_S:g} s off" if abs(off) > OFFSET_WARN_S else ""
        return f"{kind:<11}{shown(name):<40}{off:+8.2f} s{mark}"  # a subject or a source: any text

    lines += [line("aggregator", name, aggregators[name]) for name in sorted(aggregators)]
    off_nodes = sorted(n for n, v in nodes.items() if abs(v - median) > OFFSET_WARN_S)
    lines += [line("node", name, nodes[name]) for name in off_nodes]
    if nodes:
        within = len(nodes) - len(off_nodes)
        lines.append(f"{'nodes':<11}{within} of {len(nodes)} within {OFFSET_WARN_S:g} s")
    lines.append(f"{'this host':<11}{'':<40}{-median:+8.2f} s")
    return "\n".join(lines)


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


async def collect(
    settings: StatusSettings, nc: NATS, clocks: Clocks | None = None, failed: list[str] | None = None
) -> list[WorkloadView]:
    """What NATS (and the cluster, with --kubeconfig) says of each workload;
    with ``clocks``, the senders' clock offsets heard meanwhile; ``failed``
    gets a line when the GPUScaler objects could not be read."""
    views: dict[WorkloadKey, WorkloadView] = {}

    def view(key: WorkloadKey) -> WorkloadView:
        return views.setdefault(key, WorkloadView(key))

    async def on_metrics(msg: Any) -> None:
        now = time.time()
        with contextlib.suppress(WireError):
            m = codec.decode(msg.data, WorkloadMetrics, now)
            view(WorkloadKey(m.namespace, m.kind, m.name)).metrics = m.averages.to_dict()
            if clocks is not None:
                clocks.aggregators.place(m.source or "unnamed", m.ts, now)

    heard: dict[str, int] = {}

    async def on_samples(msg: Any) -> None:
        # A few batches per node are enough for a median: decode no more.
        if clocks is None or heard.get(msg.subject, 0) >= NODE_SAMPLES_HEARD:
            return
        now = time.time()
        with contextlib.suppress(WireError, SubjectError):
            node = subjects.parse_samples(msg.subject)
            batch = codec.decode(msg.data, SampleBatch, now)
            heard[msg.subject] = heard.get(msg.subject, 0) + 1
            clocks.nodes.place(node, batch.ts, now, batch.interval_s)

    sub = await nc.subscribe(subjects.METRICS_ALL, cb=on_metrics)
    samples_sub = await nc.subscribe(subjects.SAMPLES_ALL, cb=on_samples) if clocks is not None else None
    scaler_task = asyncio.create_task(_scalers(settings.kubeconfig))
    decisions = await _last_decisions(nc, time.time())
    await asyncio.sleep(settings.listen_s)
    await sub.unsubscribe()
    if samples_sub is not None:
        await samples_sub.unsubscribe()
    try:
        scalers = await scaler_task
    except Exception as e:  # noqa: BLE001 - say so, show what NATS says, and exit non-zero
        line = f"GPUScaler objects not read from the cluster ({type(e).__name__}: {' '.join(str(e).split())[:200]})"
        print(f"gpuscale status: {line}", file=sys.stderr)
        if failed is not None:
            failed.append(line)
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


async def _check_kubeconfig(settings: StatusSettings) -> str | None:
    """Why the kubeconfig given cannot be used (one line), or None."""
    if settings.kubeconfig is None:
        return None
    from gpuscale.kube import ClusterConfigError, new_api_client

    try:
        api = await new_api_client(settings.kubeconfig)
    except ClusterConfigError as e:
        return str(e)
    await api.close()
    return None


async def _run(settings: StatusSettings) -> int:
    problem = await _check_kubeconfig(settings)
    if problem is not None:
        print(f"gpuscale status: {problem}", file=sys.stderr)
        return 1
    try:
        nc = await connect_once(
            settings.nats_url,
            name="gpuscale-status",
            creds=settings.nats_creds,
            tls_ca=settings.nats_tls_ca,
        )
    except NatsUnreachable as e:
        print(f"gpuscale status: {e}", file=sys.stderr)
        return 1
    try:
        while True:
            clocks = Clocks()
            read_failed: list[str] = []
            views = await collect(settings, nc, clocks, read_failed)
            table = (
                render_table(views, time.time())
                if views
                else "No workloads seen (no metrics, decisions or GPUScalers)."
            )
            table += "\n\n" + render_clocks(*clocks.offsets())
            if settings.watch and sys.stdout.isatty():
                sys.stdout.write("\x1b[H\x1b[J")
            print(table, flush=True)
            if not settings.watch:
                return 1 if read_failed else 0
            await asyncio.sleep(settings.interval_s)
    finally:
        await drain(nc)


def main(settings: StatusSettings) -> int:
    configure("status", "warning")
    try:
        return asyncio.run(_run(settings))
    except KeyboardInterrupt:
        return 0
