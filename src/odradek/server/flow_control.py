"""Per-connection flow control: read backpressure and write drain.

Follows Kafka's ``SocketServer.Processor`` muting and ``queued.max.requests`` (the bound of
``RequestChannel``), reshaped after uvicorn's flow-control module:

- *Read side.* A connection stops reading from its socket while ``queued.max.requests``
  of its requests are in flight (received, response not yet written), and resumes when
  one completes. Frames already received but not yet dispatched stay in the frame
  decoder, so the bound is exact.
- *Bytes held.* ``queued.max.request.bytes`` bounds the bytes of the requests held by the
  whole broker, being received or in flight (Kafka's ``MemoryPool`` behind its
  Processors; Kafka's default -1 is unbounded, Odradek's is 512 MiB, see
  docs/operations.md). A frame still being received is charged its announced size as
  soon as its size prefix is in and its body is not, as Kafka's ``NetworkReceive``
  allocates its buffer from the pool; once received, a frame's charge ends, except a
  Produce's, which is charged again while its handler runs (its records are what it
  holds: Kafka's ``requiresDelayedAllocation``). Nothing is charged while a request waits
  behind others or parks in the purgatory: a charge held until the response was written
  let one client with a parked Fetch (``max_wait_ms`` is the client's) and a pipeline
  behind it hold the pool, and every connection with it. When the
  :class:`RequestMemoryPool` is used up, a connection whose next frame cannot be charged
  stops reading (Kafka mutes the channel) until a frame or a Produce frees some, then the
  connections that waited are woken in turn. As with
  Kafka's (non-strict) pool, the frame that crosses the bound is still taken, so a frame
  up to ``socket.request.max.bytes`` always fits in the end. The charge is bookkeeping:
  what is buffered is only ever what was received. Each connection also stops reading
  while its own requests in flight hold ``socket.request.max.bytes`` (the largest one
  request may be), so that one client cannot take the whole pool with a pipeline of
  large requests.
- *Write side.* asyncio calls ``pause_writing`` when the transport's buffer passes its
  high-water mark; the response writer then awaits :meth:`FlowControl.drain` before
  writing more, so a slow reader cannot make us buffer unbounded responses.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["FlowControl", "RequestMemoryPool"]


class FlowControl:
    """Tracks why reading is paused and whether writing may proceed.

    ``read_paused`` and ``writable`` are plain attributes, read by the reader and the
    writer after every response (a property was a call each); only this class sets
    them."""

    __slots__ = ("_transport", "_writable", "read_paused", "writable")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self.read_paused = False
        self.writable = True  # mirrors _writable, which drain() waits on
        self._writable = asyncio.Event()
        self._writable.set()

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            if not self._transport.is_closing():
                self._transport.resume_reading()

    def reapply(self) -> None:
        """Re-assert the read state (``loop.sendfile`` toggles reading behind our back)."""
        if self._transport.is_closing():
            return
        if self.read_paused:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

    # asyncio.Protocol write flow-control callbacks are forwarded here.
    def pause_writing(self) -> None:
        self.writable = False
        self._writable.clear()

    def resume_writing(self) -> None:
        self.writable = True
        self._writable.set()

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its low-water mark."""
        if not self.writable:
            await self._writable.wait()

    def release(self) -> None:
        """Wake any writer waiting on :meth:`drain` (the connection is going away)."""
        self.writable = True
        self._writable.set()


class RequestMemoryPool:
    """Bytes of requests held broker-wide, against ``queued.max.request.bytes``.

    ``used`` and ``waiting`` are plain attributes: the dispatcher adds a request's bytes to
    ``used`` and the writer subtracts them (then wakes the waiting connections if any)
    inline, on every request."""

    __slots__ = ("limit", "used", "waiting")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        # connections waiting for bytes, in the order they began to wait
        self.waiting: dict[object, Callable[[], None]] = {}

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    @property
    def available(self) -> int:
        """Bytes left before the bound (negative once a frame crossed it), as Kafka's
        ``MemoryPool.availableMemory``."""
        return self.limit - self.used

    def try_allocate(self, size: int) -> bool:
        """Charge ``size`` bytes if any are left (Kafka's non-strict ``tryAllocate``: the
        allocation that crosses the bound succeeds)."""
        if self.used >= self.limit:
            return False
        self.used += size
        return True

    def take(self, size: int) -> None:
        self.used += size

    def release(self, size: int) -> None:
        self.used -= size
        if self.waiting:
            self.wake_waiting()

    def wake_waiting(self) -> None:
        """Wake the connections that waited, in turn, while bytes are left."""
        waiting = self.waiting
        while waiting and self.used < self.limit:
            key = next(iter(waiting))
            waiting.pop(key)()

    def wait(self, key: object, wake: Callable[[], None]) -> None:
        """Call ``wake`` once bytes are free (the connection ``key`` waits for them)."""
        self.waiting[key] = wake

    def forget(self, key: object) -> None:
        self.waiting.pop(key, None)
