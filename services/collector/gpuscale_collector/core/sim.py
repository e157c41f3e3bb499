"""Simulated GPUs: load sources and the readings they give (the demo, tests).

``constant:PCT`` holds one load; ``steps:T=PCT,T=PCT,...`` changes it at
T seconds after start (the last step holds); ``kube-sim`` reads the
simulated cluster (parsed by :func:`readings_from_kube_sim`).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from gpuscale.wire import GpuOwner, WorkloadRef
from gpuscale_collector.core.readings import DeviceReading

SIM_MODEL: Final = "NVIDIA H100 80GB HBM3"
SIM_FB_TOTAL_MIB: Final = 81559.0
KUBE_SIM: Final = "kube-sim"


@dataclass(frozen=True, slots=True)
class StepLoad:
    """Load (%) as a function of seconds since start: ``steps[i] = (from_s, pct)``."""

    steps: tuple[tuple[float, float], ...]

    def at(self, elapsed_s: float) -> float:
        load = self.steps[0][1]
        for start, pct in self.steps:
            if elapsed_s >= start:
                load = pct
        return load


def _pct(text: str) -> float:
    value = float(text)
    if not 0.0 <= value <= 100.0:
        raise ValueError(f"load {value} outside 0..100")
    return value


def parse_load_source(text: str) -> StepLoad | str:
    """``constant:50``, ``steps:0=30,60=90`` → a StepLoad; ``kube-sim`` → the name.
    Raises ValueError with a short reason."""
    text = text.strip()
    if text == KUBE_SIM:
        return KUBE_SIM
    kind, _, rest = text.partition(":")
    try:
        if kind == "constant":
            return StepLoad(((0.0, _pct(rest)),))
        if kind == "steps":
            steps: list[tuple[float, float]] = []
            for part in rest.split(","):
                at, sep, pct = part.partition("=")
                if not sep:
                    raise ValueError(f"step {part!r} is not T=PCT")
                start = float(at)
                if start < 0:
                    raise ValueError("a step time must not be negative")
                steps.append((start, _pct(pct)))
            if not steps:
                raise ValueError("no steps")
            return StepLoad(tuple(sorted(steps)))
    except ValueError as e:
        raise ValueError(f"bad load source {text!r}: {e}") from None
    raise ValueError("expected constant:PCT, steps:T=PCT,T=PCT... or kube-sim")


def sim_uuid(node: str, index: int) -> str:
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_DNS, f"{node}.gpu{index}.gpuscale.sim"))


def sim_readings(node: str, gpus: int, load_pct: float) -> list[DeviceReading]:
    """N identical GPUs at one load; memory, temperature and power follow it."""
    frac = load_pct / 100.0
    fb_used = round(SIM_FB_TOTAL_MIB * (0.05 + 0.6 * frac), 1)
    return [
        DeviceReading(
            uuid=sim_uuid(node, i),
            index=i,
            model=SIM_MODEL,
            util=load_pct,
            mem_util=round(load_pct * 0.6, 2),
            fb_used_mib=fb_used,
            fb_free_mib=round(SIM_FB_TOTAL_MIB - fb_used, 1),
            temp_c=round(30.0 + 45.0 * frac, 1),
            power_w=round(70.0 + 630.0 * frac, 1),
            sm_active=round(load_pct * 0.9, 2),
            owners=(),
        )
        for i in range(gpus)
    ]


class FeedError(ValueError):
    pass


def _num(m: dict[str, Any], key: str, default: float | None = None) -> float | None:
    v = m.get(key, default)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FeedError(f"{key} must be a number")
    return float(v)


def _owner(o: Any) -> GpuOwner:
    if not isinstance(o, dict):
        raise FeedError("owner must be an object")
    wl = o.get("workload") or {}
    if not isinstance(wl, dict):
        raise FeedError("owner.workload must be an object")
    pod = str(o.get("pod") or "")
    namespace = str(o.get("namespace") or "")
    if not pod or not namespace:
        raise FeedError("owner needs namespace and pod")
    return GpuOwner(
        namespace=namespace,
        pod=pod,
        container=str(o.get("container") or ""),
        pod_uid=str(o.get("pod_uid") or ""),
        workload=WorkloadRef(str(wl.get("kind") or "Pod"), str(wl.get("name") or pod)),
        sm_util=_num(o, "sm_util"),
        fb_used_mib=_num(o, "fb_used_mib"),
        ready=_ready(o),
    )


def _ready(o: dict[str, Any]) -> bool | None:
    ready = o.get("ready")
    if ready is not None and not isinstance(ready, bool):
        raise FeedError("owner.ready must be true, false or null")
    return ready


def readings_from_kube_sim(payload: Any) -> list[DeviceReading]:
    """kube-sim's ``GET /sim/v1/nodes/{node}/gpus`` JSON → readings with owners.
    Raises FeedError naming the first problem."""
    if not isinstance(payload, dict) or not isinstance(payload.get("gpus"), list):
        raise FeedError("expected an object with a gpus list")
    out: list[DeviceReading] = []
    gpus: Sequence[Any] = payload["gpus"]
    for g in gpus:
        if not isinstance(g, dict):
            raise FeedError("gpus[] must be objects")
        index = g.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            raise FeedError("gpus[].index must be a whole number >= 0")
        owners = g.get("owners") or []
        if not isinstance(owners, list):
            raise FeedError("gpus[].owners must be a list")
        out.append(
            DeviceReading(
                uuid=str(g.get("uuid") or f"GPU-sim-{index}"),
                index=index,
                model=str(g.get("model") or SIM_MODEL),
                util=_clamp(_num(g, "util", 0.0)),
                mem_util=_clamp(_num(g, "mem_util")),
                fb_used_mib=_num(g, "fb_used_mib"),
                fb_free_mib=_num(g, "fb_free_mib"),
                temp_c=_num(g, "temp_c"),
                power_w=_num(g, "power_w"),
                sm_active=_clamp(_num(g, "sm_active")),
                owners=tuple(_owner(o) for o in owners),
            )
        )
    return out


def _clamp(v: float | None) -> float | None:
    return None if v is None else min(max(v, 0.0), 100.0)
