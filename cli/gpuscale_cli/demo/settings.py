"""Demo options."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from gpuscale.settings import LOG_LEVELS, choice, non_empty, option, path, port, positive_float, seconds
from gpuscale_kubesim.cluster.load import parse_profile

LLM_PROFILE = "llm"


def load_profile(text: str) -> str:
    """A profile kube-sim will accept, checked here so a typo is one line, not a kube-sim that never comes up."""
    name = non_empty(text)
    if name.strip().lower() == LLM_PROFILE or Path(name).expanduser().is_file():
        return name
    try:
        parse_profile(name)
    except ValueError:
        raise ValueError(
            "unknown load profile: use step, spike, diurnal, ramp, bursty, constant:N, llm "
            "or the path of a YAML/JSON file"
        ) from None
    return name


@dataclass(frozen=True)
class DemoSettings:
    profile: str = option(
        "step",
        "--profile",
        env="GPUSCALE_DEMO_PROFILE",
        parse=load_profile,
        help="load profile: step, spike, diurnal, ramp, bursty, constant:N, or a YAML/JSON file of {t, load} "
        "points; llm: two vLLM-like workloads on a bursty trace, one scaled on requests_waiting, one on gpu_util",
    )
    duration_s: float | None = option(
        None,
        "--duration",
        env="GPUSCALE_DEMO_DURATION",
        parse=seconds,
        help="seconds to run (default: until Ctrl-C on a terminal, 120 otherwise)",
    )
    report: Path | None = option(
        None,
        "--report",
        env="GPUSCALE_DEMO_REPORT",
        parse=path,
        help="where to write the JSON report of the run "
        "(default: report.json in the logs folder; docs/DEMO.md explains its fields)",
    )
    ui_port: int = option(
        8080,
        "--ui-port",
        env="GPUSCALE_DEMO_UI_PORT",
        parse=port,
        help="port of the live web page (0: a free one)",
    )
    speed: float = option(
        1.0,
        "--speed",
        env="GPUSCALE_DEMO_SPEED",
        parse=positive_float,
        help="run the load profile's time this many times faster",
    )
    startup_delay_s: float = option(
        20.0,
        "--startup-delay",
        env="GPUSCALE_DEMO_STARTUP_DELAY",
        parse=seconds,
        help="how long a new pod loads its model before it is ready",
    )
    window_s: float = option(
        30.0,
        "--window",
        env="GPUSCALE_WINDOW",
        parse=seconds,
        help="the demo GPUScalers' spec.window (and the aggregator's default --window)",
    )
    log_dir: Path | None = option(
        None,
        "--log-dir",
        env="GPUSCALE_DEMO_LOG_DIR",
        parse=path,
        help="where each process writes its log (default: a temporary folder)",
    )
    log_level: str = option(
        "info",
        "--log-level",
        env="GPUSCALE_LOG_LEVEL",
        parse=choice(*LOG_LEVELS),
        help="log level of the services",
    )
