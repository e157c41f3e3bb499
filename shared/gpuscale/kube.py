"""kubernetes-asyncio plumbing shared by the services that talk to the API.

- :func:`new_api_client`: one way to build an API client.
- :class:`ScaleClient`: read and change the replicas of ANY resource that
  serves a ``/scale`` subresource (Deployments, StatefulSets, ReplicaSets,
  custom resources), by raw REST path, so no generated model stands between
  us and the JSON.
- :class:`KubeError` and its subclasses: what an API call can go wrong with,
  one class per thing a caller does differently (re-read on :class:`Conflict`,
  back off on :class:`Throttled`/:class:`ServerError`/:class:`Unreachable`,
  report a missing RBAC permission on :class:`Forbidden`).
- :func:`retry_with_backoff`: exponential backoff with full jitter.
- :func:`record_event`: a Kubernetes Event on the target, as ``kubectl
  describe`` shows it.
- every ``Warning`` header of an answer goes to :data:`gpuscale.apiwarnings.API_WARNINGS`
  (counted, logged once); one saying the server dropped fields we sent is
  :class:`FieldsDropped` where warnings are strict (the tests).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import aiohttp
from kubernetes_asyncio import config
from kubernetes_asyncio.client import ApiClient, Configuration

from gpuscale.aio import sleep_unless_stopped
from gpuscale.apiwarnings import API_WARNINGS, parse_warning_header
from gpuscale.labels import selector_string
from gpuscale.names import target_problems
from gpuscale.timefmt import format_micro_time, format_time, parse_time
from gpuscale.wire import ScaleTargetRef

# ScaleTargetRef (gpuscale.wire) and the time formats (gpuscale.timefmt) have
# their one home elsewhere; they are re-exported here, where callers met them.

__all__ = [
    "REPLICAS_IN_SPEC",
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
    "error_from_response",
    "event_note",
    "format_micro_time",
    "format_time",
    "new_api_client",
    "parse_forbidden",
    "parse_time",
    "ping",
    "record_event",
    "request_json",
    "retry_with_backoff",
    "scale_state_from_object",
]

T = TypeVar("T")

REQUEST_TIMEOUT_S: Final = 10.0
EVENT_REPORTING_CONTROLLER: Final = "gpuscale.io/actuator"


class ClusterConfigError(Exception):
    """No usable cluster config: ``str()`` is one line with the cause; ``remedy`` says what to do."""

    def __init__(self, cause: str, remedy: str) -> None:
        super().__init__(f"{cause}; {remedy}")
        self.cause = cause
        self.remedy = remedy


def _kubeconfig_problem(where: str, e: BaseException) -> ClusterConfigError:
    text = " ".join(str(e).split()) or type(e).__name__
    return ClusterConfigError(
        f"cannot use the kubeconfig {where}: {text[:200]}",
        "pass a readable kubeconfig with --kubeconfig (or KUBECONFIG), as `kubectl config view` shows it",
    )


def _default_kubeconfig() -> str:
    return os.path.expanduser(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0])


def _check_config_present(kubeconfig: Path | None) -> None:
    """A missing file named in words, before kubernetes-asyncio's own message."""
    if kubeconfig is not None:
        if not kubeconfig.is_file():
            raise ClusterConfigError(
                f"the kubeconfig {kubeconfig} does not exist",
                "pass the path of an existing kubeconfig with --kubeconfig (or KUBECONFIG)",
            )
    elif not os.environ.get("KUBERNETES_SERVICE_HOST") and not os.path.isfile(_default_kubeconfig()):
        raise ClusterConfigError(
            "no cluster config: not in a pod and no kubeconfig (--kubeconfig, KUBECONFIG, ~/.kube/config)",
            "pass --kubeconfig PATH, or run it in the cluster",
        )


async def new_api_client(kubeconfig: Path | None) -> ApiClient:
    """An API client from ``kubeconfig``, else in-cluster config, else ~/.kube/config;
    :class:`ClusterConfigError` in one line when none of them is usable."""
    configuration = Configuration()
    _check_config_present(kubeconfig)
    if kubeconfig is not None:
        try:
            await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        except Exception as e:  # noqa: BLE001 - unreadable, not YAML, no context: one line for the operator
            raise _kubeconfig_problem(str(kubeconfig), e) from None
    elif os.environ.get("KUBERNETES_SERVICE_HOST"):
        try:
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]  # untyped in kubernetes-asyncio
        except Exception as e:  # noqa: BLE001 - a pod without its service account token
            raise ClusterConfigError(
                f"in a pod, but its service account cannot be read ({' '.join(str(e).split())})",
                "give the pod a service account with automountServiceAccountToken: true",
            ) from None
    else:
        try:
            await config.load_kube_config(client_configuration=configuration)
        except Exception as e:  # noqa: BLE001 - e.g. "Expected key current-context": one line
            raise _kubeconfig_problem(_default_kubeconfig(), e) from None
    return ApiClient(configuration=configuration)


