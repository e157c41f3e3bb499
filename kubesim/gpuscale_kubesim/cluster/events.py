"""Events as the controllers, the scheduler and the kubelets record them (core v1)."""

from __future__ import annotations

import uuid

from gpuscale.logging import get_logger
from gpuscale_kubesim.apiserver.errors import ApiError
from gpuscale_kubesim.apiserver.resources import ResourceDef, format_time
from gpuscale_kubesim.apiserver.store import Store

from .common import Obj


class Recorder:
    def __init__(self, store: Store, rd_event: ResourceDef) -> None:
        self.store = store
        self.rd_event = rd_event
        self.log = get_logger(component="kube-sim-cluster")

    def create(self, rd: ResourceDef, obj: Obj) -> Obj | None:
        """Create as a controller does: a refusal is logged, not raised."""
        try:
            return self.store.create(rd, obj["metadata"].get("namespace"), obj)
        except ApiError as e:
            self.log.warning("create_failed", kind=rd.kind, name=obj["metadata"].get("name"), error=e.message)
            return None

    def event(
        self, about: Obj, reason: str, message: str, component: str, wall: float, type_: str = "Normal"
    ) -> None:
        """A core v1 Event about ``about``, from ``component`` (deployment-controller, default-scheduler)."""
        meta = about["metadata"]
        stamp = format_time(wall)
        self.create(
            self.rd_event,
            {
                "metadata": {
                    "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                    "namespace": meta.get("namespace") or "default",
                },
                "involvedObject": {
                    "apiVersion": about.get("apiVersion"),
                    "kind": about.get("kind"),
                    "name": meta["name"],
                    "namespace": meta.get("namespace"),
                    "uid": meta.get("uid"),
                    "resourceVersion": meta.get("resourceVersion"),
                },
                "reason": reason,
                "message": message,
                "type": type_,
                "source": {"component": component},
                "firstTimestamp": stamp,
                "lastTimestamp": stamp,
                "count": 1,
                "reportingComponent": component,
                "reportingInstance": "",
            },
        )
