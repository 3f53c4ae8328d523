"""Delayed operations completed by events, never by polling (Kafka's DelayedOperationPurgatory).

How it works: an operation that cannot finish yet (a Fetch waiting for ``min_bytes``, later
an acks=all Produce waiting for the ISR) is parked under the keys it watches (topic
partitions) with a timeout. Whoever changes a key (an append moves a log end offset) calls
:meth:`Purgatory.notify` with the key and the bytes added; each watching operation adds
them up and completes as soon as its condition holds. The timeout completes it otherwise.
The number of parked operations is bounded; past the bound new operations complete at once.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field

DEFAULT_MAX_PARKED = 100_000


@dataclass(eq=False, slots=True)
class DelayedOperation:
    """Completes when ``accumulated`` reaches ``threshold`` or on timeout."""

    keys: tuple[Hashable, ...]
    threshold: int
    accumulated: int = 0
    done: asyncio.Event = field(default_factory=asyncio.Event)

    def add(self, nbytes: int) -> None:
        self.accumulated += nbytes
        if self.accumulated >= self.threshold:
            self.done.set()

    def force(self) -> None:
        self.done.set()


class Purgatory:
    def __init__(self, max_parked: int = DEFAULT_MAX_PARKED) -> None:
        self._watchers: dict[Hashable, set[DelayedOperation]] = {}
        self.parked = 0
        self.max_parked = max_parked

    async def wait(
        self, keys: Iterable[Hashable], threshold: int, accumulated: int, timeout_s: float
    ) -> bool:
        """Park until ``threshold`` bytes arrived on ``keys`` or ``timeout_s`` passed.
        Returns True when completed by data, False on timeout."""
        op = DelayedOperation(tuple(keys), threshold, accumulated)
        if op.accumulated >= threshold or timeout_s <= 0 or self.parked >= self.max_parked:
            return op.accumulated >= threshold
        for key in op.keys:
            self._watchers.setdefault(key, set()).add(op)
        self.parked += 1
        try:
            await asyncio.wait_for(op.done.wait(), timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            self.parked -= 1
            for key in op.keys:
                watchers = self._watchers.get(key)
                if watchers is not None:
                    watchers.discard(op)
                    if not watchers:
                        del self._watchers[key]

    def notify(self, key: Hashable, nbytes: int) -> None:
        watchers = self._watchers.get(key)
        if watchers:  # called on every append: nothing to copy when nobody waits
            for op in list(watchers):
                op.add(nbytes)

    def wake_all(self, key: Hashable) -> None:
        """Complete every operation on ``key`` (e.g. its partition was deleted)."""
        for op in list(self._watchers.get(key, ())):
            op.force()
