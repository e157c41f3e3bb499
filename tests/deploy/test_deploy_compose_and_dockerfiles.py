"""docker-compose.yml and docker/*.Dockerfile, checked statically (docker
cannot run in CI): the compose schema, that every container runs a real
``gpuscale`` sub-command with options it has (parsed by the real CLI parser
and built into the real settings object), and that every referenced file exists.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import pytest
import yaml

from gpuscale import settings as settings_mod
from gpuscale_cli.main import build_parser

from .deploy_support import (
    COMPOSE_FILE,
    DEPLOY,
    DOCKER,
    REPO,
    SERVICE_PORTS,
    Instruction,
    command_names,
    command_options,
    containers,
    dockerfile_instructions,
    gpuscale_command_of_image,
    kubectl_path,
    render,
    workloads,
)

SCHEMA = Path(__file__).with_name("compose_subset.schema.json")
DOCKERFILES = sorted(DOCKER.glob("*.Dockerfile"))
NODES = ("gpu-node-1", "gpu-node-2", "gpu-node-3", "gpu-node-4")


ROLES = ("collector", "aggregator", "decider", "actuator", "observer", "setup")
# What `make compose-up` puts in .compose.env.
COMPOSE_ENV = {f"NATS_{role.upper()}_PASSWORD": f"{role}0123456789abcdef" for role in ROLES}
_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


class MissingVariable(ValueError):
    pass


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}."""

    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        value = env.get(name)
        if op in (":-", "-"):
            return arg if value is None or (op == ":-" and value == "") else value
        if op in (":?", "?"):
            if value is None or (op == ":?" and value == ""):
                raise MissingVariable(f"{name}: {arg}")
            return value
        return value or ""

    return _VARIABLE.sub(one, text)


def _compose(env: dict[str, str] | None = None) -> dict[str, Any]:
    """docker-compose.yml as `docker compose config` reads it with ``env`` (default: .compose.env's)."""
    loaded: dict[str, Any] = yaml.safe_load(
        interpolate(COMPOSE_FILE.read_text(), COMPOSE_ENV if env is None else env)
    )
    return loaded


def _services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = _compose()["services"]
    return services


def _as_list(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return value.split() if isinstance(value, str) else list(value)


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) for item in env)
    return {k: str(v) for k, v in env.items()}


def _entrypoint(dockerfile: Path) -> list[str]:
    (entry,) = [i for i in dockerfile_instructions(dockerfile) if i.keyword == "ENTRYPOINT"]
    parsed: list[str] = json.loads(entry.args)
    return parsed


def _stages(dockerfile: Path) -> list[list[Instruction]]:
    stages: list[list[Instruction]] = []
    for instruction in dockerfile_instructions(dockerfile):
        if instruction.keyword == "FROM":
            stages.append([])
        if stages:
            stages[-1].append(instruction)
    return stages


def _gpuscale_services() -> list[tuple[str, dict[str, Any], str]]:
    """(compose service, its definition, the gpuscale sub-command its image runs)."""
    found = []
    for name, service in _services().items():
        if "build" not in service:
            continue
        dockerfile = REPO / service["build"]["context"] / service["build"]["dockerfile"]
        entry = _entrypoint(dockerfile)
        assert entry[0] == "gpuscale", f"{name}: ENTRYPOINT {entry}"
        assert len(entry) == 2, f"{name}: ENTRYPOINT {entry}"
        found.append((name, service, entry[1]))
    return found


# --- docker-compose.yml ---------------------------------------------------------


def test_compose_file_matches_the_compose_spec_subset() -> None:
    schema = json.loads(SCHEMA.read_text())
    jsonschema.Draft7Validator.check_schema(schema)
    errors = [
        f"{'/'.join(str(p) for p in e.path)}: {e.message}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(_compose())
    ]
    assert errors == []


def test_the_schema_subset_rejects_a_misspelt_key() -> None:
    schema = json.loads(SCHEMA.read_text())
    broken = _compose()
    broken["services"]["aggregator"]["enviroment"] = {"GPUSCALE_WINDOW": "30"}
    assert list(jsonschema.Draft7Validator(schema).iter_errors(broken))


