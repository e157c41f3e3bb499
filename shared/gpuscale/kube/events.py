"""A Kubernetes Event on a scale target, as ``kubectl describe`` shows it."""

from __future__ import annotations

import contextlib
import os
import time
from typing import TYPE_CHECKING, Any, Final

from gpuscale.kube.client import request_json
from gpuscale.kube.errors import KubeError, NotFound
from gpuscale.kube.scale import ScaleClient
from gpuscale.timefmt import format_micro_time, format_time
from gpuscale.wire import ScaleTargetRef

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient

EVENT_REPORTING_CONTROLLER: Final = "gpuscale.io/actuator"
EVENT_NOTE_MAX_BYTES: Final = 1024  # the API server's NoteLengthLimit: len() of a Go string, so bytes


def event_note(message: str, max_bytes: int = EVENT_NOTE_MAX_BYTES) -> str:
    """``message`` cut to at most ``max_bytes`` of UTF-8, never inside a character
    (reasons carry ``×`` and other multi-byte signs); a cut note ends in ``…``."""
    if len(message.encode()) <= max_bytes:
        return message
    return truncate_utf8(message, max_bytes - len("…".encode())) + "…"


def truncate_utf8(text: str, max_bytes: int) -> str:
    """The longest prefix of ``text`` that is at most ``max_bytes`` of UTF-8."""
    return text.encode()[:max_bytes].decode("utf-8", errors="ignore")


def _event_name(target_name: str, now: float) -> str:
    # client-go's scheme: <object>.<hex nanoseconds>, unique per emitter and moment. The name
    # must stay a DNS-1123 subdomain of at most 253 characters (events.k8s.io/v1 validates it):
    # a long object name is shortened, never the suffix that makes the name unique, and the cut
    # must not end in '.' or '-'.
    suffix = f".{int(now * 1e9):x}"
    return target_name[: 253 - len(suffix)].rstrip(".-") + suffix


async def record_event(
    api: ApiClient,
    ref: ScaleTargetRef,
    reason: str,
    message: str,
    type: str = "Normal",  # noqa: A002 - the Event field's own name
    *,
    uid: str | None = None,
    reporting_instance: str = "",
    reporting_controller: str = EVENT_REPORTING_CONTROLLER,
    action: str = "Scale",
    now: float | None = None,
) -> dict[str, Any]:
    """Write an events.k8s.io/v1 Event about ``ref`` (core v1 Event where that
    API is not served). ``uid`` is read from the target when not given.
    Raises KubeError; callers treat events as best-effort."""
    now = time.time() if now is None else now
    if uid is None:
        with contextlib.suppress(KubeError):
            uid = await ScaleClient(api).uid(ref) or None
    regarding: dict[str, Any] = {
        "apiVersion": ref.api_version,
        "kind": ref.kind,
        "name": ref.name,
        "namespace": ref.namespace,
    }
    if uid:
        regarding["uid"] = uid
    name = _event_name(ref.name, now)
    instance = reporting_instance or f"{reporting_controller}-{os.getpid()}"
    note = event_note(message)
    event = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ref.namespace},
        "eventTime": format_micro_time(now),
        "reportingController": reporting_controller,
        "reportingInstance": truncate_utf8(instance, 128),
        "action": action,
        "reason": reason,
        "note": note,
        "type": type,
        "regarding": regarding,
    }
    try:
        return await request_json(
            api, "POST", f"/apis/events.k8s.io/v1/namespaces/{ref.namespace}/events", event
        )
    except NotFound:
        pass  # events.k8s.io not served: the core v1 Event says the same thing
    core_event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": ref.namespace},
        "involvedObject": regarding,
        "reason": reason,
        "message": note,
        "type": type,
        "source": {"component": reporting_controller},
        "firstTimestamp": format_time(now),
        "lastTimestamp": format_time(now),
        "count": 1,
        "reportingComponent": reporting_controller,
        "reportingInstance": truncate_utf8(instance, 128),
        "action": action,
    }
    return await request_json(api, "POST", f"/api/v1/namespaces/{ref.namespace}/events", core_event)
