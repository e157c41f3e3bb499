"""Talking to the Kubernetes API, one module a concern.

Only :func:`new_api_client` loads kubernetes-asyncio, so the collector fits its memory budget."""

from gpuscale.kube.client import each_page, ping, request_json
from gpuscale.kube.config import ClusterConfigError, new_api_client
from gpuscale.kube.errors import (
    BadRequest,
    Conflict,
    FieldsDropped,
    Forbidden,
    KubeError,
    NotFound,
    ServerError,
    Throttled,
    Unauthorized,
    Unreachable,
    error_from_response,
    parse_forbidden,
)
from gpuscale.kube.events import (
    EVENT_NOTE_MAX_BYTES,
    event_note,
    record_event,
)
from gpuscale.kube.retry import backoff_delay, retry_with_backoff
from gpuscale.kube.scale import ScaleClient, ScaleState

# ScaleTargetRef (gpuscale.wire) and the time formats (gpuscale.timefmt) have
# their one home elsewhere; they are re-exported here, where callers met them.
from gpuscale.timefmt import format_micro_time, parse_time
from gpuscale.wire import ScaleTargetRef

__all__ = [
    "EVENT_NOTE_MAX_BYTES",
    "BadRequest",
    "ClusterConfigError",
    "Conflict",
    "FieldsDropped",
    "Forbidden",
    "KubeError",
    "NotFound",
    "ScaleClient",
    "ScaleState",
    "ScaleTargetRef",
    "ServerError",
    "Throttled",
    "Unauthorized",
    "Unreachable",
    "backoff_delay",
    "each_page",
    "error_from_response",
    "event_note",
    "format_micro_time",
    "new_api_client",
    "parse_forbidden",
    "parse_time",
    "ping",
    "record_event",
    "request_json",
    "retry_with_backoff",
]
