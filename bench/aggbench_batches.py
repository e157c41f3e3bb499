"""The aggregator bench's node batches: encoded once per node, then stamped with a fresh ts and seq."""

from __future__ import annotations

import random
import struct
from typing import Any

import msgpack

from gpuscale import codec
from gpuscale.wire import WIRE_VERSION

GPUS_PER_NODE = 8
PODS_PER_WORKLOAD = 4
SEQ_BASE = 2**31  # packs as a fixed-width uint32, so the template can be patched in place
TS_SENTINEL = 1234.5678


def node_name(n: int) -> str:
    return f"gpu-node-{n:05d}"


def batch_template(n: int, nodes: int) -> tuple[bytes, int, int]:
    """A node's encoded batch and the byte offsets of its ts and seq."""
    workloads = max(1, nodes * GPUS_PER_NODE // PODS_PER_WORKLOAD)
    rng = random.Random(n)
    gpus = []
    for i in range(GPUS_PER_NODE):
        pod_index = n * GPUS_PER_NODE + i
        w = pod_index % workloads
        util = rng.uniform(10, 95)
        gpus.append(
            {
                "uuid": f"GPU-{n:05d}-{i}-8f1c2b7e-5a4d-4c3e-9b1a",
                "index": i,
                "model": "NVIDIA H100 80GB HBM3",
                "util": util,
                "mem_util": util / 2,
                "fb_used_mib": rng.uniform(1000, 70000),
                "fb_free_mib": 81559.0 - 70000,
                "temp_c": rng.uniform(30, 80),
                "power_w": rng.uniform(100, 700),
                "sm_active": util * 0.8,
                "mig": None,
                "health": "ok",
                "owners": [
                    {
                        "namespace": "inference",
                        "pod": f"model-{w:05d}-{pod_index:06d}",
                        "container": "server",
                        "pod_uid": f"uid-{pod_index:06d}-2a6f-4b1e-8c3d",
                        "workload": {"kind": "Deployment", "name": f"model-{w:05d}"},
                        "sm_util": None,
                        "fb_used_mib": None,
                    }
                ],
            }
        )
    raw = codec.encode_raw(
        {
            "v": WIRE_VERSION,
            "node": node_name(n),
            "ts": TS_SENTINEL,
            "seq": SEQ_BASE,
            "interval_s": 1.0,
            "gpus": gpus,
        }
    )
    ts_at = raw.find(struct.pack(">d", TS_SENTINEL))
    seq_at = raw.find(struct.pack(">I", SEQ_BASE))
    assert ts_at > 0
    assert seq_at > 0
    return raw, ts_at, seq_at


def stamp(template: tuple[bytes, int, int], ts: float, seq: int) -> bytes:
    raw, ts_at, seq_at = template
    buf = bytearray(raw)
    struct.pack_into(">d", buf, ts_at, ts)
    struct.pack_into(">I", buf, seq_at, SEQ_BASE + seq)
    return bytes(buf)


def bare_decode(data: bytes) -> Any:
    """The baseline's whole work per batch: ``msgpack.unpackb`` to plain dicts
    (what the aggregator's codec did before gpuscale.wire became typed msgspec)."""
    return msgpack.unpackb(data, raw=False, strict_map_key=False)
