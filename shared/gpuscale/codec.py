"""Bytes <-> typed wire messages: the one module that knows MessagePack.

Rejections are :class:`~gpuscale.wire.WireError` with a bounded code; unknown names are
reported to ``on_unknown``, looked for only now and then (a second decode costs)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Generic, TypeVar

import msgspec
import msgspec.msgpack
from msgspec.structs import replace

from gpuscale.wire import (
    Action,
    Decision,
    GpuSample,
    Message,
    OtherVersion,
    SampleBatch,
    WindowRequest,
    WireError,
    WorkloadMetrics,
    classify,
    rejection,
    unknown_fields,
    unusable_gpus,
)

__all__ = ["Reader", "Rejected", "UnknownSink", "decode", "decode_raw", "encode", "encode_raw"]

M = TypeVar("M", SampleBatch, WorkloadMetrics, Decision, Action, WindowRequest)
# (index in the batch's gpus, why): an entry left out of a sound batch.
Rejected = tuple[int, WireError]
# Called once per (kind, name) a reader meets and does not know.
UnknownSink = Callable[[str, str], None]

# Looked at for unknown names: this many first messages, then one per interval.
LOOK_FIRST: Final = 32
LOOK_EVERY_S: Final = 1.0
# Distinct unknown names reported per reader; past it they are reported as one
# "_other" (a sender cannot grow a metrics label without bound).
MAX_UNKNOWN_NAMES: Final = 64
MAX_NAME_CHARS: Final = 100
OTHER_NAMES: Final = "_other"

_NONE: Final[list[Rejected]] = []
# Malformed bytes, a string that is not UTF-8, nesting beyond the decoder's limit.
_UNDECODABLE: Final = (msgspec.DecodeError, UnicodeDecodeError, RecursionError)
_encoder: Final = msgspec.msgpack.Encoder()
_untyped: Final = msgspec.msgpack.Decoder()


def encode(message: Message) -> bytes:
    return _encoder.encode(message)


def encode_raw(payload: Any) -> bytes:
    """Pack any MessagePack-able value (tests craft bad payloads with it)."""
    return _encoder.encode(payload)


def decode_raw(data: bytes) -> Any:
    """Unpack bytes without a schema, or raise WireError('undecodable')."""
    try:
        return _untyped.decode(data)
    except _UNDECODABLE as e:
        raise WireError("undecodable", f"not msgpack: {type(e).__name__}: {e}") from None


class Reader(Generic[M]):
    """Decodes one message kind. Keeps a little state (which unknown names it
    reported, when it last looked for them): one reader per consumer and kind."""

    def __init__(
        self,
        message_type: type[M],
        *,
        on_unknown: UnknownSink | None = None,
        look_first: int = LOOK_FIRST,
        look_every_s: float = LOOK_EVERY_S,
    ) -> None:
        self.type: type[M] = message_type
        self.kind: str = message_type.KIND
        self._decoder = msgspec.msgpack.Decoder(message_type | OtherVersion)
        self._samples = message_type is SampleBatch
        self.on_unknown = on_unknown
        self._look_left = look_first if on_unknown is not None else 0
        self._look_every_s = look_every_s
        self._next_look = float("inf") if on_unknown is None else float("-inf")
        self.unknown: set[str] = set()

    def decode(self, data: bytes, now: float) -> M:
        """A validated message, or WireError. A batch's bad GPU entries are left out."""
        return self.read(data, now)[0]

    def read(self, data: bytes, now: float) -> tuple[M, list[Rejected]]:
        """A validated message and the GPU entries left out of it (samples only)."""
        rejected: list[Rejected]
        message: Any
        try:
            message = self._decoder.decode(data)
        except msgspec.ValidationError as e:
            message, rejected = self._salvage(data, str(e))
        except _UNDECODABLE as e:
            raise WireError("undecodable", f"not msgpack: {type(e).__name__}: {e}") from None
        else:
            if message.__class__ is OtherVersion:
                raise WireError("wrong_version", "v=0, this consumer speaks v1", "$.v")
            rejected = _NONE
        message.check(now)
        if self._samples:
            batch: SampleBatch = message
            unusable: list[Rejected] = unusable_gpus(batch)
            if unusable:
                bad = {i for i, _ in unusable}
                message = replace(batch, gpus=tuple(g for i, g in enumerate(batch.gpus) if i not in bad))
                rejected = sorted([*rejected, *unusable], key=_index)
        if self._look_left or now >= self._next_look:
            self._look(data, now)
        return message, rejected

    # --- the rejection path -------------------------------------------------------

    def _salvage(self, data: bytes, error: str) -> tuple[Any, list[Rejected]]:
        """A payload msgspec refused: reject it with our code, unless only some
        GPU entries of a batch are bad (those are left out, the batch stands)."""
        raw = decode_raw(data)
        gpus = raw.get("gpus") if isinstance(raw, dict) else None
        if not (self._samples and isinstance(gpus, list) and " - at `$.gpus[" in error):
            raise rejection(error, lambda: raw)
        kept: list[GpuSample] = []
        rejected: list[Rejected] = []
        for i, entry in enumerate(gpus):
            try:
                kept.append(msgspec.convert(entry, GpuSample))
            except msgspec.ValidationError as e:
                rejected.append((i, classify(str(e), entry, f"$.gpus[{i}]")))
        try:
            header = msgspec.convert({**raw, "gpus": []}, SampleBatch | OtherVersion)
        except msgspec.ValidationError as e:
            raise rejection(str(e), lambda: raw) from None
        if header.__class__ is OtherVersion:
            raise WireError("wrong_version", "v=0, this consumer speaks v1", "$.v")
        return replace(header, gpus=tuple(kept)), rejected

    # --- unknown fields and metric names -------------------------------------------

    def _look(self, data: bytes, now: float) -> None:
        if self._look_left:
            self._look_left -= 1
        self._next_look = now + self._look_every_s
        sink = self.on_unknown
        if sink is None:
            return
        for name in sorted(unknown_fields(decode_raw(data), self.type)):
            name = name[:MAX_NAME_CHARS]
            if name in self.unknown:
                continue
            if len(self.unknown) >= MAX_UNKNOWN_NAMES:
                if OTHER_NAMES in self.unknown:
                    continue
                name = OTHER_NAMES
            self.unknown.add(name)
            sink(self.kind, name)


def _index(rejected: Rejected) -> int:
    return rejected[0]


_readers: dict[type[Any], Reader[Any]] = {}


def decode(data: bytes, message_type: type[M], now: float) -> M:
    """Bytes to a validated message of ``message_type``, or WireError. Unknown
    fields are skipped silently and bad GPU entries left out: a consumer that
    reports them holds its own :class:`Reader`."""
    reader = _readers.get(message_type)
    if reader is None:
        reader = _readers[message_type] = Reader(message_type)
    result: M = reader.decode(data, now)
    return result
