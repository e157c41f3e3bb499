"""The kinds kube-sim serves: names, scope, subresources and table columns.

Pure data and functions (no I/O). Built-in kinds are declared here; custom
resources come from CustomResourceDefinition objects (:func:`from_crd`), the
GPUScaler among them, loaded from the same YAML the deploy manifests ship.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

Obj = dict[str, Any]
Cell = Callable[[Obj, float], Any]

ALL_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")
READ_VERBS = ("get", "list", "watch")


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    cell: Cell
    description: str = ""
    format: str = ""
    priority: int = 0

    def definition(self) -> Obj:
        return {
            "name": self.name,
            "type": self.type,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        }


@dataclass(frozen=True)
class ResourceDef:
    group: str  # "" for the core API
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool = True
    short_names: tuple[str, ...] = ()
    subresources: frozenset[str] = frozenset()
    verbs: tuple[str, ...] = ALL_VERBS
    categories: tuple[str, ...] = ()
    columns: tuple[Column, ...] = ()
    custom: bool = False  # a custom resource: DELETE answers with the object
    storage: str = ""  # objects shared with another resource (events); default: own
    # A custom resource's structural schema (its CRD version's openAPIV3Schema).
    schema: Obj | None = field(default=None, compare=False)
    # Whether a PUT may omit metadata.resourceVersion (the strategy's AllowUnconditionalUpdate).
    unconditional_update: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """``deployments.apps``, ``pods``: how Kubernetes names it in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def store_key(self) -> str:
        return self.storage or f"{self.group}/{self.plural}"

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    def table_columns(self) -> tuple[Column, ...]:
        if self.columns:
            return self.columns
        return (NAME_COLUMN, AGE_COLUMN)

    def discovery(self) -> list[Obj]:
        entry: Obj = {
            "name": self.plural,
            "singularName": self.singular,
            "namespaced": self.namespaced,
            "kind": self.kind,
            "verbs": list(self.verbs),
        }
        if self.short_names:
            entry["shortNames"] = list(self.short_names)
        if self.categories:
            entry["categories"] = list(self.categories)
        entries = [entry]
        if "status" in self.subresources:
            entries.append(
                {
                    "name": f"{self.plural}/status",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "kind": self.kind,
                    "verbs": ["get", "patch", "update"],
                }
            )
        if "token" in self.subresources:
            entries.append(
                {
                    "name": f"{self.plural}/token",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "group": "authentication.k8s.io",
                    "version": "v1",
                    "kind": "TokenRequest",
                    "verbs": ["create"],
                }
            )
        if "scale" in self.subresources:
            entries.append(
                {
                    "name": f"{self.plural}/scale",
                    "singularName": "",
                    "namespaced": self.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }
            )
        return entries


# --- cells ---------------------------------------------------------------------


