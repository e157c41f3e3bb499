"""Conversions between the versions that share one storage. Pure.

Core v1 Events and events.k8s.io/v1 Events are one set of objects in a real
cluster (``kubectl get events`` shows what a controller wrote through
events.k8s.io); kube-sim stores the core form and converts at the edges.
"""

from __future__ import annotations

import copy
from typing import Any

Obj = dict[str, Any]

# events.k8s.io/v1 field -> core v1 field
_EVENT_FIELDS = {
    "regarding": "involvedObject",
    "note": "message",
    "deprecatedCount": "count",
    "deprecatedFirstTimestamp": "firstTimestamp",
    "deprecatedLastTimestamp": "lastTimestamp",
    "deprecatedSource": "source",
    "reportingController": "reportingComponent",
}
_SAME = ("metadata", "eventTime", "series", "reportingInstance", "action", "reason", "related", "type")


def events_to_core(obj: Obj) -> Obj:
    out: Obj = {"apiVersion": "v1", "kind": "Event"}
    for key in _SAME:
        if key in obj:
            out[key] = copy.deepcopy(obj[key])
    for new, old in _EVENT_FIELDS.items():
        if new in obj:
            out[old] = copy.deepcopy(obj[new])
    if "involvedObject" not in out:
        out["involvedObject"] = {}
    return out


def core_to_events(obj: Obj) -> Obj:
    out: Obj = {"apiVersion": "events.k8s.io/v1", "kind": "Event"}
    for key in _SAME:
        if key in obj:
            out[key] = copy.deepcopy(obj[key])
    for new, old in _EVENT_FIELDS.items():
        if old in obj:
            out[new] = copy.deepcopy(obj[old])
    if "reportingController" not in out and (obj.get("source") or {}).get("component"):
        out["reportingController"] = obj["source"]["component"]
    if not out.get("eventTime"):
        # events.k8s.io requires eventTime; legacy events only have timestamps.
        stamp = (
            obj.get("firstTimestamp")
            or obj.get("lastTimestamp")
            or obj.get("metadata", {}).get("creationTimestamp")
        )
        out["eventTime"] = _micro(stamp) if isinstance(stamp, str) else "1970-01-01T00:00:00.000000Z"
    return out


def to_storage(api_version: str, kind: str, obj: Obj) -> Obj:
    if api_version == "events.k8s.io/v1" and kind == "Event":
        return events_to_core(obj)
    return obj


def from_storage(api_version: str, kind: str, obj: Obj) -> Obj:
    if api_version == "events.k8s.io/v1" and kind == "Event":
        return core_to_events(obj)
    out = copy.deepcopy(obj)
    out["apiVersion"] = api_version
    out["kind"] = kind
    return out


def _micro(stamp: str) -> str:
    """RFC 3339 with microseconds (MicroTime), from a seconds timestamp."""
    if stamp.endswith("Z") and "." not in stamp:
        return stamp[:-1] + ".000000Z"
    return stamp
