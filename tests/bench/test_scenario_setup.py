"""The scenario bench's workloads: a GPU-only one is an engine kube-sim plays (its queues and
waits are measured) that the collector does not scrape (it reads the GPUs alone)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from gpuscale_collector.core.engines import ScrapeTarget, scrape_target
from gpuscale_kubesim.cluster.inference import endpoint_of

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench modules import their siblings by name, as the scripts run

import scenario_setup as setup  # noqa: E402


def pod_metadata(engine_signals: bool) -> dict[str, Any]:
    template = setup.deployment("bench-w", engine_signals)["spec"]["template"]
    return {"metadata": template["metadata"]}


def test_a_workload_with_engine_signals_is_played_and_scraped() -> None:
    pod = pod_metadata(engine_signals=True)
    assert endpoint_of(pod) is not None
    assert isinstance(scrape_target("10.0.0.7", pod["metadata"]["annotations"]), ScrapeTarget)


def test_a_gpu_only_workload_is_played_as_an_engine_but_not_scraped() -> None:
    pod = pod_metadata(engine_signals=False)
    assert endpoint_of(pod) is not None  # kube-sim still queues its requests and counts their waits
    assert scrape_target("10.0.0.7", pod["metadata"]["annotations"]) is None


def test_the_gpu_only_scaler_is_told_apart_from_the_one_with_engine_signals() -> None:
    util, gpu_only = setup.SCALERS["util"], setup.SCALERS["gpu-only"]
    assert (util.metric, util.target) == (gpu_only.metric, gpu_only.target)
    assert util.label != gpu_only.label
    assert "gpu-only" not in setup.DEFAULT_SCALERS
