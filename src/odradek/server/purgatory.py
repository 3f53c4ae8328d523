"""Delayed operations completed by events, never by polling (Kafka's DelayedOperationPurgatory).

How it works: an operation that cannot finish yet is parked under the keys it watches
(topic partitions) with a timeout. Whoever changes a key calls :meth:`Purgatory.notify`
with the key and what happened; each operation watching that key checks its own condition
(:meth:`DelayedOperation.try_complete`) and completes as soon as it holds. The timeout
completes it otherwise. Two kinds are parked today, as in Kafka's ``DelayedFetch`` and
``DelayedProduce``:

- :class:`DelayedBytes`: a Fetch waiting for ``min_bytes``; each event adds the bytes
  appended (counting costs one addition: the fetch re-reads the log once it completes);
  :class:`DelayedStableBytes`, a read_committed Fetch, counts them only once its
  partition's last stable offset moved (an append into an open transaction moves the
  high watermark, not what a read_committed fetch may read: no wake-up, no spin);
- :class:`DelayedCondition`: an operation waiting for any condition the caller can
  evaluate, such as an acks=all Produce waiting for the high watermark to pass its last
  offset; each event re-evaluates it.

Nobody waits on most keys most of the time: :attr:`Purgatory.watched` is the map from a
key to its parked operations, and a caller on the append path tests ``key in watched``
before it calls :meth:`Purgatory.notify`, so an append nobody waits for costs a dict
lookup, not a call.

The number of parked operations is bounded; past the bound new operations complete at
once (a Fetch then answers with what it has; a Produce checks its condition one last time).

:meth:`Purgatory.shutdown` (the broker stopping) completes every parked operation at once,
as its timeout would, and every operation parked after it: a consumer's long poll (a
Fetch's max wait, up to minutes) is answered with what there is instead of holding the
shutdown, which otherwise waited for it as for any request in flight. Kafka's shutdown
does not wait for delayed operations either (the purgatory's reaper stops and the
requests in flight go with their connections).
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Hashable, Iterable

DEFAULT_MAX_PARKED = 100_000


class DelayedOperation(abc.ABC):
    """A parked operation; :meth:`try_complete` runs on each event of its keys."""

    __slots__ = ("done", "keys")

    def __init__(self, keys: Iterable[Hashable]) -> None:
        self.keys = tuple(keys)
        self.done = asyncio.Event()

    @abc.abstractmethod
    def try_complete(self, nbytes: int, key: Hashable | None = None) -> None:
        """An event on ``key``, one of the keys (``nbytes`` appended, 0 for other
        changes)."""

    @abc.abstractmethod
    def satisfied(self) -> bool:
        """Whether the operation's condition holds now."""

    def force(self) -> None:
        self.done.set()


class DelayedBytes(DelayedOperation):
    """Completes when ``accumulated`` reaches ``threshold`` (Kafka's DelayedFetch)."""

    __slots__ = ("accumulated", "threshold")

    def __init__(self, keys: Iterable[Hashable], threshold: int, accumulated: int = 0) -> None:
        super().__init__(keys)
        self.threshold = threshold
        self.accumulated = accumulated

    def try_complete(self, nbytes: int, key: Hashable | None = None) -> None:
        self.accumulated += nbytes
        if self.accumulated >= self.threshold:
            self.done.set()

    def satisfied(self) -> bool:
        return self.accumulated >= self.threshold


class DelayedStableBytes(DelayedBytes):
    """A read_committed Fetch: completes when ``threshold`` bytes are below the last
    stable offset (Kafka's DelayedFetch reads to the LSO under FetchTxnCommitted).

    The bytes an event reports became visible under the high watermark; while the key's
    LSO (``last_stable_offset(key)``) has not moved they sit in a transaction still open
    and a read_committed re-read finds nothing new, so they are held back. A move of the
    LSO credits the key's held bytes (all of them: some may still lie above the new LSO,
    so the fetch may complete early, at most once per LSO move, never once per append).

    The bytes already between the LSO and the high watermark when the fetch parks (an
    open transaction's data written before it came, ``unstable_bytes(key)``) are held
    from the start: the commit that makes them stable moves the high watermark by its
    marker alone, and a fetch whose ``min_bytes`` the marker does not reach would sleep
    out its max wait with the whole transaction readable (Kafka counts the bytes from
    the fetch offset to the LSO's position). So the credit never falls short of what
    became stable."""

    __slots__ = ("_held", "_lso", "_stable")

    def __init__(self, keys: Iterable[Hashable], threshold: int, accumulated: int,
                 last_stable_offset: Callable[[Hashable], int],
                 unstable_bytes: Callable[[Hashable], int] | None = None) -> None:
        super().__init__(keys, threshold, accumulated)
        self._lso = last_stable_offset
        self._stable = {key: last_stable_offset(key) for key in self.keys}
        self._held = (dict.fromkeys(self.keys, 0) if unstable_bytes is None
                      else {key: unstable_bytes(key) for key in self.keys})

    def try_complete(self, nbytes: int, key: Hashable | None = None) -> None:
        if key is None or key not in self._stable:
            super().try_complete(nbytes)
            return
        lso = self._lso(key)
        if lso == self._stable[key]:
            self._held[key] += nbytes
            return
        self._stable[key] = lso
        held, self._held[key] = self._held[key], 0
        super().try_complete(held + nbytes)


