"""The optional keda-scaler components (deploy/components/keda-scaler, .../external-metrics)
rendered through deploy/examples/with-keda-scaler: valid Kubernetes, wired to the program's real
options, the Dockerfile's image, the observer NATS role, and the external metrics the
keda-scaler serves. The observer role is exercised end to end on a nats-server running the
shipped auth.conf."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from urllib.parse import urlparse

import grpc
import kubernetes_validate
import msgpack
import nats
import pytest

from gpuscale import settings as settings_mod
from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale_kedascaler.core.query import all_external_metric_names
from gpuscale_kedascaler.externalscaler import externalscaler_pb2 as pb
from gpuscale_kedascaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

from ..kedascaler.harness import BERT, metrics_payload, running_scaler, settings_for
from ..waiting import eventually
from .deploy_support import (
    DEPLOY,
    DOCKER,
    EXAMPLES,
    K8S_VERSION,
    NATS_AUTH_CONF,
    Obj,
    command_options,
    containers,
    env_references,
    find,
    load_yaml_documents,
    nats_roles,
    of_kind,
    render,
)

OVERLAY = EXAMPLES / "with-keda-scaler"
PLACEHOLDER = "s3cretHex0123"  # a stand-in for the Secret's value


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return render(OVERLAY)


def scaler_container(objects: list[Obj]) -> tuple[Obj, Obj]:
    ((pod, container),) = list(containers(find(objects, "Deployment", "gpuscale-keda-scaler")))
    return pod, container


def resolved_env(container: Obj) -> dict[str, str]:
    env: dict[str, str] = {}
    for entry in container["env"]:
        value = entry.get("value", PLACEHOLDER)
        for ref in env_references(value):
            value = value.replace(f"$({ref})", env[ref])
        env[entry["name"]] = value
    return env


def test_the_overlay_adds_the_components_to_the_base_install(objects: list[Obj]) -> None:
    base = {(o["kind"], o["metadata"]["name"]) for o in render(DEPLOY / "base")}
    added = {(o["kind"], o["metadata"]["name"]) for o in objects} - base
    assert added == {
        ("ServiceAccount", "gpuscale-keda-scaler"),
        ("Deployment", "gpuscale-keda-scaler"),
        ("Service", "gpuscale-keda-scaler"),
        ("PodDisruptionBudget", "gpuscale-keda-scaler"),
        ("APIService", "v1beta1.external.metrics.k8s.io"),
        ("ClusterRole", "gpuscale-external-metrics-reader"),
        ("ClusterRoleBinding", "gpuscale-external-metrics-reader"),
    }
    # Neither component is part of the default install.
    assert not of_kind(render(DEPLOY), "APIService")


def test_every_added_object_is_valid_kubernetes(objects: list[Obj]) -> None:
    for obj in objects:
        if "keda-scaler" in obj["metadata"]["name"] or obj["kind"] in (
            "APIService",
            "ClusterRole",
            "ClusterRoleBinding",
        ):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_the_container_runs_keda_scaler_with_real_options(objects: list[Obj]) -> None:
    pod, container = scaler_container(objects)
    assert container["image"] == "ghcr.io/gpuscale/gpuscale-keda-scaler:0.1.0"
    options = command_options("keda-scaler")
    for entry in container["env"]:
        assert entry["name"] in options.envs or entry["name"] == "NATS_PASSWORD", entry["name"]
    built = settings_mod.build(options.settings_class, {}, resolved_env(container))
    assert (built.http_port, built.grpc_port, built.api_port) == (9404, 9500, 6443)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9404, "grpc": 9500, "https": 6443}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False  # it calls no Kubernetes API
    # The self-signed certificate needs a writable /tmp.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]


def test_it_connects_to_nats_as_the_subscribe_only_observer(objects: list[Obj]) -> None:
    _, container = scaler_container(objects)
    url = urlparse(resolved_env(container)["GPUSCALE_NATS_URL"])
    assert (url.username, url.password, url.hostname, url.port) == (
        "observer",
        PLACEHOLDER,
        "nats.gpuscale.svc",
        4222,
    )
    ref = next(e for e in container["env"] if e["name"] == "NATS_PASSWORD")["valueFrom"]["secretKeyRef"]
    assert ref == {"name": "gpuscale-nats-credentials", "key": "observer-password"}
    (secret,) = load_yaml_documents(EXAMPLES / "nats-credentials-secret.yaml")
    assert ref["key"] in secret["stringData"]


def test_the_service_and_the_apiservice_reach_the_right_ports(objects: list[Obj]) -> None:
    _, container = scaler_container(objects)
    service = find(objects, "Service", "gpuscale-keda-scaler")
    named = {p["name"] for p in container["ports"]}
    assert all(p["targetPort"] in named for p in service["spec"]["ports"])
    api = find(objects, "APIService", "v1beta1.external.metrics.k8s.io")["spec"]
    assert (api["group"], api["version"]) == ("external.metrics.k8s.io", "v1beta1")
    https = next(p for p in service["spec"]["ports"] if p["port"] == api["service"]["port"])
    assert https["targetPort"] == "https"
    assert (api["service"]["name"], api["service"]["namespace"]) == ("gpuscale-keda-scaler", "gpuscale")


def test_the_hpa_may_read_exactly_the_metrics_served(objects: list[Obj]) -> None:
    role = find(objects, "ClusterRole", "gpuscale-external-metrics-reader")
    (rule,) = role["rules"]
    assert rule["apiGroups"] == ["external.metrics.k8s.io"]
    assert set(rule["resources"]) == set(all_external_metric_names())
    assert "*" not in rule["verbs"]
    binding = find(objects, "ClusterRoleBinding", "gpuscale-external-metrics-reader")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "horizontal-pod-autoscaler", "namespace": "kube-system"}
    ]


def test_the_image_is_built_by_its_dockerfile(objects: list[Obj]) -> None:
    pod, _ = scaler_container(objects)
    text = (DOCKER / "keda-scaler.Dockerfile").read_text()
    assert 'ENTRYPOINT ["gpuscale", "keda-scaler"]' in text
    assert f"USER {pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}" in text


# --- the observer role on the shipped auth.conf -------------------------------------------------

ROLES = tuple(nats_roles())


@pytest.fixture
def secured_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    store = tmp_path_factory.mktemp("nats-auth")
    shutil.copy(NATS_AUTH_CONF, store / "auth.conf")
    server = EmbeddedNats(store_dir=str(store), config_text="include auth.conf\n")
    with pytest.MonkeyPatch.context() as mp:
        for role in ROLES:
            mp.setenv(f"NATS_{role.upper()}_PASSWORD", f"{role}-pw-0123abcd")
        server.start()
    try:
        yield server
    finally:
        server.close()


@pytest.mark.integration
async def test_as_observer_it_receives_the_aggregators_metrics(secured_nats: EmbeddedNats) -> None:
    url = urlparse(secured_nats.url)
    observer = f"nats://observer:observer-pw-0123abcd@{url.hostname}:{url.port}"
    aggregator = await nats.connect(f"nats://aggregator:aggregator-pw-0123abcd@{url.hostname}:{url.port}")
    try:
        async with running_scaler(settings_for(observer)) as scaler:
            before = scaler.counter("gpuscale_messages_in_total", kind="metrics")
            await aggregator.publish(
                subjects.metrics(BERT), msgpack.packb(metrics_payload(averages={"gpu_util": 64.0}))
            )
            await aggregator.flush()
            await eventually(
                lambda: scaler.counter("gpuscale_messages_in_total", kind="metrics") > before,
                what="the metrics",
            )
            async with grpc.aio.insecure_channel(f"127.0.0.1:{scaler.service.grpc_port}") as channel:
                stub = pb_grpc.ExternalScalerStub(channel)
                metadata = {"workload": "bert", "metric": "gpu_util", "target": "70"}
                request = pb.GetMetricsRequest(
                    scaledObjectRef=pb.ScaledObjectRef(
                        name="so", namespace="default", scalerMetadata=metadata
                    )
                )
                answer = await stub.GetMetrics(request)
            assert answer.metricValues[0].metricValueFloat == 64.0
    finally:
        await aggregator.close()
