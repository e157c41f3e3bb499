"""Every NATS subject, stream and KV bucket gpuscale uses, declared in one place.

Tokens are escaped (``~XX``) so that no name can change a subject's shape."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

PREFIX: Final = "gpuscale.v1"
SAMPLES_ALL: Final = f"{PREFIX}.samples.>"
METRICS_ALL: Final = f"{PREFIX}.metrics.>"
DECISIONS_ALL: Final = f"{PREFIX}.decisions.>"
ACTIONS_ALL: Final = f"{PREFIX}.actions.>"
# What a GPUScaler in shadow mode would decide (Decision-shaped; no actuator reads it).
ADVICE_ALL: Final = f"{PREFIX}.advice.>"
# What each GPUScaler needs of the aggregators for its target (its averaging window).
WINDOWS_ALL: Final = f"{PREFIX}.windows.>"

# The aggregator tier's scale-out (gpuscale_aggregator.core.scaleout explains
# it): a queue group splits node batches into per-workload sub-batches, the
# NATS server's subject mapping assigns each workload to one partition.
AGGREGATOR_SPLIT_QUEUE: Final = "gpuscale-aggregator-split"
AGGREGATOR_WSAMPLES_PREFIX: Final = f"{PREFIX}.aggregator.wsamples"
AGGREGATOR_PARTS_PREFIX: Final = f"{PREFIX}.aggregator.part"
AGGREGATOR_PARTS_ALL: Final = f"{AGGREGATOR_PARTS_PREFIX}.>"

# JetStream names (streams, consumers, KV buckets) also live here: the NATS
# permissions in deploy/base/nats/auth.conf name them too.
DECISIONS_STREAM: Final = "GPUSCALE_DECISIONS"
ADVICE_STREAM: Final = "GPUSCALE_ADVICE"
SAMPLES_STREAM: Final = "GPUSCALE_SAMPLES"
AGGREGATOR_PARTS_STREAM: Final = "GPUSCALE_AGGREGATOR_PARTS"
# Each workload's desired replica count, written by the decider, converged to by the actuator.
DESIRED_BUCKET: Final = "GPUSCALE_DESIRED"
DECIDER_STATE_BUCKET: Final = "gpuscale_decider_state"
# Decisions are kept a day as the record of every change of desired count.
DECISIONS_MAX_AGE_S: Final = 24 * 3600.0
# JetStream's own default de-duplication window (Nats-Msg-Id).
DUPLICATE_WINDOW_S: Final = 120.0

_SAFE = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPE = re.compile(r"~([0-9A-F]{2})")


class SubjectError(ValueError):
    pass


def escape_token(value: str) -> str:
    if not value:
        raise SubjectError("a subject token must not be empty")
    if _SAFE.fullmatch(value):
        return value
    out: list[str] = []
    for ch in value:
        if _SAFE.fullmatch(ch):
            out.append(ch)
        else:
            out.extend(f"~{b:02X}" for b in ch.encode("utf-8"))
    return "".join(out)


def unescape_token(token: str) -> str:
    if not token or token in ("*", ">"):
        raise SubjectError(f"not a concrete token: {token!r}")
    raw = bytearray()
    i = 0
    while i < len(token):
        m = _ESCAPE.match(token, i)
        if m:
            raw.append(int(m.group(1), 16))
            i = m.end()
            continue
        ch = token[i]
        if not _SAFE.fullmatch(ch):
            raise SubjectError(f"bad character {ch!r} in token {token!r}")
        raw.extend(ch.encode())
        i += 1
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SubjectError(f"bad escape in token {token!r}") from None


@dataclass(frozen=True, slots=True)
class WorkloadKey:
    """A workload as subjects and state keys name it."""

    namespace: str
    kind: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.kind}/{self.name}"


def samples(node: str) -> str:
    return f"{PREFIX}.samples.{escape_token(node)}"


def _workload_subject(family: str, key: WorkloadKey) -> str:
    return (
        f"{PREFIX}.{family}.{escape_token(key.namespace)}.{escape_token(key.kind)}.{escape_token(key.name)}"
    )


def metrics(key: WorkloadKey) -> str:
    return _workload_subject("metrics", key)


def decisions(key: WorkloadKey) -> str:
    return _workload_subject("decisions", key)


def actions(key: WorkloadKey) -> str:
    return _workload_subject("actions", key)


def advice(key: WorkloadKey) -> str:
    return _workload_subject("advice", key)


def windows(key: WorkloadKey) -> str:
    return _workload_subject("windows", key)


def desired_key(key: WorkloadKey) -> str:
    """The workload's key in :data:`DESIRED`: escaped tokens, ``=`` for ``~`` (KV keys allow no ``~``)."""
    tokens = (escape_token(key.namespace), escape_token(key.kind), escape_token(key.name))
    return ".".join(tokens).replace("~", "=")


def parse_desired_key(kv_key: str) -> WorkloadKey:
    parts = kv_key.replace("=", "~").split(".")
    if len(parts) != 3:
        raise SubjectError(f"not a desired key: {kv_key[:200]!r}")
    return WorkloadKey(*(unescape_token(p) for p in parts))


def parse_samples(subject: str) -> str:
    """The node name of a samples subject."""
    parts = subject.split(".")
    if len(parts) != 4 or ".".join(parts[:3]) != f"{PREFIX}.samples":
        raise SubjectError(f"not a samples subject: {subject!r}")
    return unescape_token(parts[3])


