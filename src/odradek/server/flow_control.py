"""Per-connection flow control: read backpressure and write drain.

Follows Kafka's ``SocketServer.Processor`` muting and ``queued.max.requests`` (the bound of
``RequestChannel``), reshaped after uvicorn's flow-control module:

- *Read side.* A connection stops reading from its socket while ``queued.max.requests``
  of its requests are in flight (received, response not yet written), and resumes when
  one completes. Frames already received but not yet dispatched stay in the frame
  decoder, so the bound is exact.
- *Write side.* asyncio calls ``pause_writing`` when the transport's buffer passes its
  high-water mark; the response writer then awaits :meth:`FlowControl.drain` before
  writing more, so a slow reader cannot make us buffer unbounded responses.
"""

from __future__ import annotations

import asyncio

__all__ = ["FlowControl"]


class FlowControl:
    """Tracks why reading is paused and whether writing may proceed."""

    __slots__ = ("_read_paused", "_transport", "_writable")

    def __init__(self, transport: asyncio.Transport) -> None:
        self._transport = transport
        self._read_paused = False
        self._writable = asyncio.Event()
        self._writable.set()

    @property
    def read_paused(self) -> bool:
        return self._read_paused

    def pause_reading(self) -> None:
        if not self._read_paused:
            self._read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self._read_paused:
            self._read_paused = False
            if not self._transport.is_closing():
                self._transport.resume_reading()

    def reapply(self) -> None:
        """Re-assert the read state (``loop.sendfile`` toggles reading behind our back)."""
        if self._transport.is_closing():
            return
        if self._read_paused:
            self._transport.pause_reading()
        else:
            self._transport.resume_reading()

    # asyncio.Protocol write flow-control callbacks are forwarded here.
    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    @property
    def writable(self) -> bool:
        return self._writable.is_set()

    async def drain(self) -> None:
        """Wait until the transport's write buffer is below its low-water mark."""
        if not self._writable.is_set():
            await self._writable.wait()

    def release(self) -> None:
        """Wake any writer waiting on :meth:`drain` (the connection is going away)."""
        self._writable.set()
