"""Pods that play an inference server: a queueing model, and the
vLLM ``/metrics`` exposition it shows. Pure: ``now`` and rates come in.

A pod plays vLLM when its metadata says ``sim.gpuscale.io/engine: vllm``;
it serves its metrics on the port and path its own
``gpuscale.io/metrics-port`` / ``-path`` annotations name (falling back to
``prometheus.io/port`` / ``/path``, then 8000 and ``/metrics``), exactly where
the collector looks.

The model, per workload: requests arrive at the rate the workload's load L
(GPU-percent) stands for, ``λ = L / 100 × capacity`` where one GPU serves
``capacity = max_running / service_s`` requests a second at full occupancy
(so L = 100 is one GPU's worth of work, as for every other load profile). The
arrivals are split over the ready pods in proportion to their GPUs. Each pod
runs up to ``max_running × gpus`` requests at once, each for ``service_s``;
what does not fit waits in the pod's own queue (a pod keeps its backlog when
others join: a load balancer does not move queued requests), and a waiting
request gives up after ``patience_s`` on average. As a fluid model:

    running ← min(slots, running + waiting + arrivals − running·dt/service_s)
    waiting ← the rest, less waiting·dt/patience_s

GPU utilization is the busy fraction ``running / slots``: in steady state
below saturation it equals ``L / ready GPUs``, the plain load model's share.
KV-cache usage rises with running requests (their context) and with the
queue's pressure (preempted and swapped sequences): ``0.85·running/slots +
0.15·waiting/(waiting + slots)``, a 0–1 fraction as vLLM reports it.

What users pay is accounted per workload (:class:`WaitAccount`),
from the same fluid: each pod's queue is FIFO, so each step's arrivals that
find no free slot join the tail as one cohort stamped with their arrival time,
and the slots that free up take the head first; a cohort's wait is the time
from its stamp to the step that starts it (resolution: one step). Giving up
thins every waiting cohort alike (the fluid's ``waiting·dt/patience``), so the
cohorts keep their order and the waits of those served are exact for the fluid.
Request-seconds waiting is the integral of the queue; requests a removed pod
held, or that arrived while no pod served, are counted apart.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

ENGINE_ANNOTATION: Final = "sim.gpuscale.io/engine"
ENGINES: Final = ("vllm",)
PORT_ANNOTATIONS: Final = ("gpuscale.io/metrics-port", "prometheus.io/port")
PATH_ANNOTATIONS: Final = ("gpuscale.io/metrics-path", "prometheus.io/path")
MODEL_ANNOTATION: Final = "sim.gpuscale.io/model"
DEFAULT_PORT: Final = 8000
DEFAULT_PATH: Final = "/metrics"
DEFAULT_MODEL: Final = "meta-llama/Llama-3.1-8B-Instruct"
STEP_S: Final = 0.1  # integration step (simulated seconds)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_running_per_gpu: float = 16.0  # concurrent sequences one GPU runs (vLLM's max_num_seqs, scaled down)
    service_s: float = 2.0  # time one request runs
    patience_s: float = 60.0  # mean wait before a queued request gives up
    prompt_tokens: float = 512.0  # per request, for the token counters
    output_tokens: float = 128.0

    @property
    def requests_per_gpu_s(self) -> float:
        """What one GPU serves per second when full: ``100 GPU-%`` of load."""
        return self.max_running_per_gpu / self.service_s


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a pod serves its metrics."""

    engine: str
    port: int
    path: str
    model: str


def endpoint_of(pod: Mapping[str, Any]) -> Endpoint | None:
    """The pod's metrics endpoint if it plays an inference server, else None."""
    notes = (pod.get("metadata") or {}).get("annotations") or {}
    engine = str(notes.get(ENGINE_ANNOTATION, "")).strip().lower()
    if engine not in ENGINES:
        return None
    port = DEFAULT_PORT
    for key in PORT_ANNOTATIONS:
        text = str(notes.get(key, "")).strip()
        if text:
            if not text.isdigit() or not 1 <= int(text) <= 65535:
                return None  # a port nothing could listen on: the pod serves nothing
            port = int(text)
            break
    path = next(
        (str(notes[k]).strip() for k in PATH_ANNOTATIONS if str(notes.get(k, "")).strip()), DEFAULT_PATH
    )
    return Endpoint(engine, port, path, str(notes.get(MODEL_ANNOTATION) or DEFAULT_MODEL))


# Upper bounds (s) of the wait histogram: none, then a tenth of a second (one step) up
# to 10 s, then coarser; a quantile is read off it by interpolation within a bucket.
WAIT_BOUNDS_S: Final = (
    tuple(round(0.1 * i, 1) for i in range(101))
    + tuple(float(s) for s in range(11, 61))
    + tuple(float(s) for s in range(65, 601, 5))
    + (3600.0, math.inf)
)


