"""The scenario bench's settings, traces and manifests, and how a run is measured."""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

from gpuscale_cli.demo.report import NEEDED_PER_POD, Provisioning, provisioning
from gpuscale_kubesim.cluster import load as loadmod
from gpuscale_kubesim.cluster import scenarios as sim_scenarios
from gpuscale_kubesim.cluster.inference import PATH_ANNOTATIONS, PORT_ANNOTATIONS, WaitAccount

NAMESPACE = "default"
NODES, GPUS_PER_NODE = 4, 32
STARTUP_DELAY_S = 20.0
WAITING_TARGET = 4.0
UTIL_TARGET = 70.0
MAX_REPLICAS = 10
# How often the pipeline's replicas and loads are read: it places a step or a PATCH within this.
POLL_S = 0.1
DEFAULT_SCALE_DOWN_WINDOW_S = 300  # HPA's behavior.scaleDown.stabilizationWindowSeconds

# The traces (GPU-percent of work over seconds). step is the demo's: 30 → 200
# at 15 s (3 pods' worth at 70 %), back to 40 at 100 s.
TRACES: dict[str, tuple[loadmod.Profile, float]] = {
    "step": (loadmod.STEP, 180.0),
    "spike": (loadmod.SPIKE, 240.0),
    "ramp": (loadmod.RAMP, 280.0),
    "diurnal": (loadmod.Profile("diurnal-240s", sine=(40.0, 260.0), period_s=240.0), 240.0),
    "bursty": (loadmod.BURSTY, 240.0),
}
# By name only: steady is 260 GPU-% for 17 min, past a queue's 10 min capacity hold and a 300 s window.
EXTRA_TRACES: dict[str, tuple[loadmod.Profile, float]] = {
    "steady": (loadmod.Profile("steady", ((0.0, 40.0), (15.0, 260.0))), 1020.0),
}


class Scaler(NamedTuple):
    """One GPUScaler per trace: its metric and target, and whether the collector reads the pods'
    engine /metrics (without, gpuscale sees what dcgm-exporter alone shows: the GPUs)."""

    metric: str
    target: float
    engine_signals: bool = True

    @property
    def label(self) -> str:
        return f"gpuscale_{self.metric}" + ("" if self.engine_signals else "_gpu_only")

    @property
    def title(self) -> str:
        return f"gpuscale {self.metric}" + ("" if self.engine_signals else " (GPU only)")


SCALERS = {
    "queue": Scaler("requests_waiting", WAITING_TARGET),
    "util": Scaler("gpu_util", UTIL_TARGET),
    "gpu-only": Scaler("gpu_util", UTIL_TARGET, engine_signals=False),
}
DEFAULT_SCALERS = ("queue", "util")
FIELDS = (
    "time_to_adequate_s",
    "underprovisioned_gpu_s",
    "overprovisioned_gpu_s",
    "scale_events",
    "max_overshoot_replicas",
    "oscillations",
)
PAID_FIELDS = ("gpu_hours", "waiting_request_s", "wait_p90_s")
Series = list[tuple[float, float, int]]  # (t, load, requested replicas)


def deployment(name: str, engine_signals: bool = True) -> dict[str, Any]:
    """A vLLM-like workload; without ``engine_signals`` its pods name no metrics endpoint, so the
    collector reads only their GPUs (kube-sim still plays their engine, queues and waits)."""
    deploy = sim_scenarios.vllm_deployment(name, NAMESPACE)
    deploy["metadata"]["labels"] = {"app": name}
    if not engine_signals:
        notes = deploy["spec"]["template"]["metadata"]["annotations"]
        for key in (*PORT_ANNOTATIONS, *PATH_ANNOTATIONS):  # what names an endpoint
            notes.pop(key, None)
    return deploy


def gpuscaler(
    name: str, metric: str, target: float, window: str = "30s", scale_down_window_s: int | None = None
) -> dict[str, Any]:
    """HPA's default behaviour unless a scale-down stabilization window is given."""
    scaler: dict[str, Any] = {
        "apiVersion": "gpuscale.io/v1alpha1",
        "kind": "GPUScaler",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": 1,
            "maxReplicas": MAX_REPLICAS,
            "metrics": [{"name": metric, "target": target}],
            "window": window,
        },
    }
    if scale_down_window_s is not None:
        scaler["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": scale_down_window_s}}
    return scaler


def measure(points: Series, measure_from: float = 0.0) -> Provisioning:
    """The provisioning figures over the points from ``measure_from`` on (after a lead-in)."""
    kept = [(t - measure_from, load, n) for t, load, n in points if t >= measure_from]
    return provisioning(kept, NEEDED_PER_POD, min_replicas=1, max_replicas=MAX_REPLICAS)


def gpu_hours(points: Series, measure_from: float = 0.0) -> float:
    """Requested replicas (one GPU each) integrated over time from ``measure_from``, in hours."""
    kept = [(t, n) for t, _, n in points if t >= measure_from]
    return sum(n * (later - t) for (t, n), (later, _) in itertools.pairwise(kept)) / 3600.0


def paid(points: Series, account: WaitAccount, measure_from: float = 0.0) -> dict[str, Any]:
    """What users paid over the measured stretch: GPU-hours requested and their requests' waits."""
    return {
        "gpu_hours": round(gpu_hours(points, measure_from), 4),
        "waiting_request_s": round(account.waiting_request_s, 1),
        "wait_p90_s": round(account.wait_quantile_s(0.9), 2),
        "wait_p99_s": round(account.wait_quantile_s(0.99), 2),
        "requests_arrived": round(account.arrived, 1),
        "requests_abandoned": round(account.abandoned, 1),
        "requests_dropped": round(account.dropped, 1),
        "requests_unserved": round(account.unserved, 1),
    }
