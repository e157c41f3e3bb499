"""What a new user sees from the real CLI (a subprocess): usage where a flag is
wrong, one line with a cause and a remedy where something is missing, exit
codes that say it, and no password or traceback on the screen."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale_kubesim import KubeSim

from ..secret_nats import PASSWORD
from ..waiting import eventually, eventually_sync

GPUSCALE = [sys.executable, "-m", "gpuscale_cli.main"]


def gpuscale(
    *args: str, env: dict[str, str] | None = None, timeout_s: float = 90.0
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*GPUSCALE, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, **(env or {})},
        check=False,
    )


def one_line_error(result: subprocess.CompletedProcess[str], prog: str) -> str:
    """The single line on stderr, checked to be one, traceback-free and password-free."""
    assert result.returncode != 0, result
    assert "Traceback" not in result.stderr + result.stdout
    assert PASSWORD not in result.stderr + result.stdout
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"gpuscale {prog}: "), lines[0]
    return lines[0]


def no_cluster_env(tmp_path: Path) -> dict[str, str]:
    """No kubeconfig anywhere, not in a pod."""
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    return env


# --- usage ---------------------------------------------------------------------


def test_a_bare_gpuscale_prints_its_usage_and_exits_2() -> None:
    result = gpuscale()
    assert result.returncode == 2
    assert "usage: gpuscale" in result.stderr
    assert "doctor" in result.stderr


def test_a_bad_flag_prints_the_sub_commands_usage_not_the_top_levels() -> None:
    result = gpuscale("demo", "--bogus")
    assert result.returncode == 2
    assert "usage: gpuscale demo" in result.stderr
    assert "unrecognized arguments: --bogus" in result.stderr
    assert "COMMAND" not in result.stderr


def test_a_bad_demo_profile_is_one_line_naming_the_profiles() -> None:
    line = one_line_error(gpuscale("demo", "--profile", "nosuch"), "demo")
    assert "--profile" in line
    assert "step, spike" in line
    assert "llm" in line
    assert "kube-sim" not in line


def _options(help_text: str) -> list[str]:
    """Each option's help, joined onto one line."""
    flat = " ".join(help_text.split())
    return [part for part in re.split(r" (?=--[a-z])", flat) if part.startswith("--")]


@pytest.mark.parametrize("command", ["collector", "aggregator", "decider", "demo", "status", "doctor"])
def test_no_option_shows_its_default_twice(command: str) -> None:
    result = gpuscale(command, "--help")
    assert result.returncode == 0
    twice = [o for o in _options(result.stdout) if o.lower().count("default:") > 1]
    assert not twice, twice


def test_durations_are_labelled_as_seconds() -> None:
    out = " ".join(gpuscale("status", "--help").stdout.split())
    assert "--listen SECONDS" in out
    assert "(default: 3.0 s)" in out


def test_convert_mode_lists_its_choices_and_spells_them_so_in_its_error() -> None:
    assert "--mode {Active,Shadow}" in gpuscale("convert", "--help").stdout
    line = one_line_error(gpuscale("convert", "--mode", "bogus", "-"), "convert")
    assert "must be one of Active, Shadow" in line


def test_convert_notes_show_yaml_not_python_dicts(tmp_path: Path) -> None:
    hpa = tmp_path / "hpa.yaml"
    hpa.write_text(
        """
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: bert}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: bert}
  maxReplicas: 4
  metrics:
    - type: External
      external:
        metric: {name: DCGM_FI_DEV_GPU_UTIL, selector: {matchLabels: {app: bert}}}
        target: {type: AverageValue, averageValue: "70"}
  behavior:
    scaleUp:
      policies: [{type: Nonsense, value: 1, periodSeconds: 15}]
"""
    )
    result = gpuscale("convert", str(hpa))
    said = result.stdout + result.stderr
    assert "selector {matchLabels: {app: bert}}" in said
    assert "{type: Nonsense, value: 1, periodSeconds: 15}" in said
    assert "{'" not in said


# --- status and a missing cluster -------------------------------------------------


def test_status_with_a_missing_kubeconfig_is_one_line_and_exits_1(tmp_path: Path) -> None:
    line = one_line_error(gpuscale("status", "--kubeconfig", str(tmp_path / "nope")), "status")
    assert "does not exist" in line
    assert "--kubeconfig" in line