class DelayedCondition(DelayedOperation):
    """Completes when ``condition()`` holds (Kafka's DelayedProduce checks the ISR)."""

    __slots__ = ("condition",)

    def __init__(self, keys: Iterable[Hashable], condition: Callable[[], bool]) -> None:
        super().__init__(keys)
        self.condition = condition

    def try_complete(self, nbytes: int, key: Hashable | None = None) -> None:
        if self.condition():
            self.done.set()

    def satisfied(self) -> bool:
        return self.condition()


class Purgatory:
    def __init__(self, max_parked: int = DEFAULT_MAX_PARKED) -> None:
        # key -> the operations parked on it; a key leaves when its last one does, so
        # ``key in watched`` says whether notify(key) would reach anyone (read it, never
        # change it from outside)
        self.watched: dict[Hashable, set[DelayedOperation]] = {}
        # every operation parked now, keys or none (what shutdown completes)
        self._parked: set[DelayedOperation] = set()
        self.max_parked = max_parked
        self.shut_down = False

    @property
    def parked(self) -> int:
        """How many operations are parked."""
        return len(self._parked)

    async def wait(
        self, keys: Iterable[Hashable], threshold: int, accumulated: int, timeout_s: float
    ) -> bool:
        """Park until ``threshold`` bytes arrived on ``keys`` or ``timeout_s`` passed.
        Returns True when completed by data, False on timeout."""
        return await self.park(DelayedBytes(keys, threshold, accumulated), timeout_s)

    async def wait_stable(
        self, keys: Iterable[Hashable], threshold: int, accumulated: int, timeout_s: float,
        last_stable_offset: Callable[[Hashable], int],
        unstable_bytes: Callable[[Hashable], int] | None = None,
    ) -> bool:
        """:meth:`wait` for a read_committed Fetch: bytes count once below the last stable
        offset (:class:`DelayedStableBytes`)."""
        op = DelayedStableBytes(keys, threshold, accumulated, last_stable_offset,
                                unstable_bytes)
        return await self.park(op, timeout_s)

    async def wait_until(
        self, keys: Iterable[Hashable], condition: Callable[[], bool], timeout_s: float
    ) -> bool:
        """Park until ``condition()`` holds after an event on ``keys``, or ``timeout_s``
        passed. Returns whether the condition holds."""
        return await self.park(DelayedCondition(keys, condition), timeout_s)

    async def park(self, op: DelayedOperation, timeout_s: float) -> bool:
        """Park ``op`` until it completes or ``timeout_s`` passes; whether it is satisfied."""
        if (op.satisfied() or timeout_s <= 0 or len(self._parked) >= self.max_parked
                or self.shut_down):
            return op.satisfied()
        for key in op.keys:
            self.watched.setdefault(key, set()).add(op)
        self._parked.add(op)
        try:
            await asyncio.wait_for(op.done.wait(), timeout_s)
        except TimeoutError:
            pass
        finally:
            self._parked.discard(op)
            for key in op.keys:
                watchers = self.watched.get(key)
                if watchers is not None:
                    watchers.discard(op)
                    if not watchers:
                        del self.watched[key]
        return op.satisfied()

    def notify(self, key: Hashable, nbytes: int = 0) -> None:
        """Something changed on ``key``: ``nbytes`` appended, or a condition may hold."""
        watchers = self.watched.get(key)
        if watchers:  # called on every append: nothing to copy when nobody waits
            for op in list(watchers):
                op.try_complete(nbytes, key)

    def wake_all(self, key: Hashable) -> None:
        """Complete every operation on ``key`` (e.g. its partition was deleted)."""
        for op in list(self.watched.get(key, ())):
            op.force()

    def shutdown(self) -> None:
        """The broker is stopping: complete every parked operation now (each judged as at
        its timeout) and every one parked from now on at once."""
        self.shut_down = True
        for op in list(self._parked):
            op.force()

    def watching(self, key: Hashable) -> int:
        """How many parked operations watch ``key``."""
        return len(self.watched.get(key, ()))