@dataclass
class WaitAccount:
    """What a workload's requests paid in queues, cumulative (requests are the fluid's)."""

    arrived: float = 0.0
    started: float = 0.0  # left the queue for a slot (those the wait histogram holds)
    abandoned: float = 0.0  # gave up waiting
    dropped: float = 0.0  # were queued on a pod that stopped serving
    unserved: float = 0.0  # arrived while no pod served
    waiting_request_s: float = 0.0  # integral of the queue over time
    wait_counts: list[float] = field(default_factory=lambda: [0.0] * len(WAIT_BOUNDS_S))

    def record_wait(self, wait_s: float, requests: float) -> None:
        if requests > 0:
            self.started += requests
            self.wait_counts[bisect.bisect_left(WAIT_BOUNDS_S, wait_s - 1e-9)] += requests

    def since(self, earlier: WaitAccount) -> WaitAccount:
        """What was paid after ``earlier`` (a copy of this account taken then)."""
        return WaitAccount(
            self.arrived - earlier.arrived,
            self.started - earlier.started,
            self.abandoned - earlier.abandoned,
            self.dropped - earlier.dropped,
            self.unserved - earlier.unserved,
            self.waiting_request_s - earlier.waiting_request_s,
            [a - b for a, b in zip(self.wait_counts, earlier.wait_counts, strict=True)],
        )

    def copy(self) -> WaitAccount:
        return self.since(WaitAccount())

    def wait_quantile_s(self, q: float) -> float:
        """The ``q`` quantile (0..1) of the waits of started requests, 0 when none started."""
        total = sum(self.wait_counts)
        if total <= 0:
            return 0.0
        rank, below, low = q * total, 0.0, 0.0
        for bound, count in zip(WAIT_BOUNDS_S, self.wait_counts, strict=True):
            if count > 0 and below + count >= rank:
                return low if math.isinf(bound) else low + (bound - low) * (rank - below) / count
            below += count
            low = bound
        return low

    def to_json(self) -> dict[str, Any]:
        return {
            "arrived": round(self.arrived, 3),
            "started": round(self.started, 3),
            "abandoned": round(self.abandoned, 3),
            "dropped": round(self.dropped, 3),
            "unserved": round(self.unserved, 3),
            "waiting_request_s": round(self.waiting_request_s, 3),
            "wait_p50_s": round(self.wait_quantile_s(0.5), 3),
            "wait_p90_s": round(self.wait_quantile_s(0.9), 3),
            "wait_p99_s": round(self.wait_quantile_s(0.99), 3),
            "wait_bounds_s": [b if math.isfinite(b) else None for b in WAIT_BOUNDS_S],
            "wait_counts": [round(c, 4) for c in self.wait_counts],
        }

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> WaitAccount:
        counts = [float(c) for c in doc["wait_counts"]]
        if len(counts) != len(WAIT_BOUNDS_S):
            raise ValueError("wait_counts does not match WAIT_BOUNDS_S")
        return cls(
            float(doc["arrived"]),
            float(doc["started"]),
            float(doc["abandoned"]),
            float(doc["dropped"]),
            float(doc["unserved"]),
            float(doc["waiting_request_s"]),
            counts,
        )


