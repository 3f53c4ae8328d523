"""The asyncio network layer: connections, dispatch, ordered pipelining, shutdown.

Follows Kafka's ``SocketServer`` (Acceptor + Processor) and ``RequestChannel``, on one
asyncio event loop instead of threads:

1. *Accept.* :class:`KafkaServer` runs its own accept loop (Kafka's Acceptor) so that it
   can wait before accepting: for a free slot under ``max.connections`` and for the
   delay ``max.connection.creation.rate`` asks, while new connections wait in the listen
   backlog; a connection over ``max.connections.per.ip`` is closed at once (see
   :mod:`odradek.server.connection_quotas`). Each connection is a
   :class:`KafkaConnection` (an ``asyncio.Protocol``: no stream-reader copies). Rejected
   connections are logged through :class:`~odradek.server.log_summary.RejectionLog`: the
   first of a cause and host in full, repeats as one count per window.
2. *Frame.* Bytes go into a sans-I/O :class:`~odradek.protocol.framing.FrameDecoder`
   capped at ``socket.request.max.bytes``.
3. *Route.* The first 8 bytes of a frame give key, version and correlation id. The
   registry says who serves it. An unknown key, a malformed header or body (a null where
   the schema forbids one included), or an unsupported version close the connection with
   a logged reason (Kafka's behaviour), except ApiVersions at an unsupported version,
   which gets the v0 UNSUPPORTED_VERSION answer (KIP-511). The close waits its turn:
   nothing after the bad frame is read, and every request received before it is answered
   first, as Kafka, which reads one request at a time, would have answered it (an earlier
   Produce is never applied and left unanswered, which made clients retry it into a
   duplicate). ``RequestContext`` carries the header fields, peer and connection id.
4. *Handle, concurrently.* A handler starts at once, inside dispatch, and runs up to its
   first wait, as Python 3.12's eager tasks do: most (Produce, Metadata, ListOffsets…)
   never wait and finish there, with no task or loop turn of their own. One that waits
   goes on as a task, so a slow Fetch does not hold up a Metadata behind it.
   Registrations marked ``serial`` first wait for every earlier request of the
   connection (Kafka's channel muting), for APIs whose execution order matters.
5. *Respond, in order.* A per-connection writer takes requests in arrival order and
   writes each response once its handler is done, so responses leave in the order the
   requests came in, whatever order the handlers finish (Kafka's in-order guarantee,
   which its Processor gets by muting the channel). Responses already done when the
   writer reaches them go out in one write. ``None`` means no response
   (Produce acks=0). A :class:`~odradek.protocol.send.Send` is written part by part, file
   regions with ``loop.sendfile`` (``os.sendfile`` on plain TCP, read+write on TLS).
6. *Backpressure.* Reading pauses when ``queued.max.requests`` requests of the
   connection are in flight and resumes at half that (frames already buffered are still
   dispatched as slots free, so the bound is exact), while the connection's requests in
   flight hold ``socket.request.max.bytes``, and while the broker's hold
   ``queued.max.request.bytes`` (unbounded by default, as in Kafka); the writer awaits the
   transport's drain (see :mod:`odradek.server.flow_control`).
   A handler over a client quota calls :meth:`KafkaConnection.throttle` (KIP-219): its
   response goes out at once, carrying ``throttle_time_ms``, and nothing more is read or
   dispatched from the connection until the throttle time has passed (Kafka's channel
   muting, ``RequestChannel.throttle``; see :mod:`odradek.server.client_quotas`).
7. *Idle.* A connection with nothing in flight and no traffic for
   ``connections.max.idle.ms`` is closed (Kafka's ``Selector`` idle expiry); so is one
   whose client closed its side, even with requests in flight (Kafka closes at once on
   end of stream; we answer what was sent, but no longer than that).
8. *Shutdown.* :meth:`KafkaServer.stop`: close the listener, stop reading on every
   connection, let in-flight requests finish and their responses flush for up to the
   shutdown timeout, then abort connections and cancel the handlers left.
9. *Request metrics* (only with ``request_stats``, i.e. ``metrics.listener`` set): each
   request's entry in the in-flight queue is a :class:`_TimedInFlight`, which carries its
   handler's start, first wait and end, noted around the handler (in ``_handle``, with
   :func:`_resume`); the writer adds when it took the response and handed it to the
   socket, recording the lot in
   :class:`~odradek.server.broker_stats.RequestStats` (Kafka's ``RequestChannel.Metrics``:
   RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs, ResponseQueueTimeMs, ResponseSendTimeMs).
   The timestamps live on the entry the writer pops anyway: no other object is made,
   pooled or touched per request.

A handler that fails is answered, not dropped (Kafka's ``sendErrorOrCloseConnection``): a
:class:`~odradek.protocol.errors.KafkaError` with its code and message, any other exception
with UNKNOWN_SERVER_ERROR after its traceback is logged. The answer comes from
:func:`~odradek.protocol.error_response.build_error_response` (Kafka's
``getErrorResponse``: the code in every place the response has one, for each of the
request's topics, partitions, groups or resources), or from the registration's own
``error_response`` (ApiVersions). The connection is closed only when there is no answer to
send: Produce with acks=0, as in Kafka, or an answer that cannot be built or encoded.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import datetime
import errno
import functools
import itertools
import logging
import os
import socket
import time
import types
from collections.abc import Coroutine, Generator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, cast

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.codec import decode_request, encode_body, request_header_version, schema
from odradek.protocol.error_response import build_error_response
from odradek.protocol.errors import (
    ErrorCode,
    KafkaError,
    RemoteProtocolError,
    UnsupportedVersionError,
)
from odradek.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from odradek.protocol.headers import (
    encode_response,
    encode_response_prefix,
    parse_request_header,
    peek_request,
)
from odradek.protocol.registry import (
    GENERIC_ERROR_RESPONSE,
    HandlerRegistry,
    Registration,
    RequestContext,
)
from odradek.protocol.send import FileRegion, Send
from odradek.server.client_quotas import NANOS_TO_PERCENTAGE, ClientQuotaManager
from odradek.server.connection_quotas import INT_MAX, ConnectionLimits, ConnectionQuotas
from odradek.server.flow_control import FlowControl, RequestMemoryPool
from odradek.server.handlers.api_versions import unsupported_version_response
from odradek.server.log_summary import RejectionLog, Summary

if TYPE_CHECKING:
    from odradek.server.broker_stats import RequestStats

__all__ = ["KafkaConnection", "KafkaServer", "NetworkConfig"]

log = logging.getLogger(__name__)

_API_VERSIONS: Final = int(ApiKey.API_VERSIONS)
_FETCH: Final = int(ApiKey.FETCH)
# File regions up to this size are copied with pread instead of sent with sendfile: below
# it the copy costs less than sendfile's pause-reading / wait-for-empty-buffer / resume.
COPY_REGION_BYTES: Final = 64 * 1024
# Finished responses gathered into one write stop growing here (see _write_loop).
COALESCE_BYTES: Final = 256 * 1024
_Buffers = tuple[bytes | bytearray | memoryview, ...]
# After accept fails for want of descriptors or memory, wait this long before the next
# (asyncio's own server waits a second; Kafka's Acceptor logs and goes on).
ACCEPT_RETRY_DELAY_S: Final = 0.1
_ACCEPT_FAILED: Final = "accept failed"
_ACCEPT_PEER_ERRNOS: Final = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EAGAIN})


@dataclass(frozen=True, slots=True)
class NetworkConfig:
    """Network settings, named after Kafka's broker configs, with Kafka's defaults."""

    socket_request_max_bytes: int = DEFAULT_MAX_FRAME_SIZE
    """``socket.request.max.bytes``: largest request frame accepted."""
    queued_max_requests: int = 500
    """``queued.max.requests``: in-flight requests per connection before reading pauses."""
    queued_max_request_bytes: int = -1
    """``queued.max.request.bytes``: bytes of requests in flight broker-wide before reading
    pauses; -1 (Kafka's default): unbounded."""
    connections_max_idle_ms: int = 600_000
    """``connections.max.idle.ms``: close connections idle this long."""
    socket_send_buffer_bytes: int = 102_400
    """``socket.send.buffer.bytes`` (SO_SNDBUF); -1 keeps the OS default."""
    socket_receive_buffer_bytes: int = 102_400
    """``socket.receive.buffer.bytes`` (SO_RCVBUF); -1 keeps the OS default."""
    write_buffer_high_water_bytes: int = 4 * 1024 * 1024
    """Transport write buffer above which the response writer waits for a drain."""
    shutdown_timeout_ms: int = 30_000
    """How long :meth:`KafkaServer.stop` lets in-flight requests finish."""
    listen_backlog: int = 50
    """``socket.listen.backlog.size``."""
    max_connections: int = INT_MAX
    """``max.connections``: connections held at most; more wait in the backlog (KIP-402)."""
    max_connections_per_ip: int = INT_MAX
    """``max.connections.per.ip``: more from one address are closed at once."""
    max_connections_per_ip_overrides: Mapping[str, int] = field(default_factory=dict)
    """``max.connections.per.ip.overrides``: per-host maxima, parsed."""
    max_connection_creation_rate: int = INT_MAX
    """``max.connection.creation.rate``: accepts a second, broker-wide (KIP-612)."""
    rejection_log_window_ms: int = 10_000
    """Rejected connections of one cause and host are logged once per window, then counted."""

    def connection_limits(self) -> ConnectionLimits:
        return ConnectionLimits(
            max_connections=self.max_connections,
            max_connections_per_ip=self.max_connections_per_ip,
            max_connections_per_ip_overrides=dict(self.max_connections_per_ip_overrides),
            max_connection_creation_rate=self.max_connection_creation_rate,
        )


class _Close:
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
_Outcome = None | bytes | tuple[bytes, Send] | _Close


class _InFlight:
    """A request in the connection's queue, answered in order by the writer."""

    __slots__ = ("size", "task")

    def __init__(self, task: asyncio.Future[_Outcome] | None, size: int = 0) -> None:
        # None only until _dispatch has started the handler (a timed entry is made first)
        self.task: asyncio.Future[_Outcome] = task  # type: ignore[assignment]
        self.size = size  # frame bytes held until the response is written


class _TimedInFlight(_InFlight):
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


class KafkaConnection(asyncio.Protocol):
    """One client connection: per-connection state, decoder, ordered response writer."""

    def __init__(self, server: KafkaServer, index: int) -> None:
        self._server = server
        self._index = index
        self._config = server.config
        self._registry = server.registry
        self._stats = server.request_stats
        self._loop = asyncio.get_running_loop()
        self._decoder = FrameDecoder(self._config.socket_request_max_bytes)
        self._resume_at = self._config.queued_max_requests // 2
        self._pool = server.memory_pool  # None: queued.max.request.bytes unbounded
        self._request_quota = server.request_quota  # request_percentage (KIP-124)
        self._bytes_in_flight = 0
        self._max_bytes_in_flight = self._config.socket_request_max_bytes
        self._in_flight: collections.deque[_InFlight] = collections.deque()
        # Serial requests wait for everything received before them. The last serial task
        # already waited for all before it, so a new one waits only for that task and
        # the non-serial tasks started since: O(1) per request, not O(in flight).
        self._serial_barrier: asyncio.Future[_Outcome] | None = None
        self._since_barrier: set[asyncio.Future[_Outcome]] = set()
        self._wakeup = asyncio.Event()
        self._transport: asyncio.Transport | None = None
        self._flow: FlowControl | None = None
        self._writer: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._last_activity = self._loop.time()
        self._draining = False  # shutdown: no new requests, finish the in-flight ones
        self._eof = False  # the client half-closed: answer what it sent, then close
        self._closing = False
        # A frame could not be served: nothing more is read, and the connection closes
        # once the requests before that frame are answered (see _refuse).
        self._refused = False
        # Client quota throttle (KIP-219): reading is muted until this timer fires.
        self._throttle_timer: asyncio.TimerHandle | None = None
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self.peer: tuple[str, int] = ("", 0)
        self.connection_id = ""

    # -- asyncio.Protocol callbacks ---------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._flow = FlowControl(transport)
        peer = transport.get_extra_info("peername") or ("", 0)
        local = transport.get_extra_info("sockname") or ("", 0)
        self.peer = (str(peer[0]), int(peer[1]))
        self.connection_id = f"{local[0]}:{local[1]}-{peer[0]}:{peer[1]}-{self._index}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            _tune_socket(sock, self._config)
        high = self._config.write_buffer_high_water_bytes
        transport.set_write_buffer_limits(high=high, low=high // 4)
        self._writer = self._loop.create_task(self._write_loop())
        self._schedule_idle_check(self._config.connections_max_idle_ms / 1000)
        log.debug("connection %s accepted", self.connection_id)

    def data_received(self, data: bytes) -> None:
        if self._closing or self._draining or self._refused:
            return
        self._last_activity = self._loop.time()
        try:
            self._decoder.receive_data(data)
        except RemoteProtocolError as e:
            self._refuse("invalid frame", f"invalid frame: {e}")
            return
        self._pump()

    def eof_received(self) -> bool | None:
        # The client half-closed: finish what is in flight, then close (returning True
        # keeps our write side open until then).
        self._eof = True
        if not self._in_flight:
            return None
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._closing = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        if self._pool is not None:
            self._pool.forget(self)
            self._pool.release(self._bytes_in_flight)
            self._bytes_in_flight = 0
        if self._flow is not None:
            self._flow.release()
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
        # Handler tasks are not cancelled: like Kafka, a request already accepted is
        # processed; only its response is dropped. stop() cancels stragglers.
        self._in_flight.clear()
        self._server._forget(self)
        if not self.closed.done():
            self.closed.set_result(None)
        log.debug("connection %s closed (%s)", self.connection_id, exc or "normally")

    def pause_writing(self) -> None:
        assert self._flow is not None
        self._flow.pause_writing()

    def resume_writing(self) -> None:
        assert self._flow is not None
        self._flow.resume_writing()

    # -- public -------------------------------------------------------------------------

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def throttle(self, throttle_ms: int) -> None:
        """Mute the connection for ``throttle_ms``: requests already read are served, no
        more are read or dispatched until then (KIP-219; a later, longer throttle
        extends it)."""
        if throttle_ms <= 0 or self._closing or self._flow is None:
            return
        until = self._loop.time() + throttle_ms / 1000
        timer = self._throttle_timer
        if timer is not None:
            if timer.when() >= until:
                return
            timer.cancel()
        self._throttle_timer = self._loop.call_at(until, self._unthrottle)
        self._flow.pause_reading()

    def _unthrottle(self) -> None:
        self._throttle_timer = None
        self._wake()

    def _wake(self) -> None:
        """A reason to stop reading went away (throttle over, pool bytes freed)."""
        if self._closing or self._draining or self._refused or self._flow is None:
            return
        if self._flow.read_paused and self._may_read():
            self._flow.resume_reading()
        self._pump()

    def _may_read(self) -> bool:
        """Whether reading may resume: under the in-flight bounds, not throttled, and the
        broker's request bytes not exhausted (or else wait for them)."""
        if (
            len(self._in_flight) > self._resume_at or self._throttle_timer is not None
            or self._bytes_in_flight >= self._max_bytes_in_flight
        ):
            return False
        pool = self._pool
        if pool is not None and pool.exhausted:
            pool.wait(self, self._wake)
            return False
        return True

    def close(self, reason: str, level: int = logging.INFO, cause: str | None = None) -> None:
        """Close the connection now, logging ``reason`` (a rejection of the peer's input,
        with its ``cause``, is logged through the server's summarising RejectionLog)."""
        if self._closing:
            return
        self._closing = True
        if cause is not None:
            message = f"closing connection {self.connection_id} from {self.peer}: {reason}"
            self._server._log_rejection(cause, self.peer[0], message, level)
        else:
            log.log(level, "closing connection %s from %s: %s", self.connection_id, self.peer,
                    reason)
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        self._closing = True
        if self._transport is not None:
            self._transport.abort()

    def begin_shutdown(self) -> None:
        """Stop taking requests; close once the in-flight ones are answered."""
        self._draining = True
        if self._flow is not None and not self._closing:
            self._flow.pause_reading()
        self._wakeup.set()

    # -- reading and dispatch ----------------------------------------------------------

    def _pump(self) -> None:
        """Dispatch buffered frames while the in-flight bound allows."""
        assert self._flow is not None
        limit = self._config.queued_max_requests
        pool = self._pool
        while (
            not self._closing and not self._draining and not self._refused
            and len(self._in_flight) < limit and self._throttle_timer is None
            and self._bytes_in_flight < self._max_bytes_in_flight
        ):
            if pool is not None and pool.exhausted:
                pool.wait(self, self._wake)
                self._flow.pause_reading()
                return
            try:
                frame = self._decoder.next_frame()
            except RemoteProtocolError as e:
                self._refuse("invalid frame", f"invalid frame: {e}")
                return
            if frame is None:
                break
            self._dispatch(frame)
        if (
            len(self._in_flight) >= limit
            or self._bytes_in_flight >= self._max_bytes_in_flight
        ):
            self._flow.pause_reading()

    def _dispatch(self, frame: bytes | bytearray) -> None:
        received_ns = time.monotonic_ns()
        try:
            api_key, api_version, correlation_id = peek_request(frame)
        except RemoteProtocolError as e:
            self._refuse("malformed request header", str(e))
            return
        try:
            registration = self._registry.lookup(api_key, api_version)
        except UnsupportedVersionError as e:
            if api_key == _API_VERSIONS:
                self._answer_unsupported_api_versions(frame, api_version, correlation_id)
            else:
                self._refuse("unsupported version", f"{e} (correlation id {correlation_id})")
            return
        except RemoteProtocolError as e:  # unknown API key
            self._refuse("unknown API key", f"{e} (correlation id {correlation_id})")
            return
        api_schema = schema(api_key, api_version)
        try:
            header = parse_request_header(frame, api_schema.request_header_version)
            if registration.decode is not None:  # gets the mutable frame itself
                request = registration.decode(frame, header.size, api_version)
            else:
                request = decode_request(api_key, api_version, frame, header.size)
        except RemoteProtocolError as e:
            self._refuse("malformed request", f"{e} (correlation id {correlation_id})")
            return
        ctx = RequestContext(
            correlation_id=correlation_id,
            client_id=header.client_id,
            api_key=api_key,
            api_version=api_version,
            peer=self.peer,
            connection_id=self.connection_id,
            header_version=header.header_version,
            received_ns=received_ns,
            size=len(frame),
            channel=self,
        )
        prior: list[asyncio.Future[_Outcome]] = []
        if registration.serial:
            if self._serial_barrier is not None and not self._serial_barrier.done():
                prior.append(self._serial_barrier)
            prior.extend(self._since_barrier)
        size = len(frame)
        timing = (None if self._stats is None
                  else _TimedInFlight(size, api_key, api_version, received_ns))
        coro = self._handle(registration, ctx, request, prior, timing)
        task: asyncio.Future[_Outcome]
        if prior:
            task = self._loop.create_task(coro)
        else:
            task = _start_eagerly(self._loop, coro)
            if timing is not None and not task.done() and not timing.suspended:
                # the handler's first step ran just now, up to its first wait
                timing.suspended = time.monotonic_ns()
        if registration.serial:
            self._serial_barrier = task
            self._since_barrier = set()
        elif not task.done():
            # Done tasks leave at once: a finished response (and the descriptors its
            # file regions own) must not be kept alive by this bookkeeping.
            self._since_barrier.add(task)
            task.add_done_callback(self._since_barrier.discard)
        if not task.done():
            self._server._track(task)
        self._bytes_in_flight += size
        if self._pool is not None:
            self._pool.take(size)
        if timing is None:
            self._push(_InFlight(task, size))
        else:
            timing.task = task
            self._push(timing)

    def _answer_unsupported_api_versions(
        self, frame: bytes | bytearray, api_version: int, correlation_id: int
    ) -> None:
        # The body cannot be parsed, but the header can: its version follows the request
        # version's flexibility (clamped to the versions kio knows).
        try:
            parse_request_header(frame, request_header_version(_API_VERSIONS, api_version))
        except RemoteProtocolError as e:
            self._refuse(
                "malformed request header",
                f"malformed ApiVersions request at an unsupported version: {e}",
            )
            return
        response = unsupported_version_response(self._registry)
        done: asyncio.Future[_Outcome] = self._loop.create_future()
        done.set_result(encode_response(correlation_id, response, header_version=0))
        self._push(_InFlight(done))

    def _refuse(self, cause: str, reason: str) -> None:
        """A frame that cannot be served: stop reading, answer every request received
        before it, then close (Kafka answers each request before it reads the next, so
        a client never sees an earlier request applied and left unanswered)."""
        if self._refused:
            return
        self._refused = True
        if self._flow is not None:
            self._flow.pause_reading()
        done: asyncio.Future[_Outcome] = self._loop.create_future()
        done.set_result(_Close(reason, logging.INFO, cause))
        self._push(_InFlight(done))

    def _push(self, entry: _InFlight) -> None:
        self._in_flight.append(entry)
        self._wakeup.set()

    async def _handle(
        self,
        registration: Registration,
        ctx: RequestContext,
        request: Any,
        prior: list[asyncio.Future[_Outcome]],
        timing: _TimedInFlight | None = None,
    ) -> _Outcome:
        if prior:
            await asyncio.wait(prior)
        quota = self._request_quota
        try:
            measured = (quota if quota is not None and quota.active
                        and _quota_applies(ctx, request) else None)
            if timing is None and measured is None:
                result = await registration.handler(ctx, request)
            elif timing is None:
                assert measured is not None
                result = await self._handle_measured(registration, ctx, request, measured)
            elif measured is None and not prior:
                # Run eagerly by _dispatch, which notes the handler's first wait (the end
                # of its local work, Kafka's LocalTimeMs; the rest is RemoteTimeMs: a
                # purgatory, the ISR, a rebalance) when this step returns unfinished.
                timing.started = time.monotonic_ns()
                result = await registration.handler(ctx, request)
            else:
                # After earlier requests, or measured by request_percentage (which charges
                # the first step, see _handle_measured): the handler's first step runs
                # here, and one that waits is resumed through _resume (PEP 380's
                # expansion of ``await``), its first wait noted.
                timing.started = time.monotonic_ns()
                coro = cast(Coroutine[Any, Any, Any], registration.handler(ctx, request))
                suspended = False
                try:
                    waiting_on = coro.send(None)
                except StopIteration as stop:
                    result = stop.value
                else:
                    suspended = True
                    timing.suspended = time.monotonic_ns()
                throttle_ms = 0
                if measured is not None:
                    first_step_ns = (timing.suspended or time.monotonic_ns()) - timing.started
                    throttle_ms = measured.record(ctx.client_id,
                                                  first_step_ns * NANOS_TO_PERCENTAGE)
                    if throttle_ms > 0:
                        self.throttle(throttle_ms)
                if suspended:
                    result = await _resume(coro, waiting_on)
                if throttle_ms > 0:
                    result = _with_throttle(result, throttle_ms)
            if timing is not None:
                timing.done = time.monotonic_ns()
                code = getattr(result, "error_code", 0)  # a top-level error code
                if code:
                    timing.error = int(code)
        except KafkaError as e:
            if timing is not None:
                timing.done = time.monotonic_ns()
                timing.error = int(e.code)
            return self._error_outcome(registration, ctx, request, e.code, e)
        except Exception as e:
            if timing is not None:
                timing.done = time.monotonic_ns()
                timing.error = int(ErrorCode.unknown_server_error)
            log.exception(
                "handler for API %s v%s failed (connection %s, correlation id %s)",
                ctx.api_key,
                ctx.api_version,
                ctx.connection_id,
                ctx.correlation_id,
            )
            return self._error_outcome(
                registration, ctx, request, ErrorCode.unknown_server_error, e
            )
        return self._encode(registration, ctx, result)

    async def _handle_measured(
        self, registration: Registration, ctx: RequestContext, request: Any,
        quota: ClientQuotaManager,
    ) -> Any:
        """Run the handler, charging the time of its first step (all of it for a handler
        that answers without waiting) to the client's request_percentage. Over the
        quota, the connection is muted and a kio answer carries the throttle time
        (KIP-124, KIP-219)."""
        coro = registration.handler(ctx, request)
        if not isinstance(coro, Coroutine):  # not an async def: nothing to measure by
            return await coro
        started = time.monotonic_ns()
        result: Any = None
        try:
            signal = coro.send(None)
        except StopIteration as stop:
            result, suspended = stop.value, False
        else:
            suspended = True
        elapsed_ns = time.monotonic_ns() - started
        throttle_ms = quota.record(ctx.client_id, elapsed_ns * NANOS_TO_PERCENTAGE)
        if throttle_ms > 0:
            self.throttle(throttle_ms)
        if suspended:
            result = await _resume(coro, signal)
        if throttle_ms > 0:
            result = _with_throttle(result, throttle_ms)
        return result

    def _error_outcome(
        self,
        registration: Registration,
        ctx: RequestContext,
        request: Any,
        code: ErrorCode,
        error: BaseException,
    ) -> _Outcome:
        # Kafka's sendErrorOrCloseConnection: the request's error response, or closing the
        # connection when there is none (Produce acks=0) or it cannot be built.
        try:
            response = GENERIC_ERROR_RESPONSE
            if registration.error_response is not None:
                response = registration.error_response(ctx, request, code)
            if response is GENERIC_ERROR_RESPONSE:
                message = error.message if isinstance(error, KafkaError) else None
                response = build_error_response(
                    ctx.api_key, ctx.api_version, request, code, message
                )
        except Exception as e:
            log.exception("error response to API %s failed", ctx.api_key)
            return _Close(f"cannot build error response: {e!r}")
        if response is None:
            return _Close(
                f"handler for API {ctx.api_key} v{ctx.api_version} failed with no response "
                f"to carry the error: {error!r}"
            )
        return self._encode(registration, ctx, response)

    def _encode(self, registration: Registration, ctx: RequestContext, result: Any) -> _Outcome:
        if result is None:
            return None
        api_schema = schema(ctx.api_key, ctx.api_version)
        header_version = api_schema.response_header_version
        if isinstance(result, Send):
            prefix = encode_response_prefix(ctx.correlation_id, header_version, result.size)
            return (prefix, result)
        if type(result) is not api_schema.response_type:
            return _Close(
                f"handler for API {ctx.api_key} v{ctx.api_version} returned "
                f"{type(result).__name__}, expected {api_schema.response_type.__name__}"
            )
        try:
            body = encode_body(result)
        except Exception as e:
            log.exception("cannot encode response to API %s", ctx.api_key)
            return _Close(f"cannot encode response: {e!r}")
        return encode_response_prefix(ctx.correlation_id, header_version, len(body)) + body

    # -- writing -----------------------------------------------------------------------

    async def _write_loop(self) -> None:
        """Write responses in request order. Responses already finished are gathered and
        written together (one send for a run of small responses), but never held while
        the loop waits for a handler, for a drain, or past ``COALESCE_BYTES``."""
        transport = self._transport
        flow = self._flow
        assert transport is not None and flow is not None
        in_flight = self._in_flight
        stats = self._stats
        ready: list[bytes | bytearray | memoryview] = []
        ready_bytes = 0
        while True:
            if not in_flight:
                if ready:
                    _write_all(transport, ready)
                    ready_bytes = 0
                if self._draining or self._eof:
                    reason = "shutting down" if self._draining else "client closed its side"
                    self.close(reason, logging.DEBUG)
                    return
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            task = in_flight[0].task
            if not task.done():
                if ready:
                    _write_all(transport, ready)
                    ready_bytes = 0
                # shield: closing the connection cancels this writer, never the handler.
                try:
                    await asyncio.shield(task)
                except asyncio.CancelledError:
                    me = asyncio.current_task()
                    if me is not None and me.cancelling():
                        raise
            if self._closing:
                return
            entry = in_flight.popleft()
            if entry.size:
                self._bytes_in_flight -= entry.size
                if self._pool is not None:
                    self._pool.release(entry.size)
            timed = entry if stats is not None and type(entry) is _TimedInFlight else None
            taken = time.monotonic_ns() if timed is not None else 0
            wrote = False  # to the socket, now: else the answer is only buffered
            if task.cancelled():
                _write_all(transport, ready)
                self.close("request handler was cancelled", logging.WARNING)
                return
            outcome = task.result()
            if isinstance(outcome, _Close):
                _write_all(transport, ready)
                self.close(outcome.reason, outcome.level, outcome.cause)
                return
            if outcome is not None:
                self._last_activity = self._loop.time()
                if isinstance(outcome, bytes):
                    ready.append(outcome)
                    ready_bytes += len(outcome)
                else:
                    prefix, send = outcome
                    ready.append(prefix)
                    if not send.has_file_regions:  # buffers only (Produce): gathered too
                        ready.extend(cast(_Buffers, send.parts))
                        ready_bytes += len(prefix) + send.size
                    else:
                        ok = await self._write_send(ready, send)
                        ready = []
                        ready_bytes = 0
                        wrote = True
                        if not ok:
                            return
                if ready_bytes >= COALESCE_BYTES:
                    _write_all(transport, ready)
                    ready_bytes = 0
                    wrote = True
            if timed is not None and stats is not None:
                # Durations, not timestamps: below 1.07 s they are ints of one 30-bit
                # digit, which pack on the fast path (a ns timestamp takes the slow one:
                # ~200 instructions). A buffered answer is handed to the socket as taken.
                started = timed.started
                done = timed.done
                first_wait = timed.suspended or done  # never waited: no remote time
                stats.note(timed.api_key, timed.api_version, started - timed.received,
                           first_wait - started, done - first_wait, taken - done,
                           time.monotonic_ns() - taken if wrote else 0, timed.error)
            if (
                not self._draining and not self._closing and not self._refused
                and self._throttle_timer is None
            ):
                # Hysteresis: resume reading at half the bound, so a client that keeps
                # the pipe full does not cost a pause/resume pair per response. Frames
                # already buffered are dispatched as soon as a slot frees.
                if flow.read_paused and self._may_read():
                    flow.resume_reading()
                if self._decoder.buffered >= 4:
                    self._pump()
            if not flow.writable:
                if ready:
                    _write_all(transport, ready)
                    ready_bytes = 0
                await flow.drain()

    def _copy_region(
        self, part: FileRegion, buffered: list[bytes | bytearray | memoryview]
    ) -> bool:
        try:
            data = os.pread(part.fd, part.size, part.position)
        except OSError as e:
            self.close(f"reading {part} failed: {e!r}", logging.ERROR)
            return False
        if len(data) != part.size:
            self.close(f"file region {part} short by {part.size - len(data)} bytes",
                       logging.ERROR)
            return False
        buffered.append(data)
        return True

    async def _write_send(
        self, buffered: list[bytes | bytearray | memoryview], send: Send
    ) -> bool:
        """Write ``buffered`` (earlier responses and this one's prefix), then ``send``.

        Copied regions are handed to the transport every ``COALESCE_BYTES`` and the
        writer waits for the drain when the transport is full, so a response of a
        thousand small regions holds a bounded amount of memory, not the whole response."""
        transport = self._transport
        flow = self._flow
        assert transport is not None and flow is not None
        copied = 0
        for part in send.parts:
            if not isinstance(part, FileRegion):
                buffered.append(part)
                continue
            if part.size == 0:
                continue
            if part.size <= COPY_REGION_BYTES:
                # Small regions: one pread is cheaper than the pause/drain/resume dance
                # around sendfile, and keeps latency low under many small fetches.
                if not self._copy_region(part, buffered):
                    return False
                copied += part.size
                if copied >= COALESCE_BYTES:
                    _write_all(transport, buffered)
                    copied = 0
                    if not flow.writable:
                        await flow.drain()
                        if self._closing:
                            return False
                continue
            _write_all(transport, buffered)
            try:
                with open(part.fd, "rb", buffering=0, closefd=False) as file:
                    # Native sendfile only: its offsets are explicit. asyncio's fallback
                    # reads from the file position, which all dup'ed descriptors of a
                    # segment share, so concurrent responses could read each other's.
                    sent = await self._loop.sendfile(
                        transport, file, part.position, part.size, fallback=False
                    )
            except (asyncio.SendfileNotAvailableError, RuntimeError):
                if not self._copy_region(part, buffered):
                    return False
                continue
            except OSError as e:
                self.close(f"sendfile failed: {e!r}", logging.WARNING)
                return False
            finally:
                flow.reapply()
            if sent != part.size:
                # The size prefix promised more bytes than the file had: the stream is
                # now unframed and the connection cannot continue.
                self.close(
                    f"file region {part} short by {part.size - sent} bytes", logging.ERROR
                )
                return False
        _write_all(transport, buffered)
        return True

    # -- idle expiry ---------------------------------------------------------------------

    def _schedule_idle_check(self, delay: float) -> None:
        self._idle_timer = self._loop.call_later(max(delay, 0.001), self._check_idle)

    def _check_idle(self) -> None:
        if self._closing:
            return
        idle_s = self._config.connections_max_idle_ms / 1000
        if self._in_flight and not self._eof:
            self._schedule_idle_check(idle_s)
            return
        # A client that closed its side waits for its answers at most as long as an idle
        # connection lives: a closed client behind a parked request (a Fetch with a wild
        # max_wait) would otherwise hold its socket, in CLOSE_WAIT, as long as the request.
        remaining = self._last_activity + idle_s - self._loop.time()
        if remaining <= 0:
            limit = self._config.connections_max_idle_ms
            self.close(f"idle for more than connections.max.idle.ms={limit}")
        else:
            self._schedule_idle_check(remaining)


def _start_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, _Outcome]
) -> asyncio.Future[_Outcome]:
    """Run ``coro`` now, up to its first suspension, as Python 3.12's eager tasks do.

    Most handlers (Produce, Metadata, ListOffsets, …) never wait: they finish in this
    first step and come back as a done future, without a task, a loop callback or a
    loop turn. A handler that does wait (a Fetch for min_bytes, a JoinGroup) is handed
    to a task, which continues it from the future it is waiting on.

    It stays because it pays: with every handler a plain task instead, the broker spent
    twice the CPU per Produce request (93-113 us against 47-57 us for 19 KB batches, 132
    against 88 us for 66 KB; bench/produce_requests.py, both trees in one run; figures in
    bench/README.md, "Produce requests"). Python 3.12's ``eager_task_factory`` would do
    the same once the project requires 3.12."""
    try:
        waiting_on = coro.send(None)
    except StopIteration as stop:
        done: asyncio.Future[_Outcome] = loop.create_future()
        done.set_result(stop.value)
        return done
    except Exception as exc:
        failed: asyncio.Future[_Outcome] = loop.create_future()
        failed.set_exception(exc)
        return failed
    return loop.create_task(_Started(coro, waiting_on))


