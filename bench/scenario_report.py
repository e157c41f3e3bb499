"""The scenario bench's tables, totals and verdicts, printed and kept for ``--json``."""

from __future__ import annotations

import statistics
from typing import Any

from scenario_floor import floor_account, oracle
from scenario_setup import FIELDS, PAID_FIELDS, SCALERS, STARTUP_DELAY_S, Scaler, Series, measure, paid

from gpuscale_cli.demo.report import Provisioning
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster.inference import WaitAccount


def _row(label: str, p: dict[str, Any]) -> str:
    cells = []
    for f in FIELDS + PAID_FIELDS:
        v = p.get(f)
        cells.append("—" if v is None else f"{v:g}" if isinstance(v, int | float) else str(v))
    return f"| {label} | " + " | ".join(cells) + " |"


def _chain_summary(runs: list[Provisioning], paid_runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in FIELDS:
        values = [getattr(r, f) for r in runs]
        known = [v for v in values if v is not None]
        out[f] = round(statistics.fmean(known), 1) if known else None
        out[f"{f}_range"] = [min(known), max(known)] if known else None
    for f in paid_runs[0] if paid_runs else ():
        values = [float(r[f]) for r in paid_runs]
        out[f] = round(statistics.fmean(values), 4 if f == "gpu_hours" else 2)
        out[f"{f}_range"] = [min(values), max(values)]
    return out


def trace_table(
    doc: dict[str, Any],
    traces: dict[str, tuple[loadmod.Profile, float]],
    scalers: dict[str, Scaler],
    measure_from: dict[str, float],
    chain: dict[str, list[Provisioning]],
    chain_paid: dict[str, list[dict[str, Any]]],
    pipeline: dict[str, dict[str, Series]],
    pipeline_paid: dict[str, dict[str, WaitAccount]],
    stabilization_s: int,
) -> dict[str, dict[str, float]]:
    """One row per trace and scaler, into ``doc["traces"]``; the totals over the traces."""
    print()
    print("| trace · scaler | " + " | ".join(FIELDS + PAID_FIELDS) + " |")
    print("|---|" + "---:|" * len(FIELDS + PAID_FIELDS))
    totals: dict[str, dict[str, float]] = {}
    for trace_name in traces:
        start = measure_from.get(trace_name, 0.0)
        entry: dict[str, Any] = {"chain": _chain_summary(chain[trace_name], chain_paid[trace_name])}
        if trace_name in pipeline:
            for kind, scaler in scalers.items():
                points = pipeline[trace_name][kind]
                p = measure(points, start)
                entry[scaler.label] = {
                    **p.to_json(),
                    **paid(points, pipeline_paid[trace_name][kind], start),
                    "series": points,
                }
                print(_row(f"{trace_name} · {scaler.title}", entry[scaler.label]))
        print(_row(f"{trace_name} · usual chain (gpu_util, mean of {doc['chain_runs']})", entry["chain"]))
        profile, duration = traces[trace_name]
        floor = oracle(profile, duration, stabilization_s)
        entry["floor"] = {
            **measure(floor, start).to_json(),
            **paid(floor, floor_account(profile, floor, start), start),
        }
        print(
            _row(
                f"{trace_name} · floor (exact and instant, {stabilization_s} s scale-down window)",
                entry["floor"],
            )
        )
        # What waits no scaler that asks for what the load needs now can avoid: a pod's model load.
        # It asks for the floor's replicas: the floor's provisioning figures, its own waits.
        entry["floor_reacting"] = {
            **measure(floor, start).to_json(),
            **paid(floor, floor_account(profile, floor, start, STARTUP_DELAY_S), start),
        }
        print(
            _row(
                f"{trace_name} · floor reacting (exact, each pod serving {STARTUP_DELAY_S:g} s after it is asked for)",
                entry["floor_reacting"],
            )
        )
        doc["traces"][trace_name] = entry
        for label, figures in entry.items():
            bucket = totals.setdefault(
                label,
                {
                    "underprovisioned_gpu_s": 0.0,
                    "overprovisioned_gpu_s": 0.0,
                    "gpu_hours": 0.0,
                    "waiting_request_s": 0.0,
                },
            )
            for f in bucket:
                bucket[f] += float(figures.get(f) or 0.0)
    return totals


def totals_and_verdicts(
    doc: dict[str, Any], totals: dict[str, dict[str, float]], with_pipeline: bool
) -> None:
    """The totals table, and (with the pipeline run) gpuscale's verdicts against the chain."""
    print()
    print(
        "| over the traces | underprovisioned_gpu_s | overprovisioned_gpu_s | gpu_hours | waiting_request_s |"
    )
    print("|---|---:|---:|---:|---:|")
    for label, figures in totals.items():
        print(
            f"| {label} | {figures['underprovisioned_gpu_s']:.1f} | {figures['overprovisioned_gpu_s']:.1f} "
            f"| {figures['gpu_hours']:.3f} | {figures['waiting_request_s']:.1f} |"
        )
    doc["totals"] = totals
    if "chain" not in totals or not with_pipeline:
        return
    chain_total = totals["chain"]
    verdicts = {}
    for label in (s.label for s in SCALERS.values()):
        if label in totals:
            mine = totals[label]
            verdicts[label] = {
                "under_at_most_a_fifth_of_chain": mine["underprovisioned_gpu_s"]
                <= chain_total["underprovisioned_gpu_s"] / 5,
                "over_no_more_than_chain": mine["overprovisioned_gpu_s"]
                <= chain_total["overprovisioned_gpu_s"],
                # the yardstick: what users pay
                "waiting_at_most_a_fifth_of_chain": mine["waiting_request_s"]
                <= chain_total["waiting_request_s"] / 5,
                "gpu_hours_at_most_1_15_chain": mine["gpu_hours"] <= 1.15 * chain_total["gpu_hours"],
            }
    doc["verdicts"] = verdicts
    print()
    for label, v in verdicts.items():
        print(f"{label}: " + "; ".join(f"{k}: {'met' if ok else 'MISSED'}" for k, ok in v.items()))
    floor_total = totals.get("floor")
    if (
        floor_total is not None
        and floor_total["overprovisioned_gpu_s"] > chain_total["overprovisioned_gpu_s"]
    ):
        # The verdict alone reads as a defect of the scaler; the floor says whether any could meet it.
        print(
            f"the floor's surplus ({floor_total['overprovisioned_gpu_s']:.0f} GPU-s) is above the chain's "
            f"({chain_total['overprovisioned_gpu_s']:.0f}): under this scale-down window no scaler "
            "that is never short can meet 'over ≤ chain'; the chain has less by being short"
        )
    reacting = totals.get("floor_reacting")
    if reacting is not None and reacting["waiting_request_s"] > chain_total["waiting_request_s"] / 5:
        print(
            f"the reacting floor waits {reacting['waiting_request_s']:.0f} request-s, over a fifth of the "
            f"chain's ({chain_total['waiting_request_s']:.0f}): asking for exactly what the load needs the "
            "instant it needs it does not meet 'waiting ≤ chain / 5' when pods load a model first; only "
            "pods held ahead of the need can"
        )
