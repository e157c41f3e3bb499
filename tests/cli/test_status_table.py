"""`gpuscale status` renders like `kubectl get hpa`."""

from __future__ import annotations

from gpuscale.subjects import WorkloadKey
from gpuscale.wire import Decision
from gpuscale_cli.status import WorkloadView, render_clocks, render_table, targets_text

NOW = 1_800_000_000.0


def view(**kw: object) -> WorkloadView:
    v = WorkloadView(WorkloadKey("default", "Deployment", "bert"))
    for k, value in kw.items():
        setattr(v, k, value)
    return v


def test_targets_read_like_hpa() -> None:
    assert targets_text(view(metrics={"gpu_util": 83.04}, targets={"gpu_util": 70.0})) == "83/70"
    assert targets_text(view(targets={"gpu_util": 70.0})) == "<unknown>/70"
    assert (
        targets_text(
            view(metrics={"gpu_util": 41.5, "power_w": 300.0}, targets={"gpu_util": 70.0, "power_w": 400.0})
        )
        == "41.5/70, 300/400"
    )


def test_table_has_the_columns_and_last_decision() -> None:
    decision = Decision(
        id="d1",
        ts=NOW - 30,
        namespace="default",
        kind="Deployment",
        name="bert",
        from_replicas=2,
        to_replicas=3,
        reason="gpu_util 83.0 over target 70",
        inputs={},
    )
    text = render_table(
        [
            view(
                scaler="bert-gs",
                metrics={"gpu_util": 83.0},
                targets={"gpu_util": 70.0},
                min_replicas=1,
                max_replicas=10,
                replicas=3,
                decision=decision,
            )
        ],
        NOW,
    )
    header, row = text.splitlines()
    assert header.split() == [
        "NAMESPACE",
        "NAME",
        "REFERENCE",
        "TARGETS",
        "MINPODS",
        "MAXPODS",
        "REPLICAS",
        "LAST",
        "DECISION",
    ]
    assert row.split()[:7] == ["default", "bert-gs", "Deployment/bert", "83/70", "1", "10", "3"]
    assert row.endswith("2→3 30s ago: gpu_util 83.0 over target 70")


def test_unknowns_are_spelled_out() -> None:
    row = render_table([view()], NOW).splitlines()[1]
    assert "<unknown>" in row
    assert "<unset>" in row
    assert row.endswith("<none>")


def test_clocks_are_shown_against_the_fleet_not_this_host() -> None:
    """This host 5 s ahead of everyone: every sender looks 5 s behind it, and
    that is this host's offset, not theirs; one node really off is named."""
    text = render_clocks(
        {"aggregator-0": 5.5},
        {**{f"node-{i}": 5.0 for i in range(20)}, "node-late": 15.0},
    )
    lines = text.splitlines()
    assert lines[0].startswith("CLOCKS (offset from the median of 22 senders")
    assert lines[1].split() == ["aggregator", "aggregator-0", "+0.50", "s"]
    assert lines[2].split()[:3] == ["node", "node-late", "+10.00"]
    assert "more than 2 s off" in lines[2]
    assert lines[3].split() == ["nodes", "20", "of", "21", "within", "2", "s"]
    assert lines[4].split() == ["this", "host", "-5.00", "s"]
    assert not any(line.startswith("node ") and "node-1 " in line for line in lines)


def test_clocks_with_nobody_heard() -> None:
    assert render_clocks({}, {}) == "Clocks: no aggregator or node heard from."