@dataclass
class EnginePod:
    """One serving pod's queue. Counters are cumulative since the pod became ready."""

    gpus: int
    endpoint: Endpoint
    waiting: float = 0.0
    running: float = 0.0
    arrived: float = 0.0
    completed: float = 0.0
    abandoned: float = 0.0
    busy_s: float = 0.0  # integral of running/slots over time (for the latency histograms)
    served_s: float = 0.0  # also the pod's own clock, for the waits
    account: WaitAccount = field(default_factory=WaitAccount)  # its workload's, shared
    # The queue's cohorts, head first: (arrival time, size / survival when it arrived).
    cohorts: deque[tuple[float, float]] = field(default_factory=deque)
    survival: float = 1.0  # the share of a waiting request not yet given up, since the queue formed

    def slots(self, config: EngineConfig) -> float:
        return config.max_running_per_gpu * self.gpus

    def busy(self, config: EngineConfig) -> float:
        """The busy fraction, 0..1: what the GPU's utilization shows."""
        slots = self.slots(config)
        return 0.0 if slots <= 0 else min(1.0, self.running / slots)

    def kv_cache(self, config: EngineConfig) -> float:
        """KV-cache usage, a 0..1 fraction."""
        slots = self.slots(config)
        if slots <= 0:
            return 0.0
        pressure = self.waiting / (self.waiting + slots) if self.waiting > 0 else 0.0
        return min(1.0, 0.85 * self.running / slots + 0.15 * pressure)

    def step(self, arrival_rate: float, dt: float, config: EngineConfig) -> None:
        """Advance ``dt`` simulated seconds with requests arriving at ``arrival_rate``/s."""
        if dt <= 0:
            return
        slots = self.slots(config)
        arrivals = max(0.0, arrival_rate) * dt
        done = min(self.running, self.running * dt / config.service_s)
        free = max(0.0, slots - (self.running - done))
        now = self.served_s + dt
        from_queue = min(free, self.waiting)
        self._serve_head(from_queue, now)
        from_arrivals = min(free - from_queue, arrivals)
        self.account.record_wait(0.0, from_arrivals)
        queued = arrivals - from_arrivals
        if queued > 0:
            self.cohorts.append((now, queued / self.survival))
        self.running = self.running - done + from_queue + from_arrivals
        waiting = self.waiting - from_queue + queued
        gave_up = min(waiting, waiting * dt / config.patience_s)
        if waiting > 0:
            self.survival *= 1.0 - gave_up / waiting
        self.waiting = waiting - gave_up
        if self.waiting <= 1e-9 or not self.cohorts:
            self.waiting = max(0.0, self.waiting)
            self.cohorts.clear()
            self.survival = 1.0
        elif self.survival < 1e-100:  # renormalize before the scaled sizes overflow
            self.cohorts = deque((at, size * self.survival) for at, size in self.cohorts)
            self.survival = 1.0
        self.arrived += arrivals
        self.completed += done
        self.abandoned += gave_up
        self.busy_s += dt * (self.running / slots if slots > 0 else 0.0)
        self.served_s = now
        self.account.arrived += arrivals
        self.account.abandoned += gave_up
        self.account.waiting_request_s += self.waiting * dt

    def _serve_head(self, requests: float, now: float) -> None:
        """Start ``requests`` from the head of the queue, recording each cohort's wait."""
        while requests > 1e-12 and self.cohorts:
            at, scaled = self.cohorts[0]
            size = scaled * self.survival
            if size <= requests:
                self.cohorts.popleft()
                self.account.record_wait(now - at, size)
                requests -= size
            else:
                self.cohorts[0] = (at, (size - requests) / self.survival)
                self.account.record_wait(now - at, requests)
                requests = 0.0


@dataclass
class InferenceWorkloads:
    """Every serving engine pod's queue, advanced together per workload."""

    config: EngineConfig = field(default_factory=EngineConfig)
    pods: dict[str, EnginePod] = field(default_factory=dict)  # by pod uid
    at: float | None = None  # simulated time they were advanced to
    accounts: dict[tuple[str, str], WaitAccount] = field(default_factory=dict)  # by workload

    def advance(
        self,
        sim_now: float,
        serving: Mapping[tuple[str, str], Mapping[str, tuple[int, Endpoint]]],
        load_at: Any,
    ) -> None:
        """Bring every pod to ``sim_now`` (simulated seconds). ``serving``: per
        workload (namespace, name), its serving engine pods (uid → (gpus,
        endpoint)); ``load_at(workload, sim_t)`` its load in GPU-percent then.
        Pods that stopped serving leave with their queue (their clients retry
        elsewhere, as new arrivals); pods that start serving start empty. A
        workload given with no pods has its arrivals counted as unserved."""
        live = {uid for pods in serving.values() for uid in pods}
        for uid in [u for u in self.pods if u not in live]:
            gone = self.pods.pop(uid)
            gone.account.dropped += gone.waiting
        for workload, pods in serving.items():
            account = self.accounts.setdefault(workload, WaitAccount())
            for uid, (gpus, endpoint) in pods.items():
                if uid not in self.pods:
                    self.pods[uid] = EnginePod(gpus, endpoint, account=account)
        start = sim_now if self.at is None else self.at
        self.at = max(start, sim_now)
        span = sim_now - start
        if span <= 0:
            return
        steps = max(1, math.ceil(span / STEP_S))
        dt = span / steps
        per_gpu = self.config.requests_per_gpu_s
        for workload, pods in serving.items():
            total_gpus = sum(g for g, _ in pods.values())
            if total_gpus <= 0:  # nobody serves: its requests are counted, not queued
                account = self.accounts[workload]
                for i in range(steps):
                    rate = max(0.0, float(load_at(workload, start + (i + 0.5) * dt))) / 100.0 * per_gpu
                    account.arrived += rate * dt
                    account.unserved += rate * dt
                continue
            members = [(self.pods[uid], gpus / total_gpus) for uid, (gpus, _) in pods.items()]
            for i in range(steps):
                rate = max(0.0, float(load_at(workload, start + (i + 0.5) * dt))) / 100.0 * per_gpu
                for pod, share in members:
                    pod.step(rate * share, dt, self.config)


