"""Accepting and limiting connections; the server's life from bind to shutdown.

How it works: :class:`KafkaServer` is Kafka's ``SocketServer`` with its ``Acceptor``, for
one listener, on the event loop:

1. *Bind, then listen.* :meth:`KafkaServer.bind` takes the address without listening, so
   a port in use fails a broker's start-up before anything is created on disk;
   :meth:`KafkaServer.start` listens and starts the accept loop.
2. *Accept.* The server runs its own accept loop (Kafka's Acceptor) so that it can wait
   before accepting: for a free slot under ``max.connections`` and for the delay
   ``max.connection.creation.rate`` asks, while new connections wait in the listen
   backlog; a connection over ``max.connections.per.ip`` is closed at once (see
   :mod:`odradek.server.connection_quotas`). Each admitted socket becomes a
   :class:`~odradek.server.network.connection.KafkaConnection`.
3. *Rejections* are logged through :class:`~odradek.server.log_summary.RejectionLog`:
   the first of a cause and host in full, repeats as one count per window.
4. *Shutdown* (:meth:`KafkaServer.stop`): close the listener, stop reading on every
   connection, let in-flight requests finish and their responses flush for up to the
   shutdown timeout, then abort the connections and cancel the handlers left.

The server is the connections' :class:`~odradek.server.network.connection.ConnectionOwner`:
the server-wide state they share (config, registry, quotas, request metrics, the memory
pool) and the sets of live connections and running handler tasks.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import itertools
import logging
import socket
import time
from typing import TYPE_CHECKING, Any, Final

from odradek.protocol.registry import HandlerRegistry
from odradek.server.client_quotas import ClientQuotaManager
from odradek.server.connection_quotas import ConnectionQuotas, host_address
from odradek.server.flow_control import RequestMemoryPool
from odradek.server.log_summary import RejectionLog, Summary
from odradek.server.network.config import NetworkConfig
from odradek.server.network.connection import KafkaConnection
from odradek.server.network.security import ListenerSecurity
from odradek.server.network.tls_transport import TlsTransport, handshake

if TYPE_CHECKING:
    from odradek.server.broker_stats import RequestStats

__all__ = ["KafkaServer"]

# One logger for the whole network layer (its records have always been named so).
log = logging.getLogger("odradek.server.network")

# After accept fails for want of descriptors or memory, wait this long before the next
# (asyncio's own server waits a second; Kafka's Acceptor logs and goes on).
ACCEPT_RETRY_DELAY_S: Final = 0.1
_ACCEPT_FAILED: Final = "accept failed"
# A TLS client that has not finished its handshake in this long, or in
# connections.max.idle.ms if that is shorter, is dropped (the JVM broker's handshake has no
# bound of its own; the idle timeout ends it there). Until then it holds its SSLObject and
# what it has sent of a TLS record, at most HANDSHAKE_READ_BYTES past OpenSSL's buffer.
TLS_HANDSHAKE_TIMEOUT_S: Final = 10.0
_ACCEPT_PEER_ERRNOS: Final = frozenset({errno.ECONNABORTED, errno.EPROTO, errno.EAGAIN})


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
        security: ListenerSecurity | None = None,
    ) -> None:
        self.registry = registry
        # The listener's name, security protocol, TLS context and SASL settings.
        self.security = security or ListenerSecurity()
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
                left = [c for c in self._connections if not c.closed.done()]
                log.warning("shutdown timed out after %g s; aborting %d connections%s",
                            timeout, len(self._connections),
                            ": " + "; ".join(c.describe() for c in left[:5]) if left else "")
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
                    self.log_rejection(
                        _ACCEPT_FAILED, f"{self.host}:{self.port}",
                        f"accepting a connection failed: {e}", logging.WARNING,
                    )
                    await asyncio.sleep(ACCEPT_RETRY_DELAY_S)
                continue
            accepted += 1
            if accepted % burst == 0:
                await asyncio.sleep(0)
            # the peer's address as Kafka writes it, once (host ACLs, per-IP limits, logs)
            scope = address[3] if len(address) > 3 else 0
            self._admit(loop, sock, host_address(str(address[0]), scope))

    def _admit(self, loop: asyncio.AbstractEventLoop, sock: socket.socket, host: str) -> None:
        """An accepted socket: closed at once over its address's limit, else counted and
        handed to a new :class:`KafkaConnection`."""
        limit = self.quotas.inc(host)
        if limit is not None:
            sock.close()
            self.log_rejection(
                "max.connections.per.ip", host,
                f"rejected connection from {host}, address already has the configured "
                f"maximum of {limit} connections",
            )
            return
        sock.setblocking(False)
        connection = KafkaConnection(self, next(self._counter), host)
        self._counted[connection] = host
        self._connections.add(connection)
        self.track(loop.create_task(self._attach(loop, connection, sock)))

    async def _attach(
        self, loop: asyncio.AbstractEventLoop, connection: KafkaConnection, sock: socket.socket
    ) -> None:
        context = self.security.ssl_context
        try:
            if context is None:
                await loop.connect_accepted_socket(functools.partial(_same, connection), sock)
            else:  # the TLS handshake runs first; connection_made follows it
                async with asyncio.timeout(min(
                        TLS_HANDSHAKE_TIMEOUT_S, self.config.connections_max_idle_ms / 1000)):
                    session, incoming, outgoing = await handshake(loop, sock, context)
                TlsTransport(loop, sock, session, incoming, outgoing, connection).start()
        except BaseException as e:  # the socket died between accept and setup, or stop()
            peer = self._counted.get(connection, "?")
            sock.close()
            self.forget(connection)
            if not isinstance(e, Exception):
                raise
            if context is not None and isinstance(e, ConnectionError):
                # The client hung up mid-handshake (Kafka's SslTransportLayer: an EOF
                # during the handshake is an IOException, a disconnection, not an
                # authentication failure): a probe, or a client that gave up waiting.
                log.debug("connection from %s closed during the TLS handshake: %s", peer,
                          _handshake_reason(e))
                return
            if context is not None:
                # Kafka: "Failed authentication with /host (SSL handshake failed)"
                self.security.stats.failed += 1
                self.log_rejection(
                    "ssl handshake", peer,
                    f"Failed authentication with {peer} on listener {self.security.name} "
                    f"(SSL handshake failed: {_handshake_reason(e)})",
                )
                return
            log.debug("could not set up a connection from %s: %r", connection.peer, e)

    # -- rejected connections, logged without flooding ------------------------------------

    def log_rejection(
        self, cause: str, host: str, message: str, level: int = logging.INFO
    ) -> None:
        """Log a rejection of a peer's input: the first of a cause and host in full, the
        rest counted into a summary per window."""
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

    def forget(self, connection: KafkaConnection) -> None:
        """The connection is gone: release its slot in the connection quotas."""
        self._connections.discard(connection)
        host = self._counted.pop(connection, None)
        if host is not None:
            self.quotas.dec(host)

    def track(self, task: asyncio.Future[Any]) -> None:
        """A task the server waits for on stop (a handler that went on waiting, a
        connection being set up), and cancels if it outlives the shutdown timeout."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


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


def _handshake_reason(e: BaseException) -> str:
    """Why a TLS handshake failed, in a line (an SSLError's reason, else the error)."""
    reason = getattr(e, "reason", None)
    if reason:
        return str(reason)
    if isinstance(e, TimeoutError):
        return "timed out"
    return str(e) or type(e).__name__
