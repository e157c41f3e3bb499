"""The wire contract's limits: the version, the counts per message, the bounded field types and the rejection error.

Purely computational: no I/O, no clock.
"""

from __future__ import annotations

import sys
from typing import Annotated, Final

from msgspec import Meta

WIRE_VERSION: Final = 1
# A clock skew allowance: producers' clocks may run ahead, but not by this much.
MAX_FUTURE_SKEW_S: Final = 60.0
# Counts per message, far above any real node or workload, so that one
# message cannot make a consumer walk millions of entries: 16 GPUs of 7 MIG
# devices is 112; MPS serves at most 48 clients per GPU; a metrics message
# of 100,000 pods is already beyond NATS' default 1 MB payload.
MAX_GPUS_PER_NODE: Final = 512
MAX_OWNERS_PER_GPU: Final = 256
MAX_PODS_PER_WORKLOAD: Final = 100_000
HEALTH_OK: Final = "ok"

# --- the limits, as types ----------------------------------------------------------
# Every float has both bounds so that NaN and ±inf are rejected (a comparison
# with NaN is false); the largest finite double is the bound where the
# contract sets none.

_FINITE: Final = sys.float_info.max

Percent = Annotated[float, Meta(ge=0.0, le=100.0)]
NonNegative = Annotated[float, Meta(ge=0.0, le=_FINITE)]
Timestamp = Annotated[float, Meta(ge=0.0, le=_FINITE, description="unix seconds")]
Celsius = Annotated[float, Meta(ge=-273.0, le=1000.0)]
IntervalS = Annotated[float, Meta(ge=0.001, le=3600.0)]
WindowS = Annotated[float, Meta(ge=0.001, le=_FINITE)]
# What a policy may ask an aggregator to keep: a day is far above any averaging window.
MAX_REQUESTED_WINDOW_S: Final = 86_400.0
RequestedWindowS = Annotated[float, Meta(ge=0.001, le=MAX_REQUESTED_WINDOW_S)]
Count = Annotated[int, Meta(ge=0)]
Text = Annotated[str, Meta(min_length=1)]
# Kubernetes names (apimachinery's validation): a namespace and a container
# name are DNS-1123 labels (63), object and node names DNS-1123 subdomains
# (253); a kind is a CamelCase name, 63 is generous.
MAX_KIND_CHARS: Final = 63
MAX_NAME_CHARS: Final = 253
Namespace = Annotated[str, Meta(min_length=1, max_length=63)]
ObjectName = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_CHARS)]
KindName = Annotated[str, Meta(min_length=1, max_length=MAX_KIND_CHARS)]
ContainerName = Annotated[str, Meta(max_length=63)]  # empty: not known
PodUid = Annotated[str, Meta(max_length=128)]  # empty: not known
ApiVersion = Annotated[str, Meta(min_length=1, max_length=253)]
OptionalNamespace = Annotated[str, Meta(max_length=63)]
OptionalKind = Annotated[str, Meta(max_length=63)]
OptionalName = Annotated[str, Meta(max_length=253)]
# A process's name: a pod or host name, with a partition suffix where it has one.
SenderName = Annotated[str, Meta(min_length=1, max_length=253)]


class WireError(ValueError):
    """A message that breaks the contract. ``code`` is one of
    :data:`ERROR_CODES` (a metrics label: low cardinality); ``detail`` is for
    people and names the field (``$.gpus[0].util``); ``path`` is that field."""

    def __init__(self, code: str, detail: str, path: str = "") -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail
        self.path = path


# The reasons a payload is rejected. Consumers add their own few
# (subject_mismatch, bad_subject, node_mismatch, too_old) on the same label.
ERROR_CODES: Final = (
    "undecodable",
    "not_a_map",
    "wrong_version",
    "missing_field",
    "wrong_type",
    "out_of_range",
    "not_finite",
    "future_timestamp",
    "invalid",
)
