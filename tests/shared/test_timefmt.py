"""Kubernetes times as the API writes them: whole seconds, UTC, however often one is asked for."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from gpuscale.timefmt import format_micro_time, format_time, parse_time


@pytest.mark.parametrize(
    ("unix_s", "text"),
    [
        (0.0, "1970-01-01T00:00:00Z"),
        (1_700_000_000.0, "2023-11-14T22:13:20Z"),
        (1_700_000_000.999999, "2023-11-14T22:13:20Z"),  # a second is whole: never rounded up
        (1_700_000_001.0, "2023-11-14T22:13:21Z"),
        (-0.5, "1969-12-31T23:59:59Z"),
    ],
)
def test_a_time_is_its_whole_second_in_utc(unix_s: float, text: str) -> None:
    assert format_time(unix_s) == text
    assert format_time(unix_s) == datetime.fromtimestamp(unix_s, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_second_formatted_again_reads_the_same_and_parses_back() -> None:
    stamps = [format_time(1_800_000_000.0 + i / 10) for i in range(30)]
    assert stamps == [format_time(1_800_000_000.0 + i // 10) for i in range(30)]
    assert [parse_time(s) for s in stamps[::10]] == [1_800_000_000.0, 1_800_000_001.0, 1_800_000_002.0]
    assert format_micro_time(1_800_000_000.25) == "2027-01-15T08:00:00.250000Z"
