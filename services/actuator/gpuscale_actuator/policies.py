"""The GPUScalers the actuator checks every decision against, watched or read from a file."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient

from gpuscale.aio import sleep_unless_stopped
from gpuscale.kubewatch import ApiClientTransport, Reflector
from gpuscale.logging import get_logger
from gpuscale.policy import (
    API_GROUP,
    API_VERSION,
    PLURAL,
    GPUScaler,
    PolicyError,
    object_identity,
    parse_gpuscaler,
)
from gpuscale.policyfile import WatchedPolicyFile

FILE_CHECK_S: Final = 2.0


class PolicyView:
    def __init__(self, api: ApiClient, policy_file: Path | None) -> None:
        self._by_ns: dict[str, dict[str, GPUScaler]] = {}
        self.file = WatchedPolicyFile(policy_file) if policy_file is not None else None
        self.reflector = (
            None
            if self.file is not None
            else Reflector(
                ApiClientTransport(api),
                f"/apis/{API_GROUP}/{API_VERSION}/{PLURAL}",
                on_list=self._listed,
                on_event=self._event,
                what="gpuscalers",
            )
        )
        self.synced = self.reflector.synced if self.reflector is not None else asyncio.Event()
        self.log = get_logger(component="policies")

    def in_namespace(self, namespace: str) -> Sequence[GPUScaler]:
        return tuple(self._by_ns.get(namespace, {}).values())

    async def run(self, stop: asyncio.Event) -> None:
        if self.reflector is not None:
            await self.reflector.run(stop)
            return
        assert self.file is not None  # one of the two is set in __init__
        reported: str | None = None
        while not stop.is_set():
            loaded = self.file.reload_if_changed()
            if self.file.failed is not None and self.file.failed != reported:
                reported = self.file.failed
                self.log.error("policy_file_unreadable", path=str(self.file.path), error=self.file.failed)
            if loaded is not None:
                reported = None
                by_ns: dict[str, dict[str, GPUScaler]] = {}
                for scaler in loaded[0]:
                    by_ns.setdefault(scaler.namespace, {})[scaler.name] = scaler
                self._by_ns = by_ns
                self.synced.set()
            await sleep_unless_stopped(stop, FILE_CHECK_S)

    def _listed(self, items: Sequence[Mapping[str, Any]]) -> None:
        self._by_ns = {}
        for obj in items:
            self._event("ADDED", obj)

    def _event(self, kind: str, obj: Mapping[str, Any]) -> None:
        namespace, name = object_identity(obj)
        in_ns = self._by_ns.setdefault(namespace, {})
        in_ns.pop(name, None)
        if kind == "DELETED":
            return
        try:
            in_ns[name] = parse_gpuscaler(obj)
        except PolicyError as e:
            self.log.info(
                "gpuscaler_invalid_decisions_refused",
                gpuscaler=f"{namespace}/{name}",
                problems=e.summary()[:300],
            )
