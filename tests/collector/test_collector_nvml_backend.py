"""The NVML backend against a scripted device table (pynvml's functions replaced).

No GPU on CI: the table plays the driver, including its error codes.
"""

from __future__ import annotations

import threading
from typing import Any

import pynvml
import pytest
from structlog.testing import capture_logs

from gpuscale_collector.app import check_backend, main
from gpuscale_collector.backends.base import BackendUnavailable
from gpuscale_collector.backends.nvml import NvmlBackend

GPU0 = "GPU-00000000-0000-0000-0000-000000000000"
GPU1 = "GPU-11111111-1111-1111-1111-111111111111"


def started(fake: Any) -> tuple[NvmlBackend, list[str]]:
    errors: list[str] = []
    backend = NvmlBackend(on_error=errors.append)
    backend.start_sync()
    return backend, errors


def test_normal_readings(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [
        kit.Gpu(
            GPU0,
            util=87,
            mem_util=33,
            used_mib=2048.0,
            free_mib=79000.0,
            temp_c=55,
            power_mw=350_500,
            processes=[(4242, 512 * 1024 * 1024)],
            proc_util=[(4242, 10**18, 64)],
        ),
        kit.Gpu(GPU1, name="NVIDIA A100-SXM4-80GB", util=0),
    ]
    backend, errors = started(fake_nvml)
    r0, r1 = backend.read_sync()
    assert (r0.uuid, r0.index, r0.model) == (GPU0, 0, "NVIDIA H100 80GB HBM3")
    assert (r0.util, r0.mem_util, r0.fb_used_mib, r0.fb_free_mib) == (87.0, 33.0, 2048.0, 79000.0)
    assert (r0.temp_c, r0.power_w, r0.health) == (55.0, 350.5, "ok")
    assert r0.sm_active is None  # no GPM on this GPU
    assert r0.processes is not None
    assert [(p.pid, p.fb_used_mib, p.sm_util) for p in r0.processes] == [(4242, 512.0, 64.0)]
    assert (r1.index, r1.model, r1.util) == (1, "NVIDIA A100-SXM4-80GB", 0.0)
    assert errors == []


def test_each_call_at_most_once_per_gpu_per_tick(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [kit.Gpu(GPU0, gpm=True)]
    backend, _ = started(fake_nvml)
    fake_nvml.calls.clear()
    backend.read_sync()
    per_call = {fn: n for (fn, uuid), n in fake_nvml.calls.items() if uuid == GPU0}
    assert per_call, "no calls recorded"
    assert max(per_call.values()) == 1, per_call


def test_gpm_sm_active_from_two_samples(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [kit.Gpu(GPU0, gpm=True, sm_active=42.25), kit.Gpu(GPU1, gpm=False)]
    backend, _ = started(fake_nvml)
    first = backend.read_sync()
    assert [r.sm_active for r in first] == [None, None]  # one sample is not an interval yet
    second = backend.read_sync()
    assert [r.sm_active for r in second] == [42.25, None]
    fake_nvml.gpus[0].sm_active = 90.0
    assert backend.read_sync()[0].sm_active == 90.0


def test_unsupported_call_is_skipped_and_not_retried(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [
        kit.Gpu(GPU0, unsupported={"nvmlDeviceGetPowerUsage", "nvmlDeviceGetComputeRunningProcesses"})
    ]
    backend, errors = started(fake_nvml)
    for _ in range(5):
        (r,) = backend.read_sync()
        assert r.power_w is None
        assert r.processes is None  # unknown, not "no processes"
        assert r.util == 50.0
        assert r.health == "ok"
    assert fake_nvml.count("nvmlDeviceGetPowerUsage", GPU0) == 1
    assert fake_nvml.count("nvmlDeviceGetComputeRunningProcesses", GPU0) == 1
    assert fake_nvml.count("nvmlDeviceGetUtilizationRates", GPU0) == 5
    assert sorted(errors) == ["power", "processes"]


def test_utilization_unsupported_marks_health(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [kit.Gpu(GPU0, unsupported={"nvmlDeviceGetUtilizationRates"})]
    backend, _ = started(fake_nvml)
    (r,) = backend.read_sync()
    assert r.util is None
    assert r.health == "UtilizationNotSupported"


def test_gpu_lost_reported_once_then_recovers(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [kit.Gpu(GPU0), kit.Gpu(GPU1, util=70)]
    backend, errors = started(fake_nvml)
    assert [r.health for r in backend.read_sync()] == ["ok", "ok"]
    fake_nvml.gpus[1].lost = True
    with capture_logs() as logs:
        ticks = [backend.read_sync() for _ in range(4)]
    for readings in ticks:
        healthy, lost = readings
        assert healthy.health == "ok"
        assert (lost.uuid, lost.index, lost.health) == (GPU1, 1, "GpuIsLost")
        assert (lost.util, lost.fb_used_mib, lost.temp_c, lost.power_w) == (None, None, None, None)
    assert [e["event"] for e in logs].count("gpu_lost") == 1
    assert errors == ["gpu_lost"]
    # While lost: one probing call per tick, no storm.
    before = sum(n for (fn, uuid), n in fake_nvml.calls.items() if uuid == GPU1)
    backend.read_sync()
    assert sum(n for (fn, uuid), n in fake_nvml.calls.items() if uuid == GPU1) - before == 1
    fake_nvml.gpus[1].lost = False
    fake_nvml.gpus[1].util = 12
    with capture_logs() as logs:
        _, back = backend.read_sync()
    assert (back.health, back.util) == ("ok", 12.0)
    assert "gpu_recovered" in [e["event"] for e in logs]


def test_mig_devices_replace_their_parent(fake_nvml: Any, kit: Any) -> None:
    mig_a = kit.Mig(
        "MIG-aaaaaaaa-0000-0000-0000-000000000000",
        "NVIDIA H100 80GB HBM3 MIG 1g.10gb",
        gi=7,
        ci=0,
        used_mib=100.0,
        free_mib=9000.0,
        sm_active=20.0,
        graphics=30.0,
        processes=[(77, 50 * 1024 * 1024)],
    )
    mig_b = kit.Mig(
        "MIG-bbbbbbbb-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3 MIG 3g.40gb", gi=1, ci=0
    )
    fake_nvml.gpus = [
        kit.Gpu(GPU0, gpm=True, migs=[mig_a, mig_b], temp_c=60, power_mw=200_000),
        kit.Gpu(GPU1),
    ]
    backend, _ = started(fake_nvml)
    first = backend.read_sync()
    assert [r.uuid for r in first] == [mig_a.uuid, mig_b.uuid, GPU1]
    assert first[0].health == "NoSampleYet"  # GPM needs two samples for the first interval
    a, b, whole = backend.read_sync()
    assert (a.mig_parent, a.mig_gi, a.mig_ci, a.index) == (GPU0, 7, 0, 0)
    assert (a.util, a.sm_active, a.fb_used_mib, a.health) == (30.0, 20.0, 100.0, "ok")
    assert (a.temp_c, a.power_w) == (60.0, 200.0)  # the parent's, as dcgm-exporter reports for MIG
    assert a.processes is not None
    assert [p.pid for p in a.processes] == [77]
    assert a.device_ids() == (mig_a.uuid, f"MIG-{GPU0}/7/0")
    assert b.mig_gi == 1
    assert whole.mig_parent is None
    info = backend.mig_info()
    assert info[mig_a.uuid].profile == "1g.10gb"
    assert info[mig_a.uuid].gpu_instance_id == 7


def test_mig_without_gpm_says_so(fake_nvml: Any, kit: Any) -> None:
    mig = kit.Mig("MIG-cccccccc-0000-0000-0000-000000000000", "NVIDIA A100 MIG 1g.10gb", gi=3, ci=0)
    fake_nvml.gpus = [kit.Gpu(GPU0, gpm=False, migs=[mig])]
    backend, _ = started(fake_nvml)
    backend.read_sync()
    (r,) = backend.read_sync()
    assert (r.util, r.health, r.fb_used_mib) == (None, "UtilizationNotSupported", 1000.0)


def test_process_utilization_covers_only_the_new_interval(fake_nvml: Any, kit: Any) -> None:
    fake_nvml.gpus = [
        kit.Gpu(GPU0, processes=[(1, None), (2, None)], proc_util=[(1, 10**18, 40), (1, 10**18 + 5, 60)])
    ]
    backend, _ = started(fake_nvml)
    (r,) = backend.read_sync()
    assert r.processes is not None
    assert {p.pid: p.sm_util for p in r.processes} == {1: 50.0, 2: None}
    (r,) = backend.read_sync()  # no sample newer than the last seen: nothing re-counted
    assert r.processes is not None
    assert {p.pid: p.sm_util for p in r.processes} == {1: None, 2: None}
    fake_nvml.gpus[0].proc_util.append((2, 10**18 + 10, 15))
    (r,) = backend.read_sync()
    assert r.processes is not None
    assert {p.pid: p.sm_util for p in r.processes} == {1: None, 2: 15.0}


async def test_reads_run_off_the_event_loop(
    fake_nvml: Any, kit: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    fake_nvml.gpus = [kit.Gpu(GPU0)]
    original = fake_nvml.nvmlDeviceGetUtilizationRates

    def spy(h: Any) -> Any:
        seen.append(threading.current_thread().name)
        return original(h)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetUtilizationRates", spy)
    backend = NvmlBackend()
    await backend.start()
    try:
        await backend.read()
        await backend.read()
    finally:
        await backend.close()
    assert len(seen) == 2
    assert all(name.startswith("nvml") for name in seen)
    assert threading.current_thread().name not in seen


def test_library_missing_is_one_clear_error(
    fake_nvml: Any, kit: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_nvml.library_missing = True
    with pytest.raises(BackendUnavailable, match="--backend sim"):
        NvmlBackend().start_sync()
    settings = kit.settings(backend="nvml")
    problem = check_backend(settings)
    assert problem is not None
    assert "driver" in problem
    assert "--backend sim" in problem
    assert main(settings) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("gpuscale collector: NVML is not available")


def test_kube_sim_source_needs_a_readable_kubeconfig(kit: Any, tmp_path: Any) -> None:
    assert "--kubeconfig" in (check_backend(kit.settings(sim_source="kube-sim")) or "")
    broken = tmp_path / "kubeconfig"
    broken.write_text("apiVersion: v1\nkind: Config\nclusters: []\n")
    assert "names no server" in (check_backend(kit.settings(sim_source="kube-sim", kubeconfig=broken)) or "")
    assert main(kit.settings(sim_source="kube-sim", kubeconfig=tmp_path / "missing")) == 2
    assert check_backend(kit.settings(sim_source="constant:10")) is None