def test_compose_runs_the_whole_simulation() -> None:
    services = _services()
    commands = sorted(cmd for _, _, cmd in _gpuscale_services())
    assert commands == sorted(
        ["kube-sim", *(["collector"] * len(NODES)), "aggregator", "decider", "actuator"]
    )
    nats = services["nats"]
    assert nats["image"].split(":")[0] == "nats", "the official nats image"
    assert _as_list(nats["command"]) == ["--config", "/etc/nats/nats.conf"]
    conf = (REPO / "deploy" / "compose" / "nats.conf").read_text()
    assert re.search(r"^jetstream \{", conf, re.M)
    assert re.search(r"^include auth\.conf$", conf, re.M)


def test_compose_sets_up_the_streams_as_the_setup_user_only() -> None:
    """The streams and buckets are made by `gpuscale setup` as NATS user "setup"
    (the one that may); its samples stream keeps the aggregator's window."""
    services = _services()
    setup = services["setup"]
    assert _as_list(setup["entrypoint"]) == ["gpuscale", "setup"]
    env = _environment(setup)
    assert env["GPUSCALE_NATS_URL"].startswith("nats://setup:")
    assert set(env) <= command_options("setup").envs
    built = settings_mod.build(command_options("setup").settings_class, {}, env)
    assert built.window_s == float(_environment(services["aggregator"])["GPUSCALE_WINDOW"])
    for name, service, _ in _gpuscale_services():
        assert not _environment(service).get("GPUSCALE_NATS_URL", "").startswith("nats://setup:"), name


def test_compose_publishes_every_port_on_the_loopback_only() -> None:
    for name, service in _services().items():
        for port in service.get("ports", []):
            assert str(port).startswith("127.0.0.1:"), f"{name} publishes {port} beyond this machine"


def test_compose_nats_has_deploys_users_and_permissions() -> None:
    nats = _services()["nats"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in nats["volumes"]}
    # The very file the Kubernetes install uses, not a copy.
    assert mounts["/etc/nats/auth.conf"] == "./deploy/base/nats/auth.conf"
    assert mounts["/etc/nats/nats.conf"] == "./deploy/compose/nats.conf"
    env = _environment(nats)
    for role in ROLES:
        assert env[f"NATS_{role.upper()}_PASSWORD"] == COMPOSE_ENV[f"NATS_{role.upper()}_PASSWORD"]


def test_compose_refuses_to_start_without_the_passwords() -> None:
    with pytest.raises(MissingVariable, match="NATS_COLLECTOR_PASSWORD: run make compose-up"):
        _compose({})


def test_compose_runs_the_images_make_images_builds() -> None:
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert version is not None
    for name, service, command in _gpuscale_services():
        assert service["image"] == f"ghcr.io/gpuscale/gpuscale-{command}:{version.group(1)}", name
    pinned = _compose({**COMPOSE_ENV, "GPUSCALE_VERSION": "9.9.9"})["services"]["decider"]["image"]
    assert pinned == "ghcr.io/gpuscale/gpuscale-decider:9.9.9"


def test_one_simulated_collector_per_simulated_node_reading_kube_sim() -> None:
    kube_sim = _parsed_settings("kube-sim", _services()["kube-sim"])
    nodes = []
    for name, service, command in _gpuscale_services():
        if command != "collector":
            continue
        env = _environment(service)
        nodes.append(env["GPUSCALE_NODE_NAME"])
        assert env["GPUSCALE_BACKEND"] == "sim", name
        assert env["GPUSCALE_SIM_SOURCE"] == "kube-sim", name
        assert env["KUBECONFIG"] == "/shared/kubeconfig", name
        # The simulated GPUs of a node are the ones kube-sim schedules pods onto.
        assert int(env["GPUSCALE_SIM_GPUS"]) == kube_sim.gpus_per_node, name
    assert sorted(nodes) == list(NODES)
    assert len(NODES) == kube_sim.nodes  # kube-sim names its nodes gpu-node-1..N


def _parsed_settings(command: str, service: dict[str, Any], *, strict: bool = False) -> Any:
    """What ``gpuscale <command> <compose command>`` with the compose environment builds.
    Not strict: flags the command lacks are left out (one test reports those)."""
    argv = [command, *_as_list(service.get("command"))]
    parser = build_parser(command)
    try:
        args = parser.parse_args(argv) if strict else parser.parse_known_args(argv)[0]
    except SystemExit:
        pytest.fail(f"`gpuscale {' '.join(argv)}` does not parse: a flag is not an option of {command}")
    return settings_mod.build(command_options(command).settings_class, args, _environment(service))


