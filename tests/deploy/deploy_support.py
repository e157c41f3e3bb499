"""What the deployment tests share: rendering, object lookup, the CLI's options.

Nothing here starts a server; the manifests are rendered with the real
``kubectl kustomize`` (skipped, with the reason shown, where kubectl is absent).
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from gpuscale import settings as settings_mod
from gpuscale.settings import OptionSpec
from gpuscale_cli.main import COMMANDS

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DOCKER = REPO / "docker"
COMPOSE_FILE = REPO / "docker-compose.yml"
EXAMPLES = DEPLOY / "examples"
NATS_AUTH_CONF = DEPLOY / "base" / "nats" / "auth.conf"
NATS_MAIN_CONF = DEPLOY / "base" / "nats" / "nats.conf"
CRD_FILE = DEPLOY / "cluster" / "crd-gpuscaler.yaml"

# The kustomize overlays for other platforms and settings (deploy/overlays/*).
OVERLAYS = tuple(
    sorted(f"overlays/{p.parent.name}" for p in (DEPLOY / "overlays").glob("*/kustomization.yaml"))
)
NODE_AUTH = DEPLOY / "components" / "node-auth"
NODE_AUTH_CONF = NODE_AUTH / "nats" / "node-auth.conf"
# An overlay with the node-auth component, as docs/SECURITY-node-auth.md has users write theirs.
NODE_AUTH_OVERLAY = REPO / "tests" / "fixtures" / "node-auth-overlay"

K8S_VERSION = "1.30"


def nats_roles() -> list[str]:
    """The NATS users auth.conf defines, each with a password from the Secret."""
    return re.findall(r"\{ user: ([a-z-]+),\s+password: \$NATS_[A-Z]+_PASSWORD", NATS_AUTH_CONF.read_text())


IMAGE_PREFIX = "ghcr.io/gpuscale/gpuscale-"
SERVICE_PORTS = {"collector": 9400, "aggregator": 9401, "decider": 9402, "actuator": 9403}

Obj = dict[str, Any]


# --- rendering ---------------------------------------------------------------


KUBECTL_MISSING = "kubectl not found: the kustomize rendering tests need it (/usr/bin/kubectl)"


def kubectl_path() -> str | None:
    return shutil.which("kubectl") or ("/usr/bin/kubectl" if Path("/usr/bin/kubectl").is_file() else None)


def kubectl() -> str:
    found = kubectl_path()
    if found is None:
        pytest.skip(KUBECTL_MISSING)
    return found


@functools.cache
def _render(directory: Path) -> tuple[Obj, ...]:
    result = subprocess.run(
        [kubectl(), "kustomize", str(directory)], capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed:\n{result.stderr}")
    return tuple(doc for doc in yaml.safe_load_all(result.stdout) if doc)


def render(directory: Path) -> list[Obj]:
    """The objects ``kubectl kustomize <directory>`` produces (fresh copies)."""
    return copy.deepcopy(list(_render(directory)))


def load_yaml_documents(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def find(objects: list[Obj], kind: str, name: str) -> Obj:
    for obj in objects:
        if obj["kind"] == kind and obj["metadata"]["name"] == name:
            return obj
    raise AssertionError(f"no {kind} {name!r} in the rendered manifests")


def of_kind(objects: list[Obj], *kinds: str) -> list[Obj]:
    return [o for o in objects if o["kind"] in kinds]


def workloads(objects: list[Obj]) -> list[Obj]:
    return of_kind(objects, "Deployment", "StatefulSet", "DaemonSet")


def containers(workload: Obj) -> Iterator[tuple[Obj, Obj]]:
    """(pod spec, container) for every container and init container."""
    pod = workload["spec"]["template"]["spec"]
    for c in [*pod.get("initContainers", []), *pod["containers"]]:
        yield pod, c


def main_containers(workload: Obj) -> Iterator[tuple[Obj, Obj]]:
    """(pod spec, container) for the containers that run for the pod's life (no init containers)."""
    pod = workload["spec"]["template"]["spec"]
    for c in pod["containers"]:
        yield pod, c


def account_rules(objects: list[Obj]) -> dict[str, list[Obj]]:
    """ServiceAccount -> the rules its bindings give it (a Role's only in its namespace), in
    the form kube-sim's token table takes them."""
    rules: dict[str, list[Obj]] = {}
    for binding in of_kind(objects, "RoleBinding", "ClusterRoleBinding"):
        role = find(objects, binding["roleRef"]["kind"], binding["roleRef"]["name"])
        for subject in binding["subjects"]:
            granted = rules.setdefault(subject["name"], [])
            for rule in role["rules"]:
                scoped = dict(rule)
                if binding["kind"] == "RoleBinding":
                    scoped["namespaces"] = [binding["metadata"]["namespace"]]
                granted.append(scoped)
    return rules


