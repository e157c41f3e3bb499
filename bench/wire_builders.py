"""Node batches as a collector writes them (wire maps), for the window benchmarks."""

from __future__ import annotations

from typing import Any

from gpuscale.wire import WIRE_VERSION


def owner_wire(pod: str, workload: str, **extra: Any) -> dict[str, Any]:
    return {
        "namespace": "default",
        "pod": pod,
        "container": "main",
        "pod_uid": f"uid-{pod}",
        "workload": {"kind": "Deployment", "name": workload},
        "sm_util": None,
        "fb_used_mib": None,
        **extra,
    }


def gpu_wire(
    node: str, index: int, util: float, owners: list[dict[str, Any]], **extra: Any
) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{node}-{index}",
        "index": index,
        "model": "NVIDIA H100 80GB HBM3",
        "util": util,
        "mem_util": 10.0,
        "fb_used_mib": 4000.0,
        "fb_free_mib": 12000.0,
        "temp_c": 50.0,
        "power_w": 200.0,
        "sm_active": None,
        "mig": None,
        "health": "ok",
        "owners": owners,
        **extra,
    }


def batch_wire(node: str, seq: int, ts: float, gpus: list[dict[str, Any]]) -> dict[str, Any]:
    return {"v": WIRE_VERSION, "node": node, "ts": ts, "seq": seq, "interval_s": 1.0, "gpus": gpus}