def parse_workload(subject: str, family: str) -> WorkloadKey:
    """The workload of a metrics/decisions/actions subject."""
    parts = subject.split(".")
    if len(parts) != 6 or ".".join(parts[:3]) != f"{PREFIX}.{family}":
        raise SubjectError(f"not a {family} subject: {subject!r}")
    return WorkloadKey(*(unescape_token(p) for p in parts[3:]))


# --- the aggregator's scale-out ------------------------------------------------------


def aggregator_wsamples(key: WorkloadKey) -> str:
    """Where the split stage re-publishes one workload's share of a node batch."""
    return f"{AGGREGATOR_WSAMPLES_PREFIX}.{escape_token(key.namespace)}.{escape_token(key.kind)}.{escape_token(key.name)}"


def aggregator_partition(index: int) -> str:
    """Everything partition ``index`` owns (the mapped per-workload sub-batches)."""
    return f"{AGGREGATOR_PARTS_PREFIX}.{index}.>"


def parse_aggregator_part(subject: str) -> str:
    """The workload part (``<ns>.<kind>.<name>``, escaped) of a partition subject:
    sub-batches are ordered per node and workload."""
    return subject.split(".", 4)[-1]


def aggregator_partition_mapping(partitions: int) -> str:
    """The nats-server configuration block that assigns workloads to partitions."""
    if partitions < 1:
        raise ValueError("partitions must be >= 1")
    source = f"{AGGREGATOR_WSAMPLES_PREFIX}.*.*.*"
    target = (
        f"{AGGREGATOR_PARTS_PREFIX}.{{{{partition({partitions},1,2,3)}}}}"
        ".{{wildcard(1)}}.{{wildcard(2)}}.{{wildcard(3)}}"
    )
    return f'mappings = {{\n  "{source}": "{target}"\n}}\n'


# --- JetStream streams and KV buckets, each declared once -------------------------------


@dataclass(frozen=True, slots=True)
class StreamSpec:
    """A stream as gpuscale declares it; ``gpuscale setup`` creates it and sizes it, services use it."""

    name: str
    subjects: tuple[str, ...]
    max_age_s: float | None
    storage: str = "file"
    duplicate_window_s: float = DUPLICATE_WINDOW_S
    max_bytes: int = -1  # -1: no limit of its own
    replicas: int = 1


@dataclass(frozen=True, slots=True)
class KvSpec:
    bucket: str
    history: int = 1
    ttl_s: float | None = None
    storage: str = "file"
    max_bytes: int = -1
    replicas: int = 1

    @property
    def stream(self) -> str:
        """The stream behind the bucket (JetStream's naming)."""
        return f"KV_{self.bucket}"


# Storage budgets (bytes), one per stream, so that a flood of samples discards old
# samples instead of starving the decisions (12,500 nodes x 2.5 KB x 1/s x 60 s: 1.9 GB).
SAMPLES_MAX_BYTES: Final = 2 * 1024**3
DECISIONS_MAX_BYTES: Final = 256 * 1024**2
ADVICE_MAX_BYTES: Final = 256 * 1024**2
ADVICE_MAX_AGE_S: Final = 14 * 24 * 3600.0
KV_MAX_BYTES: Final = 64 * 1024**2

# The decider creates it, the actuator creates it only where it is missing:
# both from this one declaration.
DECISIONS: Final = StreamSpec(
    DECISIONS_STREAM, (DECISIONS_ALL,), max_age_s=DECISIONS_MAX_AGE_S, max_bytes=DECISIONS_MAX_BYTES
)
# Shadow mode's advice, kept for `gpuscale shadow-report` over a trial of two weeks.
ADVICE: Final = StreamSpec(
    ADVICE_STREAM, (ADVICE_ALL,), max_age_s=ADVICE_MAX_AGE_S, max_bytes=ADVICE_MAX_BYTES
)
# One entry per workload (its latest desired count): the state the actuator converges to.
DESIRED: Final = KvSpec(DESIRED_BUCKET, history=1, max_bytes=KV_MAX_BYTES)


def _window_stream(name: str, subject: str, window_s: float, storage: str) -> StreamSpec:
    return StreamSpec(
        name,
        (subject,),
        max_age_s=window_s,
        storage=storage,
        duplicate_window_s=min(window_s, DUPLICATE_WINDOW_S),
        max_bytes=SAMPLES_MAX_BYTES,
    )


def samples_stream(window_s: float, storage: str = "file") -> StreamSpec:
    """The aggregator's replay stream: the samples of one window."""
    return _window_stream(SAMPLES_STREAM, SAMPLES_ALL, window_s, storage)


def aggregator_parts_stream(window_s: float, storage: str = "file") -> StreamSpec:
    """The partitioned aggregators' replay stream: the mapped sub-batches of one window."""
    return _window_stream(AGGREGATOR_PARTS_STREAM, AGGREGATOR_PARTS_ALL, window_s, storage)


def decider_state(bucket: str = DECIDER_STATE_BUCKET) -> KvSpec:
    """The decider's state (stabilization history), one entry per workload."""
    return KvSpec(bucket, history=1, max_bytes=KV_MAX_BYTES)
