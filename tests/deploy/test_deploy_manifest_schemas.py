"""deploy/ renders with kubectl kustomize and every object is valid Kubernetes.

Built-in kinds are checked against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields are errors); GPUScaler objects
against the CRD's own schema, with Kubernetes' pruning made strict (a field
the CRD does not know would be silently dropped by the API server, so here
it is an error); ServiceMonitors against the Services they select.
"""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import kubernetes_validate
import pytest

from ..k8s_objects import FIXTURE_CRDS
from .deploy_support import (
    DEPLOY,
    EXAMPLES,
    K8S_VERSION,
    KUBECTL_MISSING,
    OVERLAYS,
    Obj,
    _strict_json_schema,
    find,
    gpuscaler_validator,
    kubectl_path,
    load_yaml_documents,
    of_kind,
    render,
)

# Kinds that only exist once someone installs their CRD; checked by hand below.
CUSTOM_KINDS = {
    "monitoring.coreos.com/v1": {"ServiceMonitor", "PrometheusRule"},
    "gpuscale.io/v1alpha1": {"GPUScaler"},
}


def _is_custom(obj: Obj) -> bool:
    return obj["kind"] in CUSTOM_KINDS.get(obj["apiVersion"], set())


def _label(obj: Obj) -> str:
    return f"{obj['kind']}/{obj['metadata']['name']}"


def _all_rendered() -> list[tuple[str, Obj]]:
    out: list[tuple[str, Obj]] = []
    if kubectl_path() is None:
        return out
    for directory in ("", "cluster", "base", "monitoring", "grafana", *OVERLAYS):
        out.extend((f"deploy/{directory}", o) for o in render(DEPLOY / directory))
    for path in sorted(EXAMPLES.glob("*.yaml")):
        out.extend((f"deploy/examples/{path.name}", o) for o in load_yaml_documents(path))
    return out


def test_the_install_renders_the_expected_objects() -> None:
    objects = render(DEPLOY)
    kinds = {(o["kind"], o["metadata"]["name"]) for o in objects}
    expected = {
        ("DaemonSet", "gpuscale-collector"),
        ("Deployment", "gpuscale-aggregator"),
        ("Deployment", "gpuscale-decider"),
        ("Deployment", "gpuscale-actuator"),
        ("StatefulSet", "nats"),
        ("Service", "nats"),
        ("Service", "nats-headless"),
        ("ConfigMap", "nats-config"),
        ("ServiceMonitor", "gpuscale-collector"),
        ("ServiceMonitor", "gpuscale-aggregator"),
        ("ServiceMonitor", "gpuscale-decider"),
        ("ServiceMonitor", "gpuscale-actuator"),
        ("PrometheusRule", "gpuscale"),
    }
    assert expected <= kinds, f"missing: {sorted(expected - kinds)}"
    # Examples and the real Secret are deliberately not part of the install.
    assert not of_kind(objects, "GPUScaler", "Secret")
    cluster = {(o["kind"], o["metadata"]["name"]) for o in render(DEPLOY / "cluster")}
    assert cluster == {("Namespace", "gpuscale"), ("CustomResourceDefinition", "gpuscalers.gpuscale.io")}


@pytest.mark.parametrize("directory", ["", "base", *OVERLAYS])
def test_uninstalling_keeps_the_state(directory: str) -> None:
    """`kubectl delete -k` deletes what the kustomization renders: never the namespace
    (the Secret and the NATS volumes live there), the CRD (it takes every GPUScaler
    with it), a Secret or a volume claim."""
    objects = render(DEPLOY / directory)
    kept = of_kind(objects, "Namespace", "CustomResourceDefinition", "Secret", "PersistentVolumeClaim")
    assert kept == [], [f"{o['kind']}/{o['metadata']['name']}" for o in kept]
    nats = find(objects, "StatefulSet", "nats")
    assert nats["spec"]["persistentVolumeClaimRetentionPolicy"] == {
        "whenDeleted": "Retain",
        "whenScaled": "Retain",
    }


@pytest.mark.parametrize("directory", ["", *OVERLAYS])
def test_every_namespaced_object_lands_in_the_gpuscale_namespace(directory: str) -> None:
    cluster_scoped = {
        "Namespace",
        "CustomResourceDefinition",
        "ClusterRole",
        "ClusterRoleBinding",
        "PriorityClass",
    }
    for obj in render(DEPLOY / directory):
        if obj["kind"] in cluster_scoped:
            assert "namespace" not in obj["metadata"], _label(obj)
        else:
            assert obj["metadata"].get("namespace") == "gpuscale", _label(obj)


def _builtin_params() -> list[Any]:
    if kubectl_path() is None:
        return [pytest.param("", {}, id="kubectl-missing", marks=pytest.mark.skip(reason=KUBECTL_MISSING))]
    return [pytest.param(s, o, id=f"{s}:{_label(o)}") for s, o in _all_rendered() if not _is_custom(o)]


@pytest.mark.parametrize(("source", "obj"), _builtin_params())
def test_builtin_object_is_valid_against_the_kubernetes_schema(source: str, obj: Obj) -> None:
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError:
        # kubernetes-validate knows every built-in kind; other kinds must be in CUSTOM_KINDS.
        pytest.fail(f"{source}: {obj['apiVersion']} {obj['kind']} is neither built-in nor a known CRD kind")
    except kubernetes_validate.ValidationError as e:
        pytest.fail(f"{source} {_label(obj)}: {'.'.join(str(p) for p in e.path)}: {e.message}")


