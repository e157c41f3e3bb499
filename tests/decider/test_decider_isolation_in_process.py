"""One GPUScaler's failure in the decider's per-workload loops (state saves, window
requests, action reports) is its own: counted, logged once, and the loop goes on for
the others. Our own adapters stand in for NATS (a state store, a window publisher)."""

from __future__ import annotations

from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from gpuscale import subjects
from gpuscale.metrics import ServiceMetrics
from gpuscale.policy import GPUScaler, GPUScalerSpec, parse_gpuscaler
from gpuscale.subjects import WorkloadKey
from gpuscale.wire import Decision, WindowRequest
from gpuscale_decider import windows
from gpuscale_decider.core.state import ScalerState
from gpuscale_decider.decider import Decider
from gpuscale_decider.sources import MemoryStateStore, Retirement, StaticPods, StaticScaleSource

from ..waiting import sample_value

NOW = 1_800_000_000.0
NAMES = ("poisoned", "alpha", "beta")  # the poisoned one first: each loop meets it before the others


def policy(name: str) -> GPUScaler:
    body: dict[str, Any] = {
        "scaleTargetRef": {"kind": "Deployment", "name": name},
        "maxReplicas": 10,
        "metrics": [{"name": "gpu_util", "target": 70}],
    }
    return parse_gpuscaler({"metadata": {"name": name, "namespace": "default"}, "spec": body})


def key(name: str) -> WorkloadKey:
    return subjects.WorkloadKey("default", "Deployment", name)


class RefusingStore(MemoryStateStore):
    """Saves all but one workload's state (its record cannot be written, whatever the reason)."""

    def __init__(self, refused: WorkloadKey) -> None:
        super().__init__()
        self.refused = refused
        self.tries = 0

    async def save(self, key: WorkloadKey, state: ScalerState) -> None:
        if key == self.refused:
            self.tries += 1
            raise ValueError("record too large")
        await super().save(key, state)


def make(store: MemoryStateStore, publish_window: Any = None) -> Decider:
    async def publish(d: Decision) -> None:
        return None

    scales = StaticScaleSource(default=2)
    decider = Decider(
        ServiceMetrics("test-decider"),
        scales,
        StaticPods(scales),
        store,
        publish,
        publish_window=publish_window,
        clock=lambda: NOW,
    )
    decider.registry.set_policies([policy(n) for n in NAMES], [])
    assert next(iter(decider.workloads)) == key("poisoned")
    return decider


def errors(decider: Decider, stage: str) -> float:
    return sample_value(decider.metrics.registry, "gpuscale_decider_evaluation_errors_total", stage=stage)


async def test_a_state_save_that_keeps_failing_for_one_workload_holds_up_no_other() -> None:
    store = RefusingStore(key("poisoned"))
    decider = make(store)
    with capture_logs() as logs:
        # A failed save ends a round (with NATS away, one timeout a tick); the next round
        # starts after it, so the others are saved from the second round on, every round.
        await decider.tick(interval_s=0.0)  # every workload evaluated (dirty), then saved
        for round_ in (2, 3):
            store.states.clear()
            await decider.tick(interval_s=0.0)
            assert set(store.states) == {key("alpha"), key("beta")}, f"round {round_}"
    assert store.tries == 3  # tried again each round, one failure per round
    assert errors(decider, "state_save") == 3
    assert len([e for e in logs if e.get("event") == "state_save_failed"]) == 1  # one line a minute


async def test_a_window_request_that_raises_for_one_workload_is_counted_and_the_others_go_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sent: list[str] = []

    async def publish_window(request: WindowRequest) -> None:
        sent.append(request.name)

    real = windows.window_need

    def window_need(spec: GPUScalerSpec) -> windows.WindowNeed:
        if spec.scale_target_ref.name == "poisoned":
            raise ArithmeticError("planted")
        return real(spec)

    monkeypatch.setattr(windows, "window_need", window_need)
    decider = make(MemoryStateStore(), publish_window)
    with capture_logs() as logs:
        await decider.tick(interval_s=0.0)
        await decider.tick(interval_s=0.0)
    assert sent == ["alpha", "beta"]  # the first tick's; the second has nothing new to tell
    assert errors(decider, "window_request") == 2
    failed = [e for e in logs if e.get("event") == "gpuscaler_handling_failed"]
    assert [(e["stage"], e["gpuscaler"]) for e in failed] == [("window_request", "default/poisoned")]
    # Its evaluations go on: the window is not what decides.
    assert decider.workloads[key("poisoned")].last_evaluation is not None


class FlakyRetirement(Retirement):
    """Our adapter over JetStream's purges: refused once (NATS away), then done."""

    def __init__(self) -> None:
        super().__init__(cast(Any, None), "desired", "state")
        self.refusals = 1
        self.retired: list[WorkloadKey] = []

    async def retire(self, key: WorkloadKey, now: float) -> None:
        if self.refusals:
            self.refusals -= 1
            raise TimeoutError("nats away")
        self.retired.append(key)

    async def sweep(self, now: float) -> None:
        return None


async def test_retired_workloads_whose_entries_nats_refused_are_removed_on_the_next_try() -> None:
    decider = make(MemoryStateStore())
    retirement = FlakyRetirement()
    decider.retirement = retirement
    decider.registry.remove_policy("default", "alpha")
    decider.registry.remove_policy("default", "beta")
    with capture_logs() as logs:
        await decider.retire(NOW)
        assert set(decider.registry.retired) == {key("alpha"), key("beta")}  # neither lost
        assert errors(decider, "retire") == 1
        await decider.retire(NOW + 1)
    assert set(retirement.retired) == {key("alpha"), key("beta")}
    assert not decider.registry.retired
    assert [e["event"] for e in logs if e.get("event") == "retire_failed"] == ["retire_failed"]
