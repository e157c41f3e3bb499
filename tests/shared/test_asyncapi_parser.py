"""docs/asyncapi.yaml through the official AsyncAPI parser (@asyncapi/parser, with its
built-in rules): no error, no warning, and nothing else but what is named as accepted.

The parser is installed once with npm into a cache directory (a pinned version). Without
node the test is skipped, except in CI (``CI=true``), where it fails.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ..contract import ASYNCAPI

PARSER_VERSION = "3.6.6"
CHECKER = Path(__file__).with_name("asyncapi_diagnostics.js")
INSTALL_TIMEOUT_S = 540.0  # npm on a loaded machine
PARSE_TIMEOUT_S = 120.0

# Diagnostics accepted by name, with why.
ACCEPTED = {
    # The document stays on 2.6 while every consumer of it reads 2.x; 3.x is a new layout.
    "asyncapi-latest-version": "AsyncAPI 3 is recommended (information, not a warning)",
}


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        why = f"{name} is not installed (the AsyncAPI parser runs on node)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{why}; .ci/run installs it in CI")
        pytest.skip(why)
    return path


def _parser_modules() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    prefix = cache / "gpuscale" / f"asyncapi-parser-{PARSER_VERSION}"
    modules = prefix / "node_modules"
    prefix.mkdir(parents=True, exist_ok=True)
    with (prefix / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one install, however many test processes ask
        if not (modules / "@asyncapi" / "parser" / "package.json").exists():
            result = subprocess.run(
                [
                    _tool("npm"),
                    "install",
                    "--prefix",
                    str(prefix),
                    "--no-audit",
                    "--no-fund",
                    "--no-save",
                    "--loglevel=error",
                    f"@asyncapi/parser@{PARSER_VERSION}",
                ],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT_S,
                check=False,
            )
            assert result.returncode == 0, f"npm install failed: {result.stderr[-2000:]}"
    return modules


def _diagnostics(document: Path) -> list[dict[str, Any]]:
    node = _tool("node")
    result = subprocess.run(
        [node, str(CHECKER), str(document)],
        env={**os.environ, "NODE_PATH": str(_parser_modules())},
        capture_output=True,
        text=True,
        timeout=PARSE_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found: list[dict[str, Any]] = json.loads(result.stdout)
    return found


@pytest.mark.timeout(INSTALL_TIMEOUT_S + PARSE_TIMEOUT_S)
def test_the_official_parser_finds_no_error_and_no_warning() -> None:
    diagnostics = _diagnostics(ASYNCAPI)
    left = [
        f"{d['code']} at {d['path'] or '/'}: {d['message']}" for d in diagnostics if d["code"] not in ACCEPTED
    ]
    assert left == []


@pytest.mark.timeout(INSTALL_TIMEOUT_S + PARSE_TIMEOUT_S)
def test_the_check_sees_a_message_without_an_id(tmp_path: Path) -> None:
    text = ASYNCAPI.read_text()
    broken = text.replace("{messageId: Action, ", "{", 1)
    assert broken != text
    (tmp_path / "asyncapi.yaml").write_text(broken)
    codes = {d["code"] for d in _diagnostics(tmp_path / "asyncapi.yaml")}
    assert "asyncapi2-message-messageId" in codes
