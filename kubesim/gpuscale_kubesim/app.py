"""``gpuscale kube-sim``: run the simulator until SIGTERM/SIGINT."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

from gpuscale.logging import configure, get_logger
from gpuscale.runtime import SHUTDOWN_TIMEOUT_S
from gpuscale_kubesim.settings import KubeSimSettings
from gpuscale_kubesim.sim import KubeSim

SERVICE = "kube-sim"


def build(settings: KubeSimSettings) -> KubeSim:
    return KubeSim(
        port=settings.port,
        scenario=settings.scenario,
        host=settings.host,
        startup_delay_s=settings.startup_delay,
        window_s=settings.window,
        termination_delay_s=settings.termination_delay,
        tokens={settings.token: None} if settings.token else None,
        nodes=settings.nodes,
        gpus_per_node=settings.gpus_per_node,
        profile=settings.profile,
        speed=settings.speed,
        seed=settings.seed,
        kubeconfig_path=settings.kubeconfig_out,
        advertise_url=settings.advertise_url,
    )


async def run_async(settings: KubeSimSettings) -> int:
    log = get_logger(service=SERVICE)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        sim = build(settings)
        await sim.start()
    except (OSError, ValueError) as e:
        log.error("kube_sim_start_failed", error=str(e))
        return 1
    log.info("kube_sim_ready", url=sim.url, kubeconfig=str(sim.kubeconfig_path), nodes=settings.nodes)
    await stop.wait()
    log.info("shutdown_requested")
    try:
        await asyncio.wait_for(sim.stop(), SHUTDOWN_TIMEOUT_S)
    except TimeoutError:
        log.warning("shutdown_timeout", after_s=SHUTDOWN_TIMEOUT_S)
    log.info("service_stopped")
    return 0


def main(settings: KubeSimSettings) -> int:
    configure(SERVICE, settings.log_level)
    try:
        return asyncio.run(run_async(settings))
    except KeyboardInterrupt:  # a second Ctrl-C while shutting down
        print(f"{SERVICE}: interrupted", file=sys.stderr)
        return 130
