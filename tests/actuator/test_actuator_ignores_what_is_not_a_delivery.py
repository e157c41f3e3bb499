"""Whatever lands in the actuator's fetch inbox and is not a JetStream delivery of its
decisions consumer is dropped, counted and logged once per reason: another
login's junk, a reply aimed at the inbox (a forged ack subject too, where a server
lets a client name one). The decisions behind it are applied as ever. Played with an
unrestricted credential against a real nats-server and the real actuator, on kube-sim."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest
from nats.aio.msg import Msg

from gpuscale import subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.logging import configure
from gpuscale.natsio import NATS, ensure_stream, jetstream
from gpuscale_actuator.core.delivery import (
    NOT_A_DECISION_SUBJECT,
    NOT_JETSTREAM,
    OTHER_CONSUMER,
    not_a_delivery,
)
from gpuscale_kubesim import KubeSim

from ..waiting import eventually
from .actuator_harness import decision, publish, running_actuator, settings_for, watch_actions
from .kube_fixtures import seed

pytestmark = pytest.mark.integration

JUNK = 300  # plain messages published straight into the inbox
NEXT = f"$JS.API.CONSUMER.MSG.NEXT.{subjects.DECISIONS_STREAM}.{subjects.ACTUATOR_DURABLE}"
DELIVERY_ACK = f"$JS.ACK.{subjects.DECISIONS_STREAM}.{subjects.ACTUATOR_DURABLE}.1.7.7.1700000000000000000.0"


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure("actuator", "info", stream=stream)
    try:
        yield stream
    finally:
        configure("actuator", "info")


def test_only_a_delivery_of_the_decisions_consumer_passes() -> None:
    decision_subject = subjects.decisions(subjects.WorkloadKey("default", "Deployment", "bert"))
    assert not_a_delivery(decision_subject, DELIVERY_ACK) is None
    newer = f"$JS.ACK.hub.ACCHASH.{subjects.DECISIONS_STREAM}.{subjects.ACTUATOR_DURABLE}.1.7.7.1.0.tok"
    assert not_a_delivery(decision_subject, newer) is None
    assert not_a_delivery(decision_subject, "") == NOT_JETSTREAM
    assert not_a_delivery(decision_subject, "_INBOX.x.y") == NOT_JETSTREAM
    assert not_a_delivery(decision_subject, "$JS.ACK.short") == NOT_JETSTREAM
    assert not_a_delivery(decision_subject, "$JS.ACK.OTHER.c.1.1.1.1.0") == OTHER_CONSUMER
    assert not_a_delivery("_INBOX.actuator.abc", DELIVERY_ACK) == NOT_A_DECISION_SUBJECT


async def learn_the_fetch_inbox(nc: NATS) -> str:
    """What an unrestricted login sees: the inbox the actuator's pull requests name."""
    inboxes: list[str] = []

    async def on_next(msg: Msg) -> None:
        inboxes.append(msg.reply)

    sub = await nc.subscribe(NEXT, cb=on_next)
    await eventually(lambda: inboxes, what="the actuator's pull request")
    await sub.unsubscribe()
    assert inboxes[0].startswith("_INBOX.actuator."), inboxes[0]
    return inboxes[0]


async def test_junk_in_the_fetch_inbox_is_dropped_counted_and_logged_once_per_reason(
    log_lines: io.StringIO, nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2, min_replicas=1, max_replicas=5)
    js = jetstream(nats_client)
    await ensure_stream(js, "OTHER", ["other.>"], storage="memory")
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        before = decision("bert", from_=2, to=3)
        await publish(nats_client, before)
        assert (await actions.wait_for(before.id)).outcome == "applied"

        inbox = await learn_the_fetch_inbox(nats_client)
        for i in range(JUNK):
            await nats_client.publish(inbox, f"junk-{i}".encode())
        # A reply aimed at the inbox: JetStream answers a publish to another stream there.
        await nats_client.publish("other.x", b"{}", reply=inbox)
        await nats_client.flush()

        def rejected(reason: str) -> float:
            return actuator.metric("gpuscale_messages_rejected_total", kind="decisions", reason=reason)

        await eventually(
            lambda: rejected(NOT_JETSTREAM) == JUNK + 1, 30, "every message that is no delivery counted"
        )
        # ... and the tenants' decisions behind the junk are applied as ever.
        after = decision("bert", from_=3, to=4)
        await publish(nats_client, after)
        assert (await actions.wait_for(after.id)).outcome == "applied"
        assert actuator.metric("gpuscale_actuator_decisions_consumed_total") == 2
        await eventually(
            lambda: actuator.metric("gpuscale_actuator_decisions_in_flight") == 0, what="nothing left in hand"
        )
    assert int(kube_sim.get("apps/v1", "Deployment", "bert")["spec"]["replicas"]) == 4
    text = log_lines.getvalue()
    assert text.count("fetched_message_ignored") == 1, "one line per reason"
    assert "decision_handling_error" not in text
    assert "Traceback" not in text
