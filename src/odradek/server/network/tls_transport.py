"""The TLS transport of a broker connection: OpenSSL driven straight from the event loop.

How it works: this plays the part of Kafka's ``SslTransportLayer`` (its ``netReadBuffer``
and ``netWriteBuffer`` around an ``SSLEngine``), replacing asyncio's TLS layer
(``asyncio.sslproto``) on the broker's TLS listeners with less Python and fewer copies
between the socket and the connection:

- *Handshake.* :func:`handshake` wraps an accepted socket in an ``ssl.SSLObject`` over
  two memory BIOs and drives ``do_handshake`` from the loop's readiness callbacks
  (``add_reader`` / ``add_writer``), within the acceptor's timeout, reading at most
  :data:`HANDSHAKE_READ_BYTES` at a time. A failure sends OpenSSL's alert, best effort,
  and raises the ``SSLError``.
- *Reading.* When the socket is readable, :class:`TlsTransport` receives up to its read
  size (:data:`RECEIVE_BYTES`, or less: :meth:`TlsTransport.set_read_size`) into the
  receive buffer (``recv_into``: no new object), feeds them to the incoming BIO, and
  decrypts every whole record there into a single new ``bytearray`` handed over to the
  protocol's ``buffer_received`` (the frame decoder keeps it as it is: no join, no copy).
  The receive buffer is one per thread, shared by every handshake and connection of its
  event loop: the incoming BIO copies what it is given, so the buffer is free again
  before the callback returns. (One per connection, zero-filled, was 256 KiB of resident
  memory per TLS client, unauthenticated or stalled mid-handshake ones included: issue
  47, bench/README.md "Hostile frames".) asyncio's layer decrypted into a new ``bytes``
  per TLS record (16 KiB), joined them, and the frame decoder then joined them again.
- *Writing.* :meth:`TlsTransport.write` and :meth:`~TlsTransport.writelines` encrypt at
  once (the caller may reuse its buffer afterwards: the response writer reads file
  regions into one reused buffer), read the records out of the outgoing BIO and send
  them; what the socket does not take is queued as views of those bytes and sent when it
  is writable, never copied again. asyncio's layer re-copied the unsent rest of each
  piece twice (its socket transport's buffer), which made a short queue necessary.
- *Flow control* as an asyncio transport: ``pause_writing`` past the high-water mark of
  encrypted bytes queued, ``resume_writing`` at the low one; ``pause_reading`` removes
  the reader.
- *Close.* :meth:`TlsTransport.close` sends what is queued (within
  :data:`CLOSE_TIMEOUT_S`), then a ``close_notify`` (without waiting for the peer's, as
  Kafka's ``SslTransportLayer.close``), then closes the socket;
  :meth:`~TlsTransport.abort` closes at once. The peer's ``close_notify`` or end of
  stream is ``eof_received`` (TLS has no half-close: the transport then closes).

A non-blocking ``ssl.SSLSocket`` was measured too, and cost more on both sides here:
without OpenSSL's read-ahead (which Python's ``ssl`` does not expose) it makes two
``recv`` calls per TLS record, and a ``send`` per record (bench/README.md, "Security").
The plaintext listeners never see this module: their connections keep asyncio's socket
transport and ``sendfile``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import errno
import logging
import socket
import ssl
import threading
from typing import Any, Final, Protocol

__all__ = ["CLOSE_TIMEOUT_S", "HANDSHAKE_READ_BYTES", "RECEIVE_BYTES", "TlsProtocol",
           "TlsTransport", "handshake"]

log = logging.getLogger("odradek.server.network")

# Bytes received from the socket at a time (asyncio's read size). One read then decrypts
# into one buffer of about this size.
RECEIVE_BYTES: Final = 256 * 1024
# Bytes received at a time during the handshake: a client's flights are a few KiB (a
# ClientHello, a certificate chain), and what is received waits in the incoming BIO until
# OpenSSL takes it, so a client that stalls mid-handshake holds at most about this much.
HANDSHAKE_READ_BYTES: Final = 16 * 1024
# The most plaintext one TLS record carries: a partial record already taken from the
# incoming BIO by OpenSSL may complete with the bytes just received, so a read of the
# BIO's pending bytes may yield up to this much more.
_RECORD_BYTES: Final = 16 * 1024
# A closing connection whose queue the peer does not read is aborted after this long
# (asyncio's TLS layer has the same bound, its ssl_shutdown_timeout).
CLOSE_TIMEOUT_S: Final = 30.0
# asyncio's default write-buffer limits (the connection sets its own).
_DEFAULT_HIGH_WATER: Final = 64 * 1024
_SEND_ERRNOS: Final = frozenset({errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR})


_thread_buffers = threading.local()


def _receive_buffer() -> memoryview:
    """This thread's receive buffer (see the module's header): one event loop runs per
    thread, and every use of the buffer ends before its callback returns."""
    view: memoryview | None = getattr(_thread_buffers, "view", None)
    if view is None:
        view = _thread_buffers.view = memoryview(bytearray(RECEIVE_BYTES))
    return view


class TlsProtocol(Protocol):
    """What the transport calls on its connection: asyncio's protocol callbacks, with the
    data handed over as a buffer the connection may keep."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def buffer_received(self, data: memoryview) -> None: ...

    def eof_received(self) -> bool | None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...

    def pause_writing(self) -> None: ...

    def resume_writing(self) -> None: ...


