"""deploy/components/node-auth: what the component adds and changes, and that it all fits.

Rendered with the real ``kubectl kustomize`` from an overlay (base + component,
tests/fixtures/node-auth-overlay) as a user writes it; checked against the
Kubernetes schemas, against the settings of the commands the containers run,
against nats-server itself (``-t``), and applied to kube-sim with kubectl.
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import kubernetes_validate
import pytest

from gpuscale import settings as settings_mod
from gpuscale.embedded_nats import find_binary
from gpuscale_collector.settings import CollectorSettings
from gpuscale_kubesim import KubeSim
from gpuscale_kubesim.apiserver.server import Grant
from gpuscale_natsauth.settings import NatsAuthSettings

from ..kubesim.conftest import Kubectl
from .deploy_support import (
    DEPLOY,
    DOCKER,
    EXAMPLES,
    K8S_VERSION,
    NATS_AUTH_CONF,
    NATS_MAIN_CONF,
    NODE_AUTH,
    NODE_AUTH_CONF,
    NODE_AUTH_OVERLAY,
    Obj,
    account_rules,
    containers,
    env_references,
    find,
    gpuscale_command_of_image,
    kubectl_path,
    load_yaml_documents,
    nats_roles,
    of_kind,
    render,
    workloads,
)

pytestmark = pytest.mark.skipif(kubectl_path() is None, reason="kubectl is needed to render deploy/")

NATS_ENTRY_CONF = NODE_AUTH / "nats" / "nats-node-auth.conf"
SECRET_VALUE = "s3cretHex0123"  # noqa: S105 - what a secretKeyRef resolves to here: a stand-in


@pytest.fixture(scope="module")
def base() -> list[Obj]:
    return render(DEPLOY / "base")


@pytest.fixture(scope="module")
def overlay() -> list[Obj]:
    return render(NODE_AUTH_OVERLAY)


def _keys(objects: list[Obj]) -> set[tuple[str, str]]:
    return {(o["kind"], o["metadata"]["name"]) for o in objects}


def _example_secret_keys() -> dict[str, set[str]]:
    return {
        secret["metadata"]["name"]: set(secret["stringData"])
        for path in sorted(EXAMPLES.glob("*secret*.yaml"))
        for secret in load_yaml_documents(path)
    }


def _environment(c: Obj, files: dict[str, Path] | None = None) -> dict[str, str]:
    """The container's environment as the kubelet builds it; file paths swapped for real files."""
    placeholders = {"spec.nodeName": "gpu-node-1", "metadata.namespace": "gpuscale", "metadata.name": "pod-0"}
    env: dict[str, str] = {}
    for entry in c.get("env", []):
        if "value" in entry:
            value = entry["value"]
        elif "secretKeyRef" in entry["valueFrom"]:
            value = SECRET_VALUE
        else:
            value = placeholders[entry["valueFrom"]["fieldRef"]["fieldPath"]]
        for ref in env_references(value):
            assert ref in env, f"{c['name']}: $({ref}) used before it is defined"
            value = value.replace(f"$({ref})", env[ref])
        env[entry["name"]] = value
    for name, path in (files or {}).items():
        env[name] = str(path)
    return env


def _mounted_volume(pod: Obj, c: Obj, file_path: str) -> tuple[Obj, Obj]:
    """(volume, mount) that ``file_path`` lives in."""
    for mount in c.get("volumeMounts", []):
        if file_path.startswith(mount["mountPath"].rstrip("/") + "/"):
            volume = next(v for v in pod["volumes"] if v["name"] == mount["name"])
            return volume, mount
    raise AssertionError(f"{file_path} is on no mounted volume")


# --- what the component adds and changes ---------------------------------------------------------


def test_the_base_install_does_not_change_without_the_component(base: list[Obj]) -> None:
    assert not [o for o in base if "nats-auth" in o["metadata"]["name"]]
    ((_, c),) = containers(find(base, "DaemonSet", "gpuscale-collector"))
    assert "GPUSCALE_NATS_TOKEN_FILE" not in {e["name"] for e in c["env"]}
    assert set(find(base, "ConfigMap", "nats-config")["data"]) == {"nats.conf", "auth.conf"}


