"""The floors the scenario bench measures a scaler against: exact and instant, and exact but
waiting out the same model load as every scaler's pods (what no scaler that reacts can avoid)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gpuscale_kubesim.cluster import load as loadmod

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench modules import their siblings by name, as the scripts run

import scenario_floor as floors  # noqa: E402
import scenario_report as report  # noqa: E402

# 60 GPU-% (one pod at 70) until 30 s, then 200 (three pods) for a minute, then 60 again.
STEP = loadmod.Profile("floor-step", ((0.0, 60.0), (30.0, 200.0), (90.0, 60.0)))


def waits(startup_delay_s: float, scale_down_window_s: float = 60.0) -> float:
    floor = floors.oracle(STEP, 240.0, scale_down_window_s)
    return floors.floor_account(STEP, floor, 0.0, startup_delay_s).waiting_request_s


def test_the_floor_asks_for_the_step_at_once_and_holds_it_for_the_window() -> None:
    replicas = {t: n for t, _, n in floors.oracle(STEP, 240.0, 60.0)}
    assert replicas[29.0] == 1
    assert replicas[30.0] == 3
    assert replicas[149.0] == 3
    assert replicas[150.0] == 1


def test_pods_serving_the_instant_they_are_asked_for_leave_no_queue() -> None:
    assert waits(startup_delay_s=0.0) == 0.0


def test_pods_that_load_a_model_first_leave_the_step_to_queue_on_the_pod_already_there() -> None:
    # 140 GPU-% over one pod's 100 for 20 s, served by three pods afterwards: a queue, then none
    late = waits(startup_delay_s=20.0)
    assert late > 0.0
    assert waits(startup_delay_s=10.0) < late


def test_a_pod_let_go_while_still_starting_goes_before_one_that_serves() -> None:
    # 1 → 3 at 30 s; back to 1 at 35 s (no stabilization): the two still starting leave, the
    # serving pod keeps its queue, so the waits are those of one pod for the whole step.
    floor = [(float(t), STEP.at(t), 3 if 30 <= t < 35 else 1) for t in range(91)]
    kept = floors.floor_account(STEP, floor, 0.0, 20.0)
    alone = floors.floor_account(STEP, [(t, load, 1) for t, load, _ in floor], 0.0, 20.0)
    assert kept.waiting_request_s == alone.waiting_request_s
    assert kept.dropped == alone.dropped == 0.0


def test_the_pods_there_at_the_start_serve_from_it() -> None:
    floor = floors.oracle(STEP, 20.0, 60.0)  # one pod's load before the step: nothing waits or goes unserved
    account = floors.floor_account(STEP, floor, 0.0, 20.0)
    assert account.unserved == 0.0
    assert account.waiting_request_s == 0.0


def test_the_reacting_floor_totals_carry_the_floors_provisioning() -> None:
    # It asks for the floor's replicas: the same surplus over the traces, never an invented 0.
    doc: dict[str, Any] = {"traces": {}, "chain_runs": 0}
    totals = report.trace_table(
        doc, {"step": (STEP, 240.0)}, {}, {"step": 0.0}, {"step": []}, {"step": []}, {}, {}, 60
    )
    floor, reacting = totals["floor"], totals["floor_reacting"]
    assert floor["overprovisioned_gpu_s"] > 0.0
    assert reacting["gpu_hours"] == floor["gpu_hours"]
    assert reacting["overprovisioned_gpu_s"] == floor["overprovisioned_gpu_s"]
    assert reacting["waiting_request_s"] > floor["waiting_request_s"]
