"""`gpuscale kube-sim` as a program: options, kubeconfig, token, graceful shutdown."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import pytest
import yaml

from gpuscale_cli.main import main as cli_main
from gpuscale_kubesim import KubeSim

pytestmark = pytest.mark.integration

TOKEN = "s3cret"  # noqa: S105 - a throwaway token for a private test server


async def start(*args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "gpuscale_cli.main",
        "kube-sim",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def wait_for_file(path: Path, process: asyncio.subprocess.Process, timeout_s: float = 20.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not await asyncio.to_thread(path.exists):
        if process.returncode is not None or asyncio.get_running_loop().time() > deadline:
            out, err = await process.communicate()
            raise AssertionError(f"no kubeconfig written: {out.decode()} {err.decode()}")
        await asyncio.sleep(0.05)


async def test_runs_serves_with_a_token_and_stops_on_sigterm(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    process = await start(
        "--port=0",
        f"--kubeconfig-out={kubeconfig}",
        "--scenario=empty",
        "--startup-delay=0",
        f"--token={TOKEN}",
        "--nodes=3",
    )
    try:
        await wait_for_file(kubeconfig, process)
        config = yaml.safe_load(kubeconfig.read_text())
        server = config["clusters"][0]["cluster"]["server"]
        assert config["users"][0]["user"]["token"] == TOKEN
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{server}/api/v1/nodes") as r:
                assert r.status == 401
            async with http.get(f"{server}/api/v1/nodes", headers={"Authorization": f"Bearer {TOKEN}"}) as r:
                assert r.status == 200
                assert len((await r.json())["items"]) == 3
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(process.communicate(), timeout=10)
    assert process.returncode == 0, err.decode()
    assert "Traceback" not in err.decode() + out.decode()
    assert "service_stopped" in err.decode() + out.decode()


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("--startup-delay=soon", "--startup-delay"),
        ("--profile=staircase", "--profile"),
        ("--nodes=0", "--nodes"),
        ("--scenario=nowhere.yaml", "--scenario"),
    ],
)
def test_a_bad_option_exits_2_naming_it(flag: str, named: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["kube-sim", flag]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1
    assert named in err


async def test_the_kubeconfig_names_the_advertised_url(tmp_path: Path) -> None:
    async with KubeSim(port=0, kubeconfig_path=tmp_path / "kc", advertise_url="http://kube-sim:6443") as sim:
        config = yaml.safe_load((tmp_path / "kc").read_text())
        assert config["clusters"][0]["cluster"]["server"] == "http://kube-sim:6443"
        assert sim.url.startswith("http://127.0.0.1:")
        assert config["contexts"][0]["context"]["namespace"] == "default"
