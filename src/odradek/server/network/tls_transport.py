"""A broker connection's TLS transport: OpenSSL driven from the loop, large reads on a thread.

How it works: this plays the part of Kafka's ``SslTransportLayer`` (its ``netReadBuffer``
and ``netWriteBuffer`` around an ``SSLEngine``), replacing asyncio's TLS layer
(``asyncio.sslproto``) on the broker's TLS listeners with less Python and fewer copies
between the socket and the connection:

- *Handshake.* :func:`handshake` wraps an accepted socket in an ``ssl.SSLObject`` over
  two memory BIOs and drives ``do_handshake`` from the loop's readiness callbacks
  (``add_reader`` / ``add_writer``), within the acceptor's timeout. A failure sends
  OpenSSL's alert, best effort, and raises the ``SSLError``.
- *Reading.* When the socket is readable, :class:`TlsTransport` receives up to
  :data:`RECEIVE_BYTES` into one reused buffer (``recv_into``: no new object), feeds
  them to the incoming BIO, and decrypts every whole record there into a single new
  ``bytearray`` handed over to the protocol's ``buffer_received`` (the frame decoder
  keeps it as it is: no join, no copy). asyncio's layer decrypted into a new ``bytes``
  per TLS record (16 KiB), joined them, and the frame decoder then joined them again.
- *Large reads off the loop.* A read of :data:`OFFLOAD_BYTES` or more (a large request
  arriving faster than the loop takes it) is not decrypted on the event loop: its
  buffer goes to the listener's :class:`TlsDecryptor`, a thread that feeds it to the
  incoming BIO and decrypts it while the loop goes on (CPython's ``_ssl`` releases the
  GIL inside each ``SSL_read``, so decryption runs beside the loop's Python). Kafka
  spreads TLS work over its ``num.network.threads`` processors; here one thread per
  listener takes the cipher off the one loop. A connection has at most one decryption
  in flight, and while it is the session and its BIOs belong to the thread: what
  arrives meanwhile waits as ciphertext in the transport's backlog (past
  :data:`BACKLOG_BYTES` the transport stops reading: memory stays bounded), and what
  the protocol writes meanwhile is copied and encrypted once the decryption is done, in
  order (counted in the write buffer, so the writer pauses as usual). The plaintext
  comes back through ``call_soon_threadsafe`` and is handed over as an inline read's;
  the next decryption starts then. A close waits for the decryption in flight (its
  plaintext is dropped), an abort does not (the thread's answer is dropped). Small reads
  (small requests, their latency) are decrypted at once on the loop, as before.
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
import functools
import logging
import queue
import socket
import ssl
import threading
from collections.abc import Callable
from typing import Any, Final, Protocol

__all__ = ["CLOSE_TIMEOUT_S", "OFFLOAD_BYTES", "RECEIVE_BYTES", "TlsDecryptor", "TlsProtocol",
           "TlsTransport", "handshake"]

log = logging.getLogger("odradek.server.network")

# Bytes received from the socket at a time (asyncio's read size). One read then decrypts
# into one buffer of about this size.
RECEIVE_BYTES: Final = 256 * 1024
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
# A read of at least this many bytes is decrypted by the decryptor's thread, off the
# event loop; a smaller one (a small request: its latency) is decrypted at once.
OFFLOAD_BYTES: Final = 64 * 1024
# Ciphertext received while a decryption is in flight is kept for the next one; past
# this many bytes the transport stops reading until the decryption is done.
BACKLOG_BYTES: Final = 2 * RECEIVE_BYTES
# Receive buffers handed to the decryptor come back to a pool of at most this many.
_SPARE_BUFFERS: Final = 8
# How long stop() waits for the decryptor's thread (a decryption takes a millisecond).
_STOP_TIMEOUT_S: Final = 5.0


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
    buffer = bytearray(RECEIVE_BYTES)
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
        try:
            received = sock.recv_into(buffer)
        except (BlockingIOError, InterruptedError):
            continue
        if not received:
            raise ConnectionResetError("the client closed the connection during the TLS "
                                       "handshake")
        incoming.write(memoryview(buffer)[:received])


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


class TlsDecryptor:
    """A thread that decrypts large reads of a listener's TLS connections off the event
    loop (see the module's header). Jobs run in the order submitted; each connection has
    at most one in flight, so its records are decrypted in order."""

    def __init__(self, name: str = "tls-decryptor") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._stopped = False
        # Receive buffers the jobs are done with, taken back by the transports (list
        # append and pop are atomic: the thread and the loop share it without a lock).
        self.spares: list[bytearray] = []

    def start(self) -> None:
        if self._thread is None and not self._stopped:
            self._thread = threading.Thread(target=self._run, name=self._name, daemon=True)
            self._thread.start()

    def submit(self, job: Callable[[], None]) -> bool:
        """Queue ``job`` for the thread; False once stopped (the caller does it itself)."""
        if self._stopped or self._thread is None:
            return False
        self._jobs.put(job)
        return True

    def stop(self) -> None:
        """Let the jobs queued finish, then end the thread (its connections are closed
        by then: a job's answer to a closed connection is dropped)."""
        if self._stopped:
            return
        self._stopped = True
        thread, self._thread = self._thread, None
        if thread is not None:
            self._jobs.put(None)
            thread.join(_STOP_TIMEOUT_S)
        self.spares.clear()

    def _run(self) -> None:
        jobs = self._jobs
        while (job := jobs.get()) is not None:
            job()


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
        decryptor: TlsDecryptor | None = None,
    ) -> None:
        super().__init__()
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._session = session
        self._incoming = incoming
        self._outgoing = outgoing
        self._protocol = protocol
        self._decryptor = decryptor
        self._receive_buffer = bytearray(RECEIVE_BYTES)
        self._receive_view = memoryview(self._receive_buffer)
        self._queue: collections.deque[memoryview] = collections.deque()  # unsent records
        self._queued = 0  # bytes in _queue
        self._high_water = _DEFAULT_HIGH_WATER
        self._low_water = _DEFAULT_HIGH_WATER // 4
        self._writing_paused = False
        self._reading = False  # the socket's reader is registered
        self._paused = False  # the protocol paused reading
        self._closing = False  # close() or abort() called, or the connection failed
        self._lost = False  # connection_lost scheduled
        self._close_timer: asyncio.TimerHandle | None = None
        # A decryption in flight on the decryptor's thread: the session and its BIOs are
        # the thread's until it answers. Meanwhile what arrives waits in the backlog
        # (ciphertext; past BACKLOG_BYTES reading stops) and what the protocol writes in
        # _deferred (plaintext copies, encrypted when the decryption is done).
        self._decrypting = False
        self._backlog: list[memoryview] = []
        self._backlog_bytes = 0
        self._deferred: list[bytes] = []
        self._deferred_bytes = 0
        self._eof_pending = False  # the peer's end of stream, behind the backlog
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
        self._update_reader()
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
        self._update_reader()
        if not self._queue and not self._decrypting:
            self._finish()
        else:  # sent when the socket takes it, unless the peer stops reading
            self._close_timer = self._loop.call_later(CLOSE_TIMEOUT_S, self.abort)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        self._protocol = protocol  # type: ignore[assignment]

    def get_protocol(self) -> asyncio.BaseProtocol:
        return self._protocol  # type: ignore[return-value]

    # -- reading ---------------------------------------------------------------------------

    def is_reading(self) -> bool:
        return not self._paused and not self._closing

    def pause_reading(self) -> None:
        if not self._paused:
            self._paused = True
            self._update_reader()

    def resume_reading(self) -> None:
        if self._paused and not self._closing:
            self._paused = False
            if self._backlog:  # on the next turn: this may be called mid-delivery
                self._loop.call_soon(self._resume_backlog)
            self._update_reader()

    def _resume_backlog(self) -> None:
        if self._backlog and not (self._decrypting or self._paused or self._closing):
            self._decrypt_backlog()

    def _update_reader(self) -> None:
        """Read from the socket unless closing, paused by the protocol, at the end of the
        stream, or holding a full backlog behind a decryption."""
        want = not (self._closing or self._paused or self._eof_pending
                    or self._backlog_bytes >= BACKLOG_BYTES)
        if want != self._reading:
            self._reading = want
            if want:
                self._loop.add_reader(self._fd, self._read_ready)
            else:
                self._loop.remove_reader(self._fd)

    def _read_ready(self) -> None:
        try:
            received = self._sock.recv_into(self._receive_buffer)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._fail(e)
            return
        if not received:
            self._eof_pending = True
            self._update_reader()
            if not self._decrypting and not self._backlog:  # else what came before first
                self._end_of_stream()
            return
        if self._decrypting or self._backlog:
            self._keep(received)
            if self._backlog_bytes >= BACKLOG_BYTES:
                self._update_reader()
            return
        if received >= OFFLOAD_BYTES and self._decryptor is not None:
            self._keep(received)
            self._decrypt_backlog()
            return
        self._incoming.write(self._receive_view[:received])
        self._decrypt()

    def _keep(self, received: int) -> None:
        """Put what was just received in the backlog: a large read's buffer itself (the
        transport receives into a spare from then on), a small one copied."""
        if received >= OFFLOAD_BYTES:
            self._backlog.append(self._receive_view[:received])
            spares = self._decryptor.spares if self._decryptor is not None else None
            buffer = spares.pop() if spares else bytearray(RECEIVE_BYTES)
            self._receive_buffer = buffer
            self._receive_view = memoryview(buffer)
        else:
            self._backlog.append(memoryview(self._receive_view[:received].tobytes()))
        self._backlog_bytes += received

    def _decrypt_backlog(self) -> None:
        """Hand the backlog to the decryptor's thread (inline if it has stopped)."""
        chunks, self._backlog, self._backlog_bytes = self._backlog, [], 0
        decryptor = self._decryptor
        self._decrypting = True
        if decryptor is None or not decryptor.submit(
                functools.partial(self._decrypt_off_loop, chunks, decryptor.spares)):
            self._decrypting = False
            for chunk in chunks:
                self._incoming.write(chunk)
            self._decrypt()
            if self._eof_pending:
                self._end_of_stream()
        self._update_reader()

    def _decrypt_off_loop(self, chunks: list[memoryview], spares: list[bytearray]) -> None:
        """On the decryptor's thread: feed ``chunks`` to the incoming BIO, decrypt every
        whole record there, and give the plaintext to the loop (:meth:`_decrypted`)."""
        pieces: list[memoryview] = []
        closed = False
        error: Exception | None = None
        try:
            write = self._incoming.write
            for chunk in chunks:
                write(chunk)
                owner = chunk.obj
                chunk.release()
                if type(owner) is bytearray and len(spares) < _SPARE_BUFFERS:
                    spares.append(owner)
            closed = _read_records(self._session, self._incoming.pending, pieces)
        except Exception as e:  # SSLError: the connection fails, on the loop
            error = e
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            self._loop.call_soon_threadsafe(self._decrypted, pieces, closed, error)

    def _decrypted(self, pieces: list[memoryview], closed: bool,
                   error: Exception | None) -> None:
        """On the loop: a decryption is done. Send what it made OpenSSL write, encrypt
        the writes deferred meanwhile, hand the plaintext to the protocol, go on."""
        self._decrypting = False
        if self._lost:
            return
        if error is not None:
            self._fail(error)
            return
        if self._outgoing.pending:
            self._send(self._outgoing.read())
        if self._deferred:  # written before any close(): sent in any case
            deferred, self._deferred, self._deferred_bytes = self._deferred, [], 0
            self._encrypt(deferred)
            if self._lost:
                return
            self._check_low_water()
        if self._closing:  # close() came meanwhile: it waited for this
            if not self._queue:
                self._finish()
            return
        protocol = self._protocol
        for piece in pieces:
            protocol.buffer_received(piece)
            if self._closing:
                return
        if closed:
            self._end_of_stream()
        elif self._backlog and not self._paused:
            self._decrypt_backlog()
        elif self._eof_pending and not self._backlog:
            self._end_of_stream()
        else:
            self._update_reader()

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
        if self._closing:
            return
        self._eof_pending = True
        self._update_reader()
        self._protocol.eof_received()  # whatever it answers: TLS has no half-close
        self.close()

    # -- writing ---------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` now (the caller may reuse its buffer) and send it, queueing
        what the socket does not take."""
        if self._closing or not data:
            return
        if self._decrypting:
            self._defer(bytes(data))
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
        if self._decrypting:
            self._defer(b"".join(list_of_data))
            return
        self._encrypt(list_of_data)

    def _encrypt(self, list_of_data: Any) -> None:
        write = self._session.write
        try:
            for data in list_of_data:
                if data:
                    write(data)
        except ssl.SSLError as e:
            self._fail(e)
            return
        self._send(self._outgoing.read())

    def _defer(self, data: bytes) -> None:
        """A write while the session is the decryptor's: kept (a copy) until it is done."""
        if data:
            self._deferred.append(data)
            self._deferred_bytes += len(data)
            self._check_high_water()

    def can_write_eof(self) -> bool:
        return False

    def write_eof(self) -> None:
        raise NotImplementedError("TLS has no half-close")

    def get_write_buffer_size(self) -> int:
        return self._queued + self._deferred_bytes

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
        self._check_low_water()
        if not queue:
            self._loop.remove_writer(self._fd)
            if self._closing and not self._decrypting:
                self._finish()

    def _check_high_water(self) -> None:
        if not self._writing_paused and self._queued + self._deferred_bytes > self._high_water:
            self._writing_paused = True
            self._protocol.pause_writing()

    def _check_low_water(self) -> None:
        if self._writing_paused and self._queued + self._deferred_bytes <= self._low_water:
            self._writing_paused = False
            self._protocol.resume_writing()

    # -- closing ---------------------------------------------------------------------------

    def abort(self) -> None:
        """Close the socket now, dropping what is queued (a decryption in flight goes on
        on its thread; its answer is dropped)."""
        self._closing = True
        self._update_reader()
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
        self._update_reader()
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
        self._backlog.clear()
        self._backlog_bytes = 0
        self._deferred.clear()
        self._deferred_bytes = 0
        self._loop.call_soon(self._connection_lost, exc)

    def _connection_lost(self, exc: Exception | None) -> None:
        try:
            self._protocol.connection_lost(exc)
        finally:
            self._sock.close()


def _read_records(session: ssl.SSLObject, pending: int, pieces: list[memoryview]) -> bool:
    """Decrypt every whole record in ``session``'s incoming BIO (``pending`` bytes) into
    ``pieces``; True if the peer's ``close_notify`` came. Raises ``ssl.SSLError``."""
    size = pending + _RECORD_BYTES
    view = memoryview(bytearray(size))
    filled = 0
    read = session.read
    try:
        while True:
            if filled == size:  # more than the BIO promised: keep this, go on
                pieces.append(view)
                view = memoryview(bytearray(size))
                filled = 0
            got: int = read(size - filled, view[filled:])  # type: ignore[assignment]
            if not got:
                return True
            filled += got
    except ssl.SSLWantReadError:
        return False
    finally:
        if filled:
            pieces.append(view[:filled])


def _address(get: Any) -> Any:
    try:
        return get()
    except OSError:
        return None
