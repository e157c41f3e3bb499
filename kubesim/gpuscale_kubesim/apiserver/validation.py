"""Validation of the built-in kinds, after k8s.io/kubernetes pkg/apis/*/validation. Pure.

Only rules the real API server applies, with its field paths and words:
object metadata (names as DNS-1123 subdomains, labels, labels in
selectors, annotations, owner references), Pods and pod templates,
Deployments, StatefulSets, ReplicaSets, DaemonSets, Namespaces, Services,
ConfigMaps, Secrets, ServiceAccounts, RBAC, PodDisruptionBudgets, NetworkPolicies, Leases,
HPAs and Events (the legacy rules for core v1, the strict ones for
events.k8s.io/v1, notes limited to 1,024 bytes). Custom resources are
checked against their CRD's schema elsewhere (structural, cel).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from gpuscale_kubesim.apiserver import fielderrors as fe
from gpuscale_kubesim.apiserver.fielderrors import FieldError, GoLiteral

Obj = dict[str, Any]
Errors = list[FieldError]
NameFn = Callable[[str, bool], list[str]]

# --- names (k8s.io/apimachinery/pkg/util/validation) -----------------------------------


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    text = msg + " (e.g. " + " or ".join(f"'{e}', " for e in examples)
    return text + f"regex used for validation is '{fmt}')"


DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS1123_SUBDOMAIN_FMT = DNS1123_LABEL_FMT + r"(\." + DNS1123_LABEL_FMT + ")*"
DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
LABEL_VALUE_FMT = "(" + QUALIFIED_NAME_FMT + ")?"
CONFIG_KEY_FMT = "[-._a-zA-Z0-9]+"
_DNS1123_LABEL = re.compile(f"^{DNS1123_LABEL_FMT}$")
_DNS1123_SUBDOMAIN = re.compile(f"^{DNS1123_SUBDOMAIN_FMT}$")
_DNS1035_LABEL = re.compile(f"^{DNS1035_LABEL_FMT}$")
_QUALIFIED_NAME = re.compile(f"^{QUALIFIED_NAME_FMT}$")
_LABEL_VALUE = re.compile(f"^{LABEL_VALUE_FMT}$")
_CONFIG_KEY = re.compile(f"^{CONFIG_KEY_FMT}$")
DNS1123_LABEL_MSG = regex_error(
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character",
    DNS1123_LABEL_FMT,
    "my-name",
    "123-abc",
)
DNS1123_SUBDOMAIN_MSG = regex_error(
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character",
    DNS1123_SUBDOMAIN_FMT,
    "example.com",
)
DNS1035_LABEL_MSG = regex_error(
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character",
    DNS1035_LABEL_FMT,
    "my-name",
    "abc-123",
)
QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)


def _max_len(value: str, n: int) -> list[str]:
    return [f"must be no more than {n} characters"] if len(value) > n else []


def is_dns1123_label(value: str) -> list[str]:
    errs = _max_len(value, 63)
    if not _DNS1123_LABEL.match(value):
        errs.append(DNS1123_LABEL_MSG)
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = _max_len(value, 253)
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(DNS1123_SUBDOMAIN_MSG)
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = _max_len(value, 63)
    if not _DNS1035_LABEL.match(value):
        errs.append(DNS1035_LABEL_MSG)
    return errs


def _mask_trailing_dash(name: str) -> str:
    return name[:-2] + "a" if len(name) > 1 and name.endswith("-") else name


def name_is_dns_subdomain(name: str, prefix: bool) -> list[str]:
    return is_dns1123_subdomain(_mask_trailing_dash(name) if prefix else name)


def name_is_dns_label(name: str, prefix: bool) -> list[str]:
    return is_dns1123_label(_mask_trailing_dash(name) if prefix else name)


def name_is_dns1035_label(name: str, prefix: bool) -> list[str]:
    return is_dns1035_label(_mask_trailing_dash(name) if prefix else name)


def path_segment_name(name: str, prefix: bool) -> list[str]:
    if not prefix and name in (".", ".."):
        return [f"may not be '{name}'"]
    return [f"may not contain '{c}'" for c in ("/", "%") if c in name]


def is_qualified_name(value: str) -> list[str]:
    parts = value.split("/")
    if len(parts) == 1:
        prefix, name = "", parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            return ["prefix part " + "must be non-empty"]
    else:
        return [
            "a qualified name "
            + regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    errs = [f"prefix part {m}" for m in is_dns1123_subdomain(prefix)] if prefix else []
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _QUALIFIED_NAME.match(name):
        errs.append(
            "name part " + regex_error(QUALIFIED_NAME_MSG, QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


def is_label_value(value: str) -> list[str]:
    errs = _max_len(value, 63)
    if not _LABEL_VALUE.match(value):
        errs.append(
            regex_error(
                "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
                "and must start and end with an alphanumeric character",
                LABEL_VALUE_FMT,
                "MyValue",
                "my_value",
                "12345",
            )
        )
    return errs


def is_config_map_key(value: str) -> list[str]:
    errs = _max_len(value, 253)
    if not _CONFIG_KEY.match(value):
        errs.append(
            regex_error(
                "a valid config key must consist of alphanumeric characters, '-', '_' or '.'",
                CONFIG_KEY_FMT,
                "key.name",
                "KEY_NAME",
                "key-name",
            )
        )
    if value in (".", ".."):
        errs.append(f"must not be '{value}'")
    elif value.startswith(".."):
        errs.append("must not start with '..'")
    return errs


# --- object metadata --------------------------------------------------------------------

TOTAL_ANNOTATION_SIZE = 256 * 1024


def validate_labels(labels: Any, path: str) -> Errors:
    errs: Errors = []
    for key, value in (labels or {}).items():
        errs += [fe.invalid(path, key, m) for m in is_qualified_name(key)]
        errs += [fe.invalid(path, value, m) for m in is_label_value(str(value))]
    return errs


def validate_annotations(annotations: Any, path: str) -> Errors:
    errs: Errors = []
    total = 0
    for key, value in (annotations or {}).items():
        errs += [fe.invalid(path, key, m) for m in is_qualified_name(key.lower())]
        total += len(key.encode()) + len(str(value).encode())
    if total > TOTAL_ANNOTATION_SIZE:
        errs.append(fe.too_long(path, "", TOTAL_ANNOTATION_SIZE))
    return errs


def validate_object_meta(meta: Obj, namespaced: bool, name_fn: NameFn, path: str = "metadata") -> Errors:
    errs: Errors = []
    generate = str(meta.get("generateName") or "")
    if generate:
        errs += [fe.invalid(f"{path}.generateName", generate, m) for m in name_fn(generate, True)]
    name = str(meta.get("name") or "")
    if not name:
        errs.append(fe.required(f"{path}.name", "name or generateName is required"))
    else:
        errs += [fe.invalid(f"{path}.name", name, m) for m in name_fn(name, False)]
    namespace = str(meta.get("namespace") or "")
    if namespaced:
        if not namespace:
            errs.append(fe.required(f"{path}.namespace"))
        else:
            errs += [
                fe.invalid(f"{path}.namespace", namespace, m) for m in name_is_dns_label(namespace, False)
            ]
    elif namespace:
        errs.append(fe.forbidden(f"{path}.namespace", "not allowed on this type"))
    errs += validate_labels(meta.get("labels"), f"{path}.labels")
    errs += validate_annotations(meta.get("annotations"), f"{path}.annotations")
    for i, ref in enumerate(meta.get("ownerReferences") or []):
        where = f"{path}.ownerReferences[{i}]"
        for key, words in (("apiVersion", "version"), ("kind", "kind"), ("name", "name"), ("uid", "uid")):
            if not ref.get(key):
                errs.append(fe.invalid(f"{where}.{key}", ref.get(key) or "", f"{words} must not be empty"))
    controllers = [r for r in meta.get("ownerReferences") or [] if r.get("controller")]
    if len(controllers) > 1:
        errs.append(
            fe.invalid(
                f"{path}.ownerReferences",
                GoLiteral(str(len(controllers))),
                "Only one reference can have Controller set to true",
            )
        )
    return errs


# --- selectors --------------------------------------------------------------------------

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def validate_label_selector(selector: Obj, path: str) -> Errors:
    errs: Errors = []
    for i, req in enumerate(selector.get("matchExpressions") or []):
        where = f"{path}.matchExpressions[{i}]"
        op = req.get("operator")
        values = req.get("values") or []
        if op in ("In", "NotIn") and not values:
            errs.append(
                fe.required(f"{where}.values", "must be specified when `operator` is 'In' or 'NotIn'")
            )
        elif op in ("Exists", "DoesNotExist") and values:
            errs.append(
                fe.forbidden(
                    f"{where}.values", "may not be specified when `operator` is 'Exists' or 'DoesNotExist'"
                )
            )
        elif op not in _OPERATORS:
            errs.append(fe.invalid(f"{where}.operator", op, "not a valid selector operator"))
        errs += [
            fe.invalid(f"{where}.key", req.get("key"), m)
            for m in is_qualified_name(str(req.get("key") or ""))
        ]
    errs += validate_labels(selector.get("matchLabels"), f"{path}.matchLabels")
    return errs


def selector_matches(selector: Obj, labels: dict[str, str]) -> bool:
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for req in selector.get("matchExpressions") or []:
        key, op, values = req.get("key"), req.get("operator"), req.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _selector_empty(selector: Obj) -> bool:
    return not selector.get("matchLabels") and not selector.get("matchExpressions")


# --- pods -------------------------------------------------------------------------------

RESTART_POLICIES = ["Always", "OnFailure", "Never"]
PROTOCOLS = ["TCP", "UDP", "SCTP"]


def _nonnegative(value: Any, path: str) -> Errors:
    if isinstance(value, int) and value < 0:
        return [fe.invalid(path, value, "must be greater than or equal to 0")]
    return []


def validate_containers(containers: Any, path: str, *, for_pod: bool) -> Errors:
    errs: Errors = []
    if not containers:
        return [fe.required(path)]
    names: set[str] = set()
    for i, ctr in enumerate(containers):
        where = f"{path}[{i}]"
        name = str(ctr.get("name") or "")
        if not name:
            errs.append(fe.required(f"{where}.name"))
        else:
            errs += [fe.invalid(f"{where}.name", name, m) for m in is_dns1123_label(name)]
            if name in names:
                errs.append(fe.duplicate(f"{where}.name", name))
            names.add(name)
        if for_pod and not ctr.get("image"):
            errs.append(fe.required(f"{where}.image"))
        for j, port in enumerate(ctr.get("ports") or []):
            where_port = f"{where}.ports[{j}]"
            number = port.get("containerPort")
            if not isinstance(number, int) or not 1 <= number <= 65535:
                errs.append(
                    fe.invalid(
                        f"{where_port}.containerPort", number, "must be between 1 and 65535, inclusive"
                    )
                )
            if port.get("protocol") and port["protocol"] not in PROTOCOLS:
                errs.append(fe.not_supported(f"{where_port}.protocol", port["protocol"], PROTOCOLS))
        for j, env in enumerate(ctr.get("env") or []):
            if not env.get("name"):
                errs.append(fe.required(f"{where}.env[{j}].name"))
    return errs


def validate_pod_spec(spec: Any, path: str, *, for_pod: bool) -> Errors:
    if not isinstance(spec, dict):
        return [fe.required(f"{path}.containers")]
    errs = validate_containers(spec.get("containers"), f"{path}.containers", for_pod=for_pod)
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in RESTART_POLICIES:
        errs.append(fe.not_supported(f"{path}.restartPolicy", policy, RESTART_POLICIES))
    grace = spec.get("terminationGracePeriodSeconds")
    errs += _nonnegative(grace, f"{path}.terminationGracePeriodSeconds")
    return errs


def validate_pod(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    return errs + validate_pod_spec(obj.get("spec"), "spec", for_pod=True)


def validate_template(template: Any, selector: Obj | None, path: str, *, restart_always: bool) -> Errors:
    """A workload's pod template: labels that its selector matches, a valid pod spec."""
    if not isinstance(template, dict):
        return [fe.required(path)]
    errs: Errors = []
    meta = template.get("metadata") or {}
    labels = meta.get("labels") or {}
    errs += validate_labels(labels, f"{path}.metadata.labels")
    errs += validate_annotations(meta.get("annotations"), f"{path}.metadata.annotations")
    if selector is not None and not _selector_empty(selector) and not selector_matches(selector, labels):
        errs.append(
            fe.invalid(
                f"{path}.metadata.labels",
                GoLiteral.string_map(labels),
                "`selector` does not match template `labels`",
            )
        )
    spec = template.get("spec")
    errs += validate_pod_spec(spec, f"{path}.spec", for_pod=False)
    if restart_always and isinstance(spec, dict):
        policy = spec.get("restartPolicy", "Always")
        if policy != "Always":
            errs.append(fe.not_supported(f"{path}.spec.restartPolicy", policy, ["Always"]))
    return errs


