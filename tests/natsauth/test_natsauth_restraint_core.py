"""How often nats-auth asks the API server: remembered reviews, a rate and a backoff. Values in, values out."""

from __future__ import annotations

from gpuscale_natsauth.core import decide
from gpuscale_natsauth.core.decide import Refusal
from gpuscale_natsauth.core.restraint import Admitted, ApiBackoff, ReviewMemory, TokenBucket, token_key

REJECTED = Refusal(decide.TOKEN_REJECTED, "invalid bearer token")
LET_IN = Admitted("gpu-node-1", "gpuscale-collector-x7k2p")


def test_a_refusal_of_the_token_is_remembered_for_its_ttl() -> None:
    memory = ReviewMemory(refusal_ttl_s=10)
    key = token_key("a.b.c")
    memory.remember(key, REJECTED, now=100.0, valid_for_s=3600)
    assert memory.recall(key, now=109.9) == REJECTED
    assert memory.recall(key, now=110.0) is None
    assert len(memory) == 0, "forgotten once expired"


def test_refusals_that_are_not_the_tokens_fault_are_not_remembered() -> None:
    memory = ReviewMemory()
    for reason in (decide.REVIEW_FAILED, decide.TOKEN_MISSING, decide.RATE_LIMITED, decide.TOKEN_MALFORMED):
        memory.remember(token_key(reason), Refusal(reason, ""), now=0.0, valid_for_s=3600)
        assert memory.recall(token_key(reason), now=0.0) is None


def test_a_grant_is_remembered_for_its_ttl_and_never_past_the_tokens_expiry() -> None:
    memory = ReviewMemory(grant_ttl_s=60)
    memory.remember(token_key("long"), LET_IN, now=0.0, valid_for_s=3600)
    memory.remember(token_key("short"), LET_IN, now=0.0, valid_for_s=20)
    memory.remember(token_key("expired"), LET_IN, now=0.0, valid_for_s=0)
    assert memory.recall(token_key("long"), now=59.9) == LET_IN
    assert memory.recall(token_key("long"), now=60.0) is None
    assert memory.recall(token_key("short"), now=19.9) == LET_IN
    assert memory.recall(token_key("short"), now=20.0) is None
    assert memory.recall(token_key("expired"), now=0.0) is None


def test_the_memory_is_bounded_and_forgets_the_oldest_first() -> None:
    memory = ReviewMemory(refusal_ttl_s=100, capacity=3)
    for i in range(5):
        memory.remember(token_key(str(i)), REJECTED, now=float(i), valid_for_s=3600)
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


def test_the_bucket_lets_a_burst_through_then_its_rate() -> None:
    bucket = TokenBucket(rate_per_s=2.0, burst=3)
    assert [bucket.take(0.0) for _ in range(4)] == [True, True, True, False]
    assert bucket.next_in() == 0.5
    assert bucket.take(0.25) is False
    assert bucket.take(0.5) is True
    # A thousand asks in ten seconds get the burst and the rate, no more.
    granted = sum(bucket.take(1.0 + i / 100) for i in range(1000))
    assert granted <= 3 + 2 * 10 + 1


def test_a_clock_that_steps_back_grants_nothing_extra() -> None:
    bucket = TokenBucket(rate_per_s=1.0, burst=1)
    assert bucket.take(100.0) is True
    assert bucket.take(50.0) is False
    assert bucket.take(100.5) is False
    assert bucket.take(101.0) is True


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
