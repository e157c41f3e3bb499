"""LogThrottle: a line per key per period, the rest counted into the next line."""

from __future__ import annotations

from gpuscale.logging import LogThrottle


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_one_line_per_key_per_period_then_the_held_back_count() -> None:
    clock = FakeClock()
    throttle = LogThrottle(period_s=60.0, clock=clock)
    assert throttle.allow("batch", "undecodable") == 0
    assert [throttle.allow("batch", "undecodable") for _ in range(1999)] == [None] * 1999
    assert throttle.allow("batch", "node_mismatch") == 0  # another reason has its own line
    clock.now = 59.9
    assert throttle.allow("batch", "undecodable") is None
    clock.now = 60.0
    assert throttle.allow("batch", "undecodable") == 2000
    assert throttle.allow("batch", "undecodable") is None


def test_keys_are_bounded_even_when_a_caller_uses_sender_names() -> None:
    throttle = LogThrottle(period_s=60.0, clock=FakeClock(), limit=10)
    assert all(throttle.allow("node", str(i)) == 0 for i in range(100))
    assert len(throttle._next) <= 10
