"""`gpuscale convert FILE|-` as a user runs it: the real program, its streams and exit codes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "convert"
GPUSCALE = Path(sys.executable).with_name("gpuscale")


def gpuscale(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(GPUSCALE), *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )


def test_reads_standard_input_and_writes_yaml_to_stdout_notes_to_stderr() -> None:
    text = (FIXTURES / "seed-000-keda-prometheus.yaml").read_text()
    done = gpuscale("convert", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    (doc,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert doc["spec"]["metrics"] == [{"name": "gpu_util", "target": 70}]
    lines = done.stderr.splitlines()
    assert lines
    assert all(line.startswith("gpuscale convert: ScaledObject production/") for line in lines)


@pytest.mark.parametrize(
    ("args", "stdin", "message"),
    [
        pytest.param(
            ["/nonexistent/hpa.yaml"],
            None,
            "cannot read /nonexistent/hpa.yaml: No such file or directory",
            id="missing",
        ),
        pytest.param(["-"], "", "standard input holds no YAML document", id="empty"),
        pytest.param(
            ["-"], "kind: [unclosed\n", "standard input is not valid YAML at line 2, column 1", id="broken"
        ),
        pytest.param(["/"], None, "cannot read /: Is a directory", id="directory"),
    ],
)
def test_unreadable_input_exits_2_with_one_line(args: list[str], stdin: str | None, message: str) -> None:
    done = gpuscale("convert", *args, stdin=stdin)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith("gpuscale convert: ")
    assert message in done.stderr


def test_a_file_that_is_not_utf8_exits_2_with_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "hpa.yaml"
    binary.write_bytes(b"\xff\xfe\x00kind: HorizontalPodAutoscaler")
    done = gpuscale("convert", str(binary))
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1, done.stderr
    assert f"gpuscale convert: cannot read {binary}: 'utf-8' codec can't decode" in done.stderr


def test_input_without_autoscalers_exits_1_and_says_so() -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bert"}}
    done = gpuscale("convert", "-", stdin=yaml.safe_dump(deployment))
    assert done.returncode == 1
    assert "gpuscale convert: no HorizontalPodAutoscaler or ScaledObject in the input" in done.stderr
    assert "Deployment bert (apps/v1): not an HPA or ScaledObject; skipped" in done.stderr


def test_one_unconvertible_autoscaler_exits_1_but_prints_the_others() -> None:
    cpu_only = {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "web"},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "maxReplicas": 5,
            "metrics": [
                {
                    "type": "Resource",
                    "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 60}},
                }
            ],
        },
    }
    text = yaml.safe_dump(cpu_only) + "---\n" + (FIXTURES / "seed-004-hpa-duty-cycle.yaml").read_text()
    done = gpuscale("convert", "-", stdin=text)
    assert done.returncode == 1
    assert (
        "HorizontalPodAutoscaler web (autoscaling/v2): not converted: no GPU metric to scale on"
        in done.stderr
    )
    assert "# HorizontalPodAutoscaler web (autoscaling/v2): NOT CONVERTED" in done.stdout
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert [d["spec"]["scaleTargetRef"]["name"] for d in docs] == ["fast-style-transfer-serving"]


def test_file_is_required_and_help_names_it() -> None:
    done = gpuscale("convert")
    assert done.returncode == 2
    assert "the following arguments are required: FILE|-" in done.stderr
    helped = gpuscale("convert", "--help")
    assert helped.returncode == 0
    assert "- reads standard input" in " ".join(helped.stdout.split())


def test_mode_shadow_prints_gpuscalers_that_only_advise() -> None:
    """The migration's first step: the same policy beside the old autoscaler, never actuated."""
    text = (FIXTURES / "seed-000-keda-prometheus.yaml").read_text()
    done = gpuscale("convert", "--mode", "Shadow", "-", stdin=text)
    assert done.returncode == 0, done.stderr
    (doc,) = [d for d in yaml.safe_load_all(done.stdout) if d]
    assert doc["spec"]["mode"] == "Shadow"
    assert "spec.mode: Shadow" in done.stdout  # said in the comment above it
    refused = gpuscale("convert", "--mode", "Passive", "-", stdin=text)
    assert refused.returncode == 2
    assert "Passive" in refused.stderr
