"""Whatever lands in the inbox the actuator's watch of the desired counts delivers to and is
not a JetStream delivery is dropped, counted and logged once: another login's junk, a
reply aimed at the inbox. The desired counts behind it converge as ever. Played with an
unrestricted credential against a real nats-server and the real actuator, on kube-sim."""

from __future__ import annotations

import io
from collections.abc import Iterator

import pytest

from gpuscale import natsio, subjects
from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.logging import configure
from gpuscale.natsio import NATS, ensure_stream, jetstream
from gpuscale_kubesim import KubeSim

from ..waiting import eventually
from .actuator_harness import WRITTEN, decision, publish, running_actuator, settings_for, watch_actions
from .kube_fixtures import seed

pytestmark = pytest.mark.integration

JUNK = 300  # plain messages published straight into the inbox


@pytest.fixture
def log_lines() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    configure("actuator", "info", stream=stream)
    try:
        yield stream
    finally:
        configure("actuator", "info")


async def learn_the_watch_inbox(nc: NATS) -> str:
    """What an unrestricted login can learn: the deliver subject of the watch's consumer."""
    consumers = await jetstream(nc).consumers_info(subjects.DESIRED.stream)
    (inbox,) = [c.config.deliver_subject for c in consumers if c.config.deliver_subject]
    assert inbox.startswith("_INBOX.actuator."), inbox
    return inbox


async def test_junk_in_the_watch_inbox_is_dropped_counted_and_logged_once(
    log_lines: io.StringIO, nats_server: EmbeddedNats, nats_client: NATS, kube_sim: KubeSim
) -> None:
    await seed(kube_sim, "Deployment", "bert", 2, min_replicas=1, max_replicas=5)
    js = jetstream(nats_client)
    await ensure_stream(js, "OTHER", ["other.>"], storage="memory")
    settings = settings_for(nats_server.url, kube_sim.kubeconfig_path)
    async with watch_actions(nats_client) as actions, running_actuator(settings) as actuator:
        before = decision("bert", from_=2, to=3)
        await publish(nats_client, before)
        assert (await actions.wait_for(before.id)).outcome in WRITTEN

        inbox = await learn_the_watch_inbox(nats_client)
        for i in range(JUNK):
            await nats_client.publish(inbox, f"junk-{i}".encode())
        # A reply aimed at the inbox: JetStream answers a publish to another stream there.
        await nats_client.publish("other.x", b"{}", reply=inbox)
        await natsio.flush(nats_client)

        def dropped() -> float:
            return actuator.metric("gpuscale_nats_errors_total", error="NotJSMessageError")

        await eventually(lambda: dropped() == JUNK + 1, 30, "every message that is no delivery counted")
        # ... and the tenants' desired counts behind the junk converge as ever.
        after = decision("bert", from_=3, to=4)
        await publish(nats_client, after)
        assert (await actions.wait_for(after.id)).outcome in WRITTEN
        assert actuator.metric("gpuscale_actuator_desired_updates_total") == 2
    assert int(kube_sim.get("apps/v1", "Deployment", "bert")["spec"]["replicas"]) == 4
    text = log_lines.getvalue()
    assert text.count("NotJSMessageError") == 1, "one line, not one per message"
    assert "converge_error" not in text
    assert "Traceback" not in text