# --- GPUScaler against its CRD ------------------------------------------------


def _example_gpuscalers() -> list[Obj]:
    return [
        o
        for path in sorted(EXAMPLES.glob("*.yaml"))
        for o in load_yaml_documents(path)
        if o["kind"] == "GPUScaler"
    ]


def test_the_crd_is_the_one_kustomize_installs() -> None:
    crd = find(render(DEPLOY / "cluster"), "CustomResourceDefinition", "gpuscalers.gpuscale.io")
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    assert version["subresources"].get("status") == {}
    columns = {c["name"].upper() for c in version["additionalPrinterColumns"]}
    assert {"REFERENCE", "TARGETS", "MINPODS", "MAXPODS", "REPLICAS", "AGE"} <= columns


def test_the_example_gpuscaler_matches_the_seed_example_and_the_crd_schema() -> None:
    examples = _example_gpuscalers()
    assert [e["metadata"]["name"] for e in examples] == ["bert-intent-detection"]
    example = examples[0]
    assert example["metadata"]["namespace"] == "default"
    spec = example["spec"]
    assert spec["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "bert-intent-detection",
    }
    assert (spec["minReplicas"], spec["maxReplicas"]) == (1, 10)
    assert spec["metrics"] == [{"name": "gpu_util", "target": 20}]
    errors = [f"{list(e.path)}: {e.message}" for e in gpuscaler_validator().iter_errors(example)]
    assert errors == []


@pytest.mark.parametrize(
    ("change", "why"),
    [
        pytest.param(lambda s: s["metrics"][0].update(name="gpu_utilisation"), "unknown metric", id="metric"),
        pytest.param(lambda s: s.update(maxReplicas=0), "maxReplicas below 1", id="max-zero"),
        pytest.param(lambda s: s.update(minReplica=2), "typo: pruned field", id="typo"),
        pytest.param(lambda s: s["metrics"][0].update(target=0), "target must be > 0", id="target-zero"),
    ],
)
def test_the_crd_schema_check_catches_a_broken_gpuscaler(change: Any, why: str) -> None:
    broken = copy.deepcopy(_example_gpuscalers()[0])
    change(broken["spec"])
    assert list(gpuscaler_validator().iter_errors(broken)), why


def test_the_prometheus_rule_matches_the_operators_schema() -> None:
    crd = load_yaml_documents(FIXTURE_CRDS / "prometheusrules.yaml")[0]
    schema = _strict_json_schema(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
    rule = find(render(DEPLOY), "PrometheusRule", "gpuscale")
    errors = [f"{list(e.path)}: {e.message}" for e in jsonschema.Draft4Validator(schema).iter_errors(rule)]
    assert errors == []


# --- ServiceMonitors against the Services they select -------------------------


def test_every_service_monitor_selects_a_service_port_that_exists() -> None:
    objects = render(DEPLOY)
    services = of_kind(objects, "Service")
    monitors = of_kind(objects, "ServiceMonitor")
    assert {m["metadata"]["name"] for m in monitors} == {
        "gpuscale-collector",
        "gpuscale-aggregator",
        "gpuscale-decider",
        "gpuscale-actuator",
    }
    for monitor in monitors:
        spec = monitor["spec"]
        assert set(spec) <= {"selector", "namespaceSelector", "endpoints", "jobLabel"}, _label(monitor)
        wanted = spec["selector"]["matchLabels"]
        namespaces = spec.get("namespaceSelector", {}).get("matchNames", [monitor["metadata"]["namespace"]])
        selected = [
            s
            for s in services
            if s["metadata"]["namespace"] in namespaces
            and wanted.items() <= s["metadata"].get("labels", {}).items()
        ]
        assert len(selected) == 1, f"{_label(monitor)} selects {[_label(s) for s in selected]}"
        port_names = {p["name"] for p in selected[0]["spec"]["ports"]}
        for endpoint in spec["endpoints"]:
            assert set(endpoint) <= {"port", "path", "interval", "honorLabels", "relabelings"}
            assert endpoint["port"] in port_names, _label(monitor)
            assert endpoint.get("path", "/metrics") == "/metrics"


def test_the_collector_monitor_keeps_the_dcgm_pod_labels() -> None:
    # dcgm-exporter dashboards select by the GPU user's pod/namespace labels;
    # without honorLabels Prometheus would rename them exported_pod, ...
    monitor = find(render(DEPLOY), "ServiceMonitor", "gpuscale-collector")
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["honorLabels"] is True
    assert endpoint["port"] == "metrics"


def test_every_service_selects_pods_and_ports_that_exist() -> None:
    objects = render(DEPLOY)
    pods = [w["spec"]["template"] for w in of_kind(objects, "Deployment", "StatefulSet", "DaemonSet")]
    for service in of_kind(objects, "Service"):
        selector = service["spec"]["selector"]
        matching = [p for p in pods if selector.items() <= p["metadata"]["labels"].items()]
        assert matching, f"{_label(service)} selects no pods"
        port_names = {
            port["name"] for p in matching for c in p["spec"]["containers"] for port in c.get("ports", [])
        }
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in port_names, f"{_label(service)} port {port['name']}"
