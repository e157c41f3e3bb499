"""kube-sim options."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from gpuscale.settings import (
    choice,
    non_negative_int,
    option,
    path,
    port,
    positive_float,
    positive_int,
    seconds,
)

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def delay(text: str) -> float:
    """``20``, ``20s``, ``500ms``, ``0``: a duration that may be zero."""
    m = _DURATION.match(text)
    if not m:
        raise ValueError("expected a duration such as 20, 20s, 500ms or 0")
    return float(m.group(1)) * _UNITS[m.group(2)]


def profile(text: str) -> str:
    """step, spike, diurnal, ramp, bursty, constant:N, or a YAML/JSON file of [{t, load}]."""
    word = text.strip()
    lowered = word.lower()
    if lowered in ("step", "spike", "diurnal", "ramp", "bursty"):
        return lowered
    if lowered.startswith("constant:"):
        try:
            value = float(lowered.split(":", 1)[1])
        except ValueError:
            raise ValueError("constant:N needs a number N (GPU-percent)") from None
        if value < 0:
            raise ValueError("constant:N must not be negative")
        return lowered
    if Path(word).expanduser().is_file():
        return str(Path(word).expanduser())
    raise ValueError("must be step, spike, diurnal, ramp, bursty, constant:N or an existing file")


def server_url(text: str) -> str:
    parsed = urlparse(text.strip())
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise ValueError("expected an http://host:port URL")
    return text.strip().rstrip("/")


def scenario(text: str) -> str:
    word = text.strip()
    if word.lower() in ("demo", "demo-llm", "empty"):
        return word.lower()
    if Path(word).expanduser().is_file():
        return str(Path(word).expanduser())
    raise ValueError("must be demo, demo-llm, empty or an existing YAML file of objects")


def token(text: str) -> str:
    if not text.strip() or any(c.isspace() for c in text.strip()):
        raise ValueError("must be a non-empty token without spaces")
    return text.strip()


@dataclass(frozen=True)
class KubeSimSettings:
    port: int = option(
        6443, "--port", env="GPUSCALE_KUBE_SIM_PORT", parse=port, help="API port (0: a free one)"
    )
    host: str = option("127.0.0.1", "--host", env="GPUSCALE_KUBE_SIM_HOST", help="address to listen on")
    kubeconfig_out: Path | None = option(
        None,
        "--kubeconfig-out",
        env="GPUSCALE_KUBE_SIM_KUBECONFIG_OUT",
        parse=path,
        help="write a kubeconfig for clients here",
    )
    advertise_url: str | None = option(
        None,
        "--advertise-url",
        env="GPUSCALE_KUBE_SIM_ADVERTISE_URL",
        parse=server_url,
        help="server URL to write into the kubeconfig, as clients reach it (http://kube-sim:6443 in docker-compose); none: the bound address",
    )
    scenario: str = option(
        "demo",
        "--scenario",
        env="GPUSCALE_KUBE_SIM_SCENARIO",
        parse=scenario,
        help="built-in cluster ('demo'; 'demo-llm': two vLLM-like workloads, one scaled on "
        "requests_waiting, one on gpu_util; 'empty') or a YAML file of objects to create",
    )
    window: float = option(
        30.0,
        "--window",
        env="GPUSCALE_KUBE_SIM_WINDOW",
        parse=seconds,
        help="spec.window of the built-in scenarios' GPUScalers",
    )
    startup_delay: float = option(
        20.0,
        "--startup-delay",
        env="GPUSCALE_KUBE_SIM_STARTUP_DELAY",
        parse=delay,
        help="how long a new pod loads its model before it is Ready",
    )
    termination_delay: float = option(
        2.0,
        "--termination-delay",
        env="GPUSCALE_KUBE_SIM_TERMINATION_DELAY",
        parse=delay,
        help="how long a deleted pod takes to go away",
    )
    nodes: int = option(
        4, "--nodes", env="GPUSCALE_KUBE_SIM_NODES", parse=positive_int, help="simulated GPU nodes"
    )
    gpus_per_node: int = option(
        8,
        "--gpus-per-node",
        env="GPUSCALE_KUBE_SIM_GPUS_PER_NODE",
        parse=positive_int,
        help="GPUs on each node",
    )
    token: str | None = option(
        None,
        "--token",
        env="GPUSCALE_KUBE_SIM_TOKEN",
        parse=token,
        help="require this bearer token (401 without it); the kubeconfig carries it",
    )
    profile: str = option(
        "step",
        "--profile",
        env="GPUSCALE_KUBE_SIM_PROFILE",
        parse=profile,
        help="load of the demo workload(s): step, spike, diurnal, ramp, bursty, constant:N or a file of [{t, load}]",
    )
    speed: float = option(
        1.0,
        "--speed",
        env="GPUSCALE_KUBE_SIM_SPEED",
        parse=positive_float,
        help="how fast load profiles play (2: twice as fast)",
    )
    seed: int | None = option(
        None,
        "--seed",
        env="GPUSCALE_KUBE_SIM_SEED",
        parse=non_negative_int,
        help="seed of the noise generator",
    )
    log_level: str = option(
        "info",
        "--log-level",
        env="GPUSCALE_LOG_LEVEL",
        parse=choice("debug", "info", "warning", "error"),
        help="log level",
    )
