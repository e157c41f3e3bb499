"""Pure pieces around the batch: tick grid, bounded buffer, sim loads, /metrics rows."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale.wire import GpuOwner, GpuSample, SampleBatch, WorkloadRef
from gpuscale_collector.core.buffer import BoundedBuffer
from gpuscale_collector.core.exposition import (
    FB_USED,
    GPU_HEALTH,
    GPU_UTIL,
    PROCESS_SM_UTIL,
    SM_ACTIVE,
    MigInfo,
    render,
)
from gpuscale_collector.core.readings import DcgmFields
from gpuscale_collector.core.schedule import next_tick, node_phase
from gpuscale_collector.core.sim import (
    KUBE_SIM,
    FeedError,
    StepLoad,
    parse_load_source,
    readings_from_kube_sim,
    sim_readings,
)

# --- schedule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("now", "interval", "phase", "expected"),
    [
        (100.0, 1.0, 0.0, 101.0),
        (100.2, 1.0, 0.5, 100.5),
        (100.5, 1.0, 0.5, 101.5),  # strictly after
        (100.7, 1.0, 0.5, 101.5),
        (10.01, 0.25, 0.1, 10.1),
    ],
)
def test_next_tick(now: float, interval: float, phase: float, expected: float) -> None:
    assert next_tick(now, interval, phase) == pytest.approx(expected)


def test_node_phase_is_stable_and_spread() -> None:
    phases = [node_phase(f"gpu-node-{i}", 1.0) for i in range(1000)]
    assert phases[0] == node_phase("gpu-node-0", 1.0)
    assert all(0.0 <= p < 1.0 for p in phases)
    # 1000 nodes over 10 buckets of 100 ms: none empty, none holding a quarter.
    buckets = [0] * 10
    for p in phases:
        buckets[int(p * 10)] += 1
    assert min(buckets) > 50
    assert max(buckets) < 250


@given(now=st.floats(0, 1e9), interval=st.floats(0.01, 60), frac=st.floats(0, 0.999))
def test_next_tick_is_on_the_grid_and_within_one_interval(now: float, interval: float, frac: float) -> None:
    phase = frac * interval
    t = next_tick(now, interval, phase)
    assert now < t <= now + interval * (1 + 1e-9) + 1e-6
    k = (t - phase) / interval
    assert abs(k - round(k)) < 1e-6 * max(1.0, abs(k))


# --- buffer ------------------------------------------------------------------


@given(capacity=st.integers(1, 20), n=st.integers(0, 100))
def test_buffer_keeps_newest_in_order_and_counts_drops(capacity: int, n: int) -> None:
    buf: BoundedBuffer[int] = BoundedBuffer(capacity)
    for i in range(n):
        buf.append(i)
    assert buf.items() == list(range(max(0, n - capacity), n))
    assert buf.dropped == max(0, n - capacity)


def test_buffer_pop_and_peek() -> None:
    buf: BoundedBuffer[str] = BoundedBuffer(2)
    assert buf.peek() is None
    assert buf.append("a") == 0
    buf.append("b")
    assert buf.append("c") == 1
    assert buf.peek() == "b"
    assert buf.pop() == "b"
    assert len(buf) == 1
    with pytest.raises(ValueError, match="capacity"):
        BoundedBuffer(0)


# --- sim load sources ----------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "at", "expected"),
    [
        ("constant:50", 0.0, 50.0),
        ("constant:0", 99.0, 0.0),
        ("steps:0=30,60=90", 59.9, 30.0),
        ("steps:0=30,60=90", 60.0, 90.0),
        ("steps:60=90,0=30,120=10", 1000.0, 10.0),
        ("steps:10=80", 0.0, 80.0),  # before the first step: the first step's load
    ],
)
def test_step_loads(text: str, at: float, expected: float) -> None:
    source = parse_load_source(text)
    assert isinstance(source, StepLoad)
    assert source.at(at) == expected


@pytest.mark.parametrize(
    "text", ["", "constant", "constant:abc", "constant:101", "steps:", "steps:5", "steps:-1=5", "sine:5"]
)
def test_bad_load_sources(text: str) -> None:
    with pytest.raises(ValueError, match=r"load source|expected|outside"):
        parse_load_source(text)


def test_kube_sim_source_name() -> None:
    assert parse_load_source("kube-sim") == KUBE_SIM


def test_sim_readings_follow_the_load() -> None:
    idle, busy = sim_readings("n", 2, 0.0), sim_readings("n", 2, 100.0)
    assert [r.index for r in busy] == [0, 1]
    assert busy[0].uuid == idle[0].uuid != busy[1].uuid
    assert busy[0].util == 100.0
    assert busy[0].fb_used_mib is not None
    assert idle[0].fb_used_mib is not None
    assert busy[0].fb_used_mib > idle[0].fb_used_mib
    assert busy[0].power_w is not None
    assert idle[0].power_w is not None
    assert busy[0].power_w > idle[0].power_w


KUBE_SIM_PAYLOAD = {
    "node": "gpu-node-1",
    "ts": 1.0,
    "gpus": [
        {
            "index": 0,
            "uuid": "GPU-x",
            "model": "H100",
            "util": 87.5,
            "mem_util": 40,
            "fb_used_mib": 30000,
            "fb_free_mib": 51559,
            "temp_c": 60,
            "power_w": 500,
            "sm_active": 70,
            "owners": [
                {
                    "namespace": "default",
                    "pod": "bert-1",
                    "container": "server",
                    "pod_uid": "u1",
                    "workload": {"kind": "Deployment", "name": "bert"},
                }
            ],
        },
        {"index": 1, "uuid": "GPU-y", "util": 0, "owners": []},
    ],
}


def test_readings_from_kube_sim() -> None:
    first, second = readings_from_kube_sim(KUBE_SIM_PAYLOAD)
    assert (first.uuid, first.util, first.sm_active, first.fb_used_mib) == ("GPU-x", 87.5, 70.0, 30000.0)
    assert first.owners == (GpuOwner("default", "bert-1", "server", "u1", WorkloadRef("Deployment", "bert")),)
    assert second.owners == ()
    assert second.temp_c is None


def test_readings_from_kube_sim_carry_pod_readiness() -> None:
    payload = copy.deepcopy(KUBE_SIM_PAYLOAD)
    payload["gpus"][0]["owners"][0]["ready"] = False
    assert readings_from_kube_sim(payload)[0].owners[0].ready is False
    payload["gpus"][0]["owners"][0]["ready"] = "loading"
    with pytest.raises(FeedError):
        readings_from_kube_sim(payload)


@pytest.mark.parametrize(
    "payload",
    [
        [],
        {"gpus": "no"},
        {"gpus": [1]},
        {"gpus": [{"index": -1}]},
        {"gpus": [{"index": 0, "util": "high"}]},
        {"gpus": [{"index": 0, "owners": [{"pod": "p"}]}]},
        {"gpus": [{"index": 0, "owners": "x"}]},
    ],
)
def test_bad_kube_sim_payloads(payload: object) -> None:
    with pytest.raises(FeedError):
        readings_from_kube_sim(payload)


# --- exposition ----------------------------------------------------------------


def sample(uuid: str, index: int, *owners: GpuOwner, health: str = "ok", mig: str | None = None) -> GpuSample:
    ok = health == "ok"
    return GpuSample(
        uuid=uuid,
        index=index,
        model="H100",
        util=40.0 if ok else None,
        mem_util=10.0 if ok else None,
        fb_used_mib=100.0 if ok else None,
        fb_free_mib=900.0 if ok else None,
        temp_c=50.0 if ok else None,
        power_w=300.0 if ok else None,
        sm_active=25.0 if ok else None,
        mig=mig,
        health=health,
        owners=owners,
    )


def owner(pod: str, sm: float | None = None) -> GpuOwner:
    return GpuOwner("ml", pod, "server", "", WorkloadRef("Deployment", "d"), sm_util=sm, fb_used_mib=None)


def test_render_dcgm_labels_and_values() -> None:
    batch = SampleBatch("node-a", 1.0, 1, 1.0, (sample("GPU-a", 0), sample("GPU-b", 1, owner("p1"))))
    fields = DcgmFields(pci_bus_id="00000000:00:06.0", driver_version="580.159.04")
    rows = render(batch, "node-a", dcgm={"GPU-a": fields})
    util = {dict(labels)["UUID"]: (dict(labels), v) for labels, v in rows[GPU_UTIL]}
    # dcgm-exporter's labels, in its order.
    assert list(util["GPU-a"][0]) == [
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
        "container",
        "namespace",
        "pod",
    ]
    assert util["GPU-a"] == (
        {
            "gpu": "0",
            "UUID": "GPU-a",
            "pci_bus_id": "00000000:00:06.0",
            "device": "nvidia0",
            "modelName": "H100",
            "Hostname": "node-a",
            "DCGM_FI_DRIVER_VERSION": "580.159.04",
            "container": "",
            "namespace": "",
            "pod": "",
        },
        40.0,
    )
    assert util["GPU-b"][0]["pod"] == "p1"
    assert util["GPU-b"][0]["namespace"] == "ml"
    assert util["GPU-b"][0]["container"] == "server"
    assert {v for _, v in rows[SM_ACTIVE]} == {0.25}  # DCGM's SM_ACTIVE is a ratio


def test_render_shared_gpu_one_series_per_pod_and_process_series() -> None:
    batch = SampleBatch("n", 1.0, 1, 1.0, (sample("GPU-a", 0, owner("p1", 30.0), owner("p2", 10.0)),))
    rows = render(batch, "n")
    assert sorted(dict(lbl)["pod"] for lbl, _ in rows[FB_USED]) == ["p1", "p2"]
    assert sorted((dict(lbl)["pod"], v) for lbl, v in rows[PROCESS_SM_UTIL]) == [("p1", 30.0), ("p2", 10.0)]


def test_render_lost_gpu_has_health_zero_and_no_values() -> None:
    rows = render(SampleBatch("n", 1.0, 1, 1.0, (sample("GPU-a", 0, health="GpuIsLost"),)), "n")
    assert rows[GPU_UTIL] == []
    assert [v for _, v in rows[GPU_HEALTH]] == [0.0]


def test_render_mig_uses_parent_labels() -> None:
    batch = SampleBatch("n", 1.0, 1, 1.0, (sample("MIG-x", 2, mig="GPU-parent"),))
    rows = render(batch, "n", {"MIG-x": MigInfo(2, 5, "1g.10gb")})
    ((labels, _),) = rows[GPU_UTIL]
    assert dict(labels)["UUID"] == "GPU-parent"
    assert dict(labels)["GPU_I_ID"] == "5"
    assert dict(labels)["GPU_I_PROFILE"] == "1g.10gb"


def test_render_nothing_before_the_first_batch() -> None:
    assert all(rows == [] for rows in render(None, "n").values())
