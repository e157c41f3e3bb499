"""How often nats-auth asks the API server: remembered refusals and a backoff. Values in, values out."""

from __future__ import annotations

from gpuscale_natsauth.core import decide
from gpuscale_natsauth.core.decide import Refusal
from gpuscale_natsauth.core.restraint import ApiBackoff, RefusalMemory, token_key

REJECTED = Refusal(decide.TOKEN_REJECTED, "invalid bearer token")


def test_a_refusal_of_the_token_is_remembered_for_its_ttl() -> None:
    memory = RefusalMemory(ttl_s=10)
    key = token_key("a.b.c")
    memory.remember(key, REJECTED, now=100.0)
    assert memory.recall(key, now=109.9) == REJECTED
    assert memory.recall(key, now=110.0) is None
    assert len(memory) == 0, "forgotten once expired"


def test_refusals_that_are_not_the_tokens_fault_are_not_remembered() -> None:
    memory = RefusalMemory()
    for reason in (decide.REVIEW_FAILED, decide.TOKEN_MISSING):
        memory.remember(token_key(reason), Refusal(reason, ""), now=0.0)
        assert memory.recall(token_key(reason), now=0.0) is None


def test_the_memory_is_bounded_and_forgets_the_oldest_first() -> None:
    memory = RefusalMemory(ttl_s=100, capacity=3)
    for i in range(5):
        memory.remember(token_key(str(i)), REJECTED, now=float(i))
    assert len(memory) == 3
    assert memory.recall(token_key("0"), now=5.0) is None
    assert memory.recall(token_key("4"), now=5.0) == REJECTED


def test_the_key_is_a_digest_not_the_token() -> None:
    token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"  # noqa: S105 - a made-up token shape
    key = token_key(token)
    assert len(key) == 64
    assert token not in key
    assert key == token_key(token)
    assert key != token_key(token + "x")


def test_the_backoff_doubles_to_its_cap_and_resets_on_success() -> None:
    backoff = ApiBackoff(first_s=0.5, max_s=2.0)
    assert backoff.closed_for(0.0) == 0
    waits = []
    for now in (0.0, 10.0, 20.0, 30.0):
        backoff.failed(now)
        waits.append(backoff.closed_for(now))
    assert waits == [0.5, 1.0, 2.0, 2.0]
    assert backoff.closed_for(31.0) == 1.0
    assert backoff.closed_for(32.0) == 0
    backoff.succeeded()
    backoff.failed(40.0)
    assert backoff.closed_for(40.0) == 0.5
