"""The pods behind the targets' selectors: as HPA's pod lister, one list+watch of
the cluster's pods, kept in memory (only what the replica count needs) and
indexed by label, so an evaluation costs no API request."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from kubernetes_asyncio.client import ApiClient

from gpuscale.kubewatch import ApiClientTransport, Reflector
from gpuscale.labels import LabelSelector, SelectorError, parse_selector
from gpuscale.logging import get_logger
from gpuscale_decider.core.replicas import PodView

# Selector operators answered from the (label, value) index.
_LOOKED_UP: Final = frozenset({"=", "in"})
# PodScheduled=False reasons of a pod the scheduler will not place now.
_UNPLACED: Final = frozenset({"Unschedulable", "SchedulingGated"})
# A team writes its targets' selectors (a Deployment's may be ~1 MiB, ~7 MiB once parsed):
# a longer one is not read at all. Those kept parsed are bounded in number and in text, the
# long ones apart, so a team whose long selectors overflow their budget clears only theirs.
MAX_SELECTOR_CHARS: Final = 32 * 1024
LONG_SELECTOR_CHARS: Final = 1024  # a selector of a few labels is tens of characters
MAX_KEPT_SELECTORS: Final = 10_000
# Text kept parsed (tiny labels cost 50-70 bytes a character once parsed): the short ones'
# budget holds 10,000 selectors of 50 characters, the long ones' 32 at the most a target may have.
MAX_KEPT_SHORT_CHARS: Final = 512 * 1024
MAX_KEPT_SELECTOR_CHARS: Final = 2**20
MAX_KEPT_SELECTIONS: Final = 100_000  # one per target, few and stable


def _unplaced(reason: object) -> bool:
    return isinstance(reason, str) and reason in _UNPLACED  # a list or a dict is no reason (unhashable)


@dataclass(frozen=True, slots=True)
class _Pod:
    labels: Mapping[str, str]
    view: PodView


def pod_of(obj: Mapping[str, Any]) -> tuple[str, str, _Pod] | None:
    """(namespace, name, what the decider keeps) of a Pod object; None if unusable."""
    meta = obj.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    namespace, name = meta.get("namespace"), meta.get("name")
    if not isinstance(namespace, str) or not isinstance(name, str):
        return None
    labels, status = meta.get("labels"), obj.get("status")
    labels = labels if isinstance(labels, Mapping) else {}
    status = status if isinstance(status, Mapping) else {}
    listed = status.get("conditions")
    conditions = [c for c in listed if isinstance(c, Mapping)] if isinstance(listed, list | tuple) else []
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)
    # Not to be placed now: no node fits it, or a gate (an admission controller's quota) holds it
    # for a controller that may never let it go.
    unschedulable = any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and _unplaced(c.get("reason"))
        for c in conditions
    )
    phase = status.get("phase")
    view = PodView(
        name,
        phase if isinstance(phase, str) else "Pending",
        ready,
        meta.get("deletionTimestamp") is not None,
        unschedulable,
    )
    return namespace, name, _Pod({str(k): str(v) for k, v in labels.items()}, view)


@dataclass
class _Kept:
    """Selectors kept parsed, with their lookups and their selections, within a budget: past
    it all go (the selections name the texts), and are made again as they are asked for."""

    max_chars: int
    parsed: dict[str, LabelSelector | None] = field(default_factory=dict)
    lookups: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)
    # Kept with their version: the last change per looked-up (label, value) (or per namespace
    # without one); equal versions, equal answers.
    selected: dict[tuple[str, str], tuple[tuple[int, ...], tuple[PodView, ...]]] = field(default_factory=dict)
    chars: int = 0

    def make_room(self, text: str) -> None:
        if len(self.parsed) >= MAX_KEPT_SELECTORS or self.chars + len(text) > self.max_chars:
            self.parsed.clear()
            self.lookups.clear()
            self.selected.clear()
            self.chars = 0
        self.chars += len(text)


class PodIndex:
    """Pods by namespace, with a (label, value) -> names index per namespace."""

    def __init__(self) -> None:
        self._pods: dict[str, dict[str, _Pod]] = {}
        self._by_label: dict[str, dict[tuple[str, str], set[str]]] = {}
        self._change = 0
        self._namespace_change: dict[str, int] = {}
        self._label_change: dict[str, dict[tuple[str, str], int]] = {}
        self._short = _Kept(max_chars=MAX_KEPT_SHORT_CHARS)
        self._long = _Kept(max_chars=MAX_KEPT_SELECTOR_CHARS)
        self.log = get_logger(component="pod_watch")

    def __len__(self) -> int:
        return sum(len(p) for p in self._pods.values())

    def put(self, namespace: str, name: str, pod: _Pod | None) -> None:
        self._change = change = self._change + 1
        self._namespace_change[namespace] = change
        changed = self._label_change.setdefault(namespace, {})
        pods = self._pods.setdefault(namespace, {})
        index = self._by_label.setdefault(namespace, {})
        old = pods.pop(name, None)
        if old is not None:
            for label in old.labels.items():
                names = index.get(label)
                if names is not None:
                    names.discard(name)
                    if not names:
                        del index[label]
                        changed.pop(label, None)
                        continue
                changed[label] = change
        if pod is not None:
            pods[name] = pod
            for label in pod.labels.items():
                index.setdefault(label, set()).add(name)
                changed[label] = change

    def select(self, namespace: str, selector: str) -> tuple[PodView, ...] | None:
        kept = self._long if len(selector) > LONG_SELECTOR_CHARS else self._short
        parsed = self._selector(kept, selector)
        if parsed is None:
            return None
        lookups = kept.lookups[selector]
        if lookups:
            changed = self._label_change.get(namespace, {})
            version = tuple(changed.get(label, 0) for label in lookups)
        else:
            version = (self._namespace_change.get(namespace, 0),)
        key = (namespace, selector)
        made = kept.selected.get(key)
        if made is not None and made[0] == version:
            return made[1]
        selected = self._select(namespace, parsed)
        if len(kept.selected) >= MAX_KEPT_SELECTIONS:
            kept.selected.clear()
        kept.selected[key] = (version, selected)
        return selected

    def _select(self, namespace: str, parsed: LabelSelector) -> tuple[PodView, ...]:
        pods = self._pods.get(namespace)
        if not pods:
            return ()
        index = self._by_label[namespace]
        candidates: set[str] | None = None
        rest = []
        for r in parsed.requirements:
            if r.op not in _LOOKED_UP:
                rest.append(r)
                continue
            names: set[str] = set()
            for value in r.values:
                names |= index.get((r.key, value), set())
            candidates = names if candidates is None else candidates & names
        if candidates is None:  # no equality to look up: every pod of the namespace is a candidate
            return tuple(pods[n].view for n in sorted(pods) if parsed.matches(pods[n].labels))
        chosen = (pods[n] for n in sorted(candidates))
        return tuple(p.view for p in chosen if all(r.holds(p.labels) for r in rest))

    def _selector(self, kept: _Kept, text: str) -> LabelSelector | None:
        if text not in kept.parsed:
            kept.make_room(text)  # a team re-creating a Deployment with a new selector piles up none
            try:
                parsed = kept.parsed[text] = parse_selector(text)
            except SelectorError as e:
                kept.parsed[text] = None
                self.log.warning("target_selector_unparsable", selector=text[:200], error=str(e))
            else:
                kept.lookups[text] = tuple(
                    (r.key, value) for r in parsed.requirements if r.op in _LOOKED_UP for value in r.values
                )
        return kept.parsed[text]


class PodCache:
    """The index kept current by one list+watch of ``/api/v1/pods``."""

    def __init__(self, api: ApiClient | None) -> None:
        self.index = PodIndex()
        self.reflector = (
            None
            if api is None
            else Reflector(
                ApiClientTransport(api),
                "/api/v1/pods",
                on_list=self._listed,
                on_event=self.apply,
                what="pods",
            )
        )
        self.synced = self.reflector.synced if self.reflector is not None else asyncio.Event()

    def select(self, namespace: str, selector: str) -> tuple[PodView, ...] | None:
        return self.index.select(namespace, selector) if self.synced.is_set() else None

    def apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) for a Pod object."""
        found = pod_of(obj)
        if found is not None:
            self.index.put(found[0], found[1], None if kind == "DELETED" else found[2])

    def _listed(self, items: Sequence[Mapping[str, Any]]) -> None:
        index = PodIndex()
        for obj in items:
            found = pod_of(obj)
            if found is not None:
                index.put(*found)
        self.index = index

    async def run(self, stop: asyncio.Event) -> None:
        if self.reflector is not None:
            await self.reflector.run(stop)
