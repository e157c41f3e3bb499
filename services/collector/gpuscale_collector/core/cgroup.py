"""PID → pod UID and container id, from the text of ``/proc/<pid>/cgroup``.

cgroup v1 and v2, both kubelet cgroup drivers, and prefixed (nested) paths."""

from __future__ import annotations

import re
from dataclasses import dataclass

_UID = r"[0-9a-fA-F]{8}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{4}[-_][0-9a-fA-F]{12}"
_SYSTEMD_POD = re.compile(rf"^kubepods(?:-(?:burstable|besteffort|guaranteed))?-pod({_UID})\.slice$")
_CGROUPFS_POD = re.compile(rf"^pod({_UID})$")
_SYSTEMD_CONTAINER = re.compile(r"^(?:cri-containerd|docker|crio|containerd)-([0-9a-fA-F]{12,128})\.scope$")
_CGROUPFS_CONTAINER = re.compile(r"^(?:[a-z-]+-)?([0-9a-fA-F]{12,128})$")


@dataclass(frozen=True, slots=True)
class CgroupIdentity:
    pod_uid: str  # with dashes, lower case, as the API server writes metadata.uid
    container_id: str | None  # the runtime's id, without the runtime:// prefix


def _identity_from_path(path: str) -> CgroupIdentity | None:
    segments = [s for s in path.split("/") if s]
    for i, seg in enumerate(segments):
        m = _SYSTEMD_POD.match(seg) or _CGROUPFS_POD.match(seg)
        if m is None:
            continue
        uid = m.group(1).replace("_", "-").lower()
        container: str | None = None
        if i + 1 < len(segments):
            nxt = segments[i + 1]
            c = _SYSTEMD_CONTAINER.match(nxt) or _CGROUPFS_CONTAINER.match(nxt)
            if c is not None:
                container = c.group(1).lower()
        return CgroupIdentity(uid, container)
    return None


def parse_cgroup(text: str) -> CgroupIdentity | None:
    """The pod (and container) a process belongs to, or None when it is not in a pod.

    Garbage lines are skipped. A container id wins over a bare pod match
    (v1 lists several hierarchies; some may stop at the pod level)."""
    best: CgroupIdentity | None = None
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        found = _identity_from_path(parts[2].strip())
        if found is None:
            continue
        if found.container_id is not None:
            return found
        if best is None:
            best = found
    return best


def container_id_of_status(container_id: str) -> str:
    """``containerd://abc…`` (a pod's status.containerStatuses[].containerID) → ``abc…``."""
    _, sep, rest = container_id.partition("://")
    return (rest if sep else container_id).lower()
