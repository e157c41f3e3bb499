"""The pods: probes, security contexts, the collector's node access, and that
every environment variable given to a gpuscale container is an option of
the sub-command it runs (checked by building the real settings object)."""

from __future__ import annotations

import dataclasses
import re
from typing import Any
from urllib.parse import urlparse

import pytest

from gpuscale import settings as settings_mod

from .deploy_support import (
    DEPLOY,
    EXAMPLES,
    NATS_AUTH_CONF,
    NATS_MAIN_CONF,
    SERVICE_PORTS,
    Obj,
    command_options,
    containers,
    env_references,
    find,
    gpuscale_command,
    load_yaml_documents,
    main_containers,
    render,
    workloads,
)

# What a secretKeyRef resolves to in these tests.
PLACEHOLDER_SECRET = "s3cretHex0123"  # noqa: S105 - a stand-in, not a credential

# Environment variables read by something other than gpuscale's settings, each with its reader.
NON_OPTION_ENV = {
    "NVIDIA_VISIBLE_DEVICES": "the NVIDIA container runtime (which GPUs to expose)",
    "NVIDIA_DRIVER_CAPABILITIES": "the NVIDIA container runtime (which driver libraries to inject)",
}


@pytest.fixture(scope="module")
def objects() -> list[Obj]:
    return render(DEPLOY)


def _effective(pod: Obj, container: Obj, key: str) -> Any:
    """A security setting as the kubelet sees it: the container's, else the pod's."""
    value = container.get("securityContext", {}).get(key)
    return pod.get("securityContext", {}).get(key) if value is None else value


def test_every_gpuscale_and_nats_container_has_liveness_and_readiness_probes(objects: list[Obj]) -> None:
    for workload in workloads(objects):
        for _, c in main_containers(workload):  # an init container runs to completion: no probes
            assert "livenessProbe" in c, f"{workload['metadata']['name']}/{c['name']}: no livenessProbe"
            assert "readinessProbe" in c, f"{workload['metadata']['name']}/{c['name']}: no readinessProbe"


@pytest.mark.parametrize(("service", "port"), sorted(SERVICE_PORTS.items()))
def test_services_probe_healthz_and_readyz_on_their_own_port(
    objects: list[Obj], service: str, port: int
) -> None:
    kind = "DaemonSet" if service == "collector" else "Deployment"
    ((_, c),) = main_containers(find(objects, kind, f"gpuscale-{service}"))
    named = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert named == {"metrics": port}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    env = {e["name"]: e.get("value") for e in c["env"]}
    assert env["GPUSCALE_HTTP_PORT"] == str(port)
    assert {"requests", "limits"} <= set(c["resources"])


def test_every_container_is_locked_down(objects: list[Obj]) -> None:
    for workload in workloads(objects):
        for pod, c in containers(workload):
            where = f"{workload['metadata']['name']}/{c['name']}"
            sc = c.get("securityContext", {})
            assert sc.get("allowPrivilegeEscalation") is False, where
            assert sc.get("readOnlyRootFilesystem") is True, where
            assert sc.get("capabilities", {}).get("drop") == ["ALL"], where
            assert not sc.get("capabilities", {}).get("add"), where
            assert not sc.get("privileged", False), where
            assert _effective(pod, c, "seccompProfile") == {"type": "RuntimeDefault"}, where


def test_every_container_runs_as_non_root_except_the_collector(objects: list[Obj]) -> None:
    # The collector's one exception: the kubelet's pod-resources socket is
    # root-owned 0755, so only uid 0 can connect; it keeps no capabilities.
    for workload in workloads(objects):
        for pod, c in containers(workload):
            where = f"{workload['metadata']['name']}/{c['name']}"
            if workload["metadata"]["name"] == "gpuscale-collector":
                assert _effective(pod, c, "runAsUser") == 0, where
                assert c["securityContext"]["capabilities"]["drop"] == ["ALL"], where
                continue
            assert _effective(pod, c, "runAsNonRoot") is True, where
            assert _effective(pod, c, "runAsUser") not in (None, 0), where


