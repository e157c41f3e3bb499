"""The optional keda-scaler components (deploy/components/keda-scaler, its cert-manager
sub-component, .../external-metrics) rendered through deploy/examples/with-keda-scaler: valid
Kubernetes, wired to the program's real options, the Dockerfile's image, the observer NATS role,
and the external metrics the keda-scaler serves; both ports authenticated as shipped (mutual TLS
with KEDA's certificate, the front proxy's on the external metrics API), reachable only as the
NetworkPolicies say, and the example ScaledObject valid for KEDA's own CRD. The observer role
is exercised end to end on a nats-server running the shipped auth.conf."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

import jsonschema
import kubernetes_validate
import msgpack
import nats
import pytest

from gpuscale import natsio, subjects
from gpuscale import settings as settings_mod
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.settings import existing_file
from gpuscale_kedascaler.core.query import KEDA_OWN_KEYS, all_external_metric_names, parse_scaled_object_ref
from gpuscale_kedascaler.externalscaler import externalscaler_pb2 as pb
from gpuscale_kedascaler.externalscaler import externalscaler_pb2_grpc as pb_grpc

from ..k8s_objects import keda_crd
from ..kedascaler.harness import BERT, keda_channel, metrics_payload, running_scaler, settings_for
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
CERT_MANAGER_KINDS = ("Certificate", "Issuer")
# The keys cert-manager writes into a Certificate's Secret.
CERT_MANAGER_SECRET_KEYS = ("tls.crt", "tls.key", "ca.crt")


@pytest.fixture(scope="module")
def objects(tmp_path_factory: pytest.TempPathFactory) -> list[Obj]:
    """The example with cert-manager issuing the gRPC port's certificates, as its comment says
    to add where cert-manager is installed (the example alone applies to a bare cluster)."""
    overlay = tmp_path_factory.mktemp("with-cert-manager")
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\n"
        "kind: Kustomization\n"
        f"resources: [{os.path.relpath(OVERLAY, overlay)}]\n"
        f"components: [{os.path.relpath(DEPLOY / 'components' / 'keda-scaler' / 'cert-manager', overlay)}]\n"
    )
    return render(overlay)


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
        ("NetworkPolicy", "gpuscale-keda-scaler"),
        ("APIService", "v1beta1.external.metrics.k8s.io"),
        ("ClusterRole", "gpuscale-external-metrics-reader"),
        ("ClusterRoleBinding", "gpuscale-external-metrics-reader"),
        ("NetworkPolicy", "gpuscale-keda-scaler-external-metrics"),
        # cert-manager: the mutual TLS of the gRPC port.
        ("Issuer", "gpuscale-keda-scaler-selfsigned"),
        ("Certificate", "gpuscale-keda-scaler-ca"),
        ("Issuer", "gpuscale-keda-scaler-ca"),
        ("Certificate", "gpuscale-keda-scaler-grpc-tls"),
        ("Certificate", "gpuscale-keda-scaler-keda-client"),
    }
    # Neither component is part of the default install.
    assert not of_kind(render(DEPLOY), "APIService")


def test_every_added_object_is_valid_kubernetes(objects: list[Obj]) -> None:
    for obj in objects:
        if obj["kind"] in CERT_MANAGER_KINDS:  # cert-manager's: no schema here; see the TLS tests below
            assert obj["apiVersion"] == "cert-manager.io/v1"
            assert obj["metadata"]["namespace"] == "gpuscale", "namespaced Issuers only"
            continue
        if "keda-scaler" in obj["metadata"]["name"] or obj["kind"] in (
            "APIService",
            "ClusterRole",
            "ClusterRoleBinding",
        ):
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def mounted_files(pod: Obj, container: Obj) -> dict[str, tuple[str, str, str]]:
    """Every file a Secret or ConfigMap mount puts in the container:
    path -> (kind, object name, key)."""
    volumes = {v["name"]: v for v in pod["volumes"]}
    files: dict[str, tuple[str, str, str]] = {}
    for mount in container["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "secret" in volume:  # a cert-manager Certificate's Secret
            for key in CERT_MANAGER_SECRET_KEYS:
                files[f"{mount['mountPath']}/{key}"] = ("Secret", volume["secret"]["secretName"], key)
        elif "configMap" in volume:  # the requestheader settings (components/external-metrics)
            for key in ("requestheader-client-ca-file", "requestheader-allowed-names"):
                files[f"{mount['mountPath']}/{key}"] = ("ConfigMap", volume["configMap"]["name"], key)
    return files


def test_the_container_runs_keda_scaler_with_real_options(objects: list[Obj], tmp_path: Path) -> None:
    pod, container = scaler_container(objects)
    assert container["image"] == "ghcr.io/gpuscale/gpuscale-keda-scaler:0.1.0"
    options = command_options("keda-scaler")
    for entry in container["env"]:
        assert entry["name"] in options.envs or entry["name"] == "NATS_PASSWORD", entry["name"]
    env = resolved_env(container)
    # Every certificate file it is given is one its mounts provide; here, stand-ins of them.
    mounted = mounted_files(pod, container)
    file_envs = {e: p for e, p in env.items() if p.startswith("/etc/")}
    assert set(file_envs) == {
        "GPUSCALE_GRPC_TLS_CERT_FILE",
        "GPUSCALE_GRPC_TLS_PRIVATE_KEY_FILE",
        "GPUSCALE_GRPC_CLIENT_CA_FILE",
        "GPUSCALE_CLIENT_CA_FILE",
    }
    for name, path in file_envs.items():
        assert path in mounted, f"{name}={path} is not a file any mount provides"
        stand_in = tmp_path / name
        stand_in.write_text("PEM")
        env[name] = str(existing_file(str(stand_in)))
    built = settings_mod.build(options.settings_class, {}, env)
    assert (built.http_port, built.grpc_port, built.api_port) == (9404, 9500, 6443)
    # As shipped, both ports take authenticated callers only: no opt-out is set.
    assert built.unauthenticated_problems() == []
    assert not built.grpc_plaintext
    assert not built.api_any_client
    assert built.external_metrics_api
    assert built.max_streams_per_namespace < built.max_streams
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"metrics": 9404, "grpc": 9500, "https": 6443}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["automountServiceAccountToken"] is False  # it calls no Kubernetes API
    # The self-signed certificate needs a writable /tmp.
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    # The key's mode 0440 is readable by the container's group.
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"]


def test_the_grpc_certificates_come_from_cert_manager_for_the_scaler_address(objects: list[Obj]) -> None:
    pod, _ = scaler_container(objects)
    (secret_volume,) = [v for v in pod["volumes"] if "secret" in v]
    server = find(objects, "Certificate", "gpuscale-keda-scaler-grpc-tls")["spec"]
    assert server["secretName"] == secret_volume["secret"]["secretName"]
    assert "server auth" in server["usages"]
    (example,) = load_yaml_documents(OVERLAY / "scaledobject.yaml")
    host, _, port = example["spec"]["triggers"][0]["metadata"]["scalerAddress"].rpartition(":")
    assert host in server["dnsNames"]  # KEDA verifies the certificate against it
    assert int(port) == 9500
    client = find(objects, "Certificate", "gpuscale-keda-scaler-keda-client")["spec"]
    assert "client auth" in client["usages"]
    # Both from the one namespaced CA Issuer, whose CA is the client CA the scaler trusts (ca.crt).
    issuer = {"name": "gpuscale-keda-scaler-ca", "kind": "Issuer", "group": "cert-manager.io"}
    assert server["issuerRef"] == client["issuerRef"] == issuer
    ca = find(objects, "Certificate", "gpuscale-keda-scaler-ca")["spec"]
    assert ca["isCA"] is True
    assert find(objects, "Issuer", "gpuscale-keda-scaler-ca")["spec"]["ca"]["secretName"] == ca["secretName"]
    # KEDA gets exactly the parameters its external scaler reads, from the client certificate's Secret.
    (auth,) = load_yaml_documents(OVERLAY / "cluster-trigger-authentication.yaml")
    assert (auth["apiVersion"], auth["kind"]) == ("keda.sh/v1alpha1", "ClusterTriggerAuthentication")
    refs = {r["parameter"]: (r["name"], r["key"]) for r in auth["spec"]["secretTargetRef"]}
    assert refs == {
        "caCert": (client["secretName"], "ca.crt"),
        "tlsClientCert": (client["secretName"], "tls.crt"),
        "tlsClientKey": (client["secretName"], "tls.key"),
    }
    assert set(refs) <= KEDA_OWN_KEYS


def test_the_example_scaled_object_is_valid_for_keda_and_reads_its_own_namespace() -> None:
    (example,) = load_yaml_documents(OVERLAY / "scaledobject.yaml")
    (version,) = [v for v in keda_crd()["spec"]["versions"] if v["name"] == "v1alpha1"]
    jsonschema.validate(example, version["schema"]["openAPIV3Schema"])
    (trigger,) = example["spec"]["triggers"]
    assert trigger["authenticationRef"] == {
        "name": "gpuscale-keda-scaler",
        "kind": "ClusterTriggerAuthentication",
    }
    query = parse_scaled_object_ref(example["metadata"]["name"], "tenant-a", trigger["metadata"])
    assert query.query.workload.namespace == "tenant-a"
    assert query.query.workload.name == example["spec"]["scaleTargetRef"]["name"]


def test_network_policies_let_in_only_keda_and_the_api_server(objects: list[Obj]) -> None:
    _, container = scaler_container(objects)
    main = find(objects, "NetworkPolicy", "gpuscale-keda-scaler")["spec"]
    assert main["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": "gpuscale-keda-scaler"}
    assert set(main["policyTypes"]) == {"Ingress", "Egress"}
    by_port = {p["port"]: rule.get("from") for rule in main["ingress"] for p in rule["ports"]}
    assert set(by_port) == {"grpc", "metrics"}
    assert by_port["grpc"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "keda"}}}
    ]
    egress = {(p["port"], p["protocol"]) for rule in main["egress"] for p in rule["ports"]}
    assert egress == {(4222, "TCP"), (53, "UDP"), (53, "TCP")}
    nats_rule = next(r for r in main["egress"] if r["ports"][0]["port"] == 4222)
    assert nats_rule["to"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "nats"}}}]
    api = find(objects, "NetworkPolicy", "gpuscale-keda-scaler-external-metrics")["spec"]
    assert api["policyTypes"] == ["Ingress"]
    # The API server's address is not selectable: by port, and the handshake does the rest.
    assert api["ingress"] == [{"ports": [{"port": "https", "protocol": "TCP"}]}]
    assert {p["name"] for p in container["ports"]} >= {"grpc", "metrics", "https"}


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
            await natsio.flush(aggregator)
            await eventually(
                lambda: scaler.counter("gpuscale_messages_in_total", kind="metrics") > before,
                what="the metrics",
            )
            async with keda_channel(scaler) as channel:
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
