"""The ordered response writer: one task per connection, responses in request order.

How it works: this is the writing half of Kafka's ``SocketServer.Processor`` (its
``processNewResponses`` and ``Send``s), with Kafka's in-order guarantee, which its
Processor gets by muting the channel until a response is sent and here comes from the
queue: :meth:`ResponseWriter.run` takes the connection's
:class:`~odradek.server.network.inflight.InFlight` entries in arrival order and writes
each answer once its handler is done, whatever order the handlers finish in.

- *Coalescing.* Answers already finished when the writer reaches them are gathered and
  handed to the transport in one write, never held while the writer waits for a
  handler, for a drain, or past :data:`COALESCE_BYTES`.
- *Sends.* A :class:`~odradek.protocol.send.Send` is written part by part
  (:meth:`ResponseWriter._write_send`): buffers as they are, file regions up to
  :data:`COPY_REGION_BYTES` copied with ``pread`` (cheaper than sendfile's
  pause-reading / wait-for-empty-buffer / resume), larger ones through
  :meth:`ResponseWriter._write_region`: zero-copy (``os.sendfile``) on plain TCP, by
  :mod:`odradek.server.network.zero_copy` on asyncio's own loop (one writer registration
  a region, Kafka's ``transferTo`` loop) or ``loop.sendfile`` elsewhere, else one copy.
  Zero-copy
  cannot cross TLS: a TLS connection gets a :class:`TlsResponseWriter` (chosen once,
  when the connection is made: the plaintext writer does no per-request check), whose
  large regions are read and written in chunks of :data:`TLS_CHUNK_BYTES`, waiting for
  the drain between them, so a 50 MB fetch holds one chunk, not the response; its
  transport's high-water mark is :data:`TLS_WRITE_BUFFER_BYTES`.
- *Drain.* When the transport's buffer passes its high-water mark the writer waits for
  it to drain (:mod:`odradek.server.flow_control`), so a slow reader cannot make the
  broker buffer unbounded responses; copied regions are handed over in slices for the
  same reason.
- *After each response* the request's bytes are released and the reader may resume
  (:meth:`~odradek.server.network.reader.RequestReader.response_written`); with request
  metrics, the request's times are recorded (Kafka's ``RequestChannel.Metrics``).
- *End.* A :class:`~odradek.server.network.inflight.Close` outcome, a cancelled handler or
  a failed write closes the connection; so does an empty queue once the connection is
  draining for shutdown or its client has closed its side.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any, Final, Protocol, cast

from odradek.protocol.send import FileRegion, Send
from odradek.server.flow_control import FlowControl
from odradek.server.network.inflight import Close, InFlightRequests, TimedInFlight
from odradek.server.network.reader import RequestReader
from odradek.server.network.zero_copy import ShortRegionError, region_sender

if TYPE_CHECKING:
    from odradek.server.broker_stats import RequestStats

__all__ = ["COALESCE_BYTES", "COPY_REGION_BYTES", "TLS_CHUNK_BYTES", "TLS_WRITE_BUFFER_BYTES",
           "ResponseWriter", "TlsResponseWriter"]

# File regions up to this size are copied with pread instead of sent with sendfile: below
# it the copy costs less than sendfile's pause-reading / wait-for-empty-buffer / resume.
COPY_REGION_BYTES: Final = 64 * 1024
# Finished responses gathered into one write stop growing here.
COALESCE_BYTES: Final = 256 * 1024
# A TLS connection reads large file regions in chunks of this size into one reused
# buffer (its transport, :mod:`odradek.server.network.tls_transport`, encrypts each at
# once), and waits for the transport to drain once more than TLS_WRITE_BUFFER_BYTES of
# encrypted records are queued (the connection sets that high-water mark). Measured
# against 64 and 256 KiB chunks and a 1 MiB queue (bench/results/tls-transport-2026-11-27.md):
# a chunk and its records stay in the CPU's cache from the read to the send.
TLS_CHUNK_BYTES: Final = 128 * 1024
TLS_WRITE_BUFFER_BYTES: Final = 256 * 1024
_Buffers = tuple[bytes | bytearray | memoryview, ...]
_Ready = list[bytes | bytearray | memoryview]
# The outcome of a cancelled handler: the request cannot be answered, nor the ones after it.
_CANCELLED: Final = Close("request handler was cancelled", logging.WARNING)


class _Connection(Protocol):
    """What the writer reads and asks of its connection."""

    closing: bool  # closed or closing: write nothing more
    draining: bool  # shutting down: close once the queue is empty
    half_closed: bool  # the client closed its side: likewise
    last_activity: float  # loop time of the last traffic, for idle expiry

    def close(self, reason: str, level: int = ..., cause: str | None = None) -> None: ...


class ResponseWriter:
    """Writes one connection's answers in request order (see the module's header)."""

    __slots__ = ("_connection", "_flow", "_loop", "_reader", "_requests", "_sender",
                 "_stats", "_transport")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        connection: _Connection,
        transport: asyncio.Transport,
        flow: FlowControl,
        requests: InFlightRequests,
        reader: RequestReader,
        stats: RequestStats | None,
    ) -> None:
        self._loop = loop
        self._connection = connection
        self._transport = transport
        self._flow = flow
        self._requests = requests
        self._reader = reader
        self._stats = stats
        # Large file regions: sent by this where it can (plain TCP on asyncio's loop)
        self._sender = region_sender(loop, transport)

    async def run(self) -> None:
        """Write responses in request order, until the connection closes."""
        connection, transport, flow = self._connection, self._transport, self._flow
        requests, reader, stats = self._requests, self._reader, self._stats
        entries = requests.entries
        ready: _Ready = []  # finished answers gathered for one write
        ready_bytes = 0
        while True:
            if not entries:
                ready_bytes = 0
                if not await self._wait_for_requests(ready):
                    return
                continue
            task = entries[0].task
            if not task.done():
                ready_bytes = await self._wait_for_handler(task, ready)
            if connection.closing:
                return
            entry = entries.popleft()
            if entry.size:  # the request's bytes are free (this connection's bound)
                requests.bytes -= entry.size
            taken = time.monotonic_ns() if stats is not None else 0
            wrote = False  # to the socket, now: else the answer is only buffered
            outcome = _CANCELLED if task.cancelled() else task.result()
            if outcome is not None:
                if isinstance(outcome, Close):
                    self._close(ready, outcome)
                    return
                connection.last_activity = self._loop.time()
                if isinstance(outcome, bytes):
                    ready.append(outcome)
                    ready_bytes += len(outcome)
                else:
                    prefix, send = outcome
                    ready.append(prefix)
                    if not send.has_file_regions:  # buffers only (Produce): gathered too
                        ready.extend(cast(_Buffers, send.parts))
                        ready_bytes += len(prefix) + send.size
                    elif await self._write_send(ready, send):  # writes ready too
                        ready_bytes, wrote = 0, True
                    else:
                        return
                if ready_bytes >= COALESCE_BYTES:
                    ready_bytes = _write_all(transport, ready)
                    wrote = True
            if stats is not None and type(entry) is TimedInFlight:
                # Inline (a call costs more): RequestChannel.Metrics' five parts as durations
                # (small ints: the fast path); an answer only buffered was sent as taken.
                started, done, first_wait = entry.started, entry.done, entry.suspended
                first_wait = first_wait or done
                stats.note(entry.api_key, entry.api_version, started - entry.received,
                           first_wait - started, done - first_wait, taken - done,
                           time.monotonic_ns() - taken if wrote else 0, entry.error)
            reader.response_written()
            if not flow.writable:
                if ready:
                    ready_bytes = _write_all(transport, ready)
                await flow.drain()

    async def _wait_for_requests(self, ready: _Ready) -> bool:
        """The queue is empty: write what is gathered, then close the connection if it is
        draining or its client has closed its side (False), else wait for the next
        request (True)."""
        if ready:
            _write_all(self._transport, ready)
        connection = self._connection
        if connection.draining or connection.half_closed:
            reason = "shutting down" if connection.draining else "client closed its side"
            connection.close(reason, logging.DEBUG)
            return False
        wakeup = self._requests.wakeup
        wakeup.clear()
        await wakeup.wait()
        return True

    async def _wait_for_handler(self, task: asyncio.Future[Any], ready: _Ready) -> int:
        """Write what is gathered, then wait for the head request's handler; 0, the bytes
        left gathered. Shielded: closing the connection cancels the writer, never the
        handler."""
        if ready:
            _write_all(self._transport, ready)
        try:
            await asyncio.shield(task)
        except asyncio.CancelledError:
            me = asyncio.current_task()
            if me is not None and me.cancelling():
                raise
        return 0

    def _close(self, ready: _Ready, outcome: Close) -> None:
        """Write what is gathered, then close the connection as ``outcome`` says."""
        _write_all(self._transport, ready)
        self._connection.close(outcome.reason, outcome.level, outcome.cause)

    async def _write_send(self, buffered: _Ready, send: Send) -> bool:
        """Write ``buffered`` (earlier responses and this one's prefix), then ``send``.

        Copied regions are handed to the transport every ``COALESCE_BYTES`` and the
        writer waits for the drain when the transport is full, so a response of a
        thousand small regions holds a bounded amount of memory, not the whole response."""
        transport, flow = self._transport, self._flow
        copied = 0
        for part in send.parts:
            if not isinstance(part, FileRegion):
                buffered.append(part)
                continue
            if part.size == 0:
                continue
            if part.size > COPY_REGION_BYTES:
                if not await self._write_region(part, buffered):
                    return False
                continue
            if not self._copy_region(part, buffered):
                return False
            copied += part.size
            if copied >= COALESCE_BYTES:
                _write_all(transport, buffered)
                copied = 0
                if not flow.writable:
                    await flow.drain()
                    if self._connection.closing:
                        return False
        _write_all(transport, buffered)
        return True

    async def _write_region(self, part: FileRegion, buffered: _Ready) -> bool:
        """Write ``buffered``, then the large region ``part``: zero-copy where the
        transport can (plain TCP), else copied (one read: TlsResponseWriter chunks it)."""
        sender = self._sender
        if sender is not None and not self._transport.get_write_buffer_size():
            # the transport's buffer is empty: the socket is ours until the region is out
            if self._transport.is_closing():
                return False
            try:
                await sender.send(buffered, part)
            except asyncio.SendfileNotAvailableError:
                buffered.clear()  # sent: the region goes after them, copied
                return self._copy_region(part, buffered)
            except ShortRegionError as e:
                self._connection.close(f"{part}: {e}", logging.ERROR)
                return False
            except OSError as e:
                self._connection.close(f"sendfile failed: {e!r}", logging.WARNING)
                return False
            buffered.clear()
            return True
        _write_all(self._transport, buffered)
        try:
            with open(part.fd, "rb", buffering=0, closefd=False) as file:
                # Native sendfile only: its offsets are explicit. asyncio's fallback
                # reads from the file position, which all dup'ed descriptors of a
                # segment share, so concurrent responses could read each other's.
                sent = await self._loop.sendfile(
                    self._transport, file, part.position, part.size, fallback=False
                )
        except (asyncio.SendfileNotAvailableError, RuntimeError):
            return self._copy_region(part, buffered)
        except OSError as e:
            self._connection.close(f"sendfile failed: {e!r}", logging.WARNING)
            return False
        finally:
            self._flow.reapply()
        if sent != part.size:
            # The size prefix promised more bytes than the file had: the stream is now
            # unframed and the connection cannot continue.
            self._connection.close(
                f"file region {part} short by {part.size - sent} bytes", logging.ERROR
            )
            return False
        return True

    def _copy_region(self, part: FileRegion, buffered: _Ready) -> bool:
        """Read ``part`` into ``buffered`` (one ``pread``)."""
        try:
            data = os.pread(part.fd, part.size, part.position)
        except OSError as e:
            self._connection.close(f"reading {part} failed: {e!r}", logging.ERROR)
            return False
        if len(data) != part.size:
            self._connection.close(
                f"file region {part} short by {part.size - len(data)} bytes", logging.ERROR
            )
            return False
        buffered.append(data)
        return True


class TlsResponseWriter(ResponseWriter):
    """The writer of a TLS connection: file regions larger than ``COPY_REGION_BYTES`` are
    read into one reused buffer and handed to the transport in chunks of
    :data:`TLS_CHUNK_BYTES`, waiting for the transport to drain (past
    :data:`TLS_WRITE_BUFFER_BYTES`) between them (no sendfile: the bytes must be
    encrypted; the TLS transport encrypts what it is given at once, so the buffer is free
    again when ``write`` returns)."""

    __slots__ = ("_chunk",)

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        connection: _Connection,
        transport: asyncio.Transport,
        flow: FlowControl,
        requests: InFlightRequests,
        reader: RequestReader,
        stats: RequestStats | None,
    ) -> None:
        super().__init__(loop, connection, transport, flow, requests, reader, stats)
        self._chunk: memoryview | None = None  # made at the first large region

    async def _write_region(self, part: FileRegion, buffered: _Ready) -> bool:
        transport, flow, connection = self._transport, self._flow, self._connection
        _write_all(transport, buffered)
        chunk = self._chunk
        if chunk is None:
            chunk = self._chunk = memoryview(bytearray(TLS_CHUNK_BYTES))
        position, left = part.position, part.size
        while left:
            want = min(left, TLS_CHUNK_BYTES)
            view = chunk[:want] if want < TLS_CHUNK_BYTES else chunk
            try:
                got = os.preadv(part.fd, (view,), position)
            except OSError as e:
                connection.close(f"reading {part} failed: {e!r}", logging.ERROR)
                return False
            if got != want:
                connection.close(f"file region {part} short by {left - got} bytes",
                                 logging.ERROR)
                return False
            transport.write(view)
            position += want
            left -= want
            if not flow.writable:
                await flow.drain()
                if connection.closing:
                    return False
        return True


def _write_all(transport: asyncio.WriteTransport, ready: _Ready) -> int:
    """Hand the gathered responses to the transport in one write, and empty the list;
    0, the bytes left gathered."""
    if len(ready) == 1:
        transport.write(ready[0])
    elif ready:
        transport.writelines(ready)
    ready.clear()
    return 0
