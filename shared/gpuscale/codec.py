"""The one module that knows msgpack: bytes <-> typed wire messages."""

from __future__ import annotations

from typing import Any, TypeVar

import msgpack

from gpuscale.wire import Action, Decision, Message, SampleBatch, WireError, WorkloadMetrics

__all__ = ["decode", "decode_raw", "encode", "encode_raw"]

M = TypeVar("M", SampleBatch, WorkloadMetrics, Decision, Action)


def encode(message: Message) -> bytes:
    return encode_raw(message.to_wire())


def encode_raw(payload: Any) -> bytes:
    """Pack any msgpack-able value (tests use this to craft bad payloads)."""
    data: bytes = msgpack.packb(payload, use_bin_type=True)
    return data


def decode_raw(data: bytes) -> Any:
    """Unpack bytes, or raise WireError('undecodable'). Never anything else."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as e:  # noqa: BLE001 - msgpack raises a zoo of types (ExtraData, ValueError, ...)
        raise WireError("undecodable", f"not msgpack: {type(e).__name__}") from None


def decode(data: bytes, message_type: type[M], now: float) -> M:
    """Bytes to a validated message of ``message_type``, or WireError."""
    obj = decode_raw(data)
    try:
        return message_type.from_wire(obj, now)
    except WireError:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError, RecursionError) as e:
        # Defence in depth: a validator gap must reject, never crash a consumer.
        raise WireError("invalid", f"{type(e).__name__}: {e}") from None