# --- errors ------------------------------------------------------------------


class KubeError(Exception):
    """An API call failed. ``retryable`` says whether backing off can help."""

    retryable: bool = False

    def __init__(self, status: int, message: str, *, reason: str = "") -> None:
        super().__init__(f"{status} {reason}: {message}" if reason else f"{status}: {message}")
        self.status = status
        self.message = message
        self.reason = reason


class Conflict(KubeError):
    """409: the object changed since we read it (resourceVersion), or exists."""


class NotFound(KubeError):
    """404: the object (or the API serving it) does not exist."""


class Unauthorized(KubeError):
    """401: bad or expired credentials."""


class BadRequest(KubeError):
    """Another 4xx (400, 422, ...): the request itself is wrong; retrying won't help."""


class Forbidden(KubeError):
    """403: RBAC says no. ``verb``/``resource``/``group`` name the missing permission."""

    def __init__(self, status: int, message: str, *, reason: str = "") -> None:
        super().__init__(status, message, reason=reason)
        self.verb, self.resource, self.group = parse_forbidden(message)

    @property
    def missing_permission(self) -> str:
        """``patch deployments/scale in apps``: what to add to the Role."""
        group = self.group if self.group else "core"
        return f"{self.verb or '?'} {self.resource or '?'} in {group}"


class Throttled(KubeError):
    """429: the API server (or its priority-and-fairness) asks us to slow down."""

    retryable = True

    def __init__(self, status: int, message: str, *, reason: str = "", retry_after_s: float | None = None):
        super().__init__(status, message, reason=reason)
        self.retry_after_s = retry_after_s


class ServerError(KubeError):
    """5xx: the API server failed; it may work on the next try."""

    retryable = True


class FieldsDropped(KubeError):
    """The write succeeded but the server dropped fields it does not know (its ``Warning``
    said ``unknown field "..."``): only raised where warnings are strict. ``fields`` names them."""

    def __init__(self, status: int, warnings: list[str]) -> None:
        super().__init__(status, "; ".join(warnings), reason="FieldsDropped")
        self.fields = [w.removeprefix("unknown field ").strip('"') for w in warnings]


class Unreachable(KubeError):
    """No HTTP answer at all: refused, reset, DNS, TLS or timeout."""

    retryable = True

    def __init__(self, message: str) -> None:
        super().__init__(0, message, reason="Unreachable")


_FORBIDDEN = re.compile(
    r'cannot (?P<verb>[\w-]+) resource "(?P<resource>[^"]+)" in API group "(?P<group>[^"]*)"'
)


def parse_forbidden(message: str) -> tuple[str, str, str]:
    """(verb, resource, group) from an API server's 403 Status message, or empties.

    The message reads: ``deployments.apps "web" is forbidden: User "x" cannot
    patch resource "deployments/scale" in API group "apps" in the namespace "default"``.
    """
    m = _FORBIDDEN.search(message)
    if not m:
        return "", "", ""
    return m.group("verb"), m.group("resource"), m.group("group")


def _retry_after(headers: Mapping[str, str]) -> float | None:
    for key, value in headers.items():
        if key.lower() == "retry-after":
            try:
                return max(0.0, float(value))
            except ValueError:
                return None  # an HTTP date: rare from API servers; our own backoff applies
    return None


def error_from_response(status: int, body: str, headers: Mapping[str, str]) -> KubeError:
    """The KubeError for a non-2xx answer (``body`` is usually a v1 Status)."""
    message, reason = body.strip()[:500], ""
    with contextlib.suppress(ValueError):
        doc = json.loads(body)
        if isinstance(doc, dict):
            message = str(doc.get("message") or message)
            reason = str(doc.get("reason") or "")
    if status == 409:
        return Conflict(status, message, reason=reason)
    if status == 404:
        return NotFound(status, message, reason=reason)
    if status == 403:
        return Forbidden(status, message, reason=reason)
    if status == 401:
        return Unauthorized(status, message, reason=reason)
    if status == 429:
        return Throttled(status, message, reason=reason, retry_after_s=_retry_after(headers))
    if status >= 500:
        return ServerError(status, message, reason=reason)
    return BadRequest(status, message, reason=reason)


