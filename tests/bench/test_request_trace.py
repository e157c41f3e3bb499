"""A request trace read as the bench replays it: rows to GPU work, the window, the scale."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


rt = _bench_module("request_trace")
HEADER = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def trace(tmp_path: Path, rows: list[tuple[str, int, int]]) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(HEADER + "".join(f"{t},{i},{o}\n" for t, i, o in rows))
    return path


def test_a_request_costs_its_input_over_the_prefill_rate_plus_its_output_over_the_decode_rate(
    tmp_path: Path,
) -> None:
    path = trace(
        tmp_path,
        [
            ("2023-11-16 18:00:00.2000000", 1200, 25),  # 0.1 + 0.01 GPU-s
            ("2023-11-16 18:00:00.7000000", 0, 250),  # 0.1 GPU-s
            ("2023-11-16 18:00:02.5000000", 2400, 0),  # 0.2 GPU-s, two seconds on
        ],
    )
    bins = rt.read_bins(path, rt.TokenCost(12_000.0, 2_500.0))
    # GPU-percent arriving per second: 100 × GPU-s of the requests that arrive in it.
    assert bins.loads == pytest.approx([21.0, 0.0, 20.0])
    assert (bins.counts, bins.skipped) == ([2, 0, 1], 0)


def test_timestamps_with_seven_fractional_digits_keep_their_order_and_spacing(tmp_path: Path) -> None:
    # The first row is not the first request: the bins start at the earlier one, 0.948 s before.
    path = trace(
        tmp_path,
        [
            ("2023-11-16 18:17:04.9799600", 1, 1),
            ("2023-11-16 18:17:04.0319600", 1, 1),
            ("2023-11-16 18:17:05.0400000", 1, 1),
        ],
    )
    assert rt.read_bins(path, rt.TokenCost()).counts == [2, 1]


def test_the_2024_traces_times_with_an_offset_and_with_or_without_a_fraction_are_read(tmp_path: Path) -> None:
    # As Azure's 2024 week-long traces write them; the same instant as the 2023 form in UTC.
    path = trace(
        tmp_path,
        [
            ("2024-05-10 00:00:00.500000+00:00", 1, 1),
            ("2024-05-10 00:00:01+00:00", 1, 1),
            ("2024-05-10 01:00:02.5+01:00", 1, 1),
        ],
    )
    assert rt.read_bins(path, rt.TokenCost()).counts == [2, 0, 1]
    assert (
        rt.seconds("2024-05-10 00:00:00+00:00")
        == rt.seconds("2024-05-10 00:00:00.0000000")
        == rt.seconds("1715299200")
    )


def test_a_byte_order_mark_before_the_header_is_no_part_of_a_column_name(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_text("\ufeff" + HEADER + "2024-05-10 00:00:00+00:00,1,1\n", encoding="utf-8")
    assert rt.read_bins(path, rt.TokenCost()).counts == [1]


def test_a_time_years_off_is_refused_with_its_distance_not_binned(tmp_path: Path) -> None:
    # Before or after the others: either way the span would be decades of one-second bins.
    for odd in ("2099-01-01 00:00:00+00:00", "1970-01-02 00:00:00+00:00"):
        path = trace(tmp_path, [("2024-05-10 00:00:00+00:00", 1, 1), (odd, 1, 1)])
        with pytest.raises(ValueError, match="days a trace may span"):
            rt.read_bins(path, rt.TokenCost())


def test_rows_that_are_no_request_are_skipped_and_counted(tmp_path: Path) -> None:
    path = trace(
        tmp_path,
        [
            ("2024-05-10 00:00:00+00:00", 1, 1),
            ("yesterday", 1, 1),
            ("2024-05-10 00:00:01+00:00", -5, 1),
            ("nan", 1, 1),
        ],
    )
    bins = rt.read_bins(path, rt.TokenCost())
    assert (bins.counts, bins.skipped) == ([1], 3)
    (tmp_path / "empty.csv").write_text(HEADER + "yesterday,1,1\n")
    with pytest.raises(ValueError, match="no requests"):
        rt.read_bins(tmp_path / "empty.csv", rt.TokenCost())


def test_token_counts_written_as_whole_floats_are_read_and_fractions_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "exported.csv"
    path.write_text(
        HEADER
        + "2024-05-10 00:00:00,12000.0,2500.0\n"  # as a dataframe writes an integer column with gaps
        + "2024-05-10 00:00:01,1e3,0\n"
        + "2024-05-10 00:00:01,12.5,1\n"  # half a token is no count
        + "2024-05-10 00:00:01,inf,1\n"
    )
    bins = rt.read_bins(path, rt.TokenCost(prefill_tokens_per_gpu_s=12000.0, decode_tokens_per_gpu_s=2500.0))
    assert (bins.counts, bins.skipped) == ([1, 1], 2)
    assert bins.loads == pytest.approx([200.0, 100.0 * 1000 / 12000])


def test_a_trace_without_the_token_columns_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.csv"
    path.write_text("TIMESTAMP,Tokens\n2023-11-16 18:00:00,5\n")
    with pytest.raises(ValueError, match="ContextTokens"):
        rt.read_bins(path, rt.TokenCost())


def test_the_most_variable_15_minutes_after_the_lead_in_is_where_the_bursts_are() -> None:
    loads = [100.0] * 3600
    for second in range(1800, 2700):  # minutes 30 to 45: 20 s bursts every minute
        loads[second] = 600.0 if second % 60 < 20 else 0.0
    assert rt.most_variable_start_s(loads) == 1800.0


def test_no_window_starts_before_the_lead_in() -> None:
    loads = [0.0 if s % 60 < 30 else 900.0 for s in range(600)] + [100.0] * 1200
    assert rt.most_variable_start_s(loads) >= rt.LEAD_IN_S


def test_the_traffic_is_scaled_so_its_busiest_minute_needs_the_asked_replicas(tmp_path: Path) -> None:
    rows = [(f"2023-11-16 18:{m:02d}:{s:02d}.0000000", 1200, 0) for m in range(30) for s in range(0, 60, 2)]
    path = trace(tmp_path, rows)
    profile = rt.trace_profile(
        path, rt.TokenCost(12_000.0, 2_500.0), whole=True, peak_replicas=8.0, scale=None, per_pod=70.0
    )
    # 0.1 GPU-s every 2 s is 5 GPU-% a minute through; 8 replicas at 70 % is 560.
    assert rt.peak_minute(list(profile.loads)) == pytest.approx(560.0)
    assert profile.source["scale"] == pytest.approx(560.0 / 5.0)
    assert profile.at(0.5) == profile.loads[0]
    assert profile.at(profile.duration_s + 10) == 0.0
