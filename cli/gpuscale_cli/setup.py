"""``gpuscale setup``: create or update every JetStream stream and KV bucket. Idempotent.

Only this identity may: a leaked service credential cannot re-shape a stream."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from dataclasses import dataclass

from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError
from nats.js import JetStreamContext
from nats.js.errors import APIError, ServiceUnavailableError

from gpuscale import subjects
from gpuscale.logging import configure
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import NATS, apply_kv, apply_stream, connect, drain, jetstream, redact, waiting_reason
from gpuscale.settings import (
    CommonSettings,
    boolean,
    byte_size,
    choice,
    non_empty,
    option,
    positive_int,
    seconds,
)
from gpuscale.subjects import KvSpec, StreamSpec

# What a JetStream that is starting (or electing leaders) answers: worth a retry.
TRANSIENT = (NatsTimeoutError, NoRespondersError, ServiceUnavailableError, TimeoutError)
# JSClusterNoPeersErr: too few JetStream servers for the replicas, until a forming
# cluster's last server joins (or for good): so the wait is bounded by --wait.
NO_PEERS_FOR_PLACEMENT = 10005


def waiting_for_peers(error: BaseException) -> bool:
    return isinstance(error, APIError) and error.err_code == NO_PEERS_FOR_PLACEMENT


def replicas(text: str) -> int:
    value = positive_int(text)
    if value > 5:
        raise ValueError("JetStream keeps at most 5 replicas")
    return value


@dataclass(frozen=True)
class SetupSettings(CommonSettings):
    replicas: int = option(
        1,
        "--replicas",
        env="GPUSCALE_NATS_REPLICAS",
        parse=replicas,
        help="copies of every stream and bucket: 3 for deploy/'s 3-node NATS cluster, 1 for one server",
    )
    window_s: float = option(
        30.0,
        "--window",
        env="GPUSCALE_WINDOW",
        parse=seconds,
        help="how long the samples stream keeps batches: the aggregator's --window",
    )
    samples_max_bytes: int = option(
        subjects.SAMPLES_MAX_BYTES,
        "--samples-max-bytes",
        env="GPUSCALE_SAMPLES_MAX_BYTES",
        parse=byte_size,
        help="the samples stream's own storage budget (old samples go first when it is full)",
    )
    samples_storage: str = option(
        "file",
        "--samples-storage",
        env="GPUSCALE_SAMPLES_STORAGE",
        parse=choice("file", "memory"),
        help="storage of the samples stream",
    )
    state_bucket: str = option(
        subjects.DECIDER_STATE_BUCKET,
        "--state-bucket",
        env="GPUSCALE_STATE_BUCKET",
        parse=non_empty,
        help="the decider's state bucket (its --state-bucket)",
    )
    scale_out: bool = option(
        False,
        "--scale-out",
        env="GPUSCALE_SCALE_OUT",
        parse=boolean,
        is_flag=True,
        help="also the partitioned aggregators' stream (aggregator --partition)",
    )
    wait_s: float = option(
        120.0,
        "--wait",
        env="GPUSCALE_SETUP_WAIT",
        parse=seconds,
        help="how long to wait for NATS and JetStream to answer (a Job starts beside them)",
    )


def declarations(settings: SetupSettings) -> list[StreamSpec | KvSpec]:
    """Purely computational: what this deployment declares, sized by ``settings``."""
    n = settings.replicas
    samples = dataclasses.replace(
        subjects.samples_stream(settings.window_s, settings.samples_storage),
        max_bytes=settings.samples_max_bytes,
        replicas=n,
    )
    out: list[StreamSpec | KvSpec] = [
        samples,
        dataclasses.replace(subjects.DECISIONS, replicas=n),
        dataclasses.replace(subjects.ADVICE, replicas=n),
        dataclasses.replace(subjects.decider_state(settings.state_bucket), replicas=n),
        dataclasses.replace(subjects.DESIRED, replicas=n),
    ]
    if settings.scale_out:
        parts = subjects.aggregator_parts_stream(settings.window_s, settings.samples_storage)
        out.append(dataclasses.replace(parts, max_bytes=settings.samples_max_bytes, replicas=n))
    return out


def describe(spec: StreamSpec | KvSpec) -> str:
    size = "no byte limit" if spec.max_bytes < 0 else f"{spec.max_bytes / 1024**2:,.0f} MiB"
    if isinstance(spec, StreamSpec):
        age = "kept until full" if spec.max_age_s is None else f"kept {spec.max_age_s:g} s"
        return f"stream {spec.name}: {age}, {size}, {spec.storage}, {spec.replicas} replica(s)"
    ttl = "no TTL" if spec.ttl_s is None else f"TTL {spec.ttl_s:g} s"
    return f"bucket {spec.bucket}: {ttl}, {size}, {spec.storage}, {spec.replicas} replica(s)"


async def _connect(settings: SetupSettings) -> NATS:
    deadline = time.monotonic() + settings.wait_s
    stop = asyncio.Event()
    task = asyncio.create_task(
        connect(
            settings.nats_url,
            ServiceMetrics("setup"),
            name="gpuscale-setup",
            creds=str(settings.nats_creds) if settings.nats_creds else None,
            tls_ca=str(settings.nats_tls_ca) if settings.nats_tls_ca else None,
            stop=stop,
        )
    )
    done, _ = await asyncio.wait({task}, timeout=max(0.0, deadline - time.monotonic()))
    if not done:
        stop.set()
        task.cancel()
        reason = (
            waiting_reason("setup")
            or f"no NATS server answered at {','.join(map(redact, settings.nats_url))}"
        )
        raise TimeoutError(f"{reason} (tried for {settings.wait_s:g} s)")
    return task.result()


async def _apply(js: JetStreamContext, spec: StreamSpec | KvSpec, settings: SetupSettings) -> bool:
    """Declare one stream or bucket, retrying what a forming cluster answers until
    ``--wait`` has passed; a refusal is said on stderr and the next one is tried."""
    deadline = time.monotonic() + settings.wait_s
    said_waiting = False
    while True:
        try:
            if isinstance(spec, StreamSpec):
                outcome = await apply_stream(js, spec)
            else:
                outcome = await apply_kv(js, spec)
            print(f"{describe(spec)}: {outcome}", flush=True)
            return True
        except Exception as e:  # noqa: BLE001 - refused (permissions, a bad config): say so, go on
            peers = waiting_for_peers(e)
            if (peers or isinstance(e, TRANSIENT)) and time.monotonic() < deadline:
                if peers and not said_waiting:
                    print(
                        f"{describe(spec)}: waiting for {spec.replicas} JetStream servers to join "
                        f"the cluster (up to {settings.wait_s:g} s)",
                        flush=True,
                    )
                    said_waiting = True
                await asyncio.sleep(1.0)
                continue
            hint = (
                f" (fewer than {spec.replicas} JetStream servers joined the cluster within "
                f"{settings.wait_s:g} s: is --replicas more than the cluster has?)"
                if peers
                else ""
            )
            print(f"gpuscale setup: {describe(spec)}: {type(e).__name__}: {e}{hint}", file=sys.stderr)
            return False


async def run(settings: SetupSettings) -> int:
    try:
        nc = await _connect(settings)
    except Exception as e:  # noqa: BLE001 - one line for the operator, whatever the cause
        print(f"gpuscale setup: {e}", file=sys.stderr)
        return 1
    js = jetstream(nc, timeout_s=10.0)
    failed = 0
    try:
        for spec in declarations(settings):
            if not await _apply(js, spec, settings):
                failed += 1
    finally:
        await drain(nc)
    return 1 if failed else 0


def main(settings: SetupSettings) -> int:
    configure("setup", settings.log_level)
    return asyncio.run(run(settings))