def test_the_collector_daemonset_reaches_the_node_read_only(objects: list[Obj]) -> None:
    ds = find(objects, "DaemonSet", "gpuscale-collector")
    pod = ds["spec"]["template"]["spec"]
    ((_, c),) = containers(ds)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["hostPID"] is True
    assert pod["runtimeClassName"] == "nvidia"
    assert "hostNetwork" not in pod

    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    mounts = {m["mountPath"]: m for m in c["volumeMounts"]}
    pod_resources = mounts["/var/lib/kubelet/pod-resources"]
    assert host_paths[pod_resources["name"]] == "/var/lib/kubelet/pod-resources"
    assert pod_resources["readOnly"] is True
    host_proc = mounts["/host/proc"]
    assert host_paths[host_proc["name"]] == "/proc"
    assert host_proc["readOnly"] is True
    for mount in c["volumeMounts"]:
        if mount["name"] in host_paths:
            assert mount.get("readOnly") is True, f"host path {mount['mountPath']} is writable"

    env = {e["name"]: e for e in c["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["GPUSCALE_PROC_ROOT"]["value"] == "/host/proc"
    assert env["GPUSCALE_POD_RESOURCES_SOCKET"]["value"].startswith(pod_resources["mountPath"] + "/")
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert c["resources"] == {
        "requests": {"cpu": "20m", "memory": "64Mi"},
        "limits": {"cpu": "200m", "memory": "128Mi"},
    }


@pytest.mark.parametrize("service", ["decider", "actuator"])
def test_leader_elected_services_run_two_replicas_knowing_their_namespace(
    objects: list[Obj], service: str
) -> None:
    deployment = find(objects, "Deployment", f"gpuscale-{service}")
    assert deployment["spec"]["replicas"] == 2
    ((_, c),) = main_containers(deployment)
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    assert env["GPUSCALE_IDENTITY"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    # The settings really take the Lease's namespace and holder name from them.
    built = settings_mod.build(command_options(service).settings_class, {}, _resolved_environment(c))
    by_env = {
        env_name: getattr(built, f.name)
        for f in dataclasses.fields(built)
        if "option" in f.metadata
        for env_name in f.metadata["option"].env
    }
    assert by_env["POD_NAMESPACE"] == "gpuscale"
    assert by_env["GPUSCALE_IDENTITY"] == "pod-0"
    pdb = find(objects, "PodDisruptionBudget", f"gpuscale-{service}")
    assert pdb["spec"]["minAvailable"] == 1


# --- environment -> settings ---------------------------------------------------


def _gpuscale_containers(objects: list[Obj]) -> list[tuple[str, Obj]]:
    found = []
    for workload in workloads(objects):
        for _, c in containers(workload):
            command = gpuscale_command(c)
            if command is not None:
                found.append((command, c))
    return found


def test_all_four_services_run_from_gpuscale_images(objects: list[Obj]) -> None:
    # ... and gpuscale setup, the decider's init container.
    assert sorted(cmd for cmd, _ in _gpuscale_containers(objects)) == sorted([*SERVICE_PORTS, "setup"])


def _placeholder(entry: Obj) -> str:
    """A stand-in for a value Kubernetes fills in at run time."""
    source = entry["valueFrom"]
    if "secretKeyRef" in source:
        return PLACEHOLDER_SECRET
    return {"spec.nodeName": "gpu-node-1", "metadata.namespace": "gpuscale", "metadata.name": "pod-0"}[
        source["fieldRef"]["fieldPath"]
    ]


def _resolved_environment(c: Obj) -> dict[str, str]:
    """The container's environment as the kubelet builds it, $(VAR) expanded
    from variables defined earlier in the list (Kubernetes' own rule)."""
    env: dict[str, str] = {}
    for entry in c.get("env", []):
        value = entry["value"] if "value" in entry else _placeholder(entry)
        for ref in env_references(value):
            assert ref in env, f"{c['name']}: $({ref}) used before it is defined"
            value = value.replace(f"$({ref})", env[ref])
        env[entry["name"]] = value
    return env


def test_every_env_var_is_an_option_of_the_command_the_container_runs(objects: list[Obj]) -> None:
    for command, c in _gpuscale_containers(objects):
        options = command_options(command)
        referenced = {ref for e in c["env"] if "value" in e for ref in env_references(e["value"])}
        for entry in c["env"]:
            name = entry["name"]
            if name in options.envs or name in NON_OPTION_ENV:
                continue
            assert name in referenced, (
                f"gpuscale {command}: env {name} is no option of {options.settings_class.__name__}, "
                f"is not referenced as $({name}) and not listed in NON_OPTION_ENV"
            )


def test_every_container_environment_builds_valid_settings(objects: list[Obj]) -> None:
    for command, c in _gpuscale_containers(objects):
        cls = command_options(command).settings_class
        try:
            built = settings_mod.build(cls, {}, _resolved_environment(c))
        except settings_mod.SettingsError as e:
            pytest.fail(f"gpuscale {command}: {e}")
        if command in SERVICE_PORTS:
            assert built.http_port == SERVICE_PORTS[command]


# --- NATS credentials ----------------------------------------------------------


def _auth_users() -> dict[str, str]:
    """user -> password variable, from auth.conf."""
    pattern = re.compile(r"\{\s*user:\s*(\w+),\s*password:\s*\$(\w+),")
    return dict(pattern.findall(NATS_AUTH_CONF.read_text()))


def _example_secret_keys() -> set[str]:
    (secret,) = load_yaml_documents(EXAMPLES / "nats-credentials-secret.yaml")
    return set(secret["stringData"])


def test_each_service_connects_to_nats_as_its_own_user(objects: list[Obj]) -> None:
    users = _auth_users()
    for command, c in _gpuscale_containers(objects):
        url = urlparse(_resolved_environment(c)["GPUSCALE_NATS_URL"])
        assert url.username == command, f"gpuscale {command} connects as {url.username}"
        assert url.username in users
        assert url.password == PLACEHOLDER_SECRET, "the password must come from the Secret"
        assert (url.hostname, url.port) == ("nats.gpuscale.svc", 4222)


def test_every_secret_reference_is_a_key_of_the_credentials_secret(objects: list[Obj]) -> None:
    keys = _example_secret_keys()
    for workload in workloads(objects):
        for _, c in containers(workload):
            for entry in c.get("env", []):
                ref = entry.get("valueFrom", {}).get("secretKeyRef")
                if ref is not None:
                    assert ref["name"] == "gpuscale-nats-credentials"
                    assert ref["key"] in keys, f"{c['name']}: {ref['key']}"


def test_setup_runs_as_the_decider_init_container_with_the_aggregator_window(objects: list[Obj]) -> None:
    """The streams are made by the one NATS user allowed to, before the decider
    starts, sized for the 3-node cluster, keeping one aggregator window."""
    decider = find(objects, "Deployment", "gpuscale-decider")
    (setup,) = decider["spec"]["template"]["spec"]["initContainers"]
    assert gpuscale_command(setup) == "setup"
    built = settings_mod.build(command_options("setup").settings_class, {}, _resolved_environment(setup))
    assert urlparse(built.nats_url[0]).username == "setup"
    assert built.replicas == find(objects, "StatefulSet", "nats")["spec"]["replicas"] == 3
    ((_, aggregator),) = main_containers(find(objects, "Deployment", "gpuscale-aggregator"))
    window = settings_mod.build(
        command_options("aggregator").settings_class, {}, _resolved_environment(aggregator)
    ).window_s
    assert built.window_s == window
    # The setup password reaches no long-running container.
    for workload in workloads(objects):
        for _, c in main_containers(workload):
            if workload["metadata"]["name"] == "nats":
                continue
            keys = {
                e["valueFrom"]["secretKeyRef"]["key"]
                for e in c.get("env", [])
                if "secretKeyRef" in e.get("valueFrom", {})
            }
            assert "setup-password" not in keys, c["name"]


def test_nats_gets_every_password_auth_conf_reads(objects: list[Obj]) -> None:
    ((_, c),) = containers(find(objects, "StatefulSet", "nats"))
    given = {e["name"] for e in c["env"] if "secretKeyRef" in e.get("valueFrom", {})}
    assert set(_auth_users().values()) == given
    assert set(_auth_users()) == {"collector", "aggregator", "decider", "actuator", "observer", "setup"}
    config = find(objects, "ConfigMap", "nats-config")
    assert set(config["data"]) == {"nats.conf", "auth.conf"}
    assert "include auth.conf" in config["data"]["nats.conf"]
    assert config["data"]["auth.conf"] == NATS_AUTH_CONF.read_text()
    assert config["data"]["nats.conf"] == NATS_MAIN_CONF.read_text()


def test_nats_routes_name_every_statefulset_pod(objects: list[Obj]) -> None:
    sts = find(objects, "StatefulSet", "nats")
    headless = find(objects, "Service", sts["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None"
    assert headless["spec"]["publishNotReadyAddresses"] is True
    routes = re.findall(r"nats://([\w.-]+):6222", NATS_MAIN_CONF.read_text())
    expected = [f"nats-{i}.{sts['spec']['serviceName']}" for i in range(sts["spec"]["replicas"])]
    assert routes == expected
