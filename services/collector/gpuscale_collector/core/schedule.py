"""Tick timing: aligned to the interval, shifted by a per-node phase.

Else a thousand collectors of one roll-out would publish in the same millisecond."""

from __future__ import annotations

import hashlib
import math


def node_phase(node: str, interval_s: float) -> float:
    """A stable pseudo-random offset in [0, interval) derived from the node name."""
    digest = hashlib.blake2b(node.encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") / 2**64) * interval_s


def next_tick(now: float, interval_s: float, phase: float) -> float:
    """The first tick strictly after ``now`` on the grid ``k * interval + phase``."""
    k = math.floor((now - phase) / interval_s) + 1
    return k * interval_s + phase
