"""One client connection, from accept to close.

How it works: :class:`KafkaConnection` is an ``asyncio.Protocol`` (no stream-reader
copies) and plays the per-channel part of Kafka's ``SocketServer.Processor``. Its life:

1. *Accept.* The acceptor (:mod:`odradek.server.network.acceptor`, Kafka's
   ``Acceptor``) admits the socket and makes the connection; :meth:`connection_made`
   tunes the socket and starts serving.
2. *Authenticate.* On a TLS listener the handshake has already run (the acceptor drives
   it, then hands the connection Odradek's own TLS transport,
   :mod:`odradek.server.network.tls_transport`, which delivers decrypted bytes through
   :meth:`buffer_received`; a failed handshake never becomes a connection): the principal comes from
   the client's certificate (:meth:`ListenerSecurity.tls_principal`), else it is
   ``User:ANONYMOUS``. On a SASL listener the connection starts unauthenticated: its
   :class:`~odradek.server.network.sasl.SaslAuthenticator` gates the reader's frames
   (only ApiVersions and the SASL requests pass) until the client authenticates, then
   hands the reader back to the dispatcher, so an authenticated connection costs
   nothing more per request.
3. *Serve.* Three parts, each in its own module, joined by the connection's
   :class:`~odradek.server.network.inflight.InFlightRequests`: the
   :class:`~odradek.server.network.reader.RequestReader` frames the bytes and applies the
   in-flight bounds, the :class:`~odradek.server.network.dispatch.Dispatcher` starts each
   request's handler and queues it, the
   :class:`~odradek.server.network.writer.ResponseWriter` writes the answers in request
   order. A handler over a client quota mutes the connection through :meth:`throttle`.
4. *Close.* :meth:`close` (a refused frame, a failed write, idle expiry), the client
   closing its side (its requests are answered first, within the idle timeout), or
   shutdown (:meth:`begin_shutdown`: stop reading, answer what is in flight, then
   close). :meth:`connection_lost` releases what the connection held. Handler tasks are
   not cancelled, as in Kafka: a request already accepted is processed, only its response
   is dropped; the server's shutdown cancels what is left.

Idle expiry follows Kafka's ``Selector``: a connection with nothing in flight and no
traffic for ``connections.max.idle.ms`` is closed.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import TYPE_CHECKING, Any, Protocol

from odradek.protocol.registry import HandlerRegistry
from odradek.security.principal import ANONYMOUS, NoMatchingRuleError
from odradek.server.client_quotas import ClientQuotaManager
from odradek.server.connection_quotas import host_address
from odradek.server.flow_control import FlowControl, RequestMemoryPool
from odradek.server.network.config import NetworkConfig
from odradek.server.network.dispatch import Dispatcher
from odradek.server.network.inflight import InFlightRequests
from odradek.server.network.reader import RequestReader
from odradek.server.network.sasl import SaslAuthenticator
from odradek.server.network.security import ListenerSecurity
from odradek.server.network.tls_transport import TlsTransport
from odradek.server.network.writer import (
    TLS_WRITE_BUFFER_BYTES,
    ResponseWriter,
    TlsResponseWriter,
)

if TYPE_CHECKING:
    from odradek.server.broker_stats import RequestStats

__all__ = ["ConnectionOwner", "KafkaConnection"]

# One logger for the whole network layer (its records have always been named so).
log = logging.getLogger("odradek.server.network")


class ConnectionOwner(Protocol):
    """What a connection uses of the server that accepted it (server-wide state)."""

    config: NetworkConfig
    registry: HandlerRegistry
    request_stats: RequestStats | None
    request_quota: ClientQuotaManager | None
    memory_pool: RequestMemoryPool | None
    security: ListenerSecurity

    def log_rejection(self, cause: str, host: str, message: str, level: int = ...) -> None:
        """Log a rejection of a peer's input, summarised per cause and host."""

    def forget(self, connection: KafkaConnection) -> None:
        """The connection is gone: release its slot in the connection quotas."""

    def track(self, task: asyncio.Future[Any]) -> None:
        """A handler went on as a task: the server waits for it or cancels it on stop."""