@pytest.mark.parametrize(
    ("name", "service", "command"), [pytest.param(*s, id=s[0]) for s in _gpuscale_services()]
)
def test_every_option_and_env_var_exists_for_the_command(
    name: str, service: dict[str, Any], command: str
) -> None:
    assert command in command_names()
    options = command_options(command)
    unknown_env = set(_environment(service)) - options.envs
    assert not unknown_env, f"{name}: {sorted(unknown_env)} are not options of gpuscale {command}"
    flags = {a.split("=", 1)[0] for a in _as_list(service.get("command")) if a.startswith("--")}
    assert flags <= options.flags, f"{name}: {sorted(flags - options.flags)}"
    built = _parsed_settings(command, service, strict=True)
    # The published port is the one the service listens on.
    port = built.http_port if hasattr(built, "http_port") else built.port
    container_ports = {int(p.split(":")[-1].split("/")[0]) for p in service.get("ports", [])}
    assert container_ports == {port}, f"{name}: ports {service.get('ports')} vs listening on {port}"


def test_kube_sim_shares_a_kubeconfig_the_others_can_reach() -> None:
    services = _services()
    kube_sim = _parsed_settings("kube-sim", services["kube-sim"])
    assert str(kube_sim.kubeconfig_out) == "/shared/kubeconfig"
    assert kube_sim.host == "0.0.0.0"  # noqa: S104 - it must listen beyond its own container
    # The kubeconfig's server URL names kube-sim as the other containers reach it.
    advertise = next(
        (
            f.name
            for f in dataclasses.fields(kube_sim)
            if "option" in f.metadata and f.metadata["option"].flag == "--advertise-url"
        ),
        None,
    )
    assert advertise is not None, (
        "gpuscale kube-sim needs --advertise-url (GPUSCALE_KUBE_SIM_ADVERTISE_URL): the server URL its "
        "kubeconfig gives to the other containers (http://kube-sim:6443), not the 127.0.0.1 it writes today"
    )
    advertised = urlparse(str(getattr(kube_sim, advertise)))
    assert (advertised.hostname, advertised.port) == ("kube-sim", kube_sim.port)
    assert "kubeconfig:/shared" in services["kube-sim"]["volumes"]
    for name, service, command in _gpuscale_services():
        if command in ("collector", "decider", "actuator"):
            assert _environment(service)["KUBECONFIG"] == str(kube_sim.kubeconfig_out), name
            assert "kubeconfig:/shared:ro" in service["volumes"], name
            assert service["depends_on"]["kube-sim"]["condition"] == "service_healthy", name
        if command != "kube-sim":
            assert service["depends_on"]["nats"]["condition"] == "service_healthy", name
            url = urlparse(_environment(service)["GPUSCALE_NATS_URL"])
            assert (url.hostname, url.port) == ("nats", 4222), name
            # Each service logs in as its own role, as in deploy/.
            assert url.username == command, name
            assert url.password == COMPOSE_ENV[f"NATS_{command.upper()}_PASSWORD"], name


def test_every_file_and_volume_compose_references_exists() -> None:
    compose = _compose()
    declared_volumes = set(compose.get("volumes", {}))
    services = compose["services"]
    for name, service in services.items():
        if "build" in service:
            context = REPO / service["build"]["context"]
            assert context.is_dir(), name
            assert (context / service["build"]["dockerfile"]).is_file(), name
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/")):
                assert (REPO / source).exists(), f"{name}: {source}"
            else:
                assert source in declared_volumes, f"{name}: volume {source} is not declared"
        for dependency in service.get("depends_on", {}):
            assert dependency in services, f"{name} depends on unknown {dependency}"
            if service["depends_on"][dependency]["condition"] == "service_healthy":
                dep = services[dependency]
                has_check = "healthcheck" in dep or any(
                    i.keyword == "HEALTHCHECK"
                    for i in dockerfile_instructions(
                        REPO / dep["build"]["context"] / dep["build"]["dockerfile"]
                    )
                )
                assert has_check, f"{name} waits for {dependency} to be healthy, which has no health check"


# --- Dockerfiles --------------------------------------------------------------------


