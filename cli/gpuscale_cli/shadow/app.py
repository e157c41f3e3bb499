"""``gpuscale shadow-report``: shadow mode's advice against the live controller's record.

Advice is read by sequence with the observer's rights: a consumer's deliver subject could
point anywhere."""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Final

from nats.js.errors import NotFoundError

from gpuscale import codec, subjects
from gpuscale.logging import configure
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, connect, drain, jetstream
from gpuscale.policy_spec import MAX_REPLICAS
from gpuscale.settings import CommonSettings, choice, kubeconfig_option, option, positive_float, seconds
from gpuscale.subjects import SubjectError, WorkloadKey
from gpuscale.timefmt import format_time, parse_time
from gpuscale.wire import Decision, ScaleTargetRef, WireError
from gpuscale_cli.shadow.compare import Advice, LiveChange, Matched, Report, compare

# The HPA controller's Event for a rescale (pkg/controller/podautoscaler/horizontal.go):
# reason SuccessfulRescale, message "New size: 4; reason: ...".
# Anyone who may create Events in the namespace writes one: past a replica count, it is left out.
_NEW_SIZE = re.compile(r"^New size: (\d{1,10});")
GPU_RESOURCES = ("nvidia.com/gpu",)
# Message gets in flight at once: a round trip per this many messages (100,000 in seconds).
READ_AHEAD: Final = 256
# HPAs and Events listed this many at a time (as the decider's conflict search): a team's
# Events in its own namespace are as many and as large (a core/v1 message has no limit of
# its own, ~1.5 MiB in etcd) as it likes, and the report holds one page of them at a time.
LIST_PAGE: Final = 20


def _workload(text: str) -> WorkloadKey:
    parts = text.split("/")
    if len(parts) == 2:
        return WorkloadKey(parts[0], "Deployment", parts[1])
    if len(parts) == 3 and all(parts):
        return WorkloadKey(*parts)
    raise ValueError("expected NAMESPACE/NAME or NAMESPACE/KIND/NAME")


@dataclass(frozen=True)
class ShadowReportSettings(CommonSettings):
    kubeconfig: Path | None = kubeconfig_option(
        "read the live controller's Events, the scale and the GPUs per replica from this cluster"
    )
    workload: WorkloadKey | None = option(
        None,
        "--workload",
        parse=_workload,
        help="only this workload: NAMESPACE/NAME (a Deployment) or NAMESPACE/KIND/NAME",
    )
    since_s: float | None = option(
        None, "--since", parse=seconds, help="only advice younger than this; none: all the stream keeps"
    )
    gpus_per_replica: float | None = option(
        None,
        "--gpus-per-replica",
        parse=positive_float,
        help="GPUs per replica (default: the pod template's nvidia.com/gpu limits, else 1)",
    )
    output: str = option("text", "--output", parse=choice("text", "json"), help="text or json")


@dataclass(frozen=True)
class Live:
    """What the cluster says of one workload."""

    changes: tuple[LiveChange, ...] = ()
    replicas_now: int | None = None
    gpus_per_replica: float | None = None
    controllers: tuple[str, ...] = ()
    problem: str | None = None  # why it could not be read


@dataclass
class AdviceRead:
    """What the advice stream held: each workload's advice, oldest first, and
    how many messages could not be read, by reason."""

    advice: dict[WorkloadKey, list[Advice]] = field(default_factory=dict)
    api_versions: dict[WorkloadKey, str] = field(default_factory=dict)
    skipped: Counter[str] = field(default_factory=Counter)
    rounds: int = 0  # round trips waited for (one per READ_AHEAD messages)

    def take(
        self, subject: str, data: bytes, key: WorkloadKey | None, since: float | None, now: float
    ) -> None:
        """One stored message: kept, left out (another workload, too old) or skipped (unreadable)."""
        if key is not None and subject != subjects.advice(key):
            return
        try:
            found = subjects.parse_workload(subject, "advice")
        except SubjectError:
            self.skipped["bad_subject"] += 1
            return
        try:
            d = codec.decode(data, Decision, now)
        except WireError as e:
            self.skipped[e.code] += 1
            return
        if WorkloadKey(d.namespace, d.kind, d.name) != found:
            self.skipped["subject_mismatch"] += 1
            return
        if since is not None and d.ts < since:
            return
        self.advice.setdefault(found, []).append(Advice(d.ts, d.from_replicas, d.to_replicas, d.reason))
        self.api_versions[found] = d.api_version or self.api_versions.get(found) or "apps/v1"

    def skipped_line(self) -> str:
        total = sum(self.skipped.values())
        reasons = ", ".join(f"{reason} {count}" for reason, count in sorted(self.skipped.items()))
        return f"{total} advice messages could not be read and were skipped ({reasons})"


