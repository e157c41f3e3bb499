"""Hostile but well-typed traffic for every gpuscale subject.

A peer holding one role's NATS credentials (or none, on an open server)
sends messages that look like gpuscale's own: long names, wildcard and
path characters, extreme numbers, timestamps far in the future or the
past, huge counts, forged ids. :func:`hostile_messages` draws them from a
seeded generator, so a failing run replays exactly.

What a role may legitimately say is not here: a collector's sound batch for
its own node, an aggregator's sound metrics, a decider's in-policy decision.
Those are the role's to send (docs/SECURITY.md); everything here must be
refused, ignored or contained by the consumer, without touching the
healthy workloads named in ``spare``.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator
from typing import Any

import msgpack

from gpuscale import subjects
from gpuscale.wire import MAX_FUTURE_SKEW_S, WIRE_VERSION

Message = tuple[str, bytes]
MAX_SUBJECT = 3000

NAMES = [
    "x" * 5000,  # far beyond Kubernetes' 253
    "ghost/../victim",
    "victim?x=1",
    "victim#frag",
    "a.b.c",
    "*",
    ">",
    "with space",
    "ünïcode-名前",
    "",
    "-leading-dash",
    "UPPER",
    "victim",
]
NUMBERS: list[Any] = [
    10**9,
    2**62,
    2**64 - 1,
    -1,
    -(2**63),
    1e308,
    -1e308,
    float("nan"),
    float("inf"),
    float("-inf"),
    5e-324,
    0,
    "42",
    None,
    True,
]


def _timestamps(now: float) -> list[float]:
    return [now + MAX_FUTURE_SKEW_S + 1, now + 3600, now + 10**9, 0.0, -1.0, now - 10**6]


class Hostile:
    """Draws hostile messages. ``spare``: names of the healthy workloads and
    node, which this traffic may name only in messages the consumer must
    reject (broken fields), never in sound ones."""

    def __init__(self, seed: int, *, spare_workloads: set[str], spare_node: str) -> None:
        self.rng = random.Random(seed)
        self.spare_workloads = spare_workloads
        self.spare_node = spare_node

    # --- helpers ------------------------------------------------------------------

    def _name(self) -> str:
        name = self.rng.choice(NAMES)
        return "victim" if name in self.spare_workloads else name

    def _number(self) -> Any:
        return self.rng.choice(NUMBERS)

    def _pack(self, payload: dict[str, Any]) -> bytes:
        return msgpack.packb(payload)

    # --- one message per consumer ------------------------------------------------------

    def samples(self) -> Message:
        now = time.time()
        node = self.rng.choice([self._name(), f"node-{self.rng.randrange(10_000)}"])
        gpus, owners = self.rng.choice([(1, 1), (600, 1), (1, 300)])  # beyond the limits, within 1 MB
        owner = {
            "namespace": self.rng.choice(["default", "x" * 100, "*"]),
            "pod": self._name(),
            "container": "main",
            "pod_uid": "uid",
            "workload": {"kind": self.rng.choice(["Deployment", "*", "x" * 100]), "name": self._name()},
            "sm_util": self._number(),
            "fb_used_mib": self._number(),
        }
        gpu = {
            "uuid": "GPU-x",
            "index": self._number(),
            "model": "H100",
            "util": self._number(),
            "mem_util": 1.0,
            "fb_used_mib": self._number(),
            "fb_free_mib": 1.0,
            "temp_c": self._number(),
            "power_w": self._number(),
            "health": "ok",
            "owners": [owner] * owners,
        }
        payload = {
            "v": WIRE_VERSION,
            "node": node,
            "ts": self.rng.choice([*_timestamps(now), now]),
            "seq": self._number(),
            "interval_s": self.rng.choice([1.0, 0.0, 1e9, float("nan")]),
            "gpus": [gpu] * gpus,
        }
        if node == self.spare_node:
            payload["ts"] = now + 3600  # on the healthy node's subject only ever broken
        subject_node = self.rng.choice([node, self.spare_node, f"other-{self.rng.randrange(1000)}"])
        if subject_node == self.spare_node and payload["node"] != self.spare_node:
            payload["node"] = self.spare_node
            payload["ts"] = now + 3600
        subject = _safe_subject(lambda: subjects.samples(subject_node or "empty"), "samples")
        return subject, self._pack(payload)

    def metrics(self) -> Message:
        now = time.time()
        name = self.rng.choice([self._name(), *self.spare_workloads])
        pods = [{"pod": self._name(), "values": {"gpu_util": self._number()}, "last_seen": now}]
        payload = {
            "v": WIRE_VERSION,
            "namespace": "default",
            "kind": "Deployment",
            "name": name,
            "ts": self.rng.choice(_timestamps(now)),
            "window_s": self.rng.choice([30.0, 0.0, float("inf")]),
            "pods": pods * self.rng.choice([1, 1000]),
            "averages": {"gpu_util": self._number()},
            "pods_fresh": self._number(),
            "pods_stale": self._number(),
        }
        if name in self.spare_workloads:
            payload["ts"] = now + 3600  # broken: a sound one is the aggregator's to send
        key = subjects.WorkloadKey("default", "Deployment", name or "empty")
        return _safe_subject(lambda: subjects.metrics(key), "metrics"), self._pack(payload)

    def decision(self) -> Message:
        now = time.time()
        name = self._name()
        payload = {
            "v": WIRE_VERSION,
            "id": self.rng.choice(["", "x" * 5000, f"forged-{self.rng.randrange(10**9)}"]) or "forged",
            "ts": self.rng.choice([now, now - 10, now + 3600]),
            "namespace": self.rng.choice(["default", "kube-system", "x" * 100]),
            "kind": self.rng.choice(["Deployment", "StatefulSet", "Node", "x" * 100]),
            "name": name,
            "api_version": self.rng.choice(["apps/v1", "v1", "evil.io/v1"]),
            "from_replicas": 1,
            "to_replicas": self.rng.choice([10**9, 2**31, 0, -1, 100]),
            "reason": "hostile",
            "inputs": {},
        }
        key = subjects.WorkloadKey("default", "Deployment", name or "empty")
        return _safe_subject(lambda: subjects.decisions(key), "decisions"), self._pack(payload)

    def action(self) -> Message:
        now = time.time()
        name = self.rng.choice([self._name(), *self.spare_workloads])
        payload = {
            "v": WIRE_VERSION,
            "decision_id": f"forged-{self.rng.randrange(10**9)}",  # never a real pending id
            "ts": self.rng.choice([now, now + 3600]),
            "outcome": self.rng.choice(["failed", "applied", "maybe"]),
            "replicas_before": self._number(),
            "replicas_after": self._number(),
            "error": "x" * self.rng.choice([10, 100_000]),
            "namespace": "default",
            "kind": "Deployment",
            "name": name,
        }
        key = subjects.WorkloadKey("default", "Deployment", name or "empty")
        return _safe_subject(lambda: subjects.actions(key), "actions"), self._pack(payload)

    def garbage(self) -> Message:
        family = self.rng.choice(["samples", "metrics", "decisions", "actions"])
        subject = f"gpuscale.v1.{family}." + ".".join(
            self.rng.choice(["a", "~ZZ", "x" * 300, "default"]) for _ in range(self.rng.randrange(1, 6))
        )
        body = self.rng.choice(
            [b"", b"\xc1", msgpack.packb([1, 2, 3]), msgpack.packb({"v": 2}), b"\x00" * 5000]
        )
        return subject, body


def _safe_subject(build: Callable[[], str], family: str) -> str:
    """The subject a hostile peer would use; one our own builder refuses is
    sent on a plausible one instead (the payload still names the bad name)."""
    try:
        subject = build()
    except Exception:  # noqa: BLE001 - any refusal: fall back to a plausible subject
        subject = ""
    # nats-server cuts off a client whose protocol line passes 4 KB: that tests
    # the server, not gpuscale, so such subjects are not sent.
    if not subject or len(subject) > MAX_SUBJECT:
        tail = "node-x" if family == "samples" else "default.Deployment.victim"
        subject = f"gpuscale.v1.{family}.{tail}"
    return subject


def hostile_messages(source: Hostile, count: int) -> Iterator[Message]:
    makers = [source.samples, source.metrics, source.decision, source.action, source.garbage]
    for _ in range(count):
        yield source.rng.choice(makers)()
