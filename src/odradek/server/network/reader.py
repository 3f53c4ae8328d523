"""Reading requests: framing, the in-flight bounds, muting.

How it works: this is the reading half of Kafka's ``SocketServer.Processor``. Bytes from
the socket go into a sans-I/O :class:`~odradek.protocol.framing.FrameDecoder` capped at
``socket.request.max.bytes``; :meth:`RequestReader.pump` hands complete frames to the
dispatcher while the connection may take more:

- fewer than ``queued.max.requests`` of its requests in flight, and less than
  ``socket.request.max.bytes`` of request bytes held by them;
- the broker's request bytes (``queued.max.request.bytes``) not exhausted; when they are,
  the reader waits on the pool, which wakes it once a response frees some;
- not muted by a client-quota throttle (KIP-219, Kafka's ``RequestChannel.throttle``):
  requests already read are served, nothing more is read or dispatched until it ends.

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

from odradek.protocol.errors import RemoteProtocolError
from odradek.protocol.framing import FrameDecoder
from odradek.server.flow_control import FlowControl
from odradek.server.network.inflight import Close, InFlightRequests

__all__ = ["RequestReader"]


class RequestReader:
    """One connection's frame decoder and read backpressure."""

    __slots__ = ("_decoder", "_dispatch", "_flow", "_limit", "_loop", "_requests",
                 "_resume_at", "_throttle_timer", "stopped")

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

    def set_dispatch(self, dispatch: Callable[[bytearray | bytes], None]) -> None:
        """Hand frames to ``dispatch`` from now on (a SASL connection's gate, until it
        authenticates, then the dispatcher itself)."""
        self._dispatch = dispatch

    def receive(self, data: bytes) -> None:
        """Bytes from the socket: buffer them, dispatch what the bounds allow."""
        try:
            self._decoder.receive_data(data)
        except RemoteProtocolError as e:
            self.refuse("invalid frame", f"invalid frame: {e}")
            return
        self.pump()

    def receive_owned(self, data: memoryview) -> None:
        """:meth:`receive` of a buffer handed over for good (the TLS transport's): the
        decoder keeps it without a copy."""
        try:
            self._decoder.receive_owned(data)
        except RemoteProtocolError as e:
            self.refuse("invalid frame", f"invalid frame: {e}")
            return
        self.pump()

    def pump(self) -> None:
        """Dispatch buffered frames while the in-flight bounds allow."""
        limit = self._limit
        requests = self._requests
        entries = requests.entries
        pool = requests.pool
        while (
            not self.stopped and len(entries) < limit and self._throttle_timer is None
            and requests.bytes < requests.max_bytes
        ):
            if pool is not None and pool.exhausted:
                pool.wait(self, self.wake)
                self._flow.pause_reading()
                return
            try:
                frame = self._decoder.next_frame()
            except RemoteProtocolError as e:
                self.refuse("invalid frame", f"invalid frame: {e}")
                return
            if frame is None:
                break
            self._dispatch(frame)
        if len(entries) >= limit or requests.bytes >= requests.max_bytes:
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
                if pool is None or not pool.exhausted:
                    flow.resume_reading()
                else:
                    pool.wait(self, self.wake)
        if self._decoder.buffered >= 4:
            self.pump()

    def may_read(self) -> bool:
        """Whether reading may resume: under the in-flight bounds, not throttled, and the
        broker's request bytes not exhausted (or else wait for them)."""
        requests = self._requests
        if (
            len(requests.entries) > self._resume_at or self._throttle_timer is not None
            or requests.bytes >= requests.max_bytes
        ):
            return False
        pool = requests.pool
        if pool is not None and pool.exhausted:
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
        """The connection is gone: stop the throttle timer and any pool wait."""
        self.stopped = True
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
