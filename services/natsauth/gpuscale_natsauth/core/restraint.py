"""How often nats-auth asks the Kubernetes API. Pure: ``now`` is a parameter (monotonic seconds).

A refused collector retries its login about twice a second (nats-py's
reconnect loop), and after a NATS restart every collector logs in at once.
Two restraints keep that from becoming a storm of TokenReviews:

- :class:`RefusalMemory`: a refusal that is the token's fault is remembered
  for a while under a digest of the token (never the token), so a collector
  retrying a bad token costs one review per ``ttl_s``. Grants are never
  remembered: every login of a valid token is reviewed, so a deleted pod's
  token stops working at once.
- :class:`ApiBackoff`: after the API server fails a review, nats-auth asks it
  again only after a pause that doubles up to ``max_s`` (refusing meanwhile),
  so a struggling API server is not hammered by every node.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from .decide import REVIEW_FAILED, TOKEN_MISSING, Refusal

# Refusals that say nothing about the token: never remembered.
NOT_THE_TOKENS_FAULT: Final = frozenset({REVIEW_FAILED, TOKEN_MISSING})


def token_key(token: str) -> str:
    """A digest that names a token in memory without holding it."""
    return hashlib.sha256(token.encode("utf-8", errors="replace")).hexdigest()


@dataclass
class RefusalMemory:
    ttl_s: float = 10.0
    capacity: int = 10_000
    _entries: OrderedDict[str, tuple[float, Refusal]] = field(default_factory=OrderedDict)

    def recall(self, key: str, now: float) -> Refusal | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        until, refusal = entry
        if now >= until:
            del self._entries[key]
            return None
        return refusal

    def remember(self, key: str, refusal: Refusal, now: float) -> None:
        if refusal.reason in NOT_THE_TOKENS_FAULT:
            return
        self._entries[key] = (now + self.ttl_s, refusal)
        self._entries.move_to_end(key)
        while len(self._entries) > self.capacity:  # bounded: a flood of new tokens cannot grow memory
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)


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
