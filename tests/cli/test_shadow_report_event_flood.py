"""`gpuscale shadow-report` compares each workload's advice with its HPA's rescale Events,
which anyone who may create Events in that namespace writes, as many as it likes and each
with the count and time it likes. One team's flood of rising "New size" Events must cost
the report time in proportion, not in its square: the reports run one after another, so a
quadratic match held up every other team's report behind it (40,000 Events: ~25 s of CPU
in the matching alone). CPU time, not wall time: the bounds hold 10 times the fixed cost."""

from __future__ import annotations

import time

from gpuscale_cli.shadow.compare import Advice, LiveChange, compare


def test_rising_live_changes_are_matched_in_linear_time() -> None:
    now = 1_000_000.0
    advised = [Advice(now - 3000, 1, 2), Advice(now - 2000, 2, 1)]
    flood = [
        LiveChange(now - 2500 + i * 0.01, i + 1, "HorizontalPodAutoscaler team-b/x") for i in range(40_000)
    ]
    started = time.process_time()
    report = compare(advised, flood, end=now, live_now=1, gpus_per_replica=1)
    took = time.process_time() - started
    assert report is not None
    assert len(report.live) == 40_001  # every change, then /scale back to 1
    assert took < 2.0, f"{took:.1f} s of CPU for 40,000 live changes"


def test_many_advice_beside_many_events_are_compared_in_linear_time() -> None:
    now = 1_000_000.0
    advised = [Advice(now - 20_000 + i, 1 + i % 2, 2 - i % 2) for i in range(10_000)]
    flood = [LiveChange(now - 20_000 + i * 0.5 + 0.25, 1 + i % 3, "h") for i in range(20_000)]
    started = time.process_time()
    compare(advised, flood, end=now, live_now=1, gpus_per_replica=1)
    took = time.process_time() - started
    assert took < 2.0, f"{took:.1f} s of CPU for 10,000 advice beside 20,000 live changes"
