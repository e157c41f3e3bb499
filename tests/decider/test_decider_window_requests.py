"""The decider's window requests in-process, on a clock of the
test's: each policy's window goes out at the first tick, again every 15 s
and at once on a change; a metrics message over another window asks again
(at most every 2 s); NATS away is counted and logged once, and the next
tick tells again; a deleted GPUScaler is no longer told."""

from __future__ import annotations

from structlog.testing import capture_logs

from gpuscale import codec, subjects
from gpuscale.metrics import ServiceMetrics
from gpuscale.policy import GPUScaler, parse_gpuscaler
from gpuscale.wire import Decision, MetricValues, PodMetrics, WindowRequest, WorkloadMetrics
from gpuscale_decider.decider import Decider
from gpuscale_decider.sources import MemoryStateStore, StaticPods, StaticScaleSource
from gpuscale_decider.windows import REPEAT_S, RETRY_S

from ..waiting import sample_value

NOW = 1_800_000_000.0


def gpuscaler(name: str, window: str) -> GPUScaler:
    return parse_gpuscaler(
        {
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
                "minReplicas": 1,
                "maxReplicas": 10,
                "metrics": [{"name": "gpu_util", "target": 70}],
                "window": window,
            },
        }
    )


class World:
    def __init__(self) -> None:
        self.t = NOW
        self.sent: list[WindowRequest] = []
        self.nats_down = False
        scales = StaticScaleSource(default=2)

        async def publish(_: Decision) -> None:
            return None

        async def publish_window(request: WindowRequest) -> None:
            if self.nats_down:
                raise ConnectionError("nats: connection closed")
            self.sent.append(request)

        self.decider = Decider(
            ServiceMetrics("decider-test"),
            scales,
            StaticPods(scales),
            MemoryStateStore(),
            publish,
            publish_window=publish_window,
            clock=lambda: self.t,
        )

    def told(self, name: str) -> list[tuple[float, float]]:
        return [(r.window_s, r.recent_s) for r in self.sent if r.name == name]

    def metric(self, name: str) -> float:
        return sample_value(self.decider.metrics.registry, name)


async def test_windows_go_out_at_the_first_tick_again_when_due_and_at_once_on_a_change() -> None:
    w = World()
    w.decider.registry.set_policies([gpuscaler("bert", "10s"), gpuscaler("llama", "2m")], [])
    await w.decider.tick(5.0)
    assert w.told("bert") == [(10.0, 3.0)]
    assert w.told("llama") == [(120.0, 12.0)]  # recent: a tenth of the window
    assert all(r.ttl_s == 60.0 and r.ts == NOW for r in w.sent)
    w.t += REPEAT_S - 1
    await w.decider.tick(5.0)
    assert len(w.sent) == 2  # not due yet
    w.decider.registry.set_policies([gpuscaler("bert", "20s"), gpuscaler("llama", "2m")], [])
    await w.decider.tick(5.0)
    assert w.told("bert")[-1] == (20.0, 3.0)
    assert len(w.told("llama")) == 1
    w.t += 1
    await w.decider.tick(5.0)
    assert len(w.told("llama")) == 2  # 15 s since it was told


async def test_metrics_over_another_window_ask_again_at_most_every_two_seconds() -> None:
    w = World()
    w.decider.registry.set_policies([gpuscaler("bert", "10s")], [])
    await w.decider.tick(5.0)
    message = WorkloadMetrics(
        namespace="default",
        kind="Deployment",
        name="bert",
        ts=w.t,
        window_s=30.0,  # the aggregator restarted and forgot the request
        pods=(PodMetrics("bert-0", MetricValues(gpu_util=90.0), w.t),),
        averages=MetricValues(gpu_util=90.0),
        pods_fresh=1,
        pods_stale=0,
    )
    subject = subjects.metrics(subjects.WorkloadKey("default", "Deployment", "bert"))
    w.t += RETRY_S
    await w.decider.handle_metrics(subject, codec.encode(message))
    await w.decider.handle_metrics(subject, codec.encode(message))
    assert len(w.told("bert")) == 2  # the first tick's, and one at once, not one per message


async def test_nats_away_is_counted_logged_once_and_the_next_tick_tells_again() -> None:
    w = World()
    w.decider.registry.set_policies([gpuscaler("bert", "10s"), gpuscaler("llama", "10s")], [])
    w.nats_down = True
    with capture_logs() as logs:
        await w.decider.tick(5.0)
        w.t += REPEAT_S
        await w.decider.tick(5.0)
        w.nats_down = False
        w.t += REPEAT_S
        await w.decider.tick(5.0)
    assert w.metric("gpuscale_decider_publish_failures_total") == 4
    events = [e["event"] for e in logs if e["event"].startswith("window_request")]
    assert events == ["window_request_failed", "window_requests_resumed"]
    assert len(w.sent) == 2


async def test_a_deleted_gpuscaler_is_no_longer_told() -> None:
    w = World()
    w.decider.registry.set_policies([gpuscaler("bert", "10s"), gpuscaler("llama", "10s")], [])
    await w.decider.tick(5.0)
    w.decider.registry.set_policies([gpuscaler("llama", "10s")], [])
    for _ in range(3):
        w.t += REPEAT_S
        await w.decider.tick(5.0)
    assert len(w.told("bert")) == 1
    assert len(w.told("llama")) == 4


async def test_a_standby_decider_tells_nothing() -> None:
    w = World()
    w.decider.is_leader = lambda: False
    w.decider.registry.set_policies([gpuscaler("bert", "10s")], [])
    await w.decider.tick(5.0)
    assert w.sent == []


async def test_a_clock_set_back_an_hour_tells_again_at_once_not_an_hour_on() -> None:
    """Waiting the skew out would let the aggregator's request lapse after its 60 s ttl:
    averages over its own window, and no decision for a policy on another."""
    w = World()
    w.decider.registry.set_policies([gpuscaler("bert", "10s")], [])
    await w.decider.tick(5.0)
    w.t -= 3600.0
    await w.decider.tick(5.0)
    assert len(w.told("bert")) == 2
    w.t += 1
    await w.decider.tick(5.0)
    assert len(w.told("bert")) == 2  # and then every 15 s again on the new clock
    w.t += REPEAT_S
    await w.decider.tick(5.0)
    assert len(w.told("bert")) == 3
