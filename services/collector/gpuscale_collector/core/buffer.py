"""The bounded buffer of batches waiting for NATS (oldest dropped first)."""

from __future__ import annotations

from collections import deque
from typing import Generic, TypeVar

T = TypeVar("T")


class BoundedBuffer(Generic[T]):
    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.capacity = capacity
        self._items: deque[T] = deque()
        self.dropped = 0  # total ever dropped, for /metrics

    def __len__(self) -> int:
        return len(self._items)

    def append(self, item: T) -> int:
        """Add an item; returns how many old ones were dropped to make room."""
        self._items.append(item)
        dropped = 0
        while len(self._items) > self.capacity:
            self._items.popleft()
            dropped += 1
        self.dropped += dropped
        return dropped

    def peek(self) -> T | None:
        return self._items[0] if self._items else None

    def pop(self) -> T:
        return self._items.popleft()

    def items(self) -> list[T]:
        return list(self._items)
