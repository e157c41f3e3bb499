"""One team's Shadow GPUScaler must not fill the advice stream every team's
`gpuscale shadow-report` reads (256 MiB, kept 14 days).

Advice goes out on every new (from, to): a team whose engine reports a value that falls a
little each second gets one a second. Each carried every recommendation its stabilization
window keeps (a 1 h scale-down window: ~3,600, 55 KB an advice): 55 KB/s, the whole stream
in about 80 minutes, and with it every other team's trial. It now carries the newest few."""

from __future__ import annotations

from gpuscale import codec, subjects
from gpuscale.wire import Decision, MetricValues, PodMetrics, WorkloadMetrics
from gpuscale_decider.sources import StaticScaleSource

from .test_decider_tenant_churn_bounds import NOW, make, scaler

EVALUATIONS = 1_200  # 20 minutes of one message a second


async def test_a_shadow_gpuscaler_s_advice_stays_small_however_long_its_window() -> None:
    sizes: list[int] = []
    clock = [NOW]

    async def advice(a: Decision) -> None:
        sizes.append(len(codec.encode(a)))

    decider = make(StaticScaleSource(default=1), publish_advice=advice, clock=lambda: clock[0])
    big = scaler(
        "big",
        "big",
        [{"name": "gpu_mem_used_mib", "target": 1}],
        mode="Shadow",
        maxReplicas=2_000_000_000,
        behavior={
            "scaleDown": {"stabilizationWindowSeconds": 3600},
            "scaleUp": {"policies": [{"type": "Pods", "value": 2_000_000_000, "periodSeconds": 1}]},
        },
    )
    decider.registry.set_policies([big], [])
    subject = subjects.metrics(subjects.WorkloadKey("evil", "Deployment", "big"))
    for t in range(EVALUATIONS):
        clock[0] += 1.0
        values = MetricValues(gpu_mem_used_mib=1e6 - t)  # each recommendation below every kept one
        pod = PodMetrics("big-0", values, clock[0])
        m = WorkloadMetrics("evil", "Deployment", "big", clock[0], 30.0, (pod,), values, 1, 0)
        await decider.handle_metrics(subject, codec.encode(m))
    state = next(iter(decider.workloads.values())).memory
    assert state is not None
    assert len(state.state.recommendations) == EVALUATIONS  # the window's, kept
    assert len(sizes) == EVALUATIONS  # one advice a second: a new (from, to) each time
    assert max(sizes) <= 4_096  # before: 18.9 KB here, 55 KB at 3,600
