"""Small builders for node batches as the collector sends them (wire maps)."""

from __future__ import annotations

from typing import Any

from gpuscale.wire import WIRE_VERSION

NOW = 1_700_000_000.0


def owner(
    pod: str,
    workload: str = "bert",
    *,
    namespace: str = "default",
    kind: str = "Deployment",
    sm_util: float | None = None,
    fb_used_mib: float | None = None,
    ready: bool | None = None,
    engine: dict[str, Any] | None = None,
) -> dict[str, Any]:
    extra: dict[str, Any] = {} if ready is None else {"ready": ready}  # older producers omit the field
    if engine is not None:
        extra["engine"] = engine
    return {
        **extra,
        "namespace": namespace,
        "pod": pod,
        "container": "main",
        "pod_uid": f"uid-{pod}",
        "workload": {"kind": kind, "name": workload},
        "sm_util": sm_util,
        "fb_used_mib": fb_used_mib,
    }


def gpu(
    index: int,
    *owners: dict[str, Any],
    util: float | None = 50.0,
    sm_active: float | None = None,
    fb_used_mib: float | None = 4000.0,
    fb_free_mib: float | None = 12000.0,
    power_w: float | None = 200.0,
    health: str = "ok",
    node: str = "node-a",
) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{node}-{index}",
        "index": index,
        "model": "NVIDIA H100 80GB HBM3",
        "util": util,
        "mem_util": 10.0 if util is not None else None,
        "fb_used_mib": fb_used_mib,
        "fb_free_mib": fb_free_mib,
        "temp_c": 50.0,
        "power_w": power_w,
        "sm_active": sm_active,
        "mig": None,
        "health": health,
        "owners": list(owners),
    }


def batch(
    *gpus: dict[str, Any], node: str = "node-a", ts: float = NOW, seq: int = 0, interval_s: float = 1.0
) -> dict[str, Any]:
    return {
        "v": WIRE_VERSION,
        "node": node,
        "ts": ts,
        "seq": seq,
        "interval_s": interval_s,
        "gpus": list(gpus),
    }


def one_pod_batch(
    pod: str, util: float, *, node: str = "node-a", ts: float = NOW, seq: int = 0, workload: str = "bert"
) -> dict[str, Any]:
    return batch(gpu(0, owner(pod, workload), util=util, node=node), node=node, ts=ts, seq=seq)


def engine(
    waiting: float | None = None,
    running: float | None = None,
    kv: float | None = None,
    name: str = "vllm",
    *,
    arrival: float | None = None,
    completion: float | None = None,
) -> dict[str, Any]:
    """An owner's ``engine`` field: its pod's inference-server gauges and flows."""
    signals: dict[str, Any] = {
        "name": name,
        "requests_waiting": waiting,
        "requests_running": running,
        "kv_cache_usage": kv,
    }
    if arrival is not None or completion is not None:
        signals |= {"request_arrival_rate": arrival, "request_completion_rate": completion}
    return signals