# --- the exposition -----------------------------------------------------------------

# vLLM V1's bucket bounds (vllm/v1/metrics/loggers.py), for plausible histograms:
# most of a real /metrics page is histograms, and the collector must read past them.
_TTFT_BUCKETS: Final = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_LATENCY_BUCKETS: Final = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip
_ITL_BUCKETS: Final = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)  # fmt: skip
_TOKEN_BUCKETS: Final = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)  # fmt: skip


def _fmt(value: float) -> str:
    return repr(float(value))


def _histogram(
    out: list[str], name: str, help_: str, labels: str, count: float, mean: float, buckets: tuple[float, ...]
) -> None:
    """A histogram whose ``count`` observations spread around ``mean`` (exponentially)."""
    out.append(f"# HELP {name} {help_}")
    out.append(f"# TYPE {name} histogram")
    for bound in buckets:
        share = 1.0 - math.exp(-bound / mean) if mean > 0 else 1.0
        out.append(f'{name}_bucket{{{labels},le="{bound:g}"}} {_fmt(round(count * share))}')
    out.append(f'{name}_bucket{{{labels},le="+Inf"}} {_fmt(round(count))}')
    out.append(f"{name}_count{{{labels}}} {_fmt(round(count))}")
    out.append(f"{name}_sum{{{labels}}} {_fmt(count * mean)}")


def render_vllm(pod: EnginePod, config: EngineConfig) -> str:
    """The pod's ``/metrics`` as vLLM V1 writes it (prometheus_client's text
    format, every series labelled ``engine`` and ``model_name``)."""
    labels = f'engine="0",model_name="{pod.endpoint.model}"'
    busy = pod.busy(config)
    queue_s = pod.waiting / max(1e-9, pod.slots(config) / config.service_s)
    out: list[str] = []

    def gauge(name: str, help_: str, value: float) -> None:
        out.extend((f"# HELP {name} {help_}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {_fmt(value)}"))

    def counter(name: str, help_: str, value: float, extra: str = "") -> None:
        out.extend(
            (f"# HELP {name} {help_}", f"# TYPE {name} counter", f"{name}{{{labels}{extra}}} {_fmt(value)}")
        )

    gauge("vllm:num_requests_running", "Number of requests in model execution batches.", round(pod.running))
    gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", round(pod.waiting))
    gauge(
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        round(pod.kv_cache(config), 4),
    )
    counter("vllm:num_preemptions_total", "Cumulative number of preemption from the engine.", 0.0)
    counter(
        "vllm:prefix_cache_queries_total",
        "Prefix cache queries, in terms of number of queried tokens.",
        round(pod.arrived) * config.prompt_tokens,
    )
    counter(
        "vllm:prefix_cache_hits_total",
        "Prefix cache hits, in terms of number of cached tokens.",
        round(pod.arrived) * config.prompt_tokens * 0.3,
    )
    counter(
        "vllm:prompt_tokens_total",
        "Number of prefill tokens processed.",
        round(pod.completed) * config.prompt_tokens,
    )
    counter(
        "vllm:generation_tokens_total",
        "Number of generation tokens processed.",
        round(pod.completed) * config.output_tokens,
    )
    counter(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        round(pod.completed),
        ',finished_reason="stop"',
    )
    counter(
        "vllm:request_success_total",
        "Count of successfully processed requests.",
        round(pod.abandoned),
        ',finished_reason="abort"',
    )
    done = pod.completed
    ttft = 0.05 + queue_s + 0.2 * busy
    _histogram(
        out,
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        labels,
        done,
        ttft,
        _TTFT_BUCKETS,
    )
    _histogram(
        out,
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        labels,
        done * config.output_tokens,
        config.service_s / config.output_tokens,
        _ITL_BUCKETS,
    )
    _histogram(
        out,
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        labels,
        done,
        config.service_s + queue_s,
        _LATENCY_BUCKETS,
    )
    _histogram(
        out,
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        labels,
        done,
        max(1e-3, queue_s),
        _LATENCY_BUCKETS,
    )
    _histogram(
        out,
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        labels,
        done,
        config.service_s,
        _LATENCY_BUCKETS,
    )
    _histogram(
        out,
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        labels,
        done,
        0.05 + 0.1 * busy,
        _LATENCY_BUCKETS,
    )
    _histogram(
        out,
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        labels,
        done,
        config.service_s,
        _LATENCY_BUCKETS,
    )
    _histogram(
        out,
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        labels,
        done,
        config.prompt_tokens,
        _TOKEN_BUCKETS,
    )
    _histogram(
        out,
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        labels,
        done,
        config.output_tokens,
        _TOKEN_BUCKETS,
    )
    return "\n".join(out) + "\n"