def gpuscale_command(container: Obj) -> str | None:
    """The gpuscale sub-command a container runs: its ``command`` where it names
    one (``gpuscale setup``), else its image's entry point; None for other images."""
    command = container.get("command") or []
    if len(command) >= 2 and command[0] == "gpuscale":
        return str(command[1])
    return gpuscale_command_of_image(container["image"])


def gpuscale_command_of_image(image: str) -> str | None:
    """``ghcr.io/gpuscale/gpuscale-decider:0.1.0`` -> ``decider``; None for other images."""
    if not image.startswith(IMAGE_PREFIX):
        return None
    return image.removeprefix(IMAGE_PREFIX).split(":", 1)[0].split("@", 1)[0]


# --- the gpuscale program's options --------------------------------------------


@dataclasses.dataclass(frozen=True)
class CommandOptions:
    name: str
    settings_class: type[Any]
    flags: frozenset[str]
    envs: frozenset[str]


def command_names() -> set[str]:
    return {c.name for c in COMMANDS}


@functools.cache
def command_options(name: str) -> CommandOptions:
    command = next((c for c in COMMANDS if c.name == name), None)
    if command is None:
        raise AssertionError(f"`gpuscale {name}` is not a sub-command (gpuscale_cli.main.COMMANDS)")
    module, _, attr = command.settings.partition(":")
    cls = getattr(importlib.import_module(module), attr)
    specs: list[OptionSpec] = [
        f.metadata["option"] for f in dataclasses.fields(cls) if "option" in f.metadata
    ]
    return CommandOptions(
        name=name,
        settings_class=cls,
        flags=frozenset(s.flag for s in specs),
        envs=frozenset(e for s in specs for e in s.env),
    )


def flag_name(arg: str) -> str | None:
    """``--port=6443`` -> ``--port``; non-flags -> None."""
    if not arg.startswith("--"):
        return None
    return arg.split("=", 1)[0]


# --- Dockerfiles ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    line: int


def dockerfile_instructions(path: Path) -> list[Instruction]:
    """Instructions with their continuation lines joined; comments dropped."""
    out: list[Instruction] = []
    pending = ""
    start = 0
    for number, raw in enumerate(path.read_text().splitlines(), start=1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = (pending + stripped).strip()
        pending = ""
        keyword, _, args = text.partition(" ")
        out.append(Instruction(keyword.upper(), args.strip(), start))
    return out


_ENV_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def env_references(value: str) -> list[str]:
    """Kubernetes' ``$(VAR)`` references in an env value."""
    return _ENV_REF.findall(value)


# --- the GPUScaler CRD's schema ----------------------------------------------------


def _strict_json_schema(openapi: Any) -> Any:
    """The CRD's OpenAPI v3.0 schema as a JSON Schema (draft 4 semantics, as
    OpenAPI 3.0's boolean exclusiveMinimum), with ``nullable`` spelled as a
    null type and unknown fields forbidden wherever properties are listed."""
    if isinstance(openapi, list):
        return [_strict_json_schema(x) for x in openapi]
    if not isinstance(openapi, dict):
        return openapi
    schema = {k: _strict_json_schema(v) for k, v in openapi.items() if not k.startswith("x-kubernetes-")}
    if openapi.get("nullable") and "type" in schema:
        schema["type"] = [schema["type"], "null"]
    schema.pop("nullable", None)
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not openapi.get("x-kubernetes-preserve-unknown-fields")
    ):
        schema["additionalProperties"] = False
    return schema


def gpuscaler_validator() -> jsonschema.Draft4Validator:
    crd = load_yaml_documents(CRD_FILE)[0]
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1")
    schema = _strict_json_schema(version["schema"]["openAPIV3Schema"])
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


# --- gpuscale setup, as the decider's init container runs it ---------------------


async def run_gpuscale_setup(url: str, *, window_s: float) -> None:
    """``gpuscale setup`` as the NATS user in ``url`` (deploy/: "setup"), in-process."""
    from gpuscale_cli import setup

    settings = settings_mod.build(
        setup.SetupSettings, {}, {"GPUSCALE_NATS_URL": url, "GPUSCALE_WINDOW": str(window_s)}
    )
    assert await setup.run(settings) == 0, "gpuscale setup failed (its output is above)"