@pytest.fixture
def http_port(tmp_path: Path) -> Iterator[int]:
    """A real HTTP server (python -m http.server): a port that answers, but not as NATS."""
    port = free_port("127.0.0.1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def listening() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1):
                return True
        except OSError:
            return False

    try:
        eventually_sync(listening, what="http.server listening")
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


def test_status_names_each_nats_failure_by_its_cause(
    silent_port: int, http_port: int, nats_with_password: EmbeddedNats
) -> None:
    cases: Sequence[tuple[str, str]] = (
        (f"nats://app:{PASSWORD}@127.0.0.1:{free_port('127.0.0.1')}", "connection refused"),
        (f"nats://app:{PASSWORD}@no-such-host.invalid:4222", "unknown host"),
        (f"nats://app:wrong-{PASSWORD}@127.0.0.1:{nats_with_password.port}", "refused the credentials"),
        (f"nats://127.0.0.1:{http_port}", "not as a NATS server does"),
        (f"nats://127.0.0.1:{silent_port}", "no answer in time"),
    )
    for url, cause in cases:
        started = time.monotonic()
        line = one_line_error(gpuscale("status", "--nats-url", url), "status")
        assert cause in line, (url, line)
        assert "cannot connect to NATS at" in line
        assert "; " in line
        if "no answer" not in cause:  # a refusal is known at once, not after a timeout
            assert time.monotonic() - started < 30, (url, "took", time.monotonic() - started)


def test_an_unexpected_failure_is_one_line_unless_debug_is_asked(tmp_path: Path) -> None:
    bad = tmp_path / "kubeconfig"
    bad.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")  # no current-context
    line = one_line_error(gpuscale("status", "--kubeconfig", str(bad)), "status")
    assert "cannot use the kubeconfig" in line


def test_a_service_without_cluster_config_says_so_before_creating_any_stream(
    nats_server: EmbeddedNats, tmp_path: Path
) -> None:
    result = subprocess.run(
        [*GPUSCALE, "decider", "--nats-url", nats_server.url, "--http-port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        env=no_cluster_env(tmp_path),
        check=False,
    )
    assert result.returncode == 1
    out = result.stdout + result.stderr
    assert "Traceback" not in out
    assert "current-context" not in out
    failed = [json.loads(line) for line in out.splitlines() if "service_cannot_start" in line]
    assert len(failed) == 1
    assert "no cluster config" in failed[0]["error"]
    assert failed[0]["remedy"]
    streams = json.loads(
        urllib.request.urlopen(f"http://127.0.0.1:{nats_server.monitor_port}/jsz?streams=true").read()
    )
    assert streams.get("streams", 0) == 0, "the decider created streams before it knew it could not run"
    assert subjects.DECISIONS_STREAM not in json.dumps(streams)


async def test_a_service_waiting_for_nats_says_why_on_readyz(kube_sim: KubeSim, tmp_path: Path) -> None:
    port = free_port("127.0.0.1")
    http = free_port("127.0.0.1")
    log = (tmp_path / "decider.log").open("w")
    proc = await asyncio.to_thread(
        subprocess.Popen,
        [
            *GPUSCALE,
            "decider",
            "--nats-url",
            f"nats://app:{PASSWORD}@127.0.0.1:{port}",
            "--kubeconfig",
            str(kube_sim.kubeconfig_path),
            "--http-port",
            str(http),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )

    def readyz() -> dict[str, object] | None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=2) as r:
                return dict(json.loads(r.read()))
        except urllib.error.HTTPError as e:
            return dict(json.loads(e.read()))
        except OSError:
            return None

    try:

        async def says_why() -> bool:
            body = await asyncio.to_thread(readyz)
            return body is not None and "connection refused" in json.dumps(body)

        await eventually(says_why, timeout_s=60, what="/readyz naming the cause")
        body = readyz()
        assert body is not None
        assert body["ready"] is False
        assert PASSWORD not in json.dumps(body)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    said = (tmp_path / "decider.log").read_text()
    assert '"cause": "refused"' in said
    assert PASSWORD not in said


# --- make and the image script -------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def test_make_demo_installs_the_runtime_only_and_make_test_the_dev_toolchain(tmp_path: Path) -> None:
    def planned(target: str) -> str:
        result = subprocess.run(
            ["make", "-n", "-C", str(REPO), target, f"VENV={tmp_path / 'venv'}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0, result
        return result.stdout

    demo = planned("demo")
    assert "pip install --quiet -e ." in demo
    assert "[dev]" not in demo
    assert "pip install --quiet -e '.[dev]'" in planned("test")


def test_images_script_stops_on_its_own_error(tmp_path: Path) -> None:
    """No engine on this PATH: one line saying so, exit 2, nothing run after it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("bash", "sed", "basename", "dirname", "tr", "date", "awk", "head", "cat"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    result = subprocess.run(
        [str(bin_dir / "bash"), str(REPO / "docker" / "images.sh"), "build"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": str(bin_dir), "HOME": str(tmp_path)},
        check=False,
    )
    assert result.returncode == 2, result
    assert "no container engine" in result.stderr
    assert "command not found" not in result.stderr
    assert result.stdout == ""
