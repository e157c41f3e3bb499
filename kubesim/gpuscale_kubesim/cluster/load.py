"""Load profiles and how a workload's load turns into GPU readings. Pure.

A workload's load L is total GPU demand in GPU-percent (L=90: one GPU's
worth at 90 %). It is shared among the GPUs of the workload's ready pods;
pods still loading their model show no utilization while their memory fills.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

H100_MODEL = "NVIDIA H100 80GB HBM3"
H100_FB_MIB = 81559.0
IDLE_POWER_W = 70.0
MAX_POWER_W = 700.0
MODEL_MEMORY_FRACTION = 0.6  # model weights, resident once loaded
ACTIVE_MEMORY_FRACTION = 0.25  # activations and KV cache, growing with load
NOISE_SD = 2.0

PROFILE_NAMES = ("step", "spike", "diurnal", "ramp", "bursty", "constant:N")


@dataclass(frozen=True)
class Profile:
    """Load over time: stepwise points, optionally periodic, or a sine."""

    name: str
    points: tuple[tuple[float, float], ...] = ()  # (t seconds, load), t ascending
    period_s: float | None = None  # repeat the points (spike) or the sine (diurnal)
    sine: tuple[float, float] | None = None  # (low, high) for diurnal
    linear: bool = False  # between points: a straight line (ramp), not a step

    def at(self, t: float) -> float:
        t = max(0.0, t)
        if self.sine is not None:
            low, high = self.sine
            period = self.period_s or 600.0
            return low + (high - low) * (1 - math.cos(2 * math.pi * t / period)) / 2
        if self.period_s:
            t = t % self.period_s
        value = self.points[0][1] if self.points else 0.0
        before: tuple[float, float] | None = None
        for start, load in self.points:
            if start <= t:
                value = load
                before = (start, load)
            else:
                if self.linear and before is not None and start > before[0]:
                    return before[1] + (load - before[1]) * (t - before[0]) / (start - before[0])
                break
        return value

    def level_start(self, t: float) -> float | None:
        """When the level in force at ``t`` began (profile seconds), so that a reader
        polling the load can place a step exactly; None where the load moves
        continuously (a sine, a line between points)."""
        if self.sine is not None or self.linear:
            return None
        t = max(0.0, t)
        base = 0.0
        if self.period_s:
            base = (t // self.period_s) * self.period_s
            t -= base
        start = 0.0
        for point, _ in self.points:
            if point > t:
                break
            start = point
        if base and start == 0.0 and len(self.points) > 1 and self.points[-1][1] == self.points[0][1]:
            start = self.points[-1][0] - (self.period_s or 0.0)  # the last level goes on into this period
        return base + start


def constant(load: float) -> Profile:
    return Profile(f"constant:{load:g}", ((0.0, float(load)),))


# The demo's story: quiet, then a step that needs 3 pods at a 70 % target (one
# saturated pod reads 100 %, so it takes two scale-ups), then quiet again.
STEP = Profile("step", ((0.0, 30.0), (15.0, 200.0), (100.0, 40.0)))
SPIKE = Profile("spike", ((0.0, 40.0), (30.0, 400.0), (45.0, 40.0)), period_s=120.0)
DIURNAL = Profile("diurnal", sine=(40.0, 260.0), period_s=600.0)
# A slow climb to 3.5 GPUs of work and back down (linear between the points).
RAMP = Profile(
    "ramp", ((0.0, 40.0), (20.0, 40.0), (140.0, 350.0), (200.0, 350.0), (260.0, 60.0)), linear=True
)
# Traffic of an LLM service: bursts of different heights and lengths on a low base.
BURSTY = Profile(
    "bursty",
    (
        (0.0, 60.0),
        (20.0, 260.0),
        (50.0, 90.0),
        (80.0, 320.0),
        (95.0, 70.0),
        (130.0, 200.0),
        (170.0, 60.0),
    ),
    period_s=220.0,
)


def from_points(name: str, points: Any) -> Profile:
    """A profile from a list of {t: seconds, load: value} (a FILE profile's content)."""
    if not isinstance(points, list) or not points:
        raise ValueError("a load profile file holds a non-empty list of {t, load}")
    parsed = []
    for item in points:
        if not isinstance(item, dict) or "t" not in item or "load" not in item:
            raise ValueError("each point needs t (seconds) and load (GPU-percent)")
        t, load = float(item["t"]), float(item["load"])
        if t < 0 or load < 0 or math.isnan(t) or math.isnan(load):
            raise ValueError("t and load must be non-negative numbers")
        parsed.append((t, load))
    parsed.sort()
    return Profile(name, tuple(parsed))


def parse_profile(text: str | float | int) -> Profile:
    """``step``, ``spike``, ``diurnal``, ``ramp``, ``bursty``, ``constant:N`` or a bare number. Files: :func:`from_points`."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if text < 0 or math.isnan(float(text)):
            raise ValueError("a load must be a non-negative number")
        return constant(float(text))
    word = str(text).strip().lower()
    if word == "step":
        return STEP
    if word == "spike":
        return SPIKE
    if word == "diurnal":
        return DIURNAL
    if word == "ramp":
        return RAMP
    if word == "bursty":
        return BURSTY
    if word.startswith("constant:"):
        word = word.split(":", 1)[1]
    try:
        value = float(word)
    except ValueError:
        raise ValueError(
            f"unknown load profile {text!r}: use step, spike, diurnal, ramp, bursty, constant:N or a file"
        ) from None
    if value < 0 or math.isnan(value):
        raise ValueError("a load must be a non-negative number")
    return constant(value)


def util_per_gpu(load: float, ready_gpus: int) -> float:
    """The share of the load each ready GPU carries, capped at 100 %."""
    if ready_gpus <= 0:
        return 0.0
    return min(100.0, max(0.0, load) / ready_gpus)


def clip(value: float, low: float = 0.0, high: float = 100.0) -> float:
    return max(low, min(high, value))


@dataclass(frozen=True)
class GpuReading:
    util: float
    mem_util: float
    fb_used_mib: float
    fb_free_mib: float
    temp_c: float
    power_w: float
    sm_active: float


def reading(util: float, loaded: float, noise: float, fb_total_mib: float = H100_FB_MIB) -> GpuReading:
    """One GPU's readings. ``util`` before noise; ``loaded`` 0..1: how much of the model is in memory."""
    busy = clip(util + noise) if util > 0 else 0.0
    loaded = clip(loaded, 0.0, 1.0)
    used = fb_total_mib * (MODEL_MEMORY_FRACTION * loaded + ACTIVE_MEMORY_FRACTION * busy / 100)
    used = clip(used, 0.0, fb_total_mib)
    return GpuReading(
        util=round(busy, 2),
        mem_util=round(clip(busy * 0.6), 2),
        fb_used_mib=round(used, 1),
        fb_free_mib=round(fb_total_mib - used, 1),
        temp_c=round(30.0 + 50.0 * busy / 100, 1),
        power_w=round(IDLE_POWER_W + (MAX_POWER_W - IDLE_POWER_W) * busy / 100, 1),
        sm_active=round(clip(busy * 0.8), 2),
    )
