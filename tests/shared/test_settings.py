"""Settings: flag over environment over default; a bad value is one clear line and exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuscale.settings import SettingsError, build
from gpuscale_aggregator.settings import AggregatorSettings
from gpuscale_collector.settings import CollectorSettings

GPUSCALE = [sys.executable, "-m", "gpuscale_cli.main"]


def test_defaults_match_the_design_table() -> None:
    s = build(AggregatorSettings, {}, environ={})
    assert s.nats_url == ("nats://127.0.0.1:4222",)
    assert (s.http_port, s.window_s, s.publish_interval_s, s.log_level) == (9401, 30.0, 2.0, "info")
    c = build(CollectorSettings, {}, environ={"NODE_NAME": "gpu-7"})
    assert (c.http_port, c.backend, c.interval_s, c.sim_gpus, c.node_name) == (9400, "nvml", 1.0, 8, "gpu-7")
    assert c.pod_resources_socket == Path("/var/lib/kubelet/pod-resources/kubelet.sock")


def test_flag_beats_environment_beats_default() -> None:
    env = {"GPUSCALE_WINDOW": "45s", "GPUSCALE_PUBLISH_INTERVAL": "500ms"}
    assert build(AggregatorSettings, {}, environ=env).window_s == 45.0
    assert build(AggregatorSettings, {"window_s": "1m"}, environ=env).window_s == 60.0
    assert build(AggregatorSettings, {}, environ=env).publish_interval_s == 0.5


def test_node_name_prefers_gpuscale_variable_then_node_name() -> None:
    env = {"GPUSCALE_NODE_NAME": "a", "NODE_NAME": "b"}
    assert build(CollectorSettings, {}, environ=env).node_name == "a"


def test_settings_are_frozen() -> None:
    s = build(AggregatorSettings, {}, environ={})
    with pytest.raises(AttributeError):
        s.window_s = 1.0  # type: ignore[misc]  # the point: it must not be writable


def test_all_bad_options_are_reported_at_once() -> None:
    with pytest.raises(SettingsError) as caught:
        build(
            AggregatorSettings,
            {"window_s": "soon", "http_port": "99999"},
            environ={"GPUSCALE_LOG_LEVEL": "loud"},
        )
    flags = [flag for flag, _ in caught.value.problems]
    assert flags == ["--log-level (from $GPUSCALE_LOG_LEVEL)", "--http-port", "--window"]


# One row per option type: (command, argv, env, the option the error line must name).
BAD_VALUES = [
    pytest.param("aggregator", ["--window", "soon"], {}, "--window", id="duration"),
    pytest.param("aggregator", ["--window", "0"], {}, "--window", id="duration-zero"),
    pytest.param("aggregator", ["--http-port", "70000"], {}, "--http-port", id="port"),
    pytest.param("aggregator", ["--nats-url", "http://x:4222"], {}, "--nats-url", id="url"),
    pytest.param("aggregator", [], {"GPUSCALE_LOG_LEVEL": "chatty"}, "--log-level", id="choice-from-env"),
    pytest.param("collector", ["--sim-gpus", "-2"], {}, "--sim-gpus", id="positive-int"),
    pytest.param("collector", ["--backend", "cuda"], {}, "--backend", id="choice"),
    pytest.param("collector", ["--node-name", " "], {}, "--node-name", id="non-empty"),
    pytest.param(
        "decider", ["--policies", "/nonexistent/policies.yaml"], {}, "--policies", id="existing-file"
    ),
    pytest.param("actuator", [], {"GPUSCALE_DRY_RUN": "perhaps"}, "--dry-run", id="boolean-from-env"),
    pytest.param(
        "aggregator",
        ["--window", "5", "--publish-interval", "10"],
        {},
        "--publish-interval",
        id="cross-field",
    ),
]


@pytest.mark.parametrize(("command", "argv", "env", "option"), BAD_VALUES)
def test_bad_value_is_one_clear_line_and_exit_2(
    command: str, argv: list[str], env: dict[str, str], option: str
) -> None:
    result = subprocess.run(
        [*GPUSCALE, command, *argv],
        env={"PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert option in lines[0]
    assert "Traceback" not in result.stderr