# --- raw requests ------------------------------------------------------------


async def request_json(
    api: ApiClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    content_type: str = "application/json",
    query: Mapping[str, str] | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> dict[str, Any]:
    """One API request by path: the JSON answer, or a :class:`KubeError`."""
    headers = {"Accept": "application/json", "Content-Type": content_type}
    try:
        response = await api.call_api(
            path,
            method,
            query_params=list(query.items()) if query else None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,  # we read the body and map statuses ourselves
            _request_timeout=timeout_s,
        )
        try:
            raw = await response.read()
            status = int(response.status)
            resp_headers = {str(k): str(v) for k, v in response.headers.items()}
            warnings = [parse_warning_header(str(v)) for v in response.headers.getall("Warning", [])]
        finally:
            response.release()
    except (aiohttp.ClientError, OSError, TimeoutError) as e:
        raise Unreachable(f"{method} {path}: {type(e).__name__}: {e}") from None
    text = raw.decode("utf-8", errors="replace")
    if not 200 <= status <= 299:
        raise error_from_response(status, text, resp_headers)
    dropped = API_WARNINGS.record(method, path, warnings) if warnings else []
    if dropped and API_WARNINGS.strict:
        raise FieldsDropped(status, [w.text for w in dropped])
    if not text.strip():
        return {}
    try:
        doc = json.loads(text)
    except ValueError:
        raise ServerError(status, f"{method} {path}: answer is not JSON") from None
    return doc if isinstance(doc, dict) else {"items": doc}


async def ping(api: ApiClient, timeout_s: float = 3.0) -> tuple[bool, str]:
    """Is the API server answering? Any HTTP answer counts (even 403/404)."""
    try:
        await request_json(api, "GET", "/api", timeout_s=timeout_s)
    except Unreachable as e:
        return False, e.message
    except KubeError as e:
        return True, f"answers ({e.status})"
    return True, "reachable"


# --- scale -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScaleState:
    """A target's autoscaling/v1 Scale: desired and observed replicas."""

    replicas: int
    resource_version: str
    selector: str
    status_replicas: int


# Plurals of the kinds everyone scales; others come from discovery.
_KNOWN_PLURALS: Final[dict[tuple[str, str], str]] = {
    ("apps", "Deployment"): "deployments",
    ("apps", "StatefulSet"): "statefulsets",
    ("apps", "ReplicaSet"): "replicasets",
    ("", "ReplicationController"): "replicationcontrollers",
}

# Kinds whose scale subresource is exactly ``spec.replicas`` of the object, so
# one PATCH of the object can change replicas and annotations atomically.
REPLICAS_IN_SPEC: Final[frozenset[tuple[str, str]]] = frozenset(_KNOWN_PLURALS)


def _api_prefix(group: str, version: str) -> str:
    return f"/api/{version}" if not group else f"/apis/{group}/{version}"


def _scale_from_dict(doc: Mapping[str, Any]) -> ScaleState:
    spec = doc.get("spec") or {}
    status = doc.get("status") or {}
    meta = doc.get("metadata") or {}
    return ScaleState(
        replicas=int(spec.get("replicas") or 0),
        resource_version=str(meta.get("resourceVersion") or ""),
        selector=str(status.get("selector") or ""),
        status_replicas=int(status.get("replicas") or 0),
    )


def scale_state_from_object(obj: Mapping[str, Any]) -> ScaleState:
    """The Scale view of a Deployment/StatefulSet/ReplicaSet object."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    meta = obj.get("metadata") or {}
    replicas = spec.get("replicas")
    return ScaleState(
        replicas=1 if replicas is None else int(replicas),  # the API server's default
        resource_version=str(meta.get("resourceVersion") or ""),
        selector=selector_string(spec.get("selector")),
        status_replicas=int(status.get("replicas") or 0),
    )


class ScaleClient:
    """Read and patch the replicas of anything with a ``/scale`` subresource."""

    def __init__(self, api: ApiClient) -> None:
        self.api = api
        self._plurals: dict[tuple[str, str, str], str] = {}

    async def plural(self, ref: ScaleTargetRef) -> str:
        known = _KNOWN_PLURALS.get((ref.group, ref.kind))
        if known is not None:
            return known
        key = (ref.group, ref.version, ref.kind)
        cached = self._plurals.get(key)
        if cached is not None:
            return cached
        doc = await request_json(self.api, "GET", _api_prefix(ref.group, ref.version))
        for resource in doc.get("resources") or []:
            name = str(resource.get("name") or "")
            if resource.get("kind") == ref.kind and "/" not in name:
                self._plurals[key] = name
                return name
        raise NotFound(404, f"the API server serves no kind {ref.kind} in {ref.api_version}")

    async def object_path(self, ref: ScaleTargetRef) -> str:
        problems = target_problems(ref.namespace, ref.api_version, ref.kind, ref.name)
        if problems:  # never let a name become another path, a query or a fragment
            raise BadRequest(400, f"not a Kubernetes object: {'; '.join(problems)}", reason="Invalid")
        plural = await self.plural(ref)
        return f"{_api_prefix(ref.group, ref.version)}/namespaces/{ref.namespace}/{plural}/{ref.name}"

    async def get(self, ref: ScaleTargetRef) -> ScaleState:
        doc = await request_json(self.api, "GET", await self.object_path(ref) + "/scale")
        return _scale_from_dict(doc)

    async def get_object(self, ref: ScaleTargetRef) -> dict[str, Any]:
        """The target object itself (metadata, spec, status) as JSON."""
        return await request_json(self.api, "GET", await self.object_path(ref))

    async def patch_replicas(
        self,
        ref: ScaleTargetRef,
        replicas: int,
        resource_version: str,
        *,
        annotations: Mapping[str, str] | None = None,
    ) -> ScaleState:
        """Set ``spec.replicas`` if the target is still at ``resource_version``
        (else :class:`Conflict`). With ``annotations`` (kinds in
        :data:`REPLICAS_IN_SPEC` only) the object itself is patched, so the
        replicas and the annotations change in one atomic write."""
        meta: dict[str, Any] = {"resourceVersion": resource_version} if resource_version else {}
        if annotations:
            if (ref.group, ref.kind) not in REPLICAS_IN_SPEC:
                raise ValueError(f"{ref.kind}.{ref.group}: replicas may not live at spec.replicas")
            meta["annotations"] = dict(annotations)
            doc = await request_json(
                self.api,
                "PATCH",
                await self.object_path(ref),
                {"metadata": meta, "spec": {"replicas": replicas}},
                content_type="application/merge-patch+json",
            )
            return scale_state_from_object(doc)
        doc = await request_json(
            self.api,
            "PATCH",
            await self.object_path(ref) + "/scale",
            {"metadata": meta, "spec": {"replicas": replicas}},
            content_type="application/merge-patch+json",
        )
        return _scale_from_dict(doc)


# --- retries -----------------------------------------------------------------


def backoff_delay(attempt: int, base_s: float, cap_s: float, unit_random: float) -> float:
    """Full jitter (AWS architecture blog): uniform in [0, min(cap, base * 2^attempt)].

    ``attempt`` counts from 0; ``unit_random`` is in [0, 1).
    """
    return unit_random * min(cap_s, base_s * (2.0 ** min(attempt, 30)))


async def retry_with_backoff(
    fn: Callable[[], Awaitable[T]],
    *,
    attempts: int = 6,
    base_s: float = 0.2,
    cap_s: float = 5.0,
    stop: asyncio.Event | None = None,
    on_retry: Callable[[KubeError, int, float], None] | None = None,
    rand: Callable[[], float] = random.random,
) -> T:
    """Call ``fn`` until it succeeds; retry only retryable KubeErrors (429, 5xx,
    unreachable), at most ``attempts`` calls in all. A 429's Retry-After is a
    floor for the wait. ``stop`` cuts a wait short and re-raises the last error."""
    attempt = 0
    while True:
        try:
            return await fn()
        except KubeError as e:
            attempt += 1
            if not e.retryable or attempt >= attempts or (stop is not None and stop.is_set()):
                raise
            delay = backoff_delay(attempt - 1, base_s, cap_s, rand())
            if isinstance(e, Throttled) and e.retry_after_s is not None:
                delay = max(delay, min(e.retry_after_s, cap_s))
            if on_retry is not None:
                on_retry(e, attempt, delay)
            if stop is None:
                await asyncio.sleep(delay)
            else:
                await sleep_unless_stopped(stop, delay)
                if stop.is_set():
                    raise


# --- time and events ---------------------------------------------------------


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
    # client-go's scheme: <object>.<hex nanoseconds>, unique per emitter and moment.
    return f"{target_name}.{int(now * 1e9):x}"[:253]


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
            target = await ScaleClient(api).get_object(ref)
            uid = str((target.get("metadata") or {}).get("uid") or "") or None
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
