"""``gpuscale doctor`` against real parts (nats-server, kube-sim): each broken
part named with what to do, exit 1 until every check passes. The healthy case
(exit 0 against the running demo) is in test_demo_door.py."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from gpuscale.embedded_nats import EmbeddedNats, free_port
from gpuscale.kube import new_api_client, request_json
from gpuscale.timefmt import format_micro_time
from gpuscale_cli.doctor import Check, judge_lease, judge_workload
from gpuscale_kubesim import KubeSim

GPUSCALE = [sys.executable, "-m", "gpuscale_cli.main"]
PASSWORD = "hunter2-not-for-screens"  # noqa: S105 - a made-up one, to show it never reaches a screen


async def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(
        subprocess.run,
        [*GPUSCALE, "doctor", "--listen", "1", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )


def row(out: str, part: str) -> str:
    found = [line for line in out.splitlines() if line[6:].startswith(part + " ")]
    assert len(found) == 1, (part, out)
    return found[0]


async def test_a_bare_nats_and_cluster_fail_part_by_part_with_a_remedy_each(
    nats_server: EmbeddedNats, kube_sim: KubeSim
) -> None:
    result = await doctor(
        "--nats-url",
        nats_server.url,
        "--kubeconfig",
        str(kube_sim.kubeconfig_path),
        "--namespace",
        "gpuscale",
    )
    out = result.stdout
    assert result.returncode == 1, result
    assert row(out, "nats").startswith("OK")
    assert row(out, "streams").startswith("FAIL")
    assert "missing: stream GPUSCALE_SAMPLES" in out
    assert "gpuscale setup" in out
    assert row(out, "collectors").startswith("FAIL")
    assert row(out, "decider").startswith("FAIL")
    assert "no Lease gpuscale/gpuscale-decider" in out
    assert row(out, "actuator").startswith("FAIL")
    assert "kubectl -n gpuscale logs deploy/gpuscale-decider" in out
    assert "credentials" not in out  # this NATS asks for none: no Secret needed
    assert out.rstrip().endswith("checks fail.")
    assert "Traceback" not in result.stderr


async def test_unreachable_nats_and_no_cluster_config_are_named_not_traced(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    env["HOME"] = str(tmp_path)
    result = await asyncio.to_thread(
        subprocess.run,
        [
            *GPUSCALE,
            "doctor",
            "--listen",
            "1",
            "--nats-url",
            f"nats://app:{PASSWORD}@127.0.0.1:{free_port()}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 1
    assert row(out, "nats").startswith("FAIL")
    assert "connection refused" in row(out, "nats")
    assert row(out, "cluster").startswith("FAIL")
    assert "no cluster config" in out
    assert PASSWORD not in out + result.stderr
    assert "Traceback" not in out + result.stderr


async def test_a_missing_credentials_secret_is_named_until_it_is_created(
    kube_sim: KubeSim, tmp_path: Path
) -> None:
    (tmp_path / "nats").mkdir()
    server = EmbeddedNats(
        store_dir=str(tmp_path / "nats"),
        config_text=f'authorization {{ user: app, password: "{PASSWORD}" }}\n',
    )
    server.start()
    try:
        args = (
            "--nats-url",
            f"nats://app:{PASSWORD}@127.0.0.1:{server.port}",
            "--kubeconfig",
            str(kube_sim.kubeconfig_path),
            "--namespace",
            "gpuscale",
        )
        before = await doctor(*args)
        assert row(before.stdout, "credentials").startswith("FAIL")
        assert "no Secret gpuscale/gpuscale-nats-credentials" in before.stdout
        assert PASSWORD not in before.stdout + before.stderr

        api = await new_api_client(Path(kube_sim.kubeconfig_path))
        try:
            await request_json(
                api,
                "POST",
                "/api/v1/namespaces/gpuscale/secrets",
                {
                    "apiVersion": "v1",
                    "kind": "Secret",
                    "metadata": {"name": "gpuscale-nats-credentials"},
                    "stringData": {"decider-password": "x"},
                },
            )
        finally:
            await api.close()
        after = await doctor(*args)
        assert row(after.stdout, "credentials").startswith("OK")
    finally:
        server.close()


def test_a_lease_nobody_renews_is_named_stale_and_a_fresh_one_leads() -> None:
    now = 1_000_000.0
    stale = {
        "spec": {
            "holderIdentity": "pod-a",
            "leaseDurationSeconds": 15,
            "renewTime": format_micro_time(now - 90),
        }
    }
    fresh = {
        "spec": {
            "holderIdentity": "pod-b",
            "leaseDurationSeconds": 15,
            "renewTime": format_micro_time(now - 3),
        }
    }
    released = {
        "spec": {"holderIdentity": "", "leaseDurationSeconds": 1, "renewTime": format_micro_time(now)}
    }
    old = judge_lease("decider", "gpuscale", "gpuscale-decider", stale, now)
    assert not old.ok
    assert "last renewed 90 s ago" in old.detail
    assert "pod-a" in old.detail
    assert judge_lease("decider", "gpuscale", "gpuscale-decider", fresh, now).ok
    assert "released" in judge_lease("decider", "gpuscale", "gpuscale-decider", released, now).detail


def test_a_part_not_heard_on_nats_is_judged_by_its_pods_readiness() -> None:

    unheard = Check("aggregator", False, "no metrics heard in 5 s", "…")
    ready = {"kind": "Deployment", "status": {"replicas": 2, "readyReplicas": 1}}
    down = {"kind": "Deployment", "status": {"replicas": 2}}
    assert judge_workload("aggregator", "gpuscale", ready, unheard).ok
    failed = judge_workload("aggregator", "gpuscale", down, unheard)
    assert not failed.ok
    assert "kubectl -n gpuscale describe deployment gpuscale-aggregator" in failed.remedy
    assert judge_workload("aggregator", "gpuscale", None, unheard) is unheard