async def read_advice(nc: NATS, key: WorkloadKey | None, since: float | None, now: float) -> AdviceRead:
    """The advice stream up to its last message at the start, READ_AHEAD messages a round."""
    js = jetstream(nc)
    read = AdviceRead()
    try:
        info = await js.stream_info(subjects.ADVICE_STREAM)
    except NotFoundError:
        return read
    state = info.state
    if not state.messages:
        return read

    async def get(seq: int) -> tuple[str, bytes] | None:
        try:
            raw = await js.get_msg(subjects.ADVICE_STREAM, seq=seq)
        except NotFoundError:
            return None  # deleted, or aged out since the stream's info
        return raw.subject or "", raw.data or b""

    seq, last = state.first_seq, state.last_seq
    while seq <= last:
        upto = min(last, seq + READ_AHEAD - 1)
        read.rounds += 1
        for got in await asyncio.gather(*(get(s) for s in range(seq, upto + 1))):
            if got is not None:
                read.take(*got, key, since, now)
        seq = upto + 1
    for items in read.advice.values():
        items.sort(key=lambda a: a.ts)
    return read


def gpus_in_template(obj: dict[str, Any]) -> float | None:
    containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    total = 0.0
    for c in containers:
        limits = (c.get("resources") or {}).get("limits") or {}
        for name in GPU_RESOURCES:
            try:
                total += float(limits.get(name) or 0)
            except (TypeError, ValueError):
                continue
    return total or None


def hpa_changes(hpa: str, events: list[dict[str, Any]]) -> list[LiveChange]:
    out: list[LiveChange] = []
    for e in events:
        if e.get("reason") != "SuccessfulRescale":
            continue
        m = _NEW_SIZE.match(str(e.get("message") or e.get("note") or ""))
        ts = parse_time(e.get("lastTimestamp")) or parse_time(e.get("eventTime"))
        if m and ts is not None and int(m.group(1)) <= MAX_REPLICAS:
            out.append(LiveChange(ts, int(m.group(1)), hpa))
    return out


def _items(page: dict[str, Any]) -> list[dict[str, Any]]:
    return [item for item in page.get("items") or () if isinstance(item, dict)]


async def read_live(kubeconfig: Path, key: WorkloadKey, api_version: str) -> Live:
    from gpuscale.kube import KubeError, ScaleClient, each_page, new_api_client

    api = await new_api_client(kubeconfig)
    try:
        scales = ScaleClient(api)
        ref = ScaleTargetRef(api_version, key.kind, key.name, key.namespace)
        obj = await scales.get_object(ref)
        replicas = (await scales.get(ref)).replicas
        names: list[str] = []

        def targets(page: dict[str, Any]) -> None:
            for hpa in _items(page):
                target = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
                if (target.get("kind"), target.get("name")) == (key.kind, key.name):
                    names.append(str((hpa.get("metadata") or {}).get("name")))

        hpas = f"/apis/autoscaling/v2/namespaces/{key.namespace}/horizontalpodautoscalers"
        await each_page(api, hpas, targets, limit=LIST_PAGE)
        changes: list[LiveChange] = []
        controllers: list[str] = []
        for name in names:
            who = f"HorizontalPodAutoscaler {key.namespace}/{name}"
            controllers.append(who)
            selector = f"involvedObject.kind=HorizontalPodAutoscaler,involvedObject.name={name}"

            def rescales(page: dict[str, Any], who: str = who) -> None:
                changes.extend(hpa_changes(who, _items(page)))

            events = f"/api/v1/namespaces/{key.namespace}/events"
            await each_page(api, events, rescales, limit=LIST_PAGE, query={"fieldSelector": selector})
        return Live(tuple(changes), replicas, gpus_in_template(obj), tuple(controllers))
    except KubeError as e:
        return Live(problem=f"the cluster could not be read: {e}")
    finally:
        await api.close()


# --- output ------------------------------------------------------------------


def _lead(m: Matched, other: str) -> str:
    if m.reached_at is None:
        return f"{other} never reached {m.to_replicas} while this held"
    if m.lead_s is None:
        return f"back to where {other} was"
    if abs(m.lead_s) < 0.5:
        return "at the same time"
    return f"gpuscale {abs(m.lead_s):.0f} s {'earlier' if m.lead_s > 0 else 'later'}"