def test_the_component_adds_nats_auth_and_changes_only_the_collector_nats_and_their_config(
    base: list[Obj], overlay: list[Obj]
) -> None:
    added = {
        ("ServiceAccount", "gpuscale-nats-auth"),
        ("ClusterRole", "gpuscale-nats-auth"),
        ("ClusterRoleBinding", "gpuscale-nats-auth"),
        ("Role", "gpuscale-nats-auth"),
        ("RoleBinding", "gpuscale-nats-auth"),
        ("Deployment", "gpuscale-nats-auth"),
        ("Service", "gpuscale-nats-auth"),
        ("PodDisruptionBudget", "gpuscale-nats-auth"),
    }
    assert _keys(overlay) - _keys(base) == added
    assert _keys(base) <= _keys(overlay)
    before = {(o["kind"], o["metadata"]["name"]): o for o in base}
    changed = {key for key, o in ((k, find(overlay, *k)) for k in before) if o != before[key]}
    assert changed == {
        ("DaemonSet", "gpuscale-collector"),
        ("StatefulSet", "nats"),
        ("ConfigMap", "nats-config"),
    }
    for obj in overlay:
        if obj["metadata"].get("namespace") is not None or obj["kind"] not in (
            "ClusterRole",
            "ClusterRoleBinding",
        ):
            assert obj["metadata"].get("namespace", "gpuscale") == "gpuscale", obj["metadata"]["name"]
        assert obj["metadata"].get("labels", {}).get("app.kubernetes.io/part-of") == "gpuscale", obj["kind"]


@pytest.mark.parametrize("key", sorted({("Deployment", "gpuscale-nats-auth"), ("DaemonSet", "gpuscale-collector"), ("StatefulSet", "nats"), ("ConfigMap", "nats-config"), ("Role", "gpuscale-nats-auth"), ("ClusterRole", "gpuscale-nats-auth"), ("PodDisruptionBudget", "gpuscale-nats-auth"), ("Service", "gpuscale-nats-auth")}), ids=str)  # fmt: skip
def test_what_the_component_renders_is_valid_kubernetes(overlay: list[Obj], key: tuple[str, str]) -> None:
    try:
        kubernetes_validate.validate(find(overlay, *key), K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        pytest.fail(f"{key}: {'.'.join(str(p) for p in e.path)}: {e.message}")


# --- the collector ------------------------------------------------------------------------------


def test_the_collector_logs_in_with_its_pods_projected_token_not_the_shared_password(
    overlay: list[Obj], tmp_path: Path
) -> None:
    ds = find(overlay, "DaemonSet", "gpuscale-collector")
    pod = ds["spec"]["template"]["spec"]
    ((_, c),) = containers(ds)
    refs = [e["valueFrom"]["secretKeyRef"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})]
    assert refs == [], "no NATS password reaches the collector"
    env = {e["name"]: e.get("value") for e in c["env"]}
    url = urlparse(env["GPUSCALE_NATS_URL"])
    assert (url.username, url.password, url.hostname, url.port) == (None, None, "nats.gpuscale.svc", 4222)

    volume, mount = _mounted_volume(pod, c, env["GPUSCALE_NATS_TOKEN_FILE"])
    assert mount["readOnly"] is True
    (source,) = volume["projected"]["sources"]
    token = source["serviceAccountToken"]
    assert env["GPUSCALE_NATS_TOKEN_FILE"] == f"{mount['mountPath']}/{token['path']}"
    assert token["audience"] == NatsAuthSettings().audience, "the audience nats-auth asks the API server for"
    assert 600 <= token["expirationSeconds"] <= 86400  # the API's minimum; the kubelet rotates at 80 %

    token_file = tmp_path / "token"
    token_file.write_text("t")
    built = settings_mod.build(
        CollectorSettings, {}, _environment(c, {"GPUSCALE_NATS_TOKEN_FILE": token_file})
    )
    assert built.nats_token_file == token_file


# --- nats-auth -----------------------------------------------------------------------------------


