"""Whether a message the decisions fetch returned is a delivery of the actuator's consumer. Pure.

The fetch reads whatever reaches the actuator's inbox. Deploy/'s permissions
let no other login publish there, but a reply can still be aimed at it (a
JetStream publish or API request whose reply subject names the inbox), and a
permission gone wrong must not turn into a decision. A delivery carries the
JetStream ack subject of the decisions stream and the actuator's durable, and
a decisions subject; anything else is ignored (there is nothing to ack).
"""

from __future__ import annotations

from typing import Final

from gpuscale import subjects

NOT_JETSTREAM: Final = "not_jetstream"  # no ack subject: published or replied into the inbox
OTHER_CONSUMER: Final = "other_consumer"  # a JetStream ack subject of another stream or consumer
NOT_A_DECISION_SUBJECT: Final = "not_a_decision_subject"
REASONS: Final = (NOT_JETSTREAM, OTHER_CONSUMER, NOT_A_DECISION_SUBJECT)

_DECISIONS_PREFIX: Final = subjects.DECISIONS_ALL.removesuffix(">")


def not_a_delivery(subject: str, reply: str) -> str | None:
    """None for a delivery of the decisions consumer, else why it is not one (one of :data:`REASONS`)."""
    tokens = reply.split(".")
    if tokens[:2] != ["$JS", "ACK"]:
        return NOT_JETSTREAM
    # $JS.ACK.<stream>.<consumer>.<5 numbers>, or with a domain and an account hash first
    # (<domain>.<account>.<stream>.<consumer>.<5 numbers>.<token>) from newer servers.
    if len(tokens) == 9:
        stream, consumer = tokens[2], tokens[3]
    elif len(tokens) >= 11:
        stream, consumer = tokens[4], tokens[5]
    else:
        return NOT_JETSTREAM
    if (stream, consumer) != (subjects.DECISIONS_STREAM, subjects.ACTUATOR_DURABLE):
        return OTHER_CONSUMER
    if not subject.startswith(_DECISIONS_PREFIX):
        return NOT_A_DECISION_SUBJECT
    return None