class KafkaConnection(asyncio.Protocol):
    """One client connection: its life (see the module's header) and its state."""

    def __init__(self, server: ConnectionOwner, index: int, host: str = "") -> None:
        self._server = server
        self._index = index
        # the peer's address as the acceptor normalised it (Java's getHostAddress())
        self._host = host
        self._config = server.config
        self._stats = server.request_stats
        self._quota = server.request_quota  # request_percentage (KIP-124)
        self._loop = asyncio.get_running_loop()
        self._requests = InFlightRequests(
            self._config.socket_request_max_bytes, server.memory_pool
        )
        self._transport: asyncio.Transport | None = None
        self._flow: FlowControl | None = None
        self._reader: RequestReader | None = None
        self._writer: asyncio.Task[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self.last_activity = self._loop.time()
        self.closing = False
        self.draining = False  # shutdown: no new requests, finish the in-flight ones
        self.half_closed = False  # the client closed its side: answer it, then close
        self.closed: asyncio.Future[None] = self._loop.create_future()
        self.peer: tuple[str, int] = ("", 0)
        self.connection_id = ""
        self.principal = ANONYMOUS
        self._tls = server.security.uses_tls
        # A SASL listener's authenticator (SaslHandshake / SaslAuthenticate use it).
        self.authenticator: SaslAuthenticator | None = None

    # -- 1. accept --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        peer = transport.get_extra_info("peername") or ("", 0)
        local = transport.get_extra_info("sockname") or ("", 0)
        host = self._host or _host_of(peer)
        self.peer = (host, int(peer[1]))
        local_host = _host_of(local)
        self.connection_id = f"{local_host}:{local[1]}-{host}:{peer[1]}-{self._index}"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            _tune_socket(sock, self._config)
        high = self._config.write_buffer_high_water_bytes
        if self._tls:  # a short queue of encrypted records: see TLS_WRITE_BUFFER_BYTES
            high = min(high, TLS_WRITE_BUFFER_BYTES)
        transport.set_write_buffer_limits(high=high, low=high // 4)
        # 2. authenticate (see the module's header)
        security = self._server.security
        if security.uses_tls:
            try:
                session = transport.get_extra_info("ssl_object")
                self.principal = security.tls_principal(
                    transport.get_extra_info("peercert"),
                    None if session is None else session.getpeercert(binary_form=True))
            except NoMatchingRuleError as e:
                security.stats.failed += 1
                self._server.log_rejection(
                    "authentication", self.peer[0],
                    f"Failed authentication with {self.peer[0]} on listener "
                    f"{security.name} ({e})")
                transport.abort()
                return
            if security.sasl is None:
                security.stats.successful += 1
        self._serve(transport, security)
        self._schedule_idle_check(self._config.connections_max_idle_ms / 1000)
        log.debug("connection %s accepted", self.connection_id)

    # -- 3. serve ---------------------------------------------------------------------

    def _serve(self, transport: asyncio.Transport, security: ListenerSecurity) -> None:
        """Join the reader, the dispatcher and the writer, and start the writer."""
        config, loop, requests = self._config, self._loop, self._requests
        self._flow = flow = FlowControl(transport)
        dispatcher = Dispatcher(
            loop, self._server.registry, requests, self, self.peer, self.connection_id,
            self._refuse, self._server.track, self._stats, self._quota,
            security.name, self.principal,
        )
        self._reader = reader = RequestReader(
            loop, flow, requests, dispatcher.dispatch, config.socket_request_max_bytes,
            config.queued_max_requests,
        )
        if security.sasl is not None:
            self.authenticator = SaslAuthenticator(
                self, security, loop, dispatcher, reader, requests, self._server.track,
            )
        # chosen once: TLS cannot take sendfile, its file regions go in bounded copies
        writer_class = TlsResponseWriter if security.uses_tls else ResponseWriter
        writer = writer_class(loop, self, transport, flow, requests, reader, self._stats)
        self._writer = loop.create_task(writer.run())

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        if reader is None or reader.stopped:
            return
        self.last_activity = self._loop.time()
        reader.receive(data)

    def buffer_received(self, data: memoryview) -> None:
        """Decrypted bytes from the TLS transport (:mod:`odradek.server.network.
        tls_transport`), handed over: kept without a copy."""
        reader = self._reader
        if reader is None or reader.stopped:
            return
        self.last_activity = self._loop.time()
        reader.receive_owned(data)

    def pause_writing(self) -> None:
        assert self._flow is not None
        self._flow.pause_writing()

    def resume_writing(self) -> None:
        assert self._flow is not None
        self._flow.resume_writing()

    @property
    def in_flight(self) -> int:
        return len(self._requests.entries)

    def describe(self) -> str:
        """The connection and what it is doing, for a log line (a shutdown that waited
        for it, above all)."""
        state = [f"{self.in_flight} request(s) in flight"]
        if self._tls:
            state.append("TLS")
        if self.closing:
            state.append("closing")
        if self.half_closed:
            state.append("client closed its side")
        return f"{self.connection_id} ({self.principal}, {', '.join(state)})"

    def throttle(self, throttle_ms: int) -> None:
        """Mute the connection for ``throttle_ms``: requests already read are served, no
        more are read or dispatched until then (KIP-219; a later, longer throttle
        extends it)."""
        if throttle_ms <= 0 or self.closing or self._reader is None:
            return
        self._reader.mute(throttle_ms)

    def limit_reads(self, max_bytes: int | None) -> None:
        """Read at most ``max_bytes`` from the socket at a time (``None``: the transport's
        own size again). A SASL connection reads little until it authenticates, so a
        hostile size prefix, refused at once, costs the broker one small read, not the
        256 KiB asyncio's socket transport reads at a time (issue 47: the pages of
        hundreds of such reads, freed between longer-lived objects, were kept by the
        allocator). On SASL_SSL the same holds for the TLS transport's reads, and so for
        the decrypted buffer each read is handed over in."""
        transport = self._transport
        if isinstance(transport, TlsTransport):
            transport.set_read_size(max_bytes)
            return
        if transport is None or self._tls or not hasattr(type(transport), "max_size"):
            return
        if max_bytes is None:
            vars(transport).pop("max_size", None)
        else:
            transport.max_size = max_bytes  # type: ignore[attr-defined]

    def _refuse(self, cause: str, reason: str) -> None:
        if self._reader is not None:
            self._reader.refuse(cause, reason)

    # -- 4. close ---------------------------------------------------------------------

    def eof_received(self) -> bool | None:
        # The client half-closed: finish what is in flight, then close (returning True
        # keeps our write side open until then).
        self.half_closed = True
        if not self._requests.entries or self._tls:
            return None  # (TLS has no half-close: its transport closes whatever we return)
        return True

    def close(self, reason: str, level: int = logging.INFO, cause: str | None = None) -> None:
        """Close the connection now, logging ``reason`` (a rejection of the peer's input,
        with its ``cause``, is logged through the server's summarising RejectionLog)."""
        if self.closing:
            return
        self._stop_reading()
        if cause is not None:
            message = f"closing connection {self.connection_id} from {self.peer}: {reason}"
            self._server.log_rejection(cause, self.peer[0], message, level)
        else:
            log.log(level, "closing connection %s from %s: %s", self.connection_id, self.peer,
                    reason)
        if self._transport is not None:
            self._transport.close()

    def abort(self) -> None:
        self._stop_reading()
        if self._transport is not None:
            self._transport.abort()

    def begin_shutdown(self) -> None:
        """Stop taking requests; close once the in-flight ones are answered."""
        self.draining = True
        if self._reader is not None:
            self._reader.stopped = True
        if self._flow is not None and not self.closing:
            self._flow.pause_reading()
        self._requests.wakeup.set()

    def _stop_reading(self) -> None:
        self.closing = True
        if self._reader is not None:
            self._reader.stopped = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self.authenticator is not None:
            self.authenticator.release()
        if self._reader is not None:
            self._reader.release()
        # Handler tasks are not cancelled: like Kafka, a request already accepted is
        # processed; only its response is dropped. stop() cancels stragglers.
        self._requests.clear(self._reader)
        if self._flow is not None:
            self._flow.release()
        if self._writer is not None and not self._writer.done():
            self._writer.cancel()
        self._server.forget(self)
        if not self.closed.done():
            self.closed.set_result(None)
        log.debug("connection %s closed (%s)", self.connection_id, exc or "normally")

    # -- idle expiry --------------------------------------------------------------------

    def _schedule_idle_check(self, delay: float) -> None:
        self._idle_timer = self._loop.call_later(max(delay, 0.001), self._check_idle)

    def _check_idle(self) -> None:
        if self.closing:
            return
        idle_s = self._config.connections_max_idle_ms / 1000
        if self._requests.entries and not self.half_closed:
            self._schedule_idle_check(idle_s)
            return
        # A client that closed its side waits for its answers at most as long as an idle
        # connection lives: a closed client behind a parked request (a Fetch with a wild
        # max_wait) would otherwise hold its socket, in CLOSE_WAIT, as long as the request.
        remaining = self.last_activity + idle_s - self._loop.time()
        if remaining <= 0:
            limit = self._config.connections_max_idle_ms
            self.close(f"idle for more than connections.max.idle.ms={limit}")
        else:
            self._schedule_idle_check(remaining)


def _host_of(address: tuple[Any, ...]) -> str:
    """A socket address's host as Kafka writes it (an IPv6 address's 4-tuple carries its
    scope id)."""
    return host_address(str(address[0]), int(address[3]) if len(address) > 3 else 0)


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
