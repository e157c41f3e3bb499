"""A reason names the value it rests on: a window mean in HPA's words, a recent mean
as one, and an estimate as an estimated demand with its unit, never as a reading of
the metric (a gpu_util of 200 does not exist). The decision's inputs say the same."""

from __future__ import annotations

import pytest

from gpuscale.policy import GPUScaler

from .scenario import P, policy, step

UTIL = policy()  # gpu_util, target 70
QUEUE = policy(metrics=[{"name": "requests_waiting", "target": 4}])
FLOWS = {"request_arrival_rate": 16.0, "request_completion_rate": 8.0}

CASES = {
    "window mean: HPA's wording": (UTIL, 2, (P(83.0), P(83.0)), "gpu_util 83.0 over target 70", "window mean"),
    "pinned, no engine: judged on the recent mean, named so": (
        UTIL, 2, (P(60.0, recent={"gpu_util": 100.0}),) * 2, "gpu_util recent mean 100.0 over target 70", "recent mean",
    ),
    "pinned, flows size it: an estimated demand in GPU-%": (
        UTIL, 1, (P(53.0, recent={"gpu_util": 100.0, **FLOWS}),),
        "gpu_util: estimated demand 200.0 GPU-% over target 70", "estimated demand",
    ),
    "a growing queue: judged on its recent mean, named so": (
        QUEUE, 2, (P({"requests_waiting": 4.0}, recent={"requests_waiting": 10.0}),) * 2,
        "requests_waiting recent mean 10.0 over target 4", "recent mean",
    ),
}  # fmt: skip


@pytest.mark.parametrize(
    ("scaler", "current", "pods", "head", "basis"), list(CASES.values()), ids=list(CASES)
)
def test_the_reason_and_the_inputs_name_the_value_used(
    scaler: GPUScaler, current: int, pods: tuple[P, ...], head: str, basis: str
) -> None:
    s = step(scaler, current, pods)
    assert s.decision is not None
    assert s.decision.reason.startswith(head), s.decision.reason
    metric = next(iter(s.decision.inputs["averages"]))
    assert s.decision.inputs["averages_basis"] == {metric: basis}
    if basis == "estimated demand":
        assert "gpu_util 200" not in s.decision.reason
