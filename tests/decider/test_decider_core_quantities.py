"""HPA's replica calculation on targets and values as milli-units rounded up:
a positive target is never 0 milli-units, so no evaluation divides by zero."""

from __future__ import annotations

from gpuscale.policy import NotReadyPods
from gpuscale_decider.core.replicas import PodView, Rule, Tolerances, metric_proposal

TOLERANCES = Tolerances(down=0.1, up=0.1)


def proposal(target: float, *values: float) -> tuple[Rule, int | None, float | None]:
    pods = [PodView(f"p{i}", "Running") for i in range(len(values))]
    p = metric_proposal(
        "gpu_util",
        target,
        {pod.name: v for pod, v in zip(pods, values, strict=True)},
        pods,
        len(values),
        TOLERANCES,
        NotReadyPods.MISSING,
    )
    return p.rule, p.replicas, p.ratio


def test_a_target_that_rounds_below_a_milli_unit_counts_as_one_not_zero() -> None:
    # Before: 5e-10 was 0 milli-units and the ratio divided by it, on every evaluation.
    assert proposal(5e-10, 0.0, 0.0) == (Rule.RATIO, 0, 0.0)
    assert proposal(5e-10, 0.001, 0.001) == (Rule.WITHIN, 2, 1.0)


def test_a_value_below_a_milli_unit_counts_as_one_as_hpa_reads_it() -> None:
    # 0.0004 is 1m, as resource.Quantity's MilliValue() rounds it: at a 1m target, ratio 1.
    assert proposal(0.001, 0.0004) == (Rule.WITHIN, 1, 1.0)


def test_binary_noise_does_not_round_a_whole_milli_unit_up() -> None:
    # 0.07 x 1000 is 70.00000000000001: still 70m, so 0.07 at a 0.07 target is ratio 1.
    assert proposal(0.07, 0.07, 0.07) == (Rule.WITHIN, 2, 1.0)