def render(key: WorkloadKey, report: Report, live: Live) -> str:
    who = ", ".join(live.controllers) or "no HorizontalPodAutoscaler targets it"
    lines = [
        f"{key.namespace}/{key.kind}/{key.name}: {who}; {report.gpus_per_replica:g} GPU(s) per replica",
        f"  {format_time(report.start)} .. {format_time(report.end)}",
    ]
    if live.problem:
        lines.append(f"  live changes from the decider's view only: {live.problem}")
    lines.append("  GPUSCALE ADVISED")
    for m in report.advised:
        parts = [f"    {format_time(m.ts)}  {m.from_replicas} → {m.to_replicas}"]
        if m.reached_at is not None and m.lead_s is not None:
            parts.append(f"live reached it at {format_time(m.reached_at)}")
        parts.append(_lead(m, "the live count"))
        lines.append("  ".join(parts))
    if not report.advised:
        lines.append("    no change advised")
    lines.append("  LIVE CHANGES")
    for m in report.live:
        lines.append(
            f"    {format_time(m.ts)}  {m.from_replicas} → {m.to_replicas}  ({m.source})  {_lead(m, 'gpuscale')}"
        )
    if not report.live:
        lines.append("    none seen")
    lines.append(
        f"  GPU-seconds: following gpuscale would have used {report.extra_gpu_s:,.0f} more "
        f"and {report.saved_gpu_s:,.0f} fewer (net {report.net_gpu_s:+,.0f})"
    )
    return "\n".join(lines)


def as_json(key: WorkloadKey, report: Report, live: Live) -> dict[str, Any]:
    return {
        "workload": {"namespace": key.namespace, "kind": key.kind, "name": key.name},
        "controllers": list(live.controllers),
        "problem": live.problem,
        **asdict(report),
        "net_gpu_s": report.net_gpu_s,
    }


async def _run(settings: ShadowReportSettings) -> int:
    try:
        nc = await asyncio.wait_for(
            connect(settings.nats_url, ServiceMetrics("shadow_report"), name="gpuscale-shadow-report"), 10
        )
    except Exception as e:  # noqa: BLE001 - any failure to connect is the same answer for a CLI
        print(
            f"gpuscale shadow-report: cannot reach NATS at {','.join(settings.nats_url)}: {type(e).__name__}: {e}",
            file=sys.stderr,
        )
        return 1
    try:
        reports, read = await build_reports(settings, nc, time.time())
    except Exception as e:  # noqa: BLE001 - NATS or the cluster failed mid-read: say so, exit 1
        print(f"gpuscale shadow-report: {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    finally:
        await drain(nc)
    # Said on stderr beside JSON (its output stays one list), after the reports as text.
    skipped = read.skipped_line() if read.skipped else None
    if not reports:
        print("No shadow advice (no GPUScaler with spec.mode Shadow has advised yet).", file=sys.stderr)
        if skipped:
            print(skipped, file=sys.stderr)
        return 0
    if settings.output == "json":
        print(json.dumps([as_json(*r) for r in reports], indent=2))
        if skipped:
            print(skipped, file=sys.stderr)
    else:
        print("\n\n".join(render(*r) for r in reports))
        if skipped:
            print(f"\n{skipped}")
    return 0


async def build_reports(
    settings: ShadowReportSettings, nc: NATS, now: float
) -> tuple[list[tuple[WorkloadKey, Report, Live]], AdviceRead]:
    since = now - settings.since_s if settings.since_s else None
    read = await read_advice(nc, settings.workload, since, now)
    out: list[tuple[WorkloadKey, Report, Live]] = []
    for key, items in sorted(read.advice.items(), key=lambda kv: str(kv[0])):
        live = (
            Live(problem="no --kubeconfig")
            if settings.kubeconfig is None
            else await read_live(settings.kubeconfig, key, read.api_versions[key])
        )
        gpus = settings.gpus_per_replica or live.gpus_per_replica or 1.0
        report = compare(items, live.changes, end=now, live_now=live.replicas_now, gpus_per_replica=gpus)
        if report is not None:
            out.append((key, report, live))
    return out, read


def main(settings: ShadowReportSettings) -> int:
    configure("shadow-report", "warning")
    try:
        return asyncio.run(_run(settings))
    except KeyboardInterrupt:
        return 0
