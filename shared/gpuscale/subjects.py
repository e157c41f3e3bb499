"""Every NATS subject gpuscale uses, built and parsed in one place.

Tokens are escaped so that a name with a dot, a wildcard or a space cannot
change a subject's shape: any byte outside ``[A-Za-z0-9_-]`` becomes ``~XX``
(hex of its UTF-8 bytes). Kubernetes names are DNS labels and subdomains, so
in practice only ``.`` is ever escaped (``gpu-node-1.example`` ->
``gpu-node-1~2Eexample``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

PREFIX: Final = "gpuscale.v1"
SAMPLES_ALL: Final = f"{PREFIX}.samples.>"
METRICS_ALL: Final = f"{PREFIX}.metrics.>"
DECISIONS_ALL: Final = f"{PREFIX}.decisions.>"
ACTIONS_ALL: Final = f"{PREFIX}.actions.>"

# JetStream names (streams, consumers, KV buckets) also live here: the NATS
# permissions in deploy/base/nats/auth.conf name them too.
DECISIONS_STREAM: Final = "GPUSCALE_DECISIONS"
SAMPLES_STREAM: Final = "GPUSCALE_SAMPLES"
ACTUATOR_DURABLE: Final = "gpuscale-actuator"
ACTUATOR_APPLIED_BUCKET: Final = "GPUSCALE_ACTUATOR_APPLIED"
DECIDER_STATE_BUCKET: Final = "gpuscale_decider_state"

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