def test_there_is_a_dockerfile_per_service() -> None:
    assert {p.name.removesuffix(".Dockerfile") for p in DOCKERFILES} == {
        "collector",
        "aggregator",
        "decider",
        "actuator",
        "keda-scaler",
        "kube-sim",
        "nats-auth",  # deploy/components/node-auth
    }


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_is_a_slim_multi_stage_non_root_build(dockerfile: Path) -> None:
    service = dockerfile.name.removesuffix(".Dockerfile")
    builder, final = _stages(dockerfile)
    assert builder[0].args == "python:3.11-slim AS builder"
    assert final[0].args == "python:3.11-slim"
    build_steps = " ".join(i.args for i in builder if i.keyword == "RUN")
    assert "pip wheel" in build_steps
    assert "-m venv /opt/venv" in build_steps
    copies = [i.args for i in final if i.keyword == "COPY"]
    assert copies == ["--from=builder /opt/venv /opt/venv"], "the final stage takes only the venv"
    (user,) = [i.args for i in final if i.keyword == "USER"]
    uid = user.split(":")[0]
    assert uid.isdigit(), "a numeric uid (runAsNonRoot can check it)"
    assert int(uid) != 0, "not root"
    assert _entrypoint(dockerfile) == ["gpuscale", service]
    assert service in command_names()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_dockerfile_exposes_the_default_port_and_checks_health(dockerfile: Path) -> None:
    service = dockerfile.name.removesuffix(".Dockerfile")
    built = settings_mod.build(command_options(service).settings_class, {}, {})
    port = built.http_port if hasattr(built, "http_port") else built.port
    instructions = dockerfile_instructions(dockerfile)
    # The keda-scaler also serves KEDA's gRPC and the external metrics API (HTTPS).
    more = {"keda-scaler": " 9500 6443"}.get(service, "")
    assert [i.args for i in instructions if i.keyword == "EXPOSE"] == [f"{port}{more}"]
    (check,) = [i.args for i in instructions if i.keyword == "HEALTHCHECK"]
    exec_form = json.loads(check[check.index("CMD") + 3 :])
    assert exec_form[:2] == ["python", "-c"]
    compile(exec_form[2], f"{dockerfile.name} HEALTHCHECK", "exec")
    assert str(port) in exec_form[2]
    if service in SERVICE_PORTS:
        assert "/healthz" in exec_form[2]


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.name)
def test_everything_a_dockerfile_copies_exists_and_is_not_ignored(dockerfile: Path) -> None:
    ignore = dockerfile.with_name(dockerfile.name + ".dockerignore")
    assert ignore.is_file(), "a per-Dockerfile .dockerignore keeps the build context small"
    reincluded = {line[1:].rstrip("/") for line in ignore.read_text().splitlines() if line.startswith("!")}
    for instruction in dockerfile_instructions(dockerfile):
        if instruction.keyword != "COPY" or instruction.args.startswith("--from"):
            continue
        *sources, _ = instruction.args.split()
        for source in sources:
            assert (REPO / source).exists(), f"{dockerfile.name}:{instruction.line}: {source}"
            assert source.rstrip("/") in reincluded, f"{source} is excluded by {ignore.name}"
    # The wheel build needs the project file, its readme, and every package it lists.
    pyproject = (REPO / "pyproject.toml").read_text()
    packages = re.findall(r'"([a-z_/]+/gpuscale[a-z_]*)"', pyproject)
    copied = " ".join(i.args for i in dockerfile_instructions(dockerfile) if i.keyword == "COPY")
    for package in packages:
        top = package.split("/")[0]
        assert f"{top}/" in copied, f"{dockerfile.name} does not copy {package}"


def test_the_kubernetes_images_are_built_by_these_dockerfiles() -> None:
    if kubectl_path() is None:
        pytest.skip("kubectl not found: cannot render deploy/")
    for workload in workloads(render(DEPLOY / "base")):
        for pod, c in containers(workload):
            command = gpuscale_command_of_image(c["image"])
            if command is None:
                continue
            dockerfile = DOCKER / f"{command}.Dockerfile"
            assert dockerfile.is_file(), c["image"]
            assert _entrypoint(dockerfile) == ["gpuscale", command]
            user = next(i.args for i in _stages(dockerfile)[-1] if i.keyword == "USER")
            run_as = c.get("securityContext", {}).get(
                "runAsUser", pod.get("securityContext", {}).get("runAsUser")
            )
            if command != "collector":  # the collector runs as root on purpose (see collector.yaml)
                assert run_as == int(user.split(":")[0]), c["image"]


def test_the_kubernetes_images_are_tagged_with_the_project_version() -> None:
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert version is not None
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    tags = {image["name"]: image["newTag"] for image in kustomization["images"]}
    assert set(tags) == {f"ghcr.io/gpuscale/gpuscale-{service}" for service in SERVICE_PORTS}
    assert set(tags.values()) == {version.group(1)}
