"""What the demo shows is what decided: a real decider's decision on an estimate,
read off a real nats-server by the demo's observer, is shown as the estimate it is,
beside the window and recent means it came from."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes_asyncio.client import ApiClient

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.natsio import NATS
from gpuscale.wire import MetricValues, PodMetrics, WorkloadMetrics
from gpuscale_cli.demo import terminal
from gpuscale_cli.demo.observer import DemoState, Observer, decision_basis
from gpuscale_cli.demo.report import DecisionRecord, TimelinePoint
from gpuscale_kubesim import KubeSim

from ..decider.decider_harness import (
    deployment,
    gpuscaler,
    publish_metrics,
    running_decider,
    running_pods,
    settings_for,
    watch_decisions,
    write_policies,
)
from ..waiting import eventually

pytestmark = pytest.mark.integration


def pinned_metrics(pod: str) -> WorkloadMetrics:
    """One pod pinned at 95 % over the window (100 over the last 3 s), its engine
    taking 14 requests/s and finishing 5.6: demand 95 × 14 / 5.6 = 237.5 GPU-%."""
    now = time.time()
    window = MetricValues(gpu_util=95.0, request_arrival_rate=14.0, request_completion_rate=5.6)
    recent = MetricValues(gpu_util=100.0, request_arrival_rate=14.0, request_completion_rate=5.6)
    return WorkloadMetrics(
        namespace="default",
        kind="Deployment",
        name="bert",
        ts=now,
        window_s=30.0,
        pods=(PodMetrics(pod, window, now, recent=recent),),
        averages=window,
        pods_fresh=1,
        pods_stale=0,
        recent_s=3.0,
    )


async def test_a_decision_on_an_estimate_is_shown_as_an_estimate(
    nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim, tmp_path: Path
) -> None:
    await kube_sim.create(deployment("bert", 1))
    policies = write_policies(tmp_path / "policies.yaml", gpuscaler("bert", "bert"))
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path, policies=policies)
    state = DemoState("step")
    state.workload, state.target = "default/bert", 70.0
    api = ApiClient()  # never called: the observer only subscribes here
    try:
        observer = Observer(state, nats_client, api, kube_sim.url)
        await observer.subscribe()
        async with running_decider(settings), watch_decisions(nats_client) as watch:
            (pod,) = await running_pods(kube_sim, "bert", 1)
            await publish_metrics(nats_client, pinned_metrics(pod))
            decision = await watch.next(1, timeout_s=30.0)
            await eventually(lambda: state.record.decisions, 30, "the observer to see the decision")
        await eventually(lambda: state.primary.recent_avg is not None, 30, "the observer to see the metrics")
    finally:
        await api.close()

    # The reason calls the estimate an estimate, never a utilization of 237.5.
    head = decision.reason.split(";", 1)[0]
    assert head.startswith(
        "gpu_util: estimated demand 237.5 GPU-% (14.0 requests/s arriving, 5.6/s served per pod) over target 70"
    ), decision.reason
    assert "gpu_util 237.5" not in decision.reason
    assert decision.inputs["averages_basis"] == {"gpu_util": "estimated demand"}
    (seen,) = state.record.decisions
    assert (seen.from_replicas, seen.to_replicas, seen.value, seen.basis) == (1, 4, 237.5, "estimated demand")

    # The screens: the page's data and the terminal show the estimate by its name, and
    # the window and recent means it was made from by theirs.
    observer._record(state.primary, time.time())
    shown = state.as_json()["workloads"][0]
    assert shown["decisions"][0]["value"] == 237.5
    assert shown["decisions"][0]["basis"] == "estimated demand"
    assert shown["timeline"][-1]["gpu_util_avg"] == 95.0
    assert shown["timeline"][-1]["recent_avg"] == 100.0
    frame = terminal.render(state, 5.0, None, "http://127.0.0.1:8080/")
    assert "gpu_util  window mean 95.0 · recent mean 100.0 (last 3 s) · target 70" in frame
    assert "decided   1 → 4 on estimated demand 237.5" in frame


def test_a_decider_that_does_not_say_what_its_value_is_is_shown_unnamed() -> None:
    """An older decider sends the averages without ``averages_basis``: the value is shown
    without a name rather than called a window mean it may not be; junk shows nothing."""
    assert decision_basis("gpu_util", {"averages": {"gpu_util": 237.5}}) == (237.5, "")
    assert decision_basis(
        "gpu_util", {"averages": {"gpu_util": 80.0}, "averages_basis": {"gpu_util": "a guess"}}
    ) == (
        80.0,
        "",
    )
    assert decision_basis("gpu_util", {"averages": {"gpu_util": float("nan")}}) == (None, "")
    assert decision_basis("gpu_util", {"averages": {"gpu_util": True}}) == (None, "")
    assert decision_basis("gpu_util", {"averages": "junk"}) == (None, "")
    state = DemoState("step")
    state.workload = "default/bert"
    view = state.primary
    view.record.timeline.append(TimelinePoint(10.0, 200.0, 1, 4, 48.2))
    view.record.decisions.append(DecisionRecord(9.0, 0.0, 1, 4, "gpu_util 237.5 ...", "d-1", 237.5, ""))
    assert "decided   1 → 4 on a value of 237.5 (1 s ago)" in terminal.render(state, 10.0, None, "http://x/")
