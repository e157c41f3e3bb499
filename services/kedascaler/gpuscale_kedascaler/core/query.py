"""What KEDA and the HPA ask for: a workload's metric, as a typed query. Pure.

``average`` is the per-pod average (an HPA ``Value`` target); ``total`` is it times the fresh
pods (``AverageValue``, KEDA's default)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gpuscale.catalog import METRIC_NAMES
from gpuscale.names import DNS1123_SUBDOMAIN_MAX, is_dns1123_label, is_dns1123_subdomain
from gpuscale.quoting import quoted
from gpuscale.subjects import WorkloadKey

METRIC_PREFIX: Final = "gpuscale-"
TOTAL_SUFFIX: Final = "-total"
WORKLOAD_KINDS: Final = ("Deployment", "StatefulSet")
DEFAULT_KIND: Final = "Deployment"

# Trigger metadata keys that KEDA itself reads for an external scaler (the
# address and its TLS settings): passed along to us, not ours to judge.
KEDA_OWN_KEYS: Final = frozenset(
    {"scalerAddress", "tlsCertFile", "caCert", "tlsClientCert", "tlsClientKey", "unsafeSsl", "enableTLS"}
)
SCALER_KEYS: Final = ("workload", "namespace", "metric", "target", "activationTarget", "value")
SELECTOR_KEYS: Final = ("workload", "kind")

# What one ScaledObject's trigger may send (a tenant writes it): far above any real
# trigger (seven short keys), low enough that every stream it holds stays small.
MAX_METADATA_ENTRIES: Final = 32
MAX_METADATA_KEY: Final = 128
MAX_METADATA_VALUE: Final = 1024
# Caller text quoted back in a problem (and so in a status and a log line) is cut to this.
SHOWN_MAX: Final = 80

# QueryError reasons: low-cardinality, a metrics label.
INVALID: Final = "invalid"
TOO_LARGE: Final = "too_large"
OTHER_NAMESPACE: Final = "other_namespace"


class ValueKind(StrEnum):
    AVERAGE = "average"
    TOTAL = "total"


class QueryError(ValueError):
    """A query that cannot be answered as asked; ``problems`` lists every reason,
    ``reason`` says which kind of refusal it is (:data:`INVALID` unless told)."""

    def __init__(self, problems: list[str], reason: str = INVALID) -> None:
        self.problems = problems
        self.reason = reason
        super().__init__("; ".join(problems))


def shown(text: object) -> str:
    """Caller text as quoted in a problem: its repr, cut to :data:`SHOWN_MAX` characters."""
    return quoted(text, SHOWN_MAX)


@dataclass(frozen=True, slots=True)
class WorkloadQuery:
    """One metric of one workload, as a value of one kind."""

    workload: WorkloadKey
    metric: str
    value: ValueKind = ValueKind.AVERAGE

    @property
    def metric_name(self) -> str:
        """The name KEDA and the HPA know it by: ``gpuscale-gpu_util`` or ``gpuscale-gpu_util-total``."""
        return external_metric_name(self.metric, self.value)


@dataclass(frozen=True, slots=True)
class ScalerQuery:
    """A KEDA trigger's question: the workload's metric, its target and activation threshold."""

    query: WorkloadQuery
    target: float
    activation_target: float = 0.0

    @property
    def metric_name(self) -> str:
        return self.query.metric_name


def external_metric_name(metric: str, value: ValueKind = ValueKind.AVERAGE) -> str:
    suffix = TOTAL_SUFFIX if value is ValueKind.TOTAL else ""
    return f"{METRIC_PREFIX}{metric}{suffix}"


def all_external_metric_names() -> tuple[str, ...]:
    return tuple(external_metric_name(m, v) for m in METRIC_NAMES for v in ValueKind)


def parse_workload(text: str, kind: str | None = None) -> tuple[str, str, list[str]]:
    """``name`` or ``Kind/name`` -> (kind, name, problems)."""
    problems: list[str] = []
    raw = text.strip()
    given_kind, sep, name = raw.partition("/")
    if not sep:
        given_kind, name = "", raw
    chosen = given_kind or (kind or "").strip() or DEFAULT_KIND
    if given_kind and kind and kind.strip() and kind.strip() != given_kind:
        problems.append(
            f"workload {shown(raw)} names kind {shown(given_kind)} but kind is {shown(kind.strip())}"
        )
    if chosen not in WORKLOAD_KINDS:
        problems.append(f"kind must be one of {', '.join(WORKLOAD_KINDS)}, got {shown(chosen)}")
    if not name or "/" in name:
        problems.append(f"workload must be <name> or <Kind>/<name>, got {shown(text)}")
    elif not is_dns1123_subdomain(name):
        problems.append(f"workload name {shown(name)} is not a Kubernetes object name (DNS-1123 subdomain)")
    return chosen, name, problems


def _number(
    metadata: Mapping[str, str], key: str, problems: list[str], *, positive: bool, below: float = math.inf
) -> float | None:
    raw = metadata.get(key)
    if raw is None or not str(raw).strip():
        return None
    try:
        value = float(str(raw).strip())
    except ValueError:
        problems.append(f"{key} must be a number, got {shown(raw)}")
        return None
    if not math.isfinite(value) or (value <= 0 if positive else value < 0):
        problems.append(f"{key} must be {'greater than 0' if positive else 'at least 0'}, got {shown(raw)}")
        return None
    if value >= below:
        problems.append(f"{key} must be below {below:.3g} (KEDA's targetSize is an int64), got {shown(raw)}")
        return None
    return value


def parse_scaler_metadata(metadata: Mapping[str, str], default_namespace: str) -> ScalerQuery:
    """A KEDA trigger's metadata as a query, or QueryError with every problem at once."""
    problems: list[str] = []
    unknown = sorted(k for k in metadata if k not in SCALER_KEYS and k not in KEDA_OWN_KEYS)
    if unknown:
        named = ", ".join(shown(k).strip("'\"") for k in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        problems.append(f"unknown metadata {named} (gpuscale reads {', '.join(SCALER_KEYS)})")
    workload_text = (metadata.get("workload") or "").strip()
    kind, name = DEFAULT_KIND, ""
    if not workload_text:
        problems.append("workload is required (the Deployment's name, or Kind/name)")
    else:
        kind, name, more = parse_workload(workload_text)
        problems.extend(more)
    namespace = (metadata.get("namespace") or "").strip() or default_namespace
    if not namespace:
        problems.append("namespace is required (the ScaledObject's namespace was not sent)")
    elif not is_dns1123_label(namespace):
        problems.append(f"namespace {shown(namespace)} is not a Kubernetes namespace (DNS-1123 label)")
    metric = (metadata.get("metric") or "").strip()
    if not metric:
        problems.append(f"metric is required (one of {', '.join(METRIC_NAMES)})")
    elif metric not in METRIC_NAMES:
        problems.append(f"metric must be one of {', '.join(METRIC_NAMES)}, got {shown(metric)}")
    target = _number(metadata, "target", problems, positive=True, below=2.0**63)
    if target is None and not any(p.startswith("target ") for p in problems):
        problems.append("target is required (the per-pod value to hold, in the metric's unit)")
    activation = _number(metadata, "activationTarget", problems, positive=False)
    value_text = (metadata.get("value") or ValueKind.AVERAGE.value).strip()
    try:
        value = ValueKind(value_text)
    except ValueError:
        problems.append(f"value must be average or total, got {shown(value_text)}")
        value = ValueKind.AVERAGE
    if problems or target is None:
        raise QueryError(problems)
    return ScalerQuery(
        WorkloadQuery(WorkloadKey(namespace, kind, name), metric, value), target, activation or 0.0
    )


def metadata_size_problems(metadata: Mapping[str, str]) -> list[str]:
    """Why a trigger's metadata is too large to read ([] if it is not): counts and lengths only."""
    problems: list[str] = []
    if len(metadata) > MAX_METADATA_ENTRIES:
        problems.append(f"the trigger metadata has {len(metadata)} entries (at most {MAX_METADATA_ENTRIES})")
    long_keys = sum(1 for k in metadata if len(k) > MAX_METADATA_KEY)
    if long_keys:
        problems.append(f"{long_keys} metadata keys are longer than {MAX_METADATA_KEY} characters")
    long_values = sorted(shown(k) for k, v in metadata.items() if len(v) > MAX_METADATA_VALUE)
    if long_values:
        problems.append(f"metadata {', '.join(long_values[:5])} longer than {MAX_METADATA_VALUE} characters")
    return problems


def parse_scaled_object_ref(name: str, namespace: str, metadata: Mapping[str, str]) -> ScalerQuery:
    """KEDA's ``ScaledObjectRef`` as a query, read only within the asking ScaledObject's namespace.

    The trigger's metadata is the tenant's text: bounded first, and it may name no other namespace."""
    if not is_dns1123_label(namespace):
        raise QueryError(
            [f"the ScaledObject's namespace {shown(namespace)} is not a Kubernetes namespace"], INVALID
        )
    if len(name) > DNS1123_SUBDOMAIN_MAX:
        raise QueryError(
            [f"the ScaledObject's name is longer than {DNS1123_SUBDOMAIN_MAX} characters"], TOO_LARGE
        )
    too_large = metadata_size_problems(metadata)
    if too_large:
        raise QueryError(too_large, TOO_LARGE)
    asked = (metadata.get("namespace") or "").strip()
    if asked and asked != namespace:
        raise QueryError(
            [
                f"namespace {shown(asked)} is not the ScaledObject's own ({namespace}): a trigger reads "
                "the workloads of its ScaledObject's namespace only (leave namespace out)"
            ],
            OTHER_NAMESPACE,
        )
    return parse_scaler_metadata(metadata, namespace)


def parse_external_metric_name(metric_name: str) -> tuple[str, ValueKind]:
    """``gpuscale-gpu_util`` -> (gpu_util, average); QueryError for any other name."""
    if metric_name.startswith(METRIC_PREFIX):
        body = metric_name.removeprefix(METRIC_PREFIX)
        value = ValueKind.AVERAGE
        if body.endswith(TOTAL_SUFFIX):
            body, value = body.removesuffix(TOTAL_SUFFIX), ValueKind.TOTAL
        if body in METRIC_NAMES:
            return body, value
    raise QueryError(
        [
            f"unknown metric {shown(metric_name)}: gpuscale serves "
            f"{METRIC_PREFIX}<metric> and {METRIC_PREFIX}<metric>{TOTAL_SUFFIX} "
            f"for {', '.join(METRIC_NAMES)}"
        ]
    )


def parse_external_metric(namespace: str, metric_name: str, selector: Mapping[str, str]) -> WorkloadQuery:
    """The external metrics API's request (namespace, metric, ``labelSelector`` as
    equality terms) as a query, or QueryError naming every problem."""
    problems: list[str] = []
    metric, value = ValueKind.AVERAGE.value, ValueKind.AVERAGE
    try:
        metric, value = parse_external_metric_name(metric_name)
    except QueryError as e:
        problems.extend(e.problems)
    unknown = sorted(k for k in selector if k not in SELECTOR_KEYS)
    if unknown:
        named = ", ".join(shown(k).strip("'\"") for k in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
        problems.append(f"unknown selector labels {named} (gpuscale reads workload and kind)")
    kind, name = DEFAULT_KIND, ""
    workload = selector.get("workload", "").strip()
    if not workload:
        problems.append("the label selector must name the workload: workload=<name>[,kind=Deployment]")
    else:
        kind, name, more = parse_workload(workload, selector.get("kind"))
        problems.extend(more)
    if problems:
        raise QueryError(problems)
    return WorkloadQuery(WorkloadKey(namespace, kind, name), metric, value)
