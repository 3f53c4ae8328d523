"""A connection's requests in flight: received, in their handlers, waiting to be answered.

How it works: this is the per-connection part of Kafka's ``RequestChannel``. The
dispatcher pushes one :class:`InFlight` entry per request, in arrival order, holding the
handler's future; the response writer pops them in that same order, so responses leave in
the order the requests came in whatever order the handlers finish. What a handler's
future yields for the writer is an :data:`Outcome`: nothing (Produce acks=0), a complete
frame, a size prefix plus a :class:`~odradek.protocol.send.Send`, or a :class:`Close`.

:class:`InFlightRequests` also counts what the entries hold, for backpressure: their
number against ``queued.max.requests``, their frame bytes against
``socket.request.max.bytes`` (per connection) and the broker's
:class:`~odradek.server.flow_control.RequestMemoryPool` (``queued.max.request.bytes``).

With request metrics on, each entry is a :class:`TimedInFlight`, which carries the
request's timestamps (Kafka's ``RequestChannel.Metrics``) on the object the writer pops
anyway: no other object is made, pooled or touched per request.
"""

from __future__ import annotations

import asyncio
import collections
import logging

from odradek.protocol.send import Send
from odradek.server.flow_control import RequestMemoryPool

__all__ = ["Close", "InFlight", "InFlightRequests", "Outcome", "TimedInFlight"]


class Close:
    """Outcome of a request whose only correct answer is closing the connection."""

    __slots__ = ("cause", "level", "reason")

    def __init__(
        self, reason: str, level: int = logging.WARNING, cause: str | None = None
    ) -> None:
        self.reason = reason
        self.level = level
        # A rejection of the peer's input: logged through the server's RejectionLog.
        self.cause = cause


# What a handler task produces for the writer: nothing, a complete frame, a prefix plus a
# Send, or a reason to close.
Outcome = None | bytes | tuple[bytes, Send] | Close


class InFlight:
    """A request in the connection's queue, answered in order by the writer."""

    __slots__ = ("size", "task")

    def __init__(self, task: asyncio.Future[Outcome] | None, size: int = 0) -> None:
        # None only until the dispatcher has started the handler (a timed entry is made
        # first)
        self.task: asyncio.Future[Outcome] = task  # type: ignore[assignment]
        self.size = size  # frame bytes held until the response is written


class TimedInFlight(InFlight):
    """With request metrics: the request's type and times (``time.monotonic_ns()``):
    received (its frame complete), its handler's start (after earlier requests it had
    to wait for), first wait (0 if it never waited) and end; and the error code it
    answered, 0 for none. (The context's fields are copied: a NamedTuple's field is a
    descriptor the interpreter does not specialize, a slot is.)"""

    __slots__ = ("api_key", "api_version", "done", "error", "received", "started",
                 "suspended")

    def __init__(self, size: int, api_key: int, api_version: int, received: int) -> None:
        # (not through super().__init__: one call fewer, on every request)
        self.task = None  # type: ignore[assignment]
        self.size = size
        self.api_key = api_key
        self.api_version = api_version
        self.received = received
        self.started = self.suspended = self.done = self.error = 0


class InFlightRequests:
    """The queue of one connection's requests, and what they hold.

    ``entries`` is read directly by the reader (its length) and the writer (its head);
    :meth:`push` adds a request, counts its bytes and wakes the writer; on their hot
    paths the dispatcher pushes and the writer pops entries and releases their bytes
    (``bytes`` and the pool) themselves. The writer waits on ``wakeup`` only after it
    found ``entries`` empty, so the dispatcher sets it only for a request that finds the
    queue empty."""

    __slots__ = ("bytes", "entries", "max_bytes", "pool", "wakeup")

    def __init__(self, max_bytes: int, pool: RequestMemoryPool | None) -> None:
        self.entries: collections.deque[InFlight] = collections.deque()
        self.bytes = 0  # frame bytes of the entries, against max_bytes
        self.max_bytes = max_bytes  # socket.request.max.bytes
        self.pool = pool  # the broker's queued.max.request.bytes; None: unbounded
        self.wakeup = asyncio.Event()  # set by a push to an empty queue: the writer waits

    def __len__(self) -> int:
        return len(self.entries)

    def push(self, entry: InFlight) -> None:
        self.bytes += entry.size
        self.entries.append(entry)
        self.wakeup.set()

    def push_done(self, loop: asyncio.AbstractEventLoop, outcome: Outcome) -> None:
        """Queue an answer known already (no handler runs): a rejected frame's close."""
        done: asyncio.Future[Outcome] = loop.create_future()
        done.set_result(outcome)
        self.push(InFlight(done))

    def clear(self, owner: object) -> None:
        """The connection is gone: forget its entries and free what they held."""
        if self.pool is not None:
            self.pool.forget(owner)
        self.bytes = 0
        self.entries.clear()
