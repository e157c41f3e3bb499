"""How often nats-auth asks the Kubernetes API. Pure: ``now`` is a parameter.

Anyone may ask for a login at will: remembered outcomes, a token bucket and a backoff keep
that from becoming a storm of TokenReviews."""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from .decide import RATE_LIMITED, REVIEW_FAILED, TOKEN_MALFORMED, TOKEN_MISSING, Refusal

# Refusals that say nothing a review found about the token: never remembered.
NOT_THE_TOKENS_FAULT: Final = frozenset({REVIEW_FAILED, TOKEN_MISSING, RATE_LIMITED, TOKEN_MALFORMED})


def token_key(token: str) -> str:
    """A digest that names a token in memory without holding it."""
    return hashlib.sha256(token.encode("utf-8", errors="replace")).hexdigest()


@dataclass(frozen=True)
class Admitted:
    """A review that let a collector pod in: enough to grant it again without asking."""

    node: str
    pod: str


@dataclass
class ReviewMemory:
    refusal_ttl_s: float = 10.0
    grant_ttl_s: float = 60.0
    capacity: int = 10_000
    _entries: OrderedDict[str, tuple[float, Refusal | Admitted]] = field(default_factory=OrderedDict)

    def recall(self, key: str, now: float) -> Refusal | Admitted | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        until, outcome = entry
        if now >= until:
            del self._entries[key]
            return None
        return outcome

    def remember(self, key: str, outcome: Refusal | Admitted, now: float, *, valid_for_s: float) -> None:
        """``valid_for_s``: how long the token itself has left; no grant outlives it."""
        if isinstance(outcome, Refusal):
            if outcome.reason in NOT_THE_TOKENS_FAULT:
                return
            ttl = self.refusal_ttl_s  # a refused token never turns valid: its expiry does not matter
        else:
            ttl = min(self.grant_ttl_s, valid_for_s)
        if ttl <= 0:
            return
        self._entries[key] = (now + ttl, outcome)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:  # bounded: a flood of new tokens cannot grow memory
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


@dataclass
class TokenBucket:
    """At most ``burst`` at once and ``rate_per_s`` on average."""

    rate_per_s: float
    burst: int
    _tokens: float = -1.0  # full at the first take
    _at: float = 0.0

    def take(self, now: float) -> bool:
        if self._tokens < 0:
            self._tokens, self._at = float(self.burst), now
        self._tokens = min(float(self.burst), self._tokens + max(0.0, now - self._at) * self.rate_per_s)
        self._at = max(self._at, now)
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def next_in(self) -> float:
        """Seconds until the next take succeeds (as of the last take)."""
        return 0.0 if self._tokens >= 1.0 else (1.0 - self._tokens) / self.rate_per_s


@dataclass
class ApiBackoff:
    first_s: float = 0.5
    max_s: float = 8.0
    _delay_s: float = 0.0
    _until: float = 0.0

    def closed_for(self, now: float) -> float:
        """Seconds until the API server may be asked again (0: now)."""
        return max(0.0, self._until - now)

    def failed(self, now: float) -> None:
        self._delay_s = min(self.max_s, max(self.first_s, self._delay_s * 2))
        self._until = now + self._delay_s

    def succeeded(self) -> None:
        self._delay_s = 0.0
        self._until = 0.0