@types.coroutine
def _resume(coro: Coroutine[Any, Any, Any], waiting_on: Any) -> Generator[Any, Any, Any]:
    """Finish awaiting ``coro``, already run up to its first wait on ``waiting_on``
    (PEP 380's expansion of ``yield from``)."""
    while True:
        try:
            value = yield waiting_on
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:
            try:
                waiting_on = coro.throw(exc)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            waiting_on = coro.send(value)
        except StopIteration as stop:
            return stop.value


class _Started(Coroutine[Any, Any, _Outcome]):
    """A coroutine that already ran its first step, for a task to drive on: the task's
    first ``send`` gets what the coroutine yielded then (the future it waits on)."""

    __slots__ = ("_coro", "_first", "_first_pending")

    def __init__(self, coro: Coroutine[Any, Any, _Outcome], first: Any) -> None:
        self._coro = coro
        self._first = first
        self._first_pending = True

    def send(self, value: Any) -> Any:
        if self._first_pending:
            self._first_pending = False
            return self._first
        return self._coro.send(value)

    def throw(self, *args: Any) -> Any:
        self._first_pending = False
        return self._coro.throw(*args)

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, _Outcome]:
        raise TypeError("a started handler is driven by its task, not awaited")


def _with_throttle(result: Any, throttle_ms: int) -> Any:
    """A kio answer carrying at least ``throttle_ms`` in its ``throttle_time`` (KIP-219);
    other answers (the hot-path writers' bytes) as they are."""
    current = getattr(result, "throttle_time", None)
    wanted = datetime.timedelta(milliseconds=throttle_ms)
    if isinstance(current, datetime.timedelta) and wanted > current:
        return dataclasses.replace(result, throttle_time=wanted)
    return result


