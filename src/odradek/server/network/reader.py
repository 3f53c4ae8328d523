"""Reading requests: framing, the in-flight bounds, the memory pool, muting.

How it works: this is the reading half of Kafka's ``SocketServer.Processor``. Bytes from
the socket go into a sans-I/O :class:`~odradek.protocol.framing.FrameDecoder` capped at the
connection's maximum frame size: ``socket.request.max.bytes``, or on a SASL listener
``sasl.server.max.receive.size`` until the client authenticates (a larger size prefix
closes the connection at once, before any of the frame is buffered: Kafka's fix of
CVE-2022-34917; such a connection reads 8 KiB at a time meanwhile, see
:meth:`~odradek.server.network.connection.KafkaConnection.limit_reads`).
:meth:`RequestReader.pump` hands complete frames to the dispatcher while the connection
may take more:

- fewer than ``queued.max.requests`` of its requests in flight, and less than
  ``socket.request.max.bytes`` of request bytes held by them;
- not muted by a client-quota throttle (KIP-219, Kafka's ``RequestChannel.throttle``):
  requests already read are served, nothing more is read or dispatched until it ends.

and charges the broker's request memory pool (``queued.max.request.bytes``, see
:mod:`odradek.server.flow_control`) for the frame still being received: its announced
size, once its prefix is in, as Kafka's ``NetworkReceive`` allocates from the pool. While
the pool is used up, a connection whose next frame is not charged already neither
dispatches it nor reads on: it waits on the pool, which wakes it once a received frame or
a finished Produce frees some. When a charged frame is complete its charge ends; the
dispatcher charges a Produce's bytes again while its handler runs, nothing else (see
:mod:`odradek.server.flow_control`). A frame that arrives whole within one read is not
charged here: the common case costs a comparison.

When it may not, the socket stops being read (see :mod:`odradek.server.flow_control`);
frames already buffered stay in the decoder, so the bounds are exact. Reading resumes at
half of ``queued.max.requests`` (hysteresis: a client that keeps the pipe full does not
cost a pause/resume pair per response); the writer calls :meth:`response_written` after
every response.

A frame that cannot be served (:meth:`refuse`: invalid framing, a malformed header or
body, an unknown API key, an unsupported version) stops reading for good: the refusal is
queued behind the requests already received, so each of those is answered before the
connection closes, as Kafka, which reads one request at a time, would have answered them
(an earlier Produce is never applied and left unanswered, which made clients retry it
into a duplicate).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from odradek.protocol.errors import FrameTooLargeError, RemoteProtocolError
from odradek.protocol.framing import FrameDecoder
from odradek.server.flow_control import FlowControl
from odradek.server.network.inflight import Close, InFlightRequests

__all__ = ["RequestReader"]


class RequestReader:
    """One connection's frame decoder and read backpressure."""

    __slots__ = ("_charged", "_decoder", "_dispatch", "_flow", "_limit", "_loop",
                 "_requests", "_resume_at", "_throttle_timer", "stopped", "too_large")

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        flow: FlowControl,
        requests: InFlightRequests,
        dispatch: Callable[[bytearray | bytes], None],
        max_frame_bytes: int,
        queued_max_requests: int,
    ) -> None:
        self._loop = loop
        self._flow = flow
        self._requests = requests
        self._dispatch = dispatch
        self._decoder = FrameDecoder(max_frame_bytes)
        self._limit = queued_max_requests
        self._resume_at = queued_max_requests // 2
        # Client quota throttle (KIP-219): reading is muted until this timer fires.
        self._throttle_timer: asyncio.TimerHandle | None = None
        # Nothing more is read or dispatched: the connection is closing or draining for
        # shutdown, or a frame was refused.
        self.stopped = False
        # Bytes charged to the pool for the frame being received (0: none).
        self._charged = 0
        # Called, instead of the plain refusal, with a size prefix above the maximum (a
        # SASL connection before authentication: a failed authentication).
        self.too_large: Callable[[int], None] | None = None

    @property
    def max_frame_size(self) -> int:
        return self._decoder.max_frame_size

    @max_frame_size.setter
    def max_frame_size(self, value: int) -> None:
        """The largest frame from now on (raised once a SASL connection authenticates)."""
        self._decoder.max_frame_size = value

    def set_dispatch(self, dispatch: Callable[[bytearray | bytes], None]) -> None:
        """Hand frames to ``dispatch`` from now on (a SASL connection's gate, until it
        authenticates, then the dispatcher itself)."""
        self._dispatch = dispatch

    def receive(self, data: bytes) -> None:
        """Bytes from the socket: buffer them, dispatch what the bounds allow."""
        try:
            self._decoder.receive_data(data)
        except RemoteProtocolError as e:
            self._invalid(e)
            return
        self.pump()

    def receive_owned(self, data: memoryview) -> None:
        """:meth:`receive` of a buffer handed over for good (the TLS transport's): the
        decoder keeps it without a copy."""
        try:
            self._decoder.receive_owned(data)
        except RemoteProtocolError as e:
            self._invalid(e)
            return
        self.pump()

    def _invalid(self, e: RemoteProtocolError) -> None:
        # Every frame before the invalid one is dispatched: what is buffered is the
        # invalid frame's, never read; drop it now rather than when the connection goes.
        self._decoder = FrameDecoder(self._decoder.max_frame_size)
        too_large = self.too_large
        if too_large is not None and isinstance(e, FrameTooLargeError):
            too_large(e.size)  # refuses the connection its own way
        self.refuse("invalid frame", f"invalid frame: {e}")  # (if that did not)

    def pump(self) -> None:
        """Dispatch buffered frames while the in-flight bounds allow; charge the pool for
        the frame still being received, or stop reading until it can be."""
        limit = self._limit
        requests = self._requests
        entries = requests.entries
        decoder = self._decoder
        pool = requests.pool
        while (
            not self.stopped and len(entries) < limit and self._throttle_timer is None
            and requests.bytes < requests.max_bytes
        ):
            if pool is not None and not self._charged and pool.used >= pool.limit:
                # the next frame cannot be charged: wait (Kafka mutes the channel)
                pool.wait(self, self.wake)
                self._flow.pause_reading()
                return
            try:
                frame = decoder.next_frame()
            except RemoteProtocolError as e:
                self._invalid(e)
                return
            if frame is None:
                break
            if self._charged:  # received: its charge ends (a Produce's goes on while
                assert pool is not None  # its handler runs: the dispatcher's)
                pool.used -= self._charged
                self._charged = 0
                if pool.waiting:  # woken from the loop, not inside this pump
                    self._loop.call_soon(pool.wake_waiting)
            self._dispatch(frame)
        if len(entries) >= limit or requests.bytes >= requests.max_bytes:
            self._flow.pause_reading()
        if (pool is not None and not self._charged and not self.stopped
                and (decoder.buffered or pool.used >= pool.limit)):
            # Charge the pool for the frame being received, once its size is known; stop
            # reading while that cannot be done, or (no frame begun) while the pool is
            # used up. Inline, with the pool's non-strict ``try_allocate`` (the charge that
            # crosses the bound succeeds): a frame split across reads, a third to a half
            # of a pipelining client's requests, comes here.
            if pool.used < pool.limit:
                size = decoder.next_size
                if size > 0:
                    pool.used += size
                    self._charged = size
                return
            pool.wait(self, self.wake)
            self._flow.pause_reading()

    def response_written(self) -> None:
        """A response left: resume reading if the bounds allow, and dispatch the frames
        already buffered as soon as a slot frees."""
        if self.stopped or self._throttle_timer is not None:
            return
        flow = self._flow
        if flow.read_paused:
            # may_read, inline: this runs after every response
            requests = self._requests
            if (len(requests.entries) <= self._resume_at
                    and requests.bytes < requests.max_bytes):
                pool = requests.pool
                if pool is None or self._charged or pool.used < pool.limit:
                    flow.resume_reading()
                else:
                    pool.wait(self, self.wake)
        if self._decoder.buffered >= 4:
            self.pump()

    def may_read(self) -> bool:
        """Whether reading may resume: under the in-flight bounds, not throttled, and the
        broker's request bytes not used up unless this connection's frame is charged
        already (or else wait for them)."""
        requests = self._requests
        if (
            len(requests.entries) > self._resume_at or self._throttle_timer is not None
            or requests.bytes >= requests.max_bytes
        ):
            return False
        pool = requests.pool
        if pool is not None and not self._charged and pool.used >= pool.limit:
            pool.wait(self, self.wake)
            return False
        return True

    def wake(self) -> None:
        """A reason to stop reading went away (throttle over, pool bytes freed)."""
        if self.stopped:
            return
        if self._flow.read_paused and self.may_read():
            self._flow.resume_reading()
        self.pump()

    def mute(self, throttle_ms: int) -> None:
        """Read and dispatch nothing more for ``throttle_ms`` (KIP-219; a later, longer
        throttle extends it)."""
        until = self._loop.time() + throttle_ms / 1000
        timer = self._throttle_timer
        if timer is not None:
            if timer.when() >= until:
                return
            timer.cancel()
        self._throttle_timer = self._loop.call_at(until, self._unmute)
        self._flow.pause_reading()

    def _unmute(self) -> None:
        self._throttle_timer = None
        self.wake()

    def refuse(self, cause: str, reason: str) -> None:
        """A frame that cannot be served: stop reading, answer every request received
        before it, then close (the writer closes when it reaches the refusal)."""
        if self.stopped:
            return
        self.stopped = True
        self._flow.pause_reading()
        self._requests.push_done(self._loop, Close(reason, logging.INFO, cause))

    def refuse_after_current(self, cause: str, reason: str) -> None:
        """:meth:`refuse`, from inside the dispatch of a request (a handler started
        eagerly): the close is queued behind that request, whose answer is sent first."""
        if self.stopped:
            return
        self.stopped = True
        self._flow.pause_reading()
        self._loop.call_soon(self._requests.push_done, self._loop,
                             Close(reason, logging.INFO, cause))

    def release(self) -> None:
        """The connection is gone: stop the throttle timer and any pool wait, and give
        back the charge of the frame it was receiving."""
        self.stopped = True
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        pool = self._requests.pool
        if pool is not None:
            pool.forget(self)
            if self._charged:
                charged, self._charged = self._charged, 0
                pool.release(charged)
