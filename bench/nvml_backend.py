"""Part 1 of the NVML probe: the collector's production NVML backend, used as the collector uses it."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvml_calls import plain
from nvml_fields import COMPARED, NODE
from nvml_load import Load, as_float, smi_gpus


def import_collector() -> dict[str, Any]:
    """The collector's modules, or ImportError (part 2 goes on without them)."""
    from prometheus_client import CollectorRegistry, generate_latest

    from gpuscale import codec
    from gpuscale import logging as gs_logging
    from gpuscale.wire import SampleBatch, WireError
    from gpuscale_collector.backends.base import BackendUnavailable
    from gpuscale_collector.backends.nvml import NvmlBackend
    from gpuscale_collector.core.attribution import Attribution, build_batch
    from gpuscale_collector.core.cgroup import parse_cgroup
    from gpuscale_collector.prom import CollectorMetrics, DcgmCollector

    return {
        "CollectorRegistry": CollectorRegistry,
        "generate_latest": generate_latest,
        "codec": codec,
        "gs_logging": gs_logging,
        "SampleBatch": SampleBatch,
        "WireError": WireError,
        "BackendUnavailable": BackendUnavailable,
        "NvmlBackend": NvmlBackend,
        "Attribution": Attribution,
        "build_batch": build_batch,
        "parse_cgroup": parse_cgroup,
        "CollectorMetrics": CollectorMetrics,
        "DcgmCollector": DcgmCollector,
    }


async def backend_phase(
    args: argparse.Namespace, report: dict[str, Any], load: Load, save: Callable[[], None]
) -> None:
    section: dict[str, Any] = report.setdefault("backend", {})
    try:
        mods = import_collector()
    except Exception as e:  # noqa: BLE001 - any import failure: part 2 goes on
        section["import_error"] = f"{type(e).__name__}: {e}"
        return
    log_file = (args.out / "backend_log.jsonl").open("w")
    mods["gs_logging"].configure("collector", stream=log_file)
    registry = mods["CollectorRegistry"]()
    metrics = mods["CollectorMetrics"](registry)
    backend = mods["NvmlBackend"](on_error=lambda call: metrics.nvml_errors.labels(call=call).inc())
    last: dict[str, Any] = {"batch": None, "dcgm": {}}
    # Registered as the collector's app registers it, so /metrics carries every dcgm-exporter counter.
    registry.register(
        mods["DcgmCollector"](
            lambda: last["batch"], socket.gethostname(), backend.mig_info, lambda: last["dcgm"]
        )
    )
    reader = mods["codec"].Reader(mods["SampleBatch"])
    ticks: list[dict[str, Any]] = section.setdefault("ticks", [])
    t0 = time.perf_counter()
    try:
        await backend.start()
    except mods["BackendUnavailable"] as e:
        section["unavailable"] = str(e)
        await backend.close()
        log_file.close()
        return
    section["start_ms"] = round((time.perf_counter() - t0) * 1000, 2)
    seq = 0
    try:
        for phase, count in (("idle", args.idle_ticks), ("load", args.seconds)):
            if phase == "load":
                await asyncio.to_thread(load.start, args.load_ready_s)
                report["load"] = {"status": load.status, "pid": load.pid}
                save()
            next_at = time.monotonic()
            for i in range(count):
                next_at += args.interval
                started, cpu_started = time.perf_counter(), time.process_time()
                readings = await backend.read()
                read_ms = (time.perf_counter() - started) * 1000
                cpu_ms = (time.process_time() - cpu_started) * 1000  # all threads: the NVML worker's too
                seq += 1
                batch = mods["build_batch"](
                    NODE, time.time(), seq, args.interval, readings, mods["Attribution"]()
                )
                last["batch"] = batch
                last["dcgm"] = {r.uuid: r.dcgm for r in readings if r.dcgm is not None}
                metrics.ticks.inc()
                metrics.gpus.set(len(batch.gpus))
                metrics.tick_seconds.observe(read_ms / 1000)
                tick = {
                    "phase": phase,
                    "tick": i,
                    "read_ms": round(read_ms, 3),
                    "cpu_ms": round(cpu_ms, 3),
                    "readings": [plain(r) for r in readings],
                    "wire": _wire_check(mods, reader, batch),
                    "smi": smi_gpus(),
                }
                ticks.append(tick)
                _print_tick(tick)
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if count:
                text = mods["generate_latest"](registry).decode()
                (args.out / f"collector_metrics_{phase}.txt").write_text(text)
                section[f"metrics_{phase}_lines"] = len(text.splitlines())
                section[f"metrics_{phase}"] = [
                    line
                    for line in text.splitlines()
                    if line.startswith(
                        ("DCGM_", "gpuscale_gpu_", "gpuscale_process_", "gpuscale_collector_nvml")
                    )
                ][:200]
            save()
    finally:
        section["gpus"] = _backend_state(backend)
        section["processes"] = _process_view(mods, ticks, load.pid)
        await backend.close()
        log_file.close()
    with contextlib.suppress(OSError, ValueError):
        section["log_events"] = [
            json.loads(line) for line in (args.out / "backend_log.jsonl").read_text().splitlines()[:200]
        ]