def test_nats_auth_runs_its_own_image_locked_down_with_probes(overlay: list[Obj]) -> None:
    deployment = find(overlay, "Deployment", "gpuscale-nats-auth")
    spec = deployment["spec"]
    assert spec["replicas"] >= 2, "while no replica answers, no collector can log in"
    assert find(overlay, "PodDisruptionBudget", "gpuscale-nats-auth")["spec"]["minAvailable"] == 1
    pod = spec["template"]["spec"]
    ((_, c),) = containers(deployment)
    assert gpuscale_command_of_image(c["image"]) == "nats-auth"
    assert c["image"].endswith(":0.1.0")
    dockerfile = (DOCKER / "nats-auth.Dockerfile").read_text()
    assert 'ENTRYPOINT ["gpuscale", "nats-auth"]' in dockerfile
    assert "USER 65532:65532" in dockerfile
    assert pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["runAsNonRoot"] is True
    sc = c["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert [p["containerPort"] for p in c["ports"]] == [NatsAuthSettings().http_port]
    assert pod["serviceAccountName"] == "gpuscale-nats-auth"


def test_nats_auth_settings_name_the_collectors_and_only_it_reads_the_issuer_seed(
    overlay: list[Obj], tmp_path: Path
) -> None:
    deployment = find(overlay, "Deployment", "gpuscale-nats-auth")
    pod = deployment["spec"]["template"]["spec"]
    ((_, c),) = containers(deployment)
    env = {e["name"]: e.get("value") for e in c["env"]}
    volume, mount = _mounted_volume(pod, c, env["GPUSCALE_NATS_AUTH_ISSUER_SEED_FILE"])
    assert mount["readOnly"] is True
    assert volume["secret"]["secretName"] == "gpuscale-nats-auth"
    assert volume["secret"]["items"] == [{"key": "issuer-seed", "path": "issuer-seed"}]
    assert volume["secret"]["defaultMode"] == 0o440
    assert pod["securityContext"]["fsGroup"] == pod["securityContext"]["runAsGroup"], "readable by its group"

    seed = tmp_path / "seed"
    seed.write_text("SA...")
    built = settings_mod.build(
        NatsAuthSettings, {}, _environment(c, {"GPUSCALE_NATS_AUTH_ISSUER_SEED_FILE": seed})
    )
    collector = find(overlay, "DaemonSet", "gpuscale-collector")
    assert built.collector_namespace == collector["metadata"]["namespace"]
    assert built.collector_service_account == collector["spec"]["template"]["spec"]["serviceAccountName"]
    url = urlparse(built.nats_url[0])
    assert (url.username, url.password) == ("nats-auth", SECRET_VALUE)
    assert re.search(rf"user:\s*{url.username}\s", NODE_AUTH_CONF.read_text())
    # Every known option is one of NatsAuthSettings' (no typo silently ignored).
    fields = {
        f.metadata["option"].env[0] for f in dataclasses.fields(NatsAuthSettings) if f.metadata["option"].env
    }
    for name in env:
        assert name in fields or name in ("POD_NAMESPACE", "NATS_PASSWORD"), name


def test_nats_auth_may_review_tokens_and_read_pods_of_its_namespace_and_nothing_else(
    base: list[Obj], overlay: list[Obj]
) -> None:
    rules = account_rules(overlay)["gpuscale-nats-auth"]
    grant = Grant("gpuscale-nats-auth", tuple(rules))
    assert grant.allows("create", "authentication.k8s.io", "tokenreviews", None, None)
    assert grant.allows("get", "", "pods", "gpuscale", "gpuscale-collector-x7k2p")
    for verb, group, resource, namespace in [
        ("get", "", "pods", "default"),
        ("list", "", "pods", "gpuscale"),
        ("watch", "", "pods", "gpuscale"),
        ("get", "", "secrets", "gpuscale"),
        ("create", "", "serviceaccounts/token", "gpuscale"),
        ("create", "authorization.k8s.io", "subjectaccessreviews", None),
    ]:
        assert not grant.allows(verb, group, resource, namespace, None), (verb, resource, namespace)
    for role in of_kind(overlay, "Role", "ClusterRole"):
        for rule in role["rules"]:
            assert "*" not in rule.get("verbs", []) + rule.get("resources", []), role["metadata"]["name"]
    others = {k: v for k, v in account_rules(overlay).items() if k != "gpuscale-nats-auth"}
    assert others == account_rules(base), "no other account gains or loses anything"


# --- nats-server -----------------------------------------------------------------------------------


def _auth_conf_users() -> set[str]:
    return set(re.findall(r"\{\s*user:\s*(\w+),", NATS_AUTH_CONF.read_text()))


def _callout_auth_users() -> set[str]:
    block = re.search(r"auth_users:\s*\[([^\]]*)\]", NODE_AUTH_CONF.read_text())
    assert block is not None
    return set(block.group(1).replace(",", " ").split())


def test_every_role_but_the_collector_keeps_its_password_login(overlay: list[Obj]) -> None:
    """A role added to auth.conf and not to auth_users would be sent to the callout and refused."""
    assert _callout_auth_users() == (_auth_conf_users() - {"collector"}) | {"nats-auth"}
    assert "collector" in _auth_conf_users(), "auth.conf is unchanged: the component only adds"


def test_nats_starts_from_the_node_auth_config_with_every_variable_it_reads(overlay: list[Obj]) -> None:
    sts = find(overlay, "StatefulSet", "nats")
    ((_, c),) = containers(sts)
    config = find(overlay, "ConfigMap", "nats-config")["data"]
    assert c["args"] == ["--config", "/etc/nats/nats-node-auth.conf"]
    mount = next(m for m in c["volumeMounts"] if m["name"] == "config")
    assert mount["mountPath"] == "/etc/nats"
    assert config["nats-node-auth.conf"] == NATS_ENTRY_CONF.read_text()
    assert config["node-auth.conf"] == NODE_AUTH_CONF.read_text()
    assert config["nats.conf"] == NATS_MAIN_CONF.read_text()
    assert config["auth.conf"] == NATS_AUTH_CONF.read_text()
    includes = re.findall(r"^include (\S+)", config["nats-node-auth.conf"], re.MULTILINE)
    assert includes == ["nats.conf", "node-auth.conf"]
    text = config["auth.conf"] + config["node-auth.conf"]
    defined = set(re.findall(r"^([A-Z_]+)\s*=", text, re.MULTILINE))  # the *_PERMISSIONS blocks
    read = set(re.findall(r":\s*\$([A-Z_]+)", text)) - defined  # values from the environment
    given = {e["name"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert read == given


def test_every_secret_the_component_reads_has_its_key_in_the_example_secrets(overlay: list[Obj]) -> None:
    examples = _example_secret_keys()
    assert examples["gpuscale-nats-auth"] == {"issuer-seed", "issuer-public-key", "service-password"}
    for workload in workloads(overlay):
        pod = workload["spec"]["template"]["spec"]
        for _, c in containers(workload):
            for entry in c.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["key"] in examples[ref["name"]], (c["name"], ref)
        for volume in pod.get("volumes", []):
            if "secret" in volume:
                for item in volume["secret"]["items"]:
                    assert item["key"] in examples[volume["secret"]["secretName"]]


def test_the_shipped_node_auth_config_parses(tmp_path: Path) -> None:
    for source in (NATS_MAIN_CONF, NATS_AUTH_CONF, NODE_AUTH_CONF, NATS_ENTRY_CONF):
        shutil.copy(source, tmp_path / source.name)
    env = {f"NATS_{role.upper()}_PASSWORD": "pw0123" for role in nats_roles()}
    env |= {"SERVER_NAME": "nats-0", "PATH": "/usr/bin:/bin", "NATS_AUTH_SERVICE_PASSWORD": "pw4567"}
    # A real account public key: the server checks issuer's form.
    env["NATS_AUTH_ISSUER"] = "ACOXMLWZAFHWWQ24UF3OZOWCIISNIS66TG66YEZYLNAFHMQSD6QISZPP"
    command = [find_binary(), "-t", "-c", str(tmp_path / NATS_ENTRY_CONF.name)]
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=30, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    env["NATS_AUTH_ISSUER"] = "not-an-account-key"
    broken = subprocess.run(command, capture_output=True, text=True, env=env, timeout=30, check=False)
    assert broken.returncode != 0, "the check can fail"


# --- applied with kubectl ----------------------------------------------------------------------------


@pytest.mark.integration
async def test_kubectl_applies_the_overlay_to_a_fresh_cluster(kube_sim: KubeSim, tmp_path: Path) -> None:
    kubectl = Kubectl(kube_sim, tmp_path / "kubectl-cache")
    await kubectl("delete", "customresourcedefinition", "gpuscalers.gpuscale.io")
    await kubectl("delete", "namespace", "gpuscale")
    await kubectl("apply", "-k", str(DEPLOY / "cluster"))  # the namespace and the CRD come first
    out = await kubectl("apply", "-k", str(NODE_AUTH_OVERLAY))  # kubectl's default validation: strict
    for line in (
        "deployment.apps/gpuscale-nats-auth created",
        "clusterrole.rbac.authorization.k8s.io/gpuscale-nats-auth created",
        "role.rbac.authorization.k8s.io/gpuscale-nats-auth created",
        "daemonset.apps/gpuscale-collector created",
        "statefulset.apps/nats created",
        "configmap/nats-config created",
    ):
        assert line in out, out
    assert "Warning" not in out, out
    stored: dict[str, Any] = kube_sim.get("apps/v1", "DaemonSet", "gpuscale-collector", namespace="gpuscale")
    volumes = {v["name"]: v for v in stored["spec"]["template"]["spec"]["volumes"]}
    assert (
        volumes["nats-token"]["projected"]["sources"][0]["serviceAccountToken"]["audience"]
        == "nats.gpuscale.io"
    )
