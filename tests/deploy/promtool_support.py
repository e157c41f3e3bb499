"""Prometheus' own promtool, where the tests need it.

CI installs it (.ci/run: Debian's ``prometheus`` package); a developer's machine without it
skips these tests with the reason shown, but CI (``CI=true``) fails rather than skip.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

PROMTOOL_TIMEOUT_S = 120.0  # generous: a loaded 2-core machine


def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        why = "promtool is not installed (Debian: apt-get install prometheus)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; .ci/run installs it in CI")
        pytest.skip(why)
    return path


def run_promtool(
    *args: str, cwd: Path | None = None, stdin: bytes | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args],
        cwd=cwd,
        input=stdin.decode() if stdin is not None else None,
        capture_output=True,
        text=True,
        timeout=PROMTOOL_TIMEOUT_S,
        check=False,
    )
