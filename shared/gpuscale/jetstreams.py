"""JetStream set-up: declare (services), apply (``gpuscale setup``) and ensure (tests) streams and buckets."""

from __future__ import annotations

from collections.abc import Sequence

from nats.js import JetStreamContext
from nats.js.api import (
    ConsumerConfig,
    DiscardPolicy,
    KeyValueConfig,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import BucketNotFoundError, NotFoundError
from nats.js.kv import KeyValue

from gpuscale.logging import get_logger
from gpuscale.subjects import KvSpec, StreamSpec

__all__ = [
    "NotSetUp",
    "apply_kv",
    "apply_stream",
    "declare_kv",
    "declare_stream",
    "ensure_consumer",
    "ensure_kv",
    "ensure_stream",
    "kv_config",
    "kv_differences",
    "stream_config",
    "stream_differences",
]


async def ensure_stream(
    js: JetStreamContext,
    name: str,
    subjects: Sequence[str],
    *,
    max_age_s: float | None = None,
    storage: str = "file",
    duplicate_window_s: float = 120.0,
) -> None:
    """Create the stream, or bring an existing one's config to ours (tests,
    benchmarks: streams that are not part of the contract)."""
    config = StreamConfig(
        name=name,
        subjects=list(subjects),
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.MEMORY if storage == "memory" else StorageType.FILE,
        max_age=max_age_s,
        max_bytes=-1,
        discard=DiscardPolicy.OLD,
        duplicate_window=duplicate_window_s,
    )
    try:
        await js.stream_info(name)
    except NotFoundError:
        await js.add_stream(config)
        return
    await js.update_stream(config)


class NotSetUp(RuntimeError):
    """A stream or bucket is missing and this user could not create it."""


def stream_config(spec: StreamSpec) -> StreamConfig:
    """Purely computational: the JetStream config of a declared stream."""
    return StreamConfig(
        name=spec.name,
        subjects=list(spec.subjects),
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.MEMORY if spec.storage == "memory" else StorageType.FILE,
        max_age=spec.max_age_s,
        max_bytes=spec.max_bytes,
        discard=DiscardPolicy.OLD,
        duplicate_window=spec.duplicate_window_s,
        num_replicas=spec.replicas,
    )


def _seconds(value: float | None) -> float:
    return 0.0 if not value else round(float(value), 3)


def stream_differences(spec: StreamSpec, config: StreamConfig, *, sizing: bool = True) -> list[str]:
    """Purely computational: how an existing stream differs from its
    declaration, one phrase per field. ``sizing``: also compare what a
    deployment sizes (bytes, replicas), which only ``gpuscale setup`` owns."""
    found: list[str] = []

    def differ(field: str, have: object, want: object) -> None:
        if have != want:
            found.append(f"{field} is {have!r}, this version declares {want!r}")

    differ("subjects", sorted(config.subjects or []), sorted(spec.subjects))
    differ("max_age_s", _seconds(config.max_age), _seconds(spec.max_age_s))
    storage = str(getattr(config.storage, "value", config.storage) or "file")  # nats-py leaves it a str
    differ("storage", storage, spec.storage)
    differ("duplicate_window_s", _seconds(config.duplicate_window), _seconds(spec.duplicate_window_s))
    if sizing:
        differ("max_bytes", config.max_bytes if config.max_bytes is not None else -1, spec.max_bytes)
        differ("replicas", config.num_replicas or 1, spec.replicas)
    return found


async def declare_stream(js: JetStreamContext, spec: StreamSpec) -> None:
    """Use a stream declared in :mod:`gpuscale.subjects`, creating it where missing and allowed.

    An existing one is ``gpuscale setup``'s: left as it is, with one warning if it differs.
    Raises :class:`NotSetUp` when it is missing and cannot be created."""
    try:
        info = await js.stream_info(spec.name)
    except NotFoundError:
        try:
            await js.add_stream(stream_config(spec))
        except Exception as e:
            raise NotSetUp(
                f"stream {spec.name} is missing and could not be created ({type(e).__name__}: {e}); "
                "run gpuscale setup (in Kubernetes: the gpuscale-setup Job)"
            ) from e
        get_logger(component="nats").info("stream_created", stream=spec.name)
        return
    differences = stream_differences(spec, info.config, sizing=False)
    if differences:
        get_logger(component="nats").warning(
            "stream_config_differs",
            stream=spec.name,
            differences=differences,
            detail="used as it is; run gpuscale setup to bring it to this version's declaration",
        )


async def apply_stream(js: JetStreamContext, spec: StreamSpec) -> str:
    """Create the stream or bring it to its declaration, sizing included
    (``gpuscale setup``): ``created``, ``updated`` or ``unchanged``."""
    try:
        info = await js.stream_info(spec.name)
    except NotFoundError:
        await js.add_stream(stream_config(spec))
        return "created"
    if not stream_differences(spec, info.config):
        return "unchanged"
    await js.update_stream(stream_config(spec))
    return "updated"


def kv_config(spec: KvSpec) -> KeyValueConfig:
    """Purely computational: the JetStream config of a declared bucket."""
    return KeyValueConfig(
        bucket=spec.bucket,
        history=spec.history,
        ttl=spec.ttl_s,
        storage=StorageType.MEMORY if spec.storage == "memory" else StorageType.FILE,
        max_bytes=spec.max_bytes,
        replicas=spec.replicas,
    )


def kv_differences(spec: KvSpec, config: StreamConfig) -> list[str]:
    """Purely computational: how a bucket's stream differs from its declaration."""
    found: list[str] = []

    def differ(field: str, have: object, want: object) -> None:
        if have != want:
            found.append(f"{field} is {have!r}, this version declares {want!r}")

    differ("history", config.max_msgs_per_subject, spec.history)
    differ("ttl_s", _seconds(config.max_age), _seconds(spec.ttl_s))
    differ("max_bytes", config.max_bytes if config.max_bytes is not None else -1, spec.max_bytes)
    differ("replicas", config.num_replicas or 1, spec.replicas)
    return found


async def declare_kv(js: JetStreamContext, spec: KvSpec) -> KeyValue:
    """Open a bucket declared in :mod:`gpuscale.subjects`, creating it where it
    is missing and this user may; :class:`NotSetUp` otherwise."""
    try:
        return await js.key_value(spec.bucket)
    except BucketNotFoundError:
        pass
    try:
        kv = await js.create_key_value(kv_config(spec))
    except Exception as e:
        raise NotSetUp(
            f"bucket {spec.bucket} is missing and could not be created ({type(e).__name__}: {e}); "
            "run gpuscale setup (in Kubernetes: the gpuscale-setup Job)"
        ) from e
    get_logger(component="nats").info("bucket_created", bucket=spec.bucket)
    return kv


async def apply_kv(js: JetStreamContext, spec: KvSpec) -> str:
    """Create the bucket or bring it to its declaration (``gpuscale setup``)."""
    try:
        info = await js.stream_info(spec.stream)
    except NotFoundError:
        await js.create_key_value(kv_config(spec))
        return "created"
    if not kv_differences(spec, info.config):
        return "unchanged"
    config = info.config
    config.max_msgs_per_subject = spec.history
    config.max_age = spec.ttl_s
    config.max_bytes = spec.max_bytes
    config.num_replicas = spec.replicas
    await js.update_stream(config)
    return "updated"


async def ensure_kv(
    js: JetStreamContext, bucket: str, *, history: int = 1, ttl_s: float | None = None, storage: str = "file"
) -> KeyValue:
    """Open or create a bucket that is not part of the contract (tests)."""
    try:
        return await js.key_value(bucket)
    except BucketNotFoundError:
        pass
    return await js.create_key_value(
        KeyValueConfig(
            bucket=bucket,
            history=history,
            ttl=ttl_s,
            storage=StorageType.MEMORY if storage == "memory" else StorageType.FILE,
        )
    )


async def ensure_consumer(js: JetStreamContext, stream: str, config: ConsumerConfig) -> None:
    try:
        await js.add_consumer(stream, config)
    except Exception as e:
        if "consumer name already in use" in str(e) or "already exists" in str(e):
            return
        raise
