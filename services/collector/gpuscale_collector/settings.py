"""Collector options (docs/ARCHITECTURE.md#options)."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from gpuscale.settings import (
    CommonSettings,
    boolean,
    byte_size,
    choice,
    existing_file,
    http_port_option,
    kubeconfig_option,
    non_empty,
    option,
    path,
    positive_int,
    seconds,
)
from gpuscale_collector.core import engines
from gpuscale_collector.core.sim import parse_load_source


def sim_source(text: str) -> str:
    """constant:PCT, steps:T=PCT,... or kube-sim; checked here so a typo exits 2."""
    parse_load_source(text)
    return text.strip()


@dataclass(frozen=True)
class CollectorSettings(CommonSettings):
    http_port: int = http_port_option(9400, "/metrics (dcgm-exporter's 9400)")
    node_name: str = option(
        socket.gethostname(),
        "--node-name",
        env=("GPUSCALE_NODE_NAME", "NODE_NAME"),
        parse=non_empty,
        help="this node's name (a DaemonSet sets NODE_NAME from spec.nodeName)",
    )
    backend: str = option(
        "nvml",
        "--backend",
        env="GPUSCALE_BACKEND",
        parse=choice("nvml", "sim"),
        help="where GPU readings come from",
    )
    interval_s: float = option(
        1.0, "--interval", env="GPUSCALE_INTERVAL", parse=seconds, help="sample interval in seconds"
    )
    sim_gpus: int = option(
        8,
        "--sim-gpus",
        env="GPUSCALE_SIM_GPUS",
        parse=positive_int,
        help="number of simulated GPUs (backend sim)",
    )
    sim_source: str = option(
        "constant:50",
        "--sim-source",
        env="GPUSCALE_SIM_SOURCE",
        parse=sim_source,
        help="load for simulated GPUs: constant:PCT, steps:T=PCT,T=PCT..., or kube-sim (read the cluster of --kubeconfig)",
    )
    pod_resources_socket: Path = option(
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        "--pod-resources-socket",
        env="GPUSCALE_POD_RESOURCES_SOCKET",
        parse=path,
        help="kubelet pod-resources gRPC socket",
    )
    proc_root: Path = option(
        Path("/proc"),
        "--proc-root",
        env="GPUSCALE_PROC_ROOT",
        parse=path,
        help="proc filesystem of the host (hostPID)",
    )
    kubeconfig: Path | None = kubeconfig_option()
    nats_token_file: Path | None = option(
        None,
        "--nats-token-file",
        env="GPUSCALE_NATS_TOKEN_FILE",
        parse=existing_file,
        help="file holding the NATS auth token: the pod's projected ServiceAccount token where NATS "
        "checks collectors with gpuscale nats-auth (re-read at every reconnect: the kubelet rotates it)",
        metavar="FILE",
    )
    engine_metrics: bool = option(
        True,
        "--engine-metrics",
        env="GPUSCALE_ENGINE_METRICS",
        parse=boolean,
        help="scrape each GPU pod's inference-server metrics (vLLM, SGLang, TGI, Triton) at its "
        "gpuscale.io/metrics-port (or prometheus.io/port) and -path annotations, and send its queue "
        "and KV-cache gauges with the samples (needs the pod watch: --kubeconfig or in-cluster)",
    )
    engine_timeout_s: float | None = option(
        None,
        "--engine-timeout",
        env="GPUSCALE_ENGINE_TIMEOUT",
        parse=seconds,
        help="how long one pod's metrics may take to answer (default: half the interval, at most 0.5 s)",
    )
    engine_concurrency: int = option(
        16,
        "--engine-concurrency",
        env="GPUSCALE_ENGINE_CONCURRENCY",
        parse=positive_int,
        help="pods' metrics endpoints scraped at the same time, at most",
    )
    # What one pod's page may cost (a tenant's input is bounded); defaults far above a real engine's page
    # (3-30 KiB, tens to a few thousand lines, a few dozen of them read).
    engine_max_page_bytes: int = option(
        engines.DEFAULT_MAX_PAGE_BYTES,
        "--engine-max-page-bytes",
        env="GPUSCALE_ENGINE_MAX_PAGE_BYTES",
        parse=byte_size,
        help="a pod's metrics page longer than this is refused (too_large) and the pod backed off",
    )
    engine_max_page_lines: int = option(
        engines.DEFAULT_MAX_PAGE_LINES,
        "--engine-max-page-lines",
        env="GPUSCALE_ENGINE_MAX_PAGE_LINES",
        parse=positive_int,
        help="a pod's metrics page of more lines is refused (too_many_lines)",
    )
    engine_max_series: int = option(
        engines.DEFAULT_MAX_SERIES,
        "--engine-max-series",
        env="GPUSCALE_ENGINE_MAX_SERIES",
        parse=positive_int,
        help="lines of the engine series read (and their TYPE lines) one page may hold (too_many_series)",
    )
    engine_max_series_bytes: int = option(
        engines.DEFAULT_MAX_SERIES_BYTES,
        "--engine-max-series-bytes",
        env="GPUSCALE_ENGINE_MAX_SERIES_BYTES",
        parse=byte_size,
        help="bytes of one line of an engine series read, labels included (label_bytes)",
    )
    engine_max_label_bytes: int = option(
        engines.DEFAULT_MAX_LABEL_BYTES,
        "--engine-max-label-bytes",
        env="GPUSCALE_ENGINE_MAX_LABEL_BYTES",
        parse=byte_size,
        help="bytes of all the lines of the engine series read on one page (label_bytes)",
    )
    engine_parse_budget_s: float = option(
        engines.DEFAULT_PARSE_BUDGET_S,
        "--engine-parse-budget",
        env="GPUSCALE_ENGINE_PARSE_BUDGET",
        parse=seconds,
        help="CPU time the parser may spend on one page (parse_time); pages are parsed one at a "
        "time, off the sampling loop",
    )
    buffer_batches: int = option(
        300,
        "--buffer-batches",
        env="GPUSCALE_BUFFER_BATCHES",
        parse=positive_int,
        help="batches kept while NATS is unreachable (oldest dropped first)",
    )

    @property
    def engine_page_limits(self) -> engines.PageLimits:
        return engines.PageLimits(
            max_bytes=self.engine_max_page_bytes,
            max_lines=self.engine_max_page_lines,
            max_series=self.engine_max_series,
            max_series_bytes=self.engine_max_series_bytes,
            max_label_bytes=self.engine_max_label_bytes,
        )

    @property
    def engine_timeout(self) -> float:
        """The scrape timeout in seconds: given, or half the interval up to 0.5 s."""
        if self.engine_timeout_s is not None:
            return self.engine_timeout_s
        return min(0.5, self.interval_s / 2)

    def __post_init__(self) -> None:
        if self.engine_timeout_s is not None and self.engine_timeout_s >= self.interval_s:
            raise ValueError(
                f"--engine-timeout {self.engine_timeout_s:g} s must be shorter than --interval "
                f"{self.interval_s:g} s: a scrape must end before the next one is due"
            )
        if self.nats_token_file is not None and any(urlsplit(u).password is not None for u in self.nats_url):
            raise ValueError(
                "--nats-url carries a user and password and --nats-token-file is set: NATS would get the "
                "token only; give one of them"
            )