def _wire_check(mods: dict[str, Any], reader: Any, batch: Any) -> dict[str, Any]:
    """What the aggregator's decoder makes of this batch: the wire contract on real readings."""
    try:
        data = mods["codec"].encode(batch)
        _message, rejected = reader.read(data, time.time())
    except mods["WireError"] as e:
        return {"error": f"{e.code}: {e}"}
    except Exception as e:  # noqa: BLE001 - a batch the decoder chokes on is a finding
        return {"error": f"{type(e).__name__}: {e}"}
    return {"bytes": len(data), "rejected": [plain(r) for r in rejected]}


def _backend_state(backend: Any) -> list[dict[str, Any]]:
    """The backend's own view of each GPU after the run (private fields: this is a probe)."""
    out = []
    for gpu in getattr(backend, "_gpus", []):
        out.append(
            {
                "index": gpu.index,
                "uuid": gpu.uuid,
                "model": gpu.model,
                "unsupported_calls": sorted(gpu.unsupported),
                "gpm_allocated": gpu.gpm is not None,
                "mig_on": gpu.mig_on,
                "mig_devices": [m.uuid for m in gpu.migs],
                "lost": gpu.lost,
            }
        )
    return out


def _process_view(mods: dict[str, Any], ticks: list[dict[str, Any]], load_pid: int | None) -> dict[str, Any]:
    """NVML reports host PIDs: can this process see them, and what pod would the collector find?"""
    pids = sorted({p["pid"] for t in ticks for r in t["readings"] for p in (r.get("processes") or [])})
    seen: dict[str, Any] = {}
    for pid in pids[:32]:
        path = Path("/proc") / str(pid) / "cgroup"
        try:
            text = path.read_text(errors="replace")
        except OSError as e:
            seen[str(pid)] = {"proc": f"unreadable: {type(e).__name__}"}
            continue
        ident = mods["parse_cgroup"](text)
        seen[str(pid)] = {"cgroup": text.strip().splitlines()[:3], "identity": plain(ident)}
    return {"load_pid_here": load_pid, "nvml_pids": pids, "in_this_pid_namespace": seen}


def _print_tick(tick: dict[str, Any]) -> None:
    for r in tick["readings"]:
        s = tick["smi"].get(r.get("mig_parent") or r["uuid"], {})
        procs = r.get("processes")
        print(
            f"  [{tick['phase']} {tick['tick']}] gpu {r['index']} read {tick['read_ms']:.1f} ms:"
            f" util {r['util']} mem {r['mem_util']} fb {r['fb_used_mib']}/{r['fb_free_mib']} MiB"
            f" {r['temp_c']} C {r['power_w']} W sm_active {r['sm_active']} health {r['health']}"
            f" procs {len(procs) if procs is not None else '?'}"
            + (f" | smi util {s.get('utilization.gpu')} power {s.get('power.draw')}" if s else "")
        )


def diffs_vs_smi(ticks: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for attr, smi_field in COMPARED:
        values = []
        for t in ticks:
            for r in t["readings"]:
                s = t["smi"].get(r["uuid"])
                mine, theirs = r.get(attr), as_float((s or {}).get(smi_field))
                if s and r.get("mig_parent") is None and mine is not None and theirs is not None:
                    values.append(abs(mine - theirs))
        out[attr] = {
            "mean_abs_diff": round(sum(values) / len(values), 3) if values else None,
            "n": len(values),
        }
    return out
