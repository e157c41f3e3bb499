"""The floors: exact scaling under the same scale-down stabilization, its pods ready the
instant they are asked for, or after the same model load as everyone else's."""

from __future__ import annotations

from scenario_setup import MAX_REPLICAS, NAMESPACE, Series

from gpuscale_cli.demo.report import NEEDED_PER_POD, needed_replicas
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster.inference import Endpoint, InferenceWorkloads, WaitAccount


def floor_account(
    profile: loadmod.Profile, floor: Series, measure_from: float = 0.0, startup_delay_s: float = 0.0
) -> WaitAccount:
    """The floor's requests through kube-sim's engine model. A pod serves ``startup_delay_s``
    after it is asked for (0: the instant); let go, it leaves with its queue, a pod still
    starting first (a ReplicaSet removes an unready pod before a ready one)."""
    engines = InferenceWorkloads()
    workload = (NAMESPACE, "floor")
    endpoint = Endpoint("vllm", 8000, "/metrics", "floor")
    before: WaitAccount | None = None
    previous = floor[0][0] if floor else 0.0
    # (when it serves, its number); the pods there at the start serve from it, as the scalers' do
    ready_at: list[tuple[float, int]] = [(previous, i) for i in range(floor[0][2] if floor else 0)]
    made = len(ready_at)
    for t, _, replicas in floor:
        # the pods that served since the previous point served until this one
        serving = {f"floor-{i}": (1, endpoint) for at, i in ready_at if at <= previous}
        engines.advance(t, {workload: serving}, lambda _w, s: profile.at(s))
        previous = t
        while len(ready_at) < replicas:
            ready_at.append((t + startup_delay_s, made))
            made += 1
        while len(ready_at) > replicas:
            ready_at.remove(max(ready_at))  # the last to serve goes first
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
