"""Small builders of valid v1 messages; tests change one thing at a time."""

from __future__ import annotations

from typing import Any

from gpuscale.wire import (
    Action,
    Decision,
    GpuOwner,
    GpuSample,
    MetricValues,
    PodMetrics,
    SampleBatch,
    WindowRequest,
    WorkloadMetrics,
    WorkloadRef,
)

NOW = 1_800_000_000.0


def owner(pod: str = "bert-7d9f-abcde", **kw: Any) -> GpuOwner:
    base: dict[str, Any] = {
        "namespace": "default",
        "pod": pod,
        "container": "server",
        "pod_uid": "0c6f8f5e-2f0b-4b8e-9a55-3b7d0c1e2f3a",
        "workload": WorkloadRef("Deployment", "bert"),
    }
    base.update(kw)
    return GpuOwner(**base)


def gpu(index: int = 0, **kw: Any) -> GpuSample:
    base: dict[str, Any] = {
        "uuid": f"GPU-00000000-0000-0000-0000-00000000000{index}",
        "index": index,
        "model": "NVIDIA H100 80GB HBM3",
        "util": 83.0,
        "mem_util": 40.0,
        "fb_used_mib": 50_000.0,
        "fb_free_mib": 31_000.0,
        "temp_c": 61.0,
        "power_w": 512.5,
        "sm_active": 71.5,
        "health": "ok",
        "owners": (owner(),),
    }
    base.update(kw)
    return GpuSample(**base)


def batch(**kw: Any) -> SampleBatch:
    base: dict[str, Any] = {
        "node": "gpu-node-1",
        "ts": NOW,
        "seq": 7,
        "interval_s": 1.0,
        "gpus": (gpu(0), gpu(1, owners=())),
    }
    base.update(kw)
    return SampleBatch(**base)


def metrics(**kw: Any) -> WorkloadMetrics:
    base: dict[str, Any] = {
        "namespace": "default",
        "kind": "Deployment",
        "name": "bert",
        "ts": NOW,
        "window_s": 30.0,
        "pods": (PodMetrics("bert-7d9f-abcde", MetricValues(gpu_util=83.0, power_w=500.0), NOW - 1),),
        "averages": MetricValues(gpu_util=83.0, power_w=500.0),
        "pods_fresh": 1,
        "pods_stale": 0,
    }
    base.update(kw)
    return WorkloadMetrics(**base)


def decision(**kw: Any) -> Decision:
    base: dict[str, Any] = {
        "id": "2f1c3a9e-5a53-4a0b-9d1e-0e7f9f6b1c2d",
        "ts": NOW,
        "namespace": "default",
        "kind": "Deployment",
        "name": "bert",
        "from_replicas": 2,
        "to_replicas": 3,
        "reason": "gpu_util 83.0 over target 70 (ratio 1.19) on 2 of 2 pods: ceil(2 × 1.19) = 3",
        "inputs": {"averages": {"gpu_util": 83.0}, "targets": {"gpu_util": 70.0}},
    }
    base.update(kw)
    return Decision(**base)


def action(**kw: Any) -> Action:
    base: dict[str, Any] = {
        "decision_id": "2f1c3a9e-5a53-4a0b-9d1e-0e7f9f6b1c2d",
        "ts": NOW,
        "outcome": "applied",
        "replicas_before": 2,
        "replicas_after": 3,
        "error": None,
        "namespace": "default",
        "kind": "Deployment",
        "name": "bert",
    }
    base.update(kw)
    return Action(**base)


def window_request(**kw: Any) -> WindowRequest:
    base: dict[str, Any] = {
        "ts": NOW,
        "namespace": "default",
        "kind": "Deployment",
        "name": "bert",
        "window_s": 10.0,
        "recent_s": 3.0,
        "ttl_s": 60.0,
    }
    base.update(kw)
    return WindowRequest(**base)