async def handshake(
    loop: asyncio.AbstractEventLoop, sock: socket.socket, context: ssl.SSLContext
) -> tuple[ssl.SSLObject, ssl.MemoryBIO, ssl.MemoryBIO]:
    """The server side of a TLS handshake on the non-blocking ``sock``: the session's
    ``SSLObject`` and its incoming and outgoing BIOs. Raises ``ssl.SSLError`` (with
    OpenSSL's reason; its alert is sent first) or ``ConnectionError``; the caller bounds
    the time and closes the socket on failure."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    session = context.wrap_bio(incoming, outgoing, server_side=True)
    fd = sock.fileno()
    while True:
        try:
            session.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        except ssl.SSLError:
            with contextlib.suppress(OSError):  # the alert, if the socket takes it
                sock.send(outgoing.read())
            raise
        await _send_all(loop, sock, fd, outgoing.read())
        if done:
            return session, incoming, outgoing
        await _wait(loop, fd, False)
        buffer = _receive_buffer()  # taken and given back with no await between
        try:
            received = sock.recv_into(buffer, HANDSHAKE_READ_BYTES)
        except (BlockingIOError, InterruptedError):
            continue
        if not received:
            raise ConnectionResetError("the client closed the connection during the TLS "
                                       "handshake")
        incoming.write(buffer[:received])


async def _send_all(loop: asyncio.AbstractEventLoop, sock: socket.socket, fd: int,
                    data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view):]
        except (BlockingIOError, InterruptedError):
            await _wait(loop, fd, True)


async def _wait(loop: asyncio.AbstractEventLoop, fd: int, writing: bool) -> None:
    ready: asyncio.Future[None] = loop.create_future()
    add, remove = ((loop.add_writer, loop.remove_writer) if writing
                   else (loop.add_reader, loop.remove_reader))
    add(fd, _resolve, ready)
    try:
        await ready
    finally:
        remove(fd)


def _resolve(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


class TlsTransport(asyncio.Transport):
    """An established TLS connection's transport (see the module's header)."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        session: ssl.SSLObject,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
        protocol: TlsProtocol,
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._session = session
        self._incoming = incoming
        self._outgoing = outgoing
        self._protocol = protocol
        self._read_size = RECEIVE_BYTES
        self._queue: collections.deque[memoryview] = collections.deque()  # unsent records
        self._queued = 0  # bytes in _queue
        self._high_water = _DEFAULT_HIGH_WATER
        self._low_water = _DEFAULT_HIGH_WATER // 4
        self._writing_paused = False
        self._reading = False
        self._closing = False  # close() or abort() called, or the connection failed
        self._lost = False  # connection_lost scheduled
        self._close_timer: asyncio.TimerHandle | None = None
        self._extra: dict[str, Any] = {
            "socket": sock, "peername": _address(sock.getpeername),
            "sockname": _address(sock.getsockname), "ssl_object": session,
            "peercert": session.getpeercert(), "cipher": session.cipher(),
            "compression": session.compression(), "sslcontext": session.context,
        }

    def start(self) -> None:
        """Tell the protocol it is connected, then serve: decrypt what came with the end
        of the handshake, and read."""
        self._protocol.connection_made(self)
        if self._closing:  # the protocol refused the connection (its principal)
            return
        self._reading = True
        self._loop.add_reader(self._fd, self._read_ready)
        if self._incoming.pending:
            self._decrypt()

    # -- asyncio.BaseTransport -----------------------------------------------------------

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self._extra.get(name, default)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        """Send what is queued and a ``close_notify``, then close the socket."""
        if self._closing:
            return
        self._closing = True
        self._stop_reading()
        if not self._queue:
            self._finish()
        else:  # sent when the socket takes it, unless the peer stops reading
            self._close_timer = self._loop.call_later(CLOSE_TIMEOUT_S, self.abort)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[return-value]

    # -- reading ---------------------------------------------------------------------------

    def is_reading(self) -> bool:
        return self._reading

    def pause_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def resume_reading(self) -> None:
        if not self._reading and not self._closing:
            self._reading = True
            self._loop.add_reader(self._fd, self._read_ready)

    def set_read_size(self, max_bytes: int | None) -> None:
        """Receive at most ``max_bytes`` at a time (``None``: :data:`RECEIVE_BYTES`
        again); one read then decrypts into a buffer of at most this plus a record."""
        self._read_size = RECEIVE_BYTES if max_bytes is None else min(max_bytes,
                                                                      RECEIVE_BYTES)

    def _stop_reading(self) -> None:
        if self._reading:
            self._reading = False
            self._loop.remove_reader(self._fd)

    def _read_ready(self) -> None:
        buffer = _receive_buffer()  # the incoming BIO copies it before this returns
        try:
            received = self._sock.recv_into(buffer, self._read_size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._fail(e)
            return
        if not received:
            self._end_of_stream()
            return
        self._incoming.write(buffer[:received])
        self._decrypt()

    def _decrypt(self) -> None:
        """Decrypt every whole record in the incoming BIO into one new buffer, and hand
        it to the protocol; send what reading made OpenSSL write (a KeyUpdate's answer)."""
        session = self._session
        size = self._incoming.pending + _RECORD_BYTES
        plain = bytearray(size)
        view = memoryview(plain)
        filled = 0
        closed = False  # the peer's close_notify: read answers 0
        try:
            while True:
                if filled == size:  # more than the BIO promised: hand this over, go on
                    self._protocol.buffer_received(view)
                    if self._closing:
                        return
                    plain = bytearray(size)
                    view = memoryview(plain)
                    filled = 0
                got: int = session.read(size - filled, view[filled:])  # type: ignore[assignment]
                if not got:
                    closed = True
                    break
                filled += got
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLError as e:  # SSLZeroReturnError included: closed uncleanly
            self._fail(e)
            return
        if self._outgoing.pending:
            self._send(self._outgoing.read())
        if filled and not self._closing:
            self._protocol.buffer_received(view[:filled])
        if closed:
            self._end_of_stream()

    def _end_of_stream(self) -> None:
        self._stop_reading()
        if self._closing:
            return
        self._protocol.eof_received()  # whatever it answers: TLS has no half-close
        self.close()

    # -- writing ---------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` now (the caller may reuse its buffer) and send it, queueing
        what the socket does not take."""
        if self._closing or not data:
            return
        try:
            self._session.write(data)
        except ssl.SSLError as e:
            self._fail(e)
            return
        self._send(self._outgoing.read())

    def writelines(self, list_of_data: Any) -> None:
        """:meth:`write` of each buffer, sent together."""
        if self._closing:
            return
        write = self._session.write
        try:
            for data in list_of_data:
                if data:
                    write(data)
        except ssl.SSLError as e:
            self._fail(e)
            return
        self._send(self._outgoing.read())

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("TLS has no half-close")

    def get_write_buffer_size(self) -> int:
        return self._queued

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._low_water, self._high_water

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        if high is None:
            high = _DEFAULT_HIGH_WATER if low is None else 4 * low
        if low is None:
            low = high // 4
        if not high >= low >= 0:
            raise ValueError(f"high ({high!r}) must be >= low ({low!r}) must be >= 0")
        self._high_water, self._low_water = high, low
        self._check_high_water()

    def _send(self, records: bytes) -> None:
        """Send encrypted ``records``, or queue them behind what is queued already."""
        if not records:
            return
        if self._queue:
            self._queue.append(memoryview(records))
            self._queued += len(records)
            self._check_high_water()
            return
        try:
            sent = self._sock.send(records)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as e:
            self._fail(e)
            return
        if sent < len(records):
            self._queue.append(memoryview(records)[sent:])
            self._queued += len(records) - sent
            self._loop.add_writer(self._fd, self._write_ready)
            self._check_high_water()

    def _write_ready(self) -> None:
        queue, sock = self._queue, self._sock
        try:
            while queue:
                head = queue[0]
                sent = sock.send(head)
                self._queued -= sent
                if sent < len(head):
                    queue[0] = head[sent:]
                    break
                queue.popleft()
        except (BlockingIOError, InterruptedError):
            pass
        except OSError as e:
            self._fail(e)
            return
        if self._writing_paused and self._queued <= self._low_water:
            self._writing_paused = False
            self._protocol.resume_writing()
        if not queue:
            self._loop.remove_writer(self._fd)
            if self._closing:
                self._finish()

    def _check_high_water(self) -> None:
        if not self._writing_paused and self._queued > self._high_water:
            self._writing_paused = True
            self._protocol.pause_writing()

    # -- closing ---------------------------------------------------------------------------

    def abort(self) -> None:
        """Close the socket now, dropping what is queued."""
        self._closing = True
        self._stop_reading()
        self._release(None)

    def _finish(self) -> None:
        """Everything is sent: a ``close_notify``, best effort, then the socket closes."""
        with contextlib.suppress(ssl.SSLError):
            self._session.unwrap()  # writes close_notify; wants the peer's: not awaited
        with contextlib.suppress(OSError):
            self._sock.send(self._outgoing.read())
        self._release(None)

    def _fail(self, exc: Exception) -> None:
        """A socket or TLS error: the connection is over."""
        log.debug("TLS connection %s failed: %r", self._extra["peername"], exc)
        self._closing = True
        self._stop_reading()
        self._release(exc)

    def _release(self, exc: Exception | None) -> None:
        if self._lost:
            return
        self._lost = True
        if self._close_timer is not None:
            self._close_timer.cancel()
        self._loop.remove_writer(self._fd)
        self._queue.clear()
        self._queued = 0
        self._loop.call_soon(self._connection_lost, exc)

    def _connection_lost(self, exc: Exception | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()


def _address(get: Any) -> Any:
    try:
        return get()
    except OSError:
        return None
