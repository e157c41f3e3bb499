"""Load profiles and the load split: table-style scenarios over the pure functions."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpuscale_kubesim.cluster import load
from gpuscale_kubesim.sim import profile_from


@dataclass(frozen=True)
class At:
    name: str
    profile: str
    t: float
    want: float


PROFILE_CASES = [
    At("step starts quiet", "step", 0, 30),
    At("step is still quiet just before the step", "step", 14.9, 30),
    At("step steps up to three pods' worth at 70 %", "step", 15, 200),
    At("step holds the high level", "step", 99, 200),
    At("step comes back down", "step", 100, 40),
    At("step stays down", "step", 10_000, 40),
    At("spike has a quiet base", "spike", 10, 40),
    At("spike spikes", "spike", 35, 400),
    At("spike repeats every two minutes", "spike", 120 + 35, 400),
    At("diurnal starts at its low", "diurnal", 0, 40),
    At("diurnal peaks at half its period", "diurnal", 300, 260),
    At("ramp starts flat", "ramp", 10, 40),
    At("ramp climbs in a straight line", "ramp", 80, 195),
    At("ramp holds its top", "ramp", 170, 350),
    At("ramp comes down in a line", "ramp", 230, 205),
    At("ramp ends low", "ramp", 1000, 60),
    At("bursty has a low base", "bursty", 10, 60),
    At("bursty bursts", "bursty", 85, 320),
    At("bursty repeats", "bursty", 220 + 25, 260),
    At("constant:N is N", "constant:120", 55, 120),
    At("a bare number is a constant", "75", 3, 75),
    At("negative time counts as the start", "step", -5, 30),
]


@pytest.mark.parametrize("case", PROFILE_CASES, ids=lambda c: c.name)
def test_profile_value_at_time(case: At) -> None:
    assert load.parse_profile(case.profile).at(case.t) == pytest.approx(case.want)


LEVEL_CASES = [
    At("step's quiet level began at the start", "step", 14.9, 0),
    At("step's high level began at 15 s", "step", 99.5, 15),
    At("spike's second spike began two minutes after the first", "spike", 120 + 35, 150),
    At("spike's base in its second period began when the first spike ended", "spike", 130, 45),
    At("bursty's burst in its second period", "bursty", 220 + 85, 300),
    At("a constant's level began at the start", "constant:120", 55, 0),
]


@pytest.mark.parametrize("case", LEVEL_CASES, ids=lambda c: c.name)
def test_a_stepwise_profile_says_when_its_level_began(case: At) -> None:
    """So a reader that polls the load once a second places a step at its own time."""
    profile = load.parse_profile(case.profile)
    assert profile.level_start(case.t) == case.want
    assert profile.at(case.want) == profile.at(case.t)


@pytest.mark.parametrize("name", ["ramp", "diurnal"])
def test_a_load_that_moves_continuously_has_no_level_start(name: str) -> None:
    assert load.parse_profile(name).level_start(80.0) is None


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("rampage", "unknown load profile"),
        ("constant:-3", "non-negative"),
        ("constant:x", "unknown load profile"),
    ],
)
def test_bad_profiles_are_refused_with_a_reason(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        load.parse_profile(text)


def test_file_profile_is_stepwise_between_points(tmp_path: object) -> None:
    path = tmp_path / "profile.yaml"  # type: ignore[operator]  # pytest's tmp_path is a Path
    path.write_text("- {t: 0, load: 10}\n- {t: 30, load: 200}\n- {t: 60, load: 50}\n")
    profile = profile_from(str(path))
    assert [profile.at(t) for t in (0, 29, 30, 59, 60, 999)] == [10, 10, 200, 200, 50, 50]


@pytest.mark.parametrize(
    ("points", "problem"),
    [([], "non-empty"), ([{"t": 0}], "needs t"), ([{"t": -1, "load": 3}], "non-negative")],
)
def test_bad_profile_files_are_refused(points: list[dict[str, float]], problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        load.from_points("f", points)


@dataclass(frozen=True)
class Split:
    name: str
    load: float
    ready_gpus: int
    want: float


SPLIT_CASES = [
    Split("one pod carries all of it", 60, 1, 60),
    Split("two pods share it", 120, 2, 60),
    Split("a GPU cannot be busier than 100 %", 280, 1, 100),
    Split("four pods at the demo's high level sit at target", 280, 4, 70),
    Split("no ready pod: nobody is busy", 90, 0, 0),
    Split("no load: idle", 0, 3, 0),
]


@pytest.mark.parametrize("case", SPLIT_CASES, ids=lambda c: c.name)
def test_load_split_among_ready_gpus(case: Split) -> None:
    assert load.util_per_gpu(case.load, case.ready_gpus) == pytest.approx(case.want)


def test_a_loading_pod_has_memory_filling_but_no_utilization() -> None:
    half = load.reading(util=0, loaded=0.5, noise=5.0)
    full = load.reading(util=0, loaded=1.0, noise=0.0)
    assert half.util == 0
    assert 0 < half.fb_used_mib < full.fb_used_mib
    assert full.fb_used_mib == pytest.approx(0.6 * load.H100_FB_MIB, rel=0.01)
    assert full.power_w == load.IDLE_POWER_W


@given(
    util=st.floats(0, 100),
    loaded=st.floats(0, 1),
    noise=st.floats(-10, 10),
)
def test_readings_stay_physical(util: float, loaded: float, noise: float) -> None:
    r = load.reading(util, loaded, noise)
    assert 0 <= r.util <= 100
    assert 0 <= r.mem_util <= 100
    assert 0 <= r.sm_active <= 100
    assert r.fb_used_mib >= 0
    assert r.fb_free_mib >= 0
    assert r.fb_used_mib + r.fb_free_mib == pytest.approx(load.H100_FB_MIB, abs=0.2)
    assert load.IDLE_POWER_W <= r.power_w <= load.MAX_POWER_W
    assert 30 <= r.temp_c <= 80
    assert not any(math.isnan(v) for v in (r.util, r.fb_used_mib, r.power_w))


@given(total=st.floats(0, 10_000), gpus=st.integers(1, 64))
def test_split_never_exceeds_a_gpu_nor_loses_load_below_saturation(total: float, gpus: int) -> None:
    share = load.util_per_gpu(total, gpus)
    assert 0 <= share <= 100
    if total / gpus <= 100:
        assert share * gpus == pytest.approx(total)
