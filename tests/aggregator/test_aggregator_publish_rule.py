"""When a workload's message is due: its tick is complete (every pod fresh at its last
message has reported since), at most once per bucket, or its deadline passed
(the publish interval since its last message), whichever comes first."""

from __future__ import annotations

from gpuscale.codec import encode_raw
from gpuscale_aggregator.core.ingest import Aggregator
from gpuscale_aggregator.core.window import WindowConfig, WorkloadTuple

from .aggregator_builders import NOW, batch, gpu, owner

BERT = ("default", "Deployment", "bert")
INTERVAL = 2.0


class Fleet:
    """An aggregator, and one batch per call for one pod on a node named after it."""

    def __init__(self) -> None:
        self.agg = Aggregator(WindowConfig(window_s=30.0, publish_interval_s=INTERVAL))
        self.seq: dict[str, int] = {}

    def send(self, t: float, pod: str, workload: str = "bert") -> None:
        node = f"node-{pod}"
        self.seq[node] = self.seq.get(node, -1) + 1
        b = batch(gpu(0, owner(pod, workload), node=node), node=node, ts=NOW + t, seq=self.seq[node])
        assert self.agg.ingest(encode_raw(b), now=NOW + t, subject_node=node).status == "accepted"

    def complete(self, t: float) -> list[WorkloadTuple]:
        return self.agg.store.take_complete(NOW + t)

    def publish(self, t: float, workload: WorkloadTuple = BERT) -> int:
        """The workload's message at ``t``: how many fresh pods it counts."""
        message = self.agg.message_of(workload, NOW + t)
        assert message is not None
        return message.pods_fresh


def two_pods_published_at(t: float) -> Fleet:
    fleet = Fleet()
    fleet.send(t - 0.5, "a-1")
    fleet.send(t - 0.4, "a-2")
    assert fleet.publish(t) == 2
    return fleet


def test_a_workload_is_complete_when_every_fresh_pod_reported_since_its_last_message() -> None:
    fleet = two_pods_published_at(10.0)
    fleet.send(10.6, "a-1")
    assert fleet.complete(10.6) == []
    fleet.send(11.2, "a-2")
    assert fleet.complete(11.2) == [BERT]
    assert fleet.complete(11.2) == []  # taken once
    assert fleet.publish(11.2) == 2


def test_a_stale_pod_is_not_waited_for() -> None:
    fleet = Fleet()
    fleet.send(0.0, "a-1")  # then silent: stale after 3 intervals
    for t in range(6):
        fleet.send(t + 0.1, "a-2")
    assert fleet.publish(5.5) == 1
    fleet.send(6.1, "a-2")
    assert fleet.complete(6.5) == [BERT]


def test_a_pod_heard_twice_does_not_complete_a_workload_its_sibling_has_not() -> None:
    fleet = two_pods_published_at(10.0)
    for k in range(20):
        fleet.send(10.5 + k * 0.1, "a-1")
        assert fleet.complete(10.5 + k * 0.1) == []
    fleet.send(12.5, "a-2")
    assert fleet.complete(12.5) == [BERT]


def test_a_new_pod_counts_as_heard_and_does_not_stand_in_for_a_sibling() -> None:
    fleet = two_pods_published_at(10.0)
    fleet.send(10.5, "a-3")
    fleet.send(10.6, "a-1")
    assert fleet.complete(11.0) == []  # a-2 not heard yet
    fleet.send(11.1, "a-2")
    assert fleet.complete(11.1) == [BERT]
    assert fleet.publish(11.1) == 3


def test_never_more_than_once_per_bucket() -> None:
    """A fast or hostile collector completes the tick over and over: one message a bucket."""
    fleet = two_pods_published_at(10.0)
    fleet.send(10.2, "a-1")
    fleet.send(10.3, "a-2")
    assert fleet.complete(10.3) == []
    assert fleet.agg.store.next_due() == NOW + 11.0
    assert fleet.complete(10.99) == []
    assert fleet.complete(11.0) == [BERT]
    assert fleet.publish(11.0) == 2
    fleet.send(11.1, "a-1")
    fleet.send(11.2, "a-2")
    assert fleet.complete(11.2) == []
    fleet.send(11.3, "a-3")  # a new pod completes it again before it is due: still one message
    assert fleet.complete(11.5) == []
    assert fleet.complete(12.0) == [BERT]


def test_a_new_workload_is_due_a_bucket_after_its_first_sample() -> None:
    """Its other pods' batches of the same tick, from other nodes, come first."""
    fleet = Fleet()
    fleet.send(0.0, "a-1")
    fleet.send(0.4, "a-2")
    assert fleet.complete(0.4) == []
    assert fleet.complete(1.0) == [BERT]
    assert fleet.publish(1.0) == 2


def test_deadline_publishes_a_workload_whose_pod_is_silent() -> None:
    fleet = two_pods_published_at(10.0)
    fleet.send(10.6, "a-1")  # a-2 silent from here
    assert fleet.complete(11.9) == []
    assert fleet.agg.store.next_due() == NOW + 10.0 + INTERVAL
    assert fleet.agg.store.take_overdue(NOW + 11.9) == []
    assert fleet.agg.store.take_overdue(NOW + 12.0) == [BERT]
    assert fleet.publish(12.0) == 2
    assert fleet.agg.store.take_overdue(NOW + 12.0) == []  # the deadline moved with the message


def test_deadlines_come_in_the_order_of_the_last_messages() -> None:
    fleet = Fleet()
    for name in ("w1", "w2", "w3"):
        fleet.send(0.0, f"{name}-0", workload=name)
    w1, w2, w3 = (("default", "Deployment", name) for name in ("w1", "w2", "w3"))
    fleet.publish(1.0, w2)
    fleet.publish(1.5, w1)
    fleet.publish(1.8, w3)
    store = fleet.agg.store
    assert store.take_overdue(NOW + 3.5) == [w2, w1]
    assert store.next_due() == NOW + 1.0 + INTERVAL


def test_a_workload_gone_from_the_window_is_due_no_more() -> None:
    fleet = two_pods_published_at(10.0)
    fleet.agg.store.expire(NOW + 100.0)
    assert fleet.agg.store.take_overdue(NOW + 100.0) == []
    assert fleet.agg.store.next_due() is None