def parse_time(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def format_time(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def human_duration(seconds: float) -> str:
    """kubectl's short age: 45s, 3m12s, 15m, 2h30m, 5h, 3d4h, 12d."""
    s = int(max(0.0, seconds))
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m{s % 60}s" if s % 60 else f"{minutes}m"
    hours = s // 3600
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    days = hours // 24
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    return f"{days}d"


def age_of(stamp: Any, now: float) -> str:
    ts = parse_time(stamp) if isinstance(stamp, str) else None
    return "<unknown>" if ts is None else human_duration(now - ts)


_JSONPATH_STEP = re.compile(
    r"""\.(?P<key>[A-Za-z0-9_-]+)"""
    r"""|\[(?P<index>\d+)\]"""
    r"""|\[\?\(@\.(?P<field>[A-Za-z0-9_-]+)\s*==\s*(?P<quote>["'])(?P<value>[^"']*)(?P=quote)\)\]"""
)


def json_path(obj: Any, path: str) -> Any:
    """The value at a printer column's path, or None: ``.a.b.c``, ``.a.0``, ``.a[0]``
    and kubectl's filter ``.status.conditions[?(@.type=="Ready")].status`` (the
    first match; the API server prints every match, joined by commas)."""
    text = path.strip()
    if text.startswith("{") and text.endswith("}"):
        text = text[1:-1]
    if text and not text.startswith((".", "[")):
        text = "." + text
    current = obj
    at = 0
    while at < len(text):
        step = _JSONPATH_STEP.match(text, at)
        if step is None:
            return None
        at = step.end()
        if step.group("key") is not None:
            key = step.group("key")
            if isinstance(current, dict):
                current = current.get(key)
            elif isinstance(current, list) and key.isdigit() and int(key) < len(current):
                current = current[int(key)]
            else:
                return None
        elif step.group("index") is not None:
            index = int(step.group("index"))
            if not isinstance(current, list) or index >= len(current):
                return None
            current = current[index]
        else:
            if not isinstance(current, list):
                return None
            field_name, wanted = step.group("field"), step.group("value")
            current = next(
                (i for i in current if isinstance(i, dict) and str(i.get(field_name)) == wanted), None
            )
            if current is None:
                return None
    return current


def _name(obj: Obj, _now: float) -> Any:
    return obj.get("metadata", {}).get("name", "")


def _age(obj: Obj, now: float) -> Any:
    return age_of(obj.get("metadata", {}).get("creationTimestamp"), now)


NAME_COLUMN = Column("Name", "string", _name, "Name must be unique within a namespace.", "name")
AGE_COLUMN = Column("Age", "string", _age, "CreationTimestamp is the time the object was created.")


def _path_cell(path: str, type_: str) -> Cell:
    def cell(obj: Obj, now: float) -> Any:
        value = json_path(obj, path)
        if type_ == "date":
            return age_of(value, now) if value is not None else None
        return value

    return cell


def _int(path: str) -> Cell:
    def cell(obj: Obj, _now: float) -> Any:
        value = json_path(obj, path)
        return value if isinstance(value, int) else 0

    return cell


def _ready_of(ready_path: str, want_path: str) -> Cell:
    def cell(obj: Obj, _now: float) -> Any:
        ready = json_path(obj, ready_path) or 0
        want = json_path(obj, want_path) or 0
        return f"{ready}/{want}"

    return cell


def _pod_ready(obj: Obj, _now: float) -> Any:
    statuses = obj.get("status", {}).get("containerStatuses") or []
    total = len(obj.get("spec", {}).get("containers") or [])
    ready = sum(1 for s in statuses if s.get("ready"))
    return f"{ready}/{total}"


def _pod_status(obj: Obj, _now: float) -> Any:
    if obj.get("metadata", {}).get("deletionTimestamp"):
        return "Terminating"
    status = obj.get("status", {})
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting")
        if waiting and waiting.get("reason"):
            return waiting["reason"]
    gated = any(
        c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
        for c in status.get("conditions") or ()
        if isinstance(c, dict)
    )
    return "SchedulingGated" if gated else status.get("reason") or status.get("phase", "Pending")


def _pod_restarts(obj: Obj, _now: float) -> Any:
    return sum(int(s.get("restartCount", 0)) for s in obj.get("status", {}).get("containerStatuses") or [])


def _node_status(obj: Obj, _now: float) -> Any:
    for cond in obj.get("status", {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return "Ready" if cond.get("status") == "True" else "NotReady"
    return "Unknown"


def _node_roles(obj: Obj, _now: float) -> Any:
    labels = obj.get("metadata", {}).get("labels") or {}
    roles = [k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/")]
    return ",".join(sorted(roles)) or "<none>"


def _event_object(obj: Obj, _now: float) -> Any:
    ref = obj.get("involvedObject") or obj.get("regarding") or {}
    return f"{str(ref.get('kind', '')).lower()}/{ref.get('name', '')}"


def _event_columns(message_path: str) -> tuple[Column, ...]:
    """``kubectl get events`` columns; the two Event APIs differ only in the message's field."""
    return (
        Column("Last Seen", "string", _event_last_seen, "Time since the last occurrence"),
        Column("Type", "string", _path_cell(".type", "string"), "Normal or Warning"),
        Column("Reason", "string", _path_cell(".reason", "string"), "Short reason"),
        Column("Object", "string", _event_object, "The object this event is about"),
        Column("Message", "string", _path_cell(message_path, "string"), "What happened"),
    )


def _event_last_seen(obj: Obj, now: float) -> Any:
    stamp = (
        obj.get("lastTimestamp") or obj.get("eventTime") or obj.get("metadata", {}).get("creationTimestamp")
    )
    return age_of(stamp, now)


def _hpa_reference(obj: Obj, _now: float) -> Any:
    ref = obj.get("spec", {}).get("scaleTargetRef") or {}
    return f"{ref.get('kind', '')}/{ref.get('name', '')}"


def _hpa_targets(obj: Obj, _now: float) -> Any:
    parts = []
    currents = {
        json_path(m, f".{m.get('type', '').lower()}.name") or m.get("type"): m
        for m in obj.get("status", {}).get("currentMetrics") or []
    }
    for metric in obj.get("spec", {}).get("metrics") or []:
        kind = str(metric.get("type", "")).lower()
        spec = metric.get(kind) or {}
        target = spec.get("target") or {}
        want = target.get("averageUtilization") or target.get("averageValue") or target.get("value")
        name = (spec.get("name") or (spec.get("metric") or {}).get("name")) or metric.get("type")
        current = currents.get(name)
        now_value = "<unknown>"
        if current is not None:
            cur = (current.get(kind) or {}).get("current") or {}
            now_value = str(cur.get("averageUtilization") or cur.get("averageValue") or cur.get("value"))
        suffix = "%" if "averageUtilization" in target else ""
        parts.append(f"{now_value}{suffix if current else ''}/{want}{suffix}")
    return ", ".join(parts) or "<none>"


def _apiservice_backend(obj: Obj, _now: float) -> Any:
    service = obj.get("spec", {}).get("service") or {}
    return f"{service.get('namespace', '')}/{service.get('name', '')}" if service else "Local"


def _selector(path: str) -> Cell:
    def cell(obj: Obj, _now: float) -> Any:
        labels = json_path(obj, path) or {}
        return ",".join(f"{k}={v}" for k, v in labels.items()) or "<none>"

    return cell


def _containers(obj: Obj, _now: float) -> Any:
    containers = json_path(obj, ".spec.template.spec.containers") or []
    return ",".join(c.get("name", "") for c in containers)


def _images(obj: Obj, _now: float) -> Any:
    containers = json_path(obj, ".spec.template.spec.containers") or []
    return ",".join(c.get("image", "") for c in containers)


def _count(path: str) -> Cell:
    def cell(obj: Obj, _now: float) -> Any:
        value = json_path(obj, path)
        return len(value) if isinstance(value, dict) else 0

    return cell


def _service_ports(obj: Obj, _now: float) -> Any:
    ports = json_path(obj, ".spec.ports") or []
    return ",".join(f"{p.get('port')}/{p.get('protocol', 'TCP')}" for p in ports) or "<none>"


def _pod_selector(obj: Obj, _now: float) -> Any:
    # metav1.FormatLabelSelector, for the matchLabels that manifests use
    labels = json_path(obj, ".spec.podSelector.matchLabels") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "<none>"


# --- built-in kinds ------------------------------------------------------------


def _core(plural: str, singular: str, kind: str, **kw: Any) -> ResourceDef:
    return ResourceDef("", "v1", plural, singular, kind, **kw)


BUILTINS: tuple[ResourceDef, ...] = (
    _core(
        "pods",
        "pod",
        "Pod",
        short_names=("po",),
        subresources=frozenset({"status"}),
        categories=("all",),
        columns=(
            NAME_COLUMN,
            Column("Ready", "string", _pod_ready, "The aggregate readiness state of this pod"),
            Column("Status", "string", _pod_status, "The aggregate status of the containers"),
            Column("Restarts", "string", _pod_restarts, "The number of times the containers restarted"),
            AGE_COLUMN,
            Column("IP", "string", _path_cell(".status.podIP", "string"), "Pod IP", priority=1),
            Column("Node", "string", _path_cell(".spec.nodeName", "string"), "Node name", priority=1),
        ),
    ),
    _core(
        "nodes",
        "node",
        "Node",
        namespaced=False,
        short_names=("no",),
        subresources=frozenset({"status"}),
        columns=(
            NAME_COLUMN,
            Column("Status", "string", _node_status, "The status of the node"),
            Column("Roles", "string", _node_roles, "The roles of the node"),
            AGE_COLUMN,
            Column("Version", "string", _path_cell(".status.nodeInfo.kubeletVersion", "string"), "Kubelet"),
        ),
    ),
    _core(
        "namespaces",
        "namespace",
        "Namespace",
        namespaced=False,
        short_names=("ns",),
        subresources=frozenset({"status"}),
        columns=(
            NAME_COLUMN,
            Column("Status", "string", _path_cell(".status.phase", "string"), "The namespace phase"),
            AGE_COLUMN,
        ),
    ),
    _core(
        "events",
        "event",
        "Event",
        short_names=("ev",),
        storage="events",
        columns=_event_columns(".message"),
    ),
    ResourceDef(
        "events.k8s.io",
        "v1",
        "events",
        "event",
        "Event",
        short_names=("ev",),
        storage="events",
        columns=_event_columns(".note"),  # events.k8s.io/v1 calls the message "note"
    ),
    ResourceDef(
        "apps",
        "v1",
        "deployments",
        "deployment",
        "Deployment",
        short_names=("deploy",),
        subresources=frozenset({"status", "scale"}),
        categories=("all",),
        columns=(
            NAME_COLUMN,
            Column("Ready", "string", _ready_of(".status.readyReplicas", ".spec.replicas"), "Ready/desired"),
            Column("Up-to-date", "integer", _int(".status.updatedReplicas"), "Up-to-date replicas"),
            Column("Available", "integer", _int(".status.availableReplicas"), "Available replicas"),
            AGE_COLUMN,
            Column("Containers", "string", _containers, "Container names", priority=1),
            Column("Images", "string", _images, "Container images", priority=1),
            Column("Selector", "string", _selector(".spec.selector.matchLabels"), "Selector", priority=1),
        ),
    ),
    ResourceDef(
        "apps",
        "v1",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        short_names=("sts",),
        subresources=frozenset({"status", "scale"}),
        categories=("all",),
        columns=(
            NAME_COLUMN,
            Column("Ready", "string", _ready_of(".status.readyReplicas", ".spec.replicas"), "Ready/desired"),
            AGE_COLUMN,
            Column("Containers", "string", _containers, "Container names", priority=1),
            Column("Images", "string", _images, "Container images", priority=1),
        ),
    ),
    ResourceDef(
        "apps",
        "v1",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        short_names=("rs",),
        subresources=frozenset({"status", "scale"}),
        categories=("all",),
        columns=(
            NAME_COLUMN,
            Column("Desired", "integer", _int(".spec.replicas"), "Desired replicas"),
            Column("Current", "integer", _int(".status.replicas"), "Current replicas"),
            Column("Ready", "integer", _int(".status.readyReplicas"), "Ready replicas"),
            AGE_COLUMN,
        ),
    ),
    ResourceDef(
        "coordination.k8s.io",
        "v1",
        "leases",
        "lease",
        "Lease",
        unconditional_update=False,
        columns=(
            NAME_COLUMN,
            Column("Holder", "string", _path_cell(".spec.holderIdentity", "string"), "Lease holder"),
            AGE_COLUMN,
        ),
    ),
    ResourceDef(
        "autoscaling",
        "v2",
        "horizontalpodautoscalers",
        "horizontalpodautoscaler",
        "HorizontalPodAutoscaler",
        short_names=("hpa",),
        subresources=frozenset({"status"}),
        categories=("all",),
        columns=(
            NAME_COLUMN,
            Column("Reference", "string", _hpa_reference, "The scale target"),
            Column("Targets", "string", _hpa_targets, "Current/target metric values"),
            Column("MinPods", "string", _path_cell(".spec.minReplicas", "string"), "Lower limit"),
            Column("MaxPods", "string", _path_cell(".spec.maxReplicas", "string"), "Upper limit"),
            Column("Replicas", "string", _path_cell(".status.currentReplicas", "string"), "Current replicas"),
            AGE_COLUMN,
        ),
    ),
    ResourceDef(
        "apiextensions.k8s.io",
        "v1",
        "customresourcedefinitions",
        "customresourcedefinition",
        "CustomResourceDefinition",
        namespaced=False,
        short_names=("crd", "crds"),
        subresources=frozenset({"status"}),
        unconditional_update=False,
        columns=(
            NAME_COLUMN,
            Column("Created At", "date", _path_cell(".metadata.creationTimestamp", "string")),
        ),
    ),
    _core(
        "secrets",
        "secret",
        "Secret",
        columns=(
            NAME_COLUMN,
            Column("Type", "string", _path_cell(".type", "string"), "The type of the secret"),
            Column("Data", "string", _count(".data"), "The number of keys"),
            AGE_COLUMN,
        ),
    ),
    _core(
        "configmaps",
        "configmap",
        "ConfigMap",
        short_names=("cm",),
        columns=(
            NAME_COLUMN,
            Column("Data", "string", _count(".data"), "The number of keys"),
            AGE_COLUMN,
        ),
    ),
    _core(
        "services",
        "service",
        "Service",
        short_names=("svc",),
        subresources=frozenset({"status"}),
        categories=("all",),
        columns=(
            NAME_COLUMN,
            Column("Type", "string", _path_cell(".spec.type", "string"), "The service type"),
            Column("Cluster-IP", "string", _path_cell(".spec.clusterIP", "string"), "The cluster IP"),
            Column("External-IP", "string", lambda _o, _n: "<none>", "External IPs"),
            Column("Port(s)", "string", _service_ports, "The service ports"),
            AGE_COLUMN,
        ),
    ),
    _core(
        "serviceaccounts",
        "serviceaccount",
        "ServiceAccount",
        short_names=("sa",),
        subresources=frozenset({"token"}),  # TokenRequest (authn.py)
    ),
    # Create-only: a review is answered, never stored (authn.py).
    ResourceDef(
        "authentication.k8s.io",
        "v1",
        "tokenreviews",
        "tokenreview",
        "TokenReview",
        namespaced=False,
        verbs=("create",),
    ),
    _core("endpoints", "endpoints", "Endpoints", short_names=("ep",)),
    ResourceDef(
        "apps",
        "v1",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        short_names=("ds",),
        subresources=frozenset({"status"}),
        categories=("all",),
        columns=(
            NAME_COLUMN,
            Column("Desired", "integer", _int(".status.desiredNumberScheduled"), "Desired pods"),
            Column("Current", "integer", _int(".status.currentNumberScheduled"), "Current pods"),
            Column("Ready", "integer", _int(".status.numberReady"), "Ready pods"),
            AGE_COLUMN,
        ),
    ),
    ResourceDef(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        short_names=("pdb",),
        subresources=frozenset({"status"}),
        columns=(
            NAME_COLUMN,
            Column("Min Available", "string", _path_cell(".spec.minAvailable", "string"), "Min available"),
            Column(
                "Max Unavailable", "string", _path_cell(".spec.maxUnavailable", "string"), "Max unavailable"
            ),
            AGE_COLUMN,
        ),
    ),
    ResourceDef(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "networkpolicy",
        "NetworkPolicy",
        short_names=("netpol",),
        columns=(
            NAME_COLUMN,
            Column("Pod-Selector", "string", _pod_selector, "The pods it selects"),
            AGE_COLUMN,
        ),
    ),
    ResourceDef(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        namespaced=False,
        short_names=("pc",),
        columns=(
            NAME_COLUMN,
            Column("Value", "integer", _int(".value"), "The priority"),
            Column(
                "Global-Default", "boolean", _path_cell(".globalDefault", "boolean"), "The default for pods"
            ),
            Column("Preemption-Policy", "string", _path_cell(".preemptionPolicy", "string"), "Preemption"),
            AGE_COLUMN,
        ),
    ),
    # Aggregated APIs (an external metrics provider's APIService); stored, nothing is proxied.
    ResourceDef(
        "apiregistration.k8s.io",
        "v1",
        "apiservices",
        "apiservice",
        "APIService",
        namespaced=False,
        subresources=frozenset({"status"}),
        categories=("api-extensions",),
        columns=(
            NAME_COLUMN,
            Column("Service", "string", _apiservice_backend, "The Service serving this API, or Local"),
            AGE_COLUMN,
        ),
    ),
    ResourceDef("rbac.authorization.k8s.io", "v1", "roles", "role", "Role"),
    ResourceDef("rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding"),
    ResourceDef(
        "rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", namespaced=False
    ),
    ResourceDef(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        namespaced=False,
    ),
)


def from_crd(crd: Obj) -> list[ResourceDef]:
    """One ResourceDef per served version of a CustomResourceDefinition."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = str(spec.get("group", ""))
    plural = str(names.get("plural", ""))
    kind = str(names.get("kind", ""))
    if not group or not plural or not kind:
        raise ValueError("a CRD needs spec.group, spec.names.plural and spec.names.kind")
    defs = []
    for version in spec.get("versions") or []:
        if not version.get("served", True):
            continue
        subs = set((version.get("subresources") or {}).keys()) & {"status", "scale"}
        printer = version.get("additionalPrinterColumns") or []
        columns: list[Column] = [NAME_COLUMN]
        for col in printer:
            columns.append(
                Column(
                    str(col.get("name", "")),
                    str(col.get("type", "string")),
                    _path_cell(str(col.get("jsonPath", "")), str(col.get("type", "string"))),
                    str(col.get("description", "")),
                    str(col.get("format", "")),
                    int(col.get("priority", 0)),
                )
            )
        if not any(c.name.lower() == "age" for c in columns):
            columns.append(AGE_COLUMN)
        defs.append(
            ResourceDef(
                group,
                str(version.get("name", "")),
                plural,
                str(names.get("singular") or kind.lower()),
                kind,
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                short_names=tuple(names.get("shortNames") or ()),
                subresources=frozenset(subs),
                categories=tuple(names.get("categories") or ()),
                columns=tuple(columns),
                custom=True,
                # All versions of one CRD share their objects.
                storage=f"{group}/{plural}",
                schema=((version.get("schema") or {}).get("openAPIV3Schema") or None),
                unconditional_update=False,
            )
        )
    return defs


@dataclass
class Registry:
    """The kinds being served, by (group, version, plural)."""

    defs: dict[tuple[str, str, str], ResourceDef] = field(default_factory=dict)
    generation: int = 0  # grows on every change: OpenAPI documents are cached per generation

    @classmethod
    def with_builtins(cls) -> Registry:
        registry = cls()
        for d in BUILTINS:
            registry.add(d)
        return registry

    def add(self, d: ResourceDef) -> None:
        self.defs[(d.group, d.version, d.plural)] = d
        self.generation += 1

    def remove_group_plural(self, group: str, plural: str) -> None:
        for key in [k for k in self.defs if k[0] == group and k[2] == plural]:
            del self.defs[key]
        self.generation += 1

    def get(self, group: str, version: str, plural: str) -> ResourceDef | None:
        return self.defs.get((group, version, plural))

    def by_kind(self, api_version: str, kind: str) -> ResourceDef | None:
        group, _, version = api_version.rpartition("/")
        for d in self.defs.values():
            if d.group == group and d.version == version and d.kind == kind:
                return d
        return None

    def groups(self) -> dict[str, list[str]]:
        """group -> versions, in registration order (first is preferred)."""
        out: dict[str, list[str]] = {}
        for d in self.defs.values():
            versions = out.setdefault(d.group, [])
            if d.version not in versions:
                versions.append(d.version)
        return out

    def in_group_version(self, group: str, version: str) -> Iterable[ResourceDef]:
        return [d for d in self.defs.values() if d.group == group and d.version == version]
