"""The floor: exact and instant scaling under the same scale-down stabilization."""

from __future__ import annotations

from scenario_setup import MAX_REPLICAS, NAMESPACE, Series

from gpuscale_cli.demo.report import NEEDED_PER_POD, needed_replicas
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster.inference import Endpoint, InferenceWorkloads, WaitAccount


def floor_account(profile: loadmod.Profile, floor: Series, measure_from: float = 0.0) -> WaitAccount:
    """The floor's requests through kube-sim's engine model, its replicas serving the
    instant it asks for them (and leaving with their queue when let go)."""
    engines = InferenceWorkloads()
    workload = (NAMESPACE, "floor")
    endpoint = Endpoint("vllm", 8000, "/metrics", "floor")
    before: WaitAccount | None = None
    serving = floor[0][2] if floor else 1
    for t, _, replicas in floor:
        # the replicas asked for at the previous point served until this one
        engines.advance(
            t, {workload: {f"floor-{i}": (1, endpoint) for i in range(serving)}}, lambda _w, s: profile.at(s)
        )
        serving = replicas
        if before is None and t >= measure_from:
            before = engines.accounts[workload].copy()
    account = engines.accounts.get(workload, WaitAccount())
    return account.since(before) if before is not None else WaitAccount()


def oracle(profile: loadmod.Profile, duration_s: float, scale_down_window_s: float) -> Series:
    """Exactly what the load needs the instant it changes, held for the scale-down window:
    never short, so its surplus is the price of the stabilization, not of the signal."""
    out: Series = []
    needs: list[tuple[float, int]] = []
    for second in range(int(duration_s) + 1):
        t = float(second)
        load = profile.at(t)
        needs.append((t, needed_replicas(load, NEEDED_PER_POD, 1, MAX_REPLICAS)))
        out.append((t, load, max(n for at, n in needs if at >= t - scale_down_window_s)))
    return out
