"""Each login's replies come in under its own inbox, ``_INBOX.<user>``, so that
deploy/'s permissions can let each role read its own replies only. Against a real nats-server
whose user may subscribe to nothing but its own inbox."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from gpuscale.embedded_nats import EmbeddedNats
from gpuscale.metrics import ServiceMetrics
from gpuscale.natsio import connect, drain, ensure_stream, inbox_prefix, jetstream, login_user

CONFIG = """
accounts {
  A {
    jetstream: enabled
    users: [
      { user: actuator, password: pw, permissions: {
          publish: { allow: ["$JS.API.>", "t.>"] }
          subscribe: { allow: ["_INBOX.actuator.>"] } } }
    ]
  }
}
"""


@pytest.fixture
def own_inbox_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedNats]:
    server = EmbeddedNats(store_dir=str(tmp_path_factory.mktemp("nats-inbox")), config_text=CONFIG)
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_the_role_is_the_user_the_url_names() -> None:
    assert login_user(["nats://actuator:secret@nats:4222"]) == "actuator"
    assert login_user(["nats://nats:4222", "nats://observer:pw@nats-1:4222"]) == "observer"
    assert login_user(["nats://nats:4222"]) is None
    assert login_user(["nats://a%2Eb:pw@nats:4222"]) == "a.b"


def test_an_inbox_prefix_is_one_token_under_the_inbox_root() -> None:
    assert inbox_prefix("actuator") == "_INBOX.actuator"
    assert inbox_prefix("a.b") == "_INBOX.a~2Eb", "a dot cannot reach into another role's inbox"
    assert inbox_prefix("*") == "_INBOX.~2A"
    assert inbox_prefix("") == "_INBOX.anonymous"


async def test_jetstream_answers_reach_a_login_that_may_read_only_its_own_inbox(
    own_inbox_nats: EmbeddedNats,
) -> None:
    url = f"nats://actuator:pw@127.0.0.1:{own_inbox_nats.port}"
    metrics = ServiceMetrics("actuator")
    nc = await connect([url], metrics, name="inbox-test", reconnect_wait_s=0.1)
    try:
        js = jetstream(nc)
        await ensure_stream(js, "T", ["t.>"], storage="memory")
        ack = await js.publish("t.x", b"1")
        assert (ack.stream, ack.seq) == ("T", 1)
        pull = await js.pull_subscribe("t.>", durable="d", stream="T")
        (msg,) = await pull.fetch(1, timeout=5)
        assert msg.data == b"1"
        assert metrics.registry.get_sample_value("gpuscale_nats_errors_total", {"error": "Error"}) is None
    finally:
        await drain(nc)