# --- apps -------------------------------------------------------------------------------


def _workload_selector(spec: Obj, kind_words: str) -> tuple[Errors, Obj | None]:
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        return [fe.required("spec.selector")], None
    errs = validate_label_selector(selector, "spec.selector")
    if _selector_empty(selector):
        errs.append(
            fe.invalid("spec.selector", GoLiteral("null"), f"empty selector is invalid for {kind_words}")
        )
    return errs, selector


def validate_deployment(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    spec = obj.get("spec") or {}
    errs += _nonnegative(spec.get("replicas"), "spec.replicas")
    sel_errs, selector = _workload_selector(spec, "deployment")
    errs += sel_errs
    errs += validate_template(spec.get("template"), selector, "spec.template", restart_always=True)
    strategy = spec.get("strategy") or {}
    kinds = ["Recreate", "RollingUpdate"]
    if strategy.get("type") is not None and strategy["type"] not in kinds:
        errs.append(fe.not_supported("spec.strategy.type", strategy["type"], kinds))
    if strategy.get("type") == "Recreate" and strategy.get("rollingUpdate") is not None:
        errs.append(
            fe.forbidden(
                "spec.strategy.rollingUpdate", "may not be specified when strategy `type` is 'Recreate'"
            )
        )
    errs += _nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    errs += _nonnegative(spec.get("revisionHistoryLimit"), "spec.revisionHistoryLimit")
    deadline = spec.get("progressDeadlineSeconds")
    if isinstance(deadline, int):
        errs += _nonnegative(deadline, "spec.progressDeadlineSeconds")
        if deadline <= int(spec.get("minReadySeconds") or 0):
            errs.append(
                fe.invalid("spec.progressDeadlineSeconds", deadline, "must be greater than minReadySeconds")
            )
    return errs


def validate_replicaset(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    spec = obj.get("spec") or {}
    errs += _nonnegative(spec.get("replicas"), "spec.replicas")
    sel_errs, selector = _workload_selector(spec, "deployment")
    errs += sel_errs
    return errs + validate_template(spec.get("template"), selector, "spec.template", restart_always=True)


def validate_statefulset(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_label)
    spec = obj.get("spec") or {}
    errs += _nonnegative(spec.get("replicas"), "spec.replicas")
    policies = ["OrderedReady", "Parallel"]
    policy = spec.get("podManagementPolicy")
    if policy is not None and policy not in policies:
        errs.append(fe.not_supported("spec.podManagementPolicy", policy, policies))
    update = (spec.get("updateStrategy") or {}).get("type")
    if update is not None and update not in ("RollingUpdate", "OnDelete"):
        errs.append(fe.not_supported("spec.updateStrategy.type", update, ["OnDelete", "RollingUpdate"]))
    sel_errs, selector = _workload_selector(spec, "statefulset")
    errs += sel_errs
    return errs + validate_template(spec.get("template"), selector, "spec.template", restart_always=True)


def validate_daemonset(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    spec = obj.get("spec") or {}
    sel_errs, selector = _workload_selector(spec, "daemonset")
    errs += sel_errs
    update = (spec.get("updateStrategy") or {}).get("type")
    if update is not None and update not in ("RollingUpdate", "OnDelete"):
        errs.append(fe.not_supported("spec.updateStrategy.type", update, ["OnDelete", "RollingUpdate"]))
    errs += _nonnegative(spec.get("minReadySeconds"), "spec.minReadySeconds")
    return errs + validate_template(spec.get("template"), selector, "spec.template", restart_always=True)


# --- core -------------------------------------------------------------------------------

SERVICE_TYPES = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"]


def validate_service(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns1035_label)
    spec = obj.get("spec") or {}
    kind = spec.get("type", "ClusterIP")
    if kind not in SERVICE_TYPES:
        errs.append(fe.not_supported("spec.type", kind, SERVICE_TYPES))
    ports = spec.get("ports") or []
    if kind != "ExternalName" and not ports and spec.get("clusterIP") != "None":
        errs.append(fe.required("spec.ports"))
    names: set[str] = set()
    for i, port in enumerate(ports):
        where = f"spec.ports[{i}]"
        name = str(port.get("name") or "")
        if len(ports) > 1 and not name:
            errs.append(fe.required(f"{where}.name"))
        elif name:
            errs += [fe.invalid(f"{where}.name", name, m) for m in is_dns1123_label(name)]
            if name in names:
                errs.append(fe.duplicate(f"{where}.name", name))
            names.add(name)
        number = port.get("port")
        if not isinstance(number, int) or not 1 <= number <= 65535:
            errs.append(fe.invalid(f"{where}.port", number, "must be between 1 and 65535, inclusive"))
        if port.get("protocol") and port["protocol"] not in PROTOCOLS:
            errs.append(fe.not_supported(f"{where}.protocol", port["protocol"], PROTOCOLS))
        target = port.get("targetPort")
        if isinstance(target, int) and not 1 <= target <= 65535:
            errs.append(fe.invalid(f"{where}.targetPort", target, "must be between 1 and 65535, inclusive"))
    errs += validate_labels(spec.get("selector"), "spec.selector")
    return errs


def _validate_data_keys(obj: Obj, fields: tuple[str, ...]) -> Errors:
    errs: Errors = []
    for field in fields:
        for key in obj.get(field) or {}:
            errs += [fe.invalid(f"{field}[{key}]", key, m) for m in is_config_map_key(key)]
    return errs


def validate_config_map(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    errs += _validate_data_keys(obj, ("data", "binaryData"))
    both = set(obj.get("data") or {}) & set(obj.get("binaryData") or {})
    errs += [
        fe.invalid(f"data[{key}]", key, "duplicate of key present in binaryData") for key in sorted(both)
    ]
    size = sum(len(str(v).encode()) for v in (obj.get("data") or {}).values())
    size += sum(len(str(v)) * 3 // 4 for v in (obj.get("binaryData") or {}).values())
    if size > 1024 * 1024:
        errs.append(fe.too_long("", "", 1024 * 1024))
    return errs


def validate_secret(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    errs += _validate_data_keys(obj, ("data", "stringData"))
    size = sum(len(str(v)) * 3 // 4 for v in (obj.get("data") or {}).values())
    if size > 1024 * 1024:
        errs.append(fe.too_long("data", "", 1024 * 1024))
    return errs


def validate_namespace(obj: Obj) -> Errors:
    return validate_object_meta(obj.get("metadata") or {}, False, name_is_dns_label)


def validate_plain(namespaced: bool, name_fn: NameFn = name_is_dns_subdomain) -> Callable[[Obj], Errors]:
    def check(obj: Obj) -> Errors:
        return validate_object_meta(obj.get("metadata") or {}, namespaced, name_fn)

    return check


# --- events -----------------------------------------------------------------------------

NOTE_LENGTH_LIMIT = 1024
REASON_LENGTH_LIMIT = 128
ACTION_LENGTH_LIMIT = 128
REPORTING_INSTANCE_LENGTH_LIMIT = 128


def _blen(value: Any) -> int:
    """Go's len(string): bytes, not characters."""
    return len(str(value or "").encode())


def validate_event(core: Obj, events_api: bool) -> Errors:
    """ValidateEventCreate on the stored (core) form; ``events_api``: written through events.k8s.io/v1."""
    errs: Errors = []
    meta = core.get("metadata") or {}
    namespace = str(meta.get("namespace") or "")
    involved = core.get("involvedObject") or {}
    involved_ns = str(involved.get("namespace") or "")
    controller_field = "reportingController" if events_api else "reportingComponent"
    if not core.get("eventTime"):
        if not involved_ns:
            if namespace not in ("", "default"):
                errs.append(
                    fe.invalid("involvedObject.namespace", involved_ns, "does not match event.namespace")
                )
        elif namespace != involved_ns:
            errs.append(fe.invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
    else:
        if not involved_ns and namespace not in ("default", "kube-system"):
            errs.append(fe.invalid("involvedObject.namespace", involved_ns, "does not match event.namespace"))
        controller = str(core.get("reportingComponent") or "")
        if not controller:
            errs.append(fe.required(controller_field))
        errs += [fe.invalid(controller_field, controller, m) for m in is_qualified_name(controller)]
        instance = core.get("reportingInstance") or ""
        if not instance:
            errs.append(fe.required("reportingInstance"))
        if _blen(instance) > REPORTING_INSTANCE_LENGTH_LIMIT:
            errs.append(
                fe.invalid(
                    "reportingInstance", "", f"can have at most {REPORTING_INSTANCE_LENGTH_LIMIT} characters"
                )
            )
        if not core.get("action"):
            errs.append(fe.required("action"))
        if _blen(core.get("action")) > ACTION_LENGTH_LIMIT:
            errs.append(fe.invalid("action", "", f"can have at most {ACTION_LENGTH_LIMIT} characters"))
        if not core.get("reason"):
            errs.append(fe.required("reason"))
        if _blen(core.get("reason")) > REASON_LENGTH_LIMIT:
            errs.append(fe.invalid("reason", "", f"can have at most {REASON_LENGTH_LIMIT} characters"))
        if _blen(core.get("message")) > NOTE_LENGTH_LIMIT:
            errs.append(fe.invalid("message", "", f"can have at most {NOTE_LENGTH_LIMIT} characters"))
    errs += [fe.invalid("namespace", namespace, m) for m in is_dns1123_subdomain(namespace)]
    if not events_api:
        return errs
    errs += validate_object_meta(meta, True, name_is_dns_subdomain)
    series = core.get("series")
    if isinstance(series, dict):
        if int(series.get("count") or 0) < 2:
            errs.append(fe.invalid("series.count", "", "should be at least 2"))
        if not series.get("lastObservedTime"):
            errs.append(fe.required("series.lastObservedTime"))
    if not core.get("eventTime"):
        errs.append(fe.required("eventTime"))
    if core.get("type") not in ("Normal", "Warning"):
        errs.append(fe.invalid("type", "", f"has invalid value: {core.get('type') or ''}"))
    for stamp in ("firstTimestamp", "lastTimestamp"):
        if core.get(stamp):
            errs.append(fe.invalid(stamp, "", "needs to be unset"))
    if core.get("count"):
        errs.append(fe.invalid("count", "", "needs to be unset"))
    source = core.get("source") or {}
    if source.get("component") or source.get("host"):
        errs.append(fe.invalid("source", "", "needs to be unset"))
    return errs


# --- others -----------------------------------------------------------------------------


def validate_lease(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    spec = obj.get("spec") or {}
    duration = spec.get("leaseDurationSeconds")
    if isinstance(duration, int) and duration <= 0:
        errs.append(fe.invalid("spec.leaseDurationSeconds", duration, "must be greater than 0"))
    transitions = spec.get("leaseTransitions")
    if isinstance(transitions, int) and transitions < 0:
        errs.append(fe.invalid("spec.leaseTransitions", transitions, "must be greater than or equal to 0"))
    if spec.get("preferredHolder") and not spec.get("strategy"):
        errs.append(fe.forbidden("spec.preferredHolder", "may only be specified if `strategy` is defined"))
    return errs


def validate_pdb(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    spec = obj.get("spec") or {}
    if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
        errs.append(
            fe.invalid(
                "spec",
                GoLiteral("policy.PodDisruptionBudgetSpec{...}"),
                "minAvailable and maxUnavailable cannot be both set",
            )
        )
    for key in ("minAvailable", "maxUnavailable"):
        value = spec.get(key)
        if isinstance(value, int):
            errs += _nonnegative(value, f"spec.{key}")
        elif isinstance(value, str):
            if not re.match(r"^[0-9]+%$", value):
                errs.append(
                    fe.invalid(
                        f"spec.{key}",
                        value,
                        "a valid percent string must be a numeric string followed by an ending '%' (e.g. '1%',  or '93%', regex used for validation is '[0-9]+%')",
                    )
                )
            elif int(value[:-1]) > 100:
                errs.append(fe.invalid(f"spec.{key}", value, "must not be greater than 100%"))
    if isinstance(spec.get("selector"), dict):
        errs += validate_label_selector(spec["selector"], "spec.selector")
    return errs


def validate_network_policy(obj: Obj) -> Errors:
    """ValidateNetworkPolicySpec's rules that a manifest runs into: selectors, types, ports."""
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    spec = obj.get("spec") or {}
    errs += validate_label_selector(spec.get("podSelector") or {}, "spec.podSelector")
    for i, kind in enumerate(spec.get("policyTypes") or []):
        if kind not in ("Ingress", "Egress"):
            errs.append(fe.not_supported(f"spec.policyTypes[{i}]", kind, ["Ingress", "Egress"]))
    for direction, peers_key in (("ingress", "from"), ("egress", "to")):
        for i, rule in enumerate(spec.get(direction) or []):
            where = f"spec.{direction}[{i}]"
            for j, port in enumerate(rule.get("ports") or []):
                protocol = port.get("protocol")
                if protocol is not None and protocol not in PROTOCOLS:
                    errs.append(fe.not_supported(f"{where}.ports[{j}].protocol", protocol, PROTOCOLS))
            for j, peer in enumerate(rule.get(peers_key) or []):
                for key in ("podSelector", "namespaceSelector"):
                    if isinstance(peer.get(key), dict):
                        errs += validate_label_selector(peer[key], f"{where}.{peers_key}[{j}].{key}")
    return errs


def _validate_rules(rules: Any, path: str) -> Errors:
    errs: Errors = []
    for i, rule in enumerate(rules or []):
        where = f"{path}[{i}]"
        if not rule.get("verbs"):
            errs.append(fe.required(f"{where}.verbs", "verbs must contain at least one value"))
        if rule.get("nonResourceURLs"):
            continue
        if not rule.get("apiGroups"):
            errs.append(
                fe.required(f"{where}.apiGroups", "resource rules must supply at least one api group")
            )
        if not rule.get("resources"):
            errs.append(fe.required(f"{where}.resources", "resource rules must supply at least one resource"))
    return errs


def validate_role(namespaced: bool) -> Callable[[Obj], Errors]:
    def check(obj: Obj) -> Errors:
        errs = validate_object_meta(obj.get("metadata") or {}, namespaced, path_segment_name)
        return errs + _validate_rules(obj.get("rules"), "rules")

    return check


def validate_binding(namespaced: bool) -> Callable[[Obj], Errors]:
    def check(obj: Obj) -> Errors:
        errs = validate_object_meta(obj.get("metadata") or {}, namespaced, path_segment_name)
        ref = obj.get("roleRef") or {}
        if ref.get("apiGroup") != "rbac.authorization.k8s.io":
            errs.append(
                fe.not_supported("roleRef.apiGroup", ref.get("apiGroup") or "", ["rbac.authorization.k8s.io"])
            )
        kinds = ["Role", "ClusterRole"] if namespaced else ["ClusterRole"]
        if ref.get("kind") not in kinds:
            errs.append(fe.not_supported("roleRef.kind", ref.get("kind") or "", kinds))
        if not ref.get("name"):
            errs.append(fe.required("roleRef.name"))
        else:
            errs += [
                fe.invalid("roleRef.name", ref["name"], m) for m in path_segment_name(str(ref["name"]), False)
            ]
        for i, subject in enumerate(obj.get("subjects") or []):
            where = f"subjects[{i}]"
            kind = subject.get("kind")
            if kind not in ("ServiceAccount", "User", "Group"):
                errs.append(
                    fe.not_supported(f"{where}.kind", kind or "", ["ServiceAccount", "User", "Group"])
                )
            if not subject.get("name"):
                errs.append(fe.required(f"{where}.name"))
            if kind == "ServiceAccount":
                if subject.get("apiGroup"):
                    errs.append(fe.not_supported(f"{where}.apiGroup", subject["apiGroup"], [""]))
                if not namespaced and not subject.get("namespace"):
                    errs.append(fe.required(f"{where}.namespace"))
        return errs

    return check


def validate_hpa(obj: Obj) -> Errors:
    errs = validate_object_meta(obj.get("metadata") or {}, True, name_is_dns_subdomain)
    spec = obj.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    if not ref.get("kind"):
        errs.append(fe.required("spec.scaleTargetRef.kind"))
    if not ref.get("name"):
        errs.append(fe.required("spec.scaleTargetRef.name"))
    low = spec.get("minReplicas")
    if isinstance(low, int) and low < 0:
        errs.append(fe.invalid("spec.minReplicas", low, "must be greater than or equal to 0"))
    high = spec.get("maxReplicas")
    if isinstance(high, int):
        if high < 1:
            errs.append(fe.invalid("spec.maxReplicas", high, "must be greater than 0"))
        if isinstance(low, int) and high < low:
            errs.append(
                fe.invalid("spec.maxReplicas", high, "must be greater than or equal to `minReplicas`")
            )
    return errs


HIGHEST_USER_DEFINABLE_PRIORITY = 1_000_000_000
SYSTEM_PRIORITY_CLASSES = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}


def validate_priority_class(obj: Obj) -> Errors:
    """pkg/apis/scheduling/validation ValidatePriorityClass."""
    meta = obj.get("metadata") or {}
    errs = validate_object_meta(meta, False, name_is_dns_subdomain)
    name = str(meta.get("name") or "")
    value = obj.get("value")
    if name.startswith("system-"):
        known = SYSTEM_PRIORITY_CLASSES.get(name)
        if known is None or known != value or obj.get("globalDefault"):
            errs.append(
                fe.forbidden(
                    "metadata.name",
                    "priority class names with 'system-' prefix are reserved for system use only. "
                    f"error: {name} is not a known system priority class",
                )
            )
    elif isinstance(value, int) and value > HIGHEST_USER_DEFINABLE_PRIORITY:
        errs.append(
            fe.forbidden(
                "value",
                f"maximum allowed value of a user defined priority is {HIGHEST_USER_DEFINABLE_PRIORITY}",
            )
        )
    policy = obj.get("preemptionPolicy")
    if policy is not None and policy not in ("Never", "PreemptLowerPriority"):
        errs.append(fe.not_supported("preemptionPolicy", policy, ["Never", "PreemptLowerPriority"]))
    return errs


def validate_node(obj: Obj) -> Errors:
    return validate_object_meta(obj.get("metadata") or {}, False, name_is_dns_subdomain)


Validator = Callable[[Obj], Errors]
VALIDATORS: dict[tuple[str, str], Validator] = {
    ("", "Pod"): validate_pod,
    ("", "Node"): validate_node,
    ("", "Namespace"): validate_namespace,
    ("", "Service"): validate_service,
    ("", "ConfigMap"): validate_config_map,
    ("", "Secret"): validate_secret,
    ("", "ServiceAccount"): validate_plain(True),
    ("", "Endpoints"): validate_plain(True),
    ("apps", "Deployment"): validate_deployment,
    ("apps", "ReplicaSet"): validate_replicaset,
    ("apps", "StatefulSet"): validate_statefulset,
    ("apps", "DaemonSet"): validate_daemonset,
    ("coordination.k8s.io", "Lease"): validate_lease,
    ("policy", "PodDisruptionBudget"): validate_pdb,
    ("networking.k8s.io", "NetworkPolicy"): validate_network_policy,
    ("rbac.authorization.k8s.io", "Role"): validate_role(True),
    ("rbac.authorization.k8s.io", "ClusterRole"): validate_role(False),
    ("rbac.authorization.k8s.io", "RoleBinding"): validate_binding(True),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding"): validate_binding(False),
    ("autoscaling", "HorizontalPodAutoscaler"): validate_hpa,
    ("scheduling.k8s.io", "PriorityClass"): validate_priority_class,
}


def validate_builtin(group: str, kind: str, obj: Obj) -> Errors:
    """The kind's own validation (Events and CRDs are validated by their own functions)."""
    check = VALIDATORS.get((group, kind))
    return check(obj) if check is not None else []


def validate_update(group: str, kind: str, new: Obj, old: Obj) -> Errors:
    """The immutable fields of ValidateXUpdate that clients run into."""
    errs: Errors = []
    if group == "apps" and kind in ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"):
        before = (old.get("spec") or {}).get("selector")
        after = (new.get("spec") or {}).get("selector")
        if kind != "ReplicaSet" and before != after:
            errs.append(fe.invalid("spec.selector", GoLiteral("v1.LabelSelector{...}"), "field is immutable"))
    if group == "scheduling.k8s.io" and kind == "PriorityClass" and old.get("value") != new.get("value"):
        errs.append(fe.forbidden("value", "may not be changed in an update."))
    binding = group == "rbac.authorization.k8s.io" and kind in ("RoleBinding", "ClusterRoleBinding")
    if binding and old.get("roleRef") != new.get("roleRef"):
        errs.append(fe.invalid("roleRef", GoLiteral("rbac.RoleRef{...}"), "cannot change roleRef"))
    return errs
