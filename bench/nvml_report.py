"""The NVML probe's Markdown: the full table per GPU (``nvml_probe.md``) and one row per counter (``summary.md``)."""

from __future__ import annotations

import json
from typing import Any

from nvml_fields import DEFAULT_COUNTERS


def _key(entry: dict[str, Any]) -> tuple[str, str]:
    return entry["dcgm"], entry["call"]


def markdown(report: dict[str, Any]) -> str:
    env = report["environment"]
    lines = [
        f"# NVML probe, {env['when']} on {env['host']}",
        "",
        f"python {env['python']}, nvidia-ml-py {env['nvidia-ml-py']}, torch {env['torch']}; load: {report['load']['status']}",
        "",
    ]
    snaps = report.get("snapshots", [])
    if not snaps or snaps[0].get("init") != "ok":
        lines.append(f"**NVML not available**: {snaps[0].get('init') if snaps else 'not tried'}")
    for gi in range(len(snaps[0].get("gpus", [])) if snaps else 0):
        columns = [{_key(e): e for e in s["gpus"][gi]} for s in snaps if gi < len(s.get("gpus", []))]
        labels = [s["label"] for s in snaps if gi < len(s.get("gpus", []))]
        lines += [
            f"## GPU {gi}: every call behind dcgm-exporter's default counters",
            "",
            "| DCGM field | NVML call | " + " | ".join(labels) + " | unit | µs |",
            "|---|---|" + "---|" * len(labels) + "---|---:|",
        ]
        for key, entry in columns[0].items():
            if entry["dcgm"] == "(struct)":
                continue
            cells = " | ".join(_cell(c.get(key, {})) for c in columns)
            note = f" ({entry['note']})" if entry.get("note") else ""
            lines.append(
                f"| {entry['dcgm']} | `{entry['call']}`{note} | {cells} | {entry['unit']} | {entry.get('us', '')} |"
            )
        lines.append("")
    if snaps and snaps[0].get("init") == "ok":
        covered = {e["dcgm"] for s in snaps for g in s.get("gpus", []) for e in g}
        missing = [c for c in DEFAULT_COUNTERS if c not in covered]
        lines += [f"Default counters without a row: {missing or 'none'}", ""]
    lines += _backend_markdown(report.get("backend", {}))
    return "\n".join(lines) + "\n"


def summary(report: dict[str, Any]) -> str:
    """One row per default counter (GPU 0): the first call that answered, idle -> load, or every error."""
    snaps = [s for s in report.get("snapshots", []) if s.get("gpus")]
    env = report["environment"]
    head = [
        f"NVML probe on {env['host']} ({env['when']}): nvidia-ml-py {env['nvidia-ml-py']}; load: {report['load']['status']}"
    ]
    if not snaps:
        init = report.get("snapshots", [{}])[0].get("init", "not tried")
        backend = report.get("backend", {})
        why = backend.get("unavailable") or backend.get("import_error") or backend.get("error") or ""
        return "\n".join([*head, f"NVML not available: {init}", f"collector backend: {why}"]) + "\n"
    rows = ["| DCGM field | NVML call | " + " | ".join(s["label"] for s in snaps) + " |"]
    rows.append("|---|---|" + "---|" * len(snaps))
    for counter in DEFAULT_COUNTERS:
        entries = [e for e in snaps[0]["gpus"][0] if e["dcgm"] == counter]
        if counter == "DCGM_FI_DEV_XID_ERRORS":  # a sequence of calls: each step's outcome
            steps = [_key(e) for e in entries if e["call"] != "nvmlDeviceGetSupportedEventTypes"]
            cells = []
            for s in snaps:
                found = {_key(e): e for e in s["gpus"][0]}
                cells.append(
                    ", ".join(f"{k[1].split('(')[0]}: {found.get(k, {}).get('error', 'ok')}" for k in steps)
                )
            rows.append(f"| {counter} | event set, critical XIDs | " + " | ".join(cells) + " |")
            continue
        working = next((e for e in entries if "error" not in e), None)
        if working is None:
            if not entries:
                rows.append(f"| {counter} | no row |" + " |" * len(snaps))
                continue
            first = entries[0]
            more = f" (and {len(entries) - 1} more, all failed)" if len(entries) > 1 else ""
            cells = [_cell(next((e for e in s["gpus"][0] if _key(e) == _key(first)), {})) for s in snaps]
            rows.append(f"| {counter} | `{first['call']}`{more} | " + " | ".join(cells) + " |")
            continue
        cells = []
        for s in snaps:
            match: dict[str, Any] = next((e for e in s["gpus"][0] if _key(e) == _key(working)), {})
            cells.append(
                _cell(match) + (f" {working['unit']}" if "value" in match and working["unit"] else "")
            )
        rows.append(f"| {counter} | `{working['call']}` | " + " | ".join(cells) + " |")
    backend = report.get("backend", {})
    ticks = backend.get("ticks", [])
    tail = []
    if ticks:
        last = ticks[-1]["readings"][0] if ticks[-1]["readings"] else {}
        tail.append(
            f"collector backend: {len(ticks)} ticks, read ms {backend.get('read_ms')}, CPU ms {backend.get('cpu_ms')},"
            f" last {last.get('util')} % util,"
            f" sm_active {last.get('sm_active')}, health {last.get('health')}, wire {ticks[-1]['wire']};"
            f" unsupported {[g['unsupported_calls'] for g in backend.get('gpus', [])]}"
        )
    else:
        tail.append(
            f"collector backend: {backend.get('unavailable') or backend.get('import_error') or backend.get('error')}"
        )
    return "\n".join([*head, *rows, *tail]) + "\n"


def _cell(entry: dict[str, Any]) -> str:
    if "error" in entry:
        return f"**{entry['error']}**"
    text = json.dumps(entry.get("value"), separators=(",", ":"))
    text = text if len(text) <= 160 else text[:157] + "..."
    return text.replace("|", "\\|")


def _backend_markdown(section: dict[str, Any]) -> list[str]:
    lines = ["## The collector's NVML backend (production code path)", ""]
    for key in ("import_error", "unavailable", "error"):
        if key in section:
            lines.append(f"**{key}**: {section[key]}")
    ticks = section.get("ticks", [])
    if ticks:
        lines += [
            "| phase | tick | gpu | read ms | util | mem% | fb used | fb free | temp | power W | sm_active | health | procs | wire | smi util | smi power |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|",
        ]
        for t in ticks:
            wire = t["wire"].get("error") or (f"{t['wire']['bytes']} B, rejected {t['wire']['rejected']}")
            for r in t["readings"]:
                s = t["smi"].get(r["uuid"], {})
                procs = r.get("processes")
                lines.append(
                    f"| {t['phase']} | {t['tick']} | {r['index']} | {t['read_ms']} | {r['util']} | {r['mem_util']}"
                    f" | {r['fb_used_mib']} | {r['fb_free_mib']} | {r['temp_c']} | {r['power_w']} | {r['sm_active']}"
                    f" | {r['health']} | {len(procs) if procs is not None else '?'} | {wire}"
                    f" | {s.get('utilization.gpu', '')} | {s.get('power.draw', '')} |"
                )
        lines.append("")
    for key in ("start_ms", "read_ms", "cpu_ms", "diff_vs_nvidia_smi", "gpus", "processes", "metrics_load"):
        if key in section:
            lines.append(f"- {key}: `{json.dumps(section[key])}`")
    return lines
