"""A test marked ``serial`` runs alone under pytest-xdist: no other worker's test overlaps it.

The suite runs on several workers (pyproject's addopts); a test that times something against a
bound is marked ``serial`` so that a neighbour's load cannot push it over. This runs a small
suite on two workers, with the hooks of tests/conftest.py, and reads when each test ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"

INNER_CONFTEST = f"""
import importlib.util

_spec = importlib.util.spec_from_file_location("gpuscale_tests_conftest", {str(CONFTEST)!r})
_suite = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_suite)
pytest_configure = _suite.pytest_configure
pytest_unconfigure = _suite.pytest_unconfigure
pytest_runtest_protocol = _suite.pytest_runtest_protocol
"""

RECORDER = """
import os, time
import pytest

def ran(name, seconds):
    start = time.monotonic()
    time.sleep(seconds)
    with open(os.environ["RAN_LOG"], "a") as f:
        f.write(f"{name} {start} {time.monotonic()}\\n")
"""


def run_inner_suite(tmp_path: Path, serial: bool) -> dict[str, tuple[float, float]]:
    """Two files on two workers: one test that holds 1 s (marked serial or not) beside ten
    unmarked ones of 0.3 s each; returns when each ran."""
    (tmp_path / "conftest.py").write_text(INNER_CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    serial: alone\n")
    mark = "@pytest.mark.serial" if serial else ""
    (tmp_path / "test_alone.py").write_text(
        RECORDER + f"\n{mark}\ndef test_alone():\n    ran('alone', 1.0)\n"
    )
    others = "".join(f"\ndef test_other_{i}():\n    ran('other_{i}', 0.3)\n" for i in range(10))
    (tmp_path / "test_others.py").write_text(RECORDER + others)
    ran_log = tmp_path / "ran.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GPUSCALE_TEST_"))}
    env["RAN_LOG"] = str(ran_log)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadfile"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    runs = {}
    for line in ran_log.read_text().splitlines():
        name, start, end = line.split()
        runs[name] = (float(start), float(end))
    assert len(runs) == 11, runs
    return runs


def overlapping(runs: dict[str, tuple[float, float]]) -> list[str]:
    start, end = runs["alone"]
    return [name for name, (s, e) in runs.items() if name != "alone" and s < end and e > start]


def test_a_serial_test_runs_while_no_other_workers_test_runs(tmp_path: Path) -> None:
    assert overlapping(run_inner_suite(tmp_path, serial=True)) == []


def test_an_unmarked_test_runs_beside_the_other_workers_tests(tmp_path: Path) -> None:
    """The control: without the mark the two files do run side by side (else the test above
    would prove nothing)."""
    assert overlapping(run_inner_suite(tmp_path, serial=False)) != []