def _quota_applies(ctx: RequestContext, request: Any) -> bool:
    """Exempt from request_percentage: ApiVersions, and followers' fetches (Kafka exempts
    cluster actions)."""
    if ctx.api_key == _API_VERSIONS:
        return False
    if ctx.api_key == _FETCH:
        state = getattr(request, "replica_state", None)
        replica = state.replica_id if state is not None else getattr(request, "replica_id", -1)
        return int(replica) < 0
    return True


def _write_all(
    transport: asyncio.WriteTransport, ready: list[bytes | bytearray | memoryview]
) -> None:
    """Hand the gathered responses to the transport in one write, and empty the list."""
    if len(ready) == 1:
        transport.write(ready[0])
    elif ready:
        transport.writelines(ready)
    ready.clear()


def _resolve(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _readable(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
    """Wait until ``sock`` is readable (a listener: a connection is waiting)."""
    ready: asyncio.Future[None] = loop.create_future()
    fd = sock.fileno()
    loop.add_reader(fd, _resolve, ready)
    try:
        await ready
    finally:
        loop.remove_reader(fd)


def _summary_message(summary: Summary) -> str:
    if summary.cause == _ACCEPT_FAILED:  # no connection was closed: none was accepted
        return (f"accepting failed {summary.count:,} more times on {summary.host} in the "
                f"last {summary.window_s:g} s")
    return summary.message()


def _same(connection: KafkaConnection) -> KafkaConnection:
    return connection


def _tune_socket(sock: socket.socket, config: NetworkConfig) -> None:
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if config.socket_send_buffer_bytes > 0:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, config.socket_send_buffer_bytes)
        if config.socket_receive_buffer_bytes > 0:
            sock.setsockopt(
                socket.SOL_SOCKET, socket.SO_RCVBUF, config.socket_receive_buffer_bytes
            )
    except OSError:  # not TCP (tests over socketpair), or the OS refused
        pass


class KafkaServer:
    """Server-wide state: the listener, its accept loop, live connections, handler tasks.

    ``port=0`` picks a free port; read it back from :attr:`port` after :meth:`start`.
    ``quotas`` may be shared by the listeners of one broker, making the connection limits
    broker-wide across them; by default each server has its own, from ``config``; so may
    ``memory_pool`` (``queued.max.request.bytes``).
    """

    def __init__(
        self,
        registry: HandlerRegistry,
        host: str = "127.0.0.1",
        port: int = 9092,
        config: NetworkConfig | None = None,
        quotas: ConnectionQuotas | None = None,
        memory_pool: RequestMemoryPool | None = None,
        request_quota: ClientQuotaManager | None = None,
        request_stats: RequestStats | None = None,
    ) -> None:
        self.registry = registry
        self.request_quota = request_quota
        # Request metrics (metrics.listener set): counted by the connections' writers.
        self.request_stats = request_stats
        self.host = host
        self._requested_port = port
        self.config = config or NetworkConfig()
        self.quotas = quotas or ConnectionQuotas(self.config.connection_limits())
        if memory_pool is None and self.config.queued_max_request_bytes > 0:
            memory_pool = RequestMemoryPool(self.config.queued_max_request_bytes)
        self.memory_pool = memory_pool
        self.rejections = RejectionLog(self.config.rejection_log_window_ms / 1000)
        self._summary_timer: asyncio.TimerHandle | None = None
        self._listener: socket.socket | None = None
        self._bound: socket.socket | None = None
        self._acceptor: asyncio.Task[None] | None = None
        self._slot_freed: asyncio.Event | None = None
        self._connections: set[KafkaConnection] = set()
        # Connections counted in the quotas, with the host they were counted for.
        self._counted: dict[KafkaConnection, str] = {}
        self._tasks: set[asyncio.Future[Any]] = set()
        self._counter = itertools.count()

    @property
    def port(self) -> int:
        sock = self._listener or self._bound
        if sock is None:
            return self._requested_port
        return int(sock.getsockname()[1])

    @property
    def connections(self) -> frozenset[KafkaConnection]:
        return frozenset(self._connections)

    @property
    def handler_tasks(self) -> frozenset[asyncio.Future[Any]]:
        """Tasks still running: handlers that waited (a Fetch parked for ``min_bytes``, a
        JoinGroup waiting for the rebalance), whether or not their connection is open, and
        accepted connections being set up."""
        return frozenset(self._tasks)

    async def bind(self) -> None:
        """Bind the listening address without accepting yet: a broker binds first, so a
        port in use fails start-up before anything is created on disk. Connections are
        refused until :meth:`start` (the socket does not listen before)."""
        if self._bound is not None or self._listener is not None:
            raise RuntimeError("server already bound")
        loop = asyncio.get_running_loop()
        address: Any
        if not self.host and socket.has_dualstack_ipv6():  # every address, IPv4 and IPv6
            family, address = socket.AF_INET6, ("", self._requested_port)
        else:
            infos = await loop.getaddrinfo(
                self.host or None, self._requested_port, type=socket.SOCK_STREAM,
                flags=socket.AI_PASSIVE,
            )
            family, _, _, _, address = infos[0]
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            # as socket.create_server does: reuse a port in TIME_WAIT, dual-stack on ""
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and not self.host:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
            sock.bind(address)
        except OSError as exc:
            sock.close()
            raise OSError(exc.errno, f"{exc.strerror} (binding {self.host}:"
                                     f"{self._requested_port})") from exc
        self._bound = sock

    async def start(self) -> None:
        if self._listener is not None:
            raise RuntimeError("server already started")
        loop = asyncio.get_running_loop()
        if self._bound is None:
            await self.bind()
        assert self._bound is not None
        listener, self._bound = self._bound, None
        listener.listen(self.config.listen_backlog)
        listener.setblocking(False)
        self._listener = listener
        self._slot_freed = asyncio.Event()
        self.quotas.add_release_listener(self._slot_freed.set)
        self._acceptor = loop.create_task(self._accept_loop(listener))
        log.debug("listening on %s:%s", self.host, self.port)

    async def stop(self, timeout: float | None = None) -> None:
        """Graceful shutdown: stop accepting, finish in-flight requests, close.

        Waits up to ``timeout`` seconds (default ``shutdown_timeout_ms``) for in-flight
        requests to be answered, then aborts the remaining connections and cancels the
        handler tasks still running.
        """
        if self._bound is not None:  # bound, never started
            self._bound.close()
            self._bound = None
        if self._listener is None:
            return
        if timeout is None:
            timeout = self.config.shutdown_timeout_ms / 1000
        if self._acceptor is not None:
            self._acceptor.cancel()
            await asyncio.wait({self._acceptor})
            self._acceptor = None
        self._listener.close()
        for connection in list(self._connections):
            connection.begin_shutdown()
        pending = {c.closed for c in self._connections} | set(self._tasks)
        if pending:
            _, not_done = await asyncio.wait(pending, timeout=timeout)
            if not_done:
                log.warning("shutdown timed out; aborting %d connections", len(self._connections))
        for connection in list(self._connections):
            connection.abort()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=1.0)
        if self._slot_freed is not None:
            self.quotas.remove_release_listener(self._slot_freed.set)
        if self._summary_timer is not None:
            self._summary_timer.cancel()
            self._summary_timer = None
        for summary in self.rejections.flush():
            log.info("%s", _summary_message(summary))
        self._listener = None
        log.info("stopped")

    async def __aenter__(self) -> KafkaServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # -- accepting -------------------------------------------------------------------------

    async def _accept_loop(self, listener: socket.socket) -> None:
        """Kafka's Acceptor: wait for the creation-rate delay and a free slot, accept one
        connection, check its address's limit, hand it to a :class:`KafkaConnection`.

        Accepting is a plain non-blocking ``accept``; the loop waits for the listener to
        be readable only when the backlog is empty, and yields to the event loop every
        ``listen_backlog`` connections, so a burst costs no loop turn per connection
        (asyncio's own server accepts the same way)."""
        loop = asyncio.get_running_loop()
        quotas = self.quotas
        slot_freed = self._slot_freed
        assert slot_freed is not None
        burst = max(self.config.listen_backlog, 1)
        accepted = 0
        while True:
            delay = quotas.accept_delay()
            if delay > 0:
                await asyncio.sleep(delay)
            while not quotas.slot_available():
                slot_freed.clear()
                await slot_freed.wait()
            try:
                sock, address = listener.accept()
            except (BlockingIOError, InterruptedError):
                quotas.refund_accept()
                await _readable(loop, listener)
                continue
            except OSError as e:
                # ECONNABORTED, EPROTO: that one client gave up in the backlog. Anything
                # else (out of descriptors or memory, above all) is logged, summarised,
                # and accepting tries again shortly rather than spinning.
                if e.errno not in _ACCEPT_PEER_ERRNOS:
                    self._log_rejection(
                        _ACCEPT_FAILED, f"{self.host}:{self.port}",
                        f"accepting a connection failed: {e}", logging.WARNING,
                    )
                    await asyncio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            accepted += 1
            if accepted % burst == 0:
                await asyncio.sleep(0)
            host = str(address[0])
            limit = quotas.inc(host)
            if limit is not None:
                sock.close()
                self._log_rejection(
                    "max.connections.per.ip", host,
                    f"rejected connection from {host}, address already has the configured "
                    f"maximum of {limit} connections",
                )
                continue
            sock.setblocking(False)
            connection = KafkaConnection(self, next(self._counter))
            self._counted[connection] = host
            self._connections.add(connection)
            self._track(loop.create_task(self._attach(loop, connection, sock)))

    async def _attach(
        self, loop: asyncio.AbstractEventLoop, connection: KafkaConnection, sock: socket.socket
    ) -> None:
        try:
            await loop.connect_accepted_socket(functools.partial(_same, connection), sock)
        except BaseException as e:  # the socket died between accept and setup, or stop()
            sock.close()
            self._forget(connection)
            if not isinstance(e, Exception):
                raise
            log.debug("could not set up a connection from %s: %r", connection.peer, e)

    # -- rejected connections, logged without flooding ------------------------------------

    def _log_rejection(
        self, cause: str, host: str, message: str, level: int = logging.INFO
    ) -> None:
        if self.rejections.record(cause, host):
            log.log(level, "%s", message)
        else:  # counted into the window's summary; in full only at DEBUG
            log.debug("%s", message)
        if self._summary_timer is None:
            self._schedule_summaries()

    def _schedule_summaries(self) -> None:
        due = self.rejections.next_due()
        if due is None:
            self._summary_timer = None
            return
        loop = asyncio.get_running_loop()
        delay = max(due - time.monotonic(), 0.0) + 0.001
        self._summary_timer = loop.call_later(delay, self._log_summaries)

    def _log_summaries(self) -> None:
        for summary in self.rejections.due():
            log.info("%s", _summary_message(summary))
        self._schedule_summaries()

    # -- bookkeeping -------------------------------------------------------------------------

    def _forget(self, connection: KafkaConnection) -> None:
        self._connections.discard(connection)
        host = self._counted.pop(connection, None)
        if host is not None:
            self.quotas.dec(host)

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
