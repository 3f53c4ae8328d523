"""The broker's own TLS transport (odradek.server.network.tls_transport) over real sockets.

A :class:`KafkaServer` with an SSL listener (certificates from trustme) serves ApiVersions
and a test Heartbeat whose ``group_id`` says what to answer ("region:N": a response
carrying an N-byte file region; "wait:NAME": the same once the test sets the event NAME;
anything else answered at once); the clients are asyncio's and Python's own TLS sockets.

The tests of large reads decrypted off the event loop hold the listener's decryptor
thread with a job of their own that waits on a ``threading.Event`` (the real thread, kept
busy): a connection's decryption then stays in flight, deterministically, until the test
lets it go.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import fcntl
import os
import socket
import ssl
import struct
import tempfile
import termios
import threading
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import trustme
from kio.schema.api_versions.v3.request import ApiVersionsRequest
from kio.schema.heartbeat.v4.request import HeartbeatRequest
from kio.schema.heartbeat.v4.response import HeartbeatResponse
from kio.static.primitive import i32

from odradek.protocol.api_keys import ApiKey
from odradek.protocol.errors import ErrorCode
from odradek.protocol.registry import HandlerRegistry, RequestContext
from odradek.protocol.send import FileRegion, Send
from odradek.server.handlers.api_versions import register_api_versions
from odradek.server.network import KafkaServer, NetworkConfig, acceptor, tls_transport
from odradek.server.network.security import ListenerSecurity
from odradek.server.network.tls_transport import (
    BACKLOG_BYTES,
    OFFLOAD_BYTES,
    RECEIVE_BYTES,
    TlsDecryptor,
    TlsTransport,
)
from odradek.server.network.writer import TLS_CHUNK_BYTES, TLS_WRITE_BUFFER_BYTES
from tests.protocol.wire import decode_response, request_frame

TIMEOUT = 30.0
REGION = 5 * 1024 * 1024 + 123  # several chunks, not a multiple of one


def _api_versions_v3() -> ApiVersionsRequest:
    return ApiVersionsRequest(client_software_name="odradek-tests", client_software_version="0.1")


def _heartbeat(action: str) -> HeartbeatRequest:
    return HeartbeatRequest(group_id=action, generation_id=i32(1), member_id="m")  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def ca() -> trustme.CA:
    return trustme.CA()


@pytest.fixture(scope="module")
def region_file() -> Iterator[tuple[int, bytes]]:
    content = os.urandom(REGION)
    fd, path = tempfile.mkstemp()
    os.write(fd, content)
    try:
        yield fd, content
    finally:
        os.close(fd)
        os.unlink(path)


@contextlib.asynccontextmanager
async def tls_server(ca: trustme.CA, fd: int, config: NetworkConfig | None = None,
                     events: dict[str, asyncio.Event] | None = None,
                     ) -> AsyncIterator[tuple[KafkaServer, list[str]]]:
    seen: list[str] = []

    async def handler(ctx: RequestContext, request: Any) -> Any:
        action = request.group_id
        seen.append(action)
        if action.startswith("wait:"):
            assert events is not None
            await events[action[5:]].wait()
            return Send([b"\x00\x00", FileRegion(fd, 0, REGION)])
        if action.startswith("region:"):
            return Send([b"\x00\x00", FileRegion(fd, 0, int(action.split(":")[1]))])
        return HeartbeatResponse(error_code=ErrorCode.none, throttle_time=datetime.timedelta(0))

    registry = HandlerRegistry()
    register_api_versions(registry)
    registry.register(ApiKey.HEARTBEAT, 4, 4, handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    security = ListenerSecurity(name="SSL", protocol="SSL", ssl_context=context)
    server = KafkaServer(registry, "127.0.0.1", 0, config=config, security=security)
    await server.start()
    try:
        yield server, seen
    finally:
        await server.stop(timeout=5)


def client_context(ca: trustme.CA) -> ssl.SSLContext:
    context = ssl.create_default_context()
    ca.configure_trust(context)
    return context


async def read_frame(reader: asyncio.StreamReader) -> bytes:
    (size,) = struct.unpack(">i", await reader.readexactly(4))
    return await reader.readexactly(size)


async def wait_for(condition: Any, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s: {what}")
        await asyncio.sleep(0.01)


def run(test: Any) -> None:
    async def with_timeout() -> None:
        await asyncio.wait_for(test(), TIMEOUT)

    asyncio.run(with_timeout())


def test_pipelined_requests_large_ones_and_file_regions_arrive_whole(
        ca: trustme.CA, region_file: tuple[int, bytes]) -> None:
    """A 3 MB request (many TLS records, many reads), small requests pipelined behind it,
    and a 5 MB file region (read and encrypted in chunks) come through byte for byte, in
    order; the connection is served by the broker's transport."""
    fd, content = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, seen):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=client_context(ca),
                server_hostname="127.0.0.1")
            big = "x" * 3_000_000
            writer.write(b"".join([
                request_frame(_heartbeat(big), 1), request_frame(_api_versions_v3(), 2),
                request_frame(_heartbeat(f"region:{REGION}"), 3),
                request_frame(_heartbeat("after"), 4)]))
            await writer.drain()
            got, response = decode_response(await read_frame(reader), 12, 4)
            assert (got, response.error_code) == (1, ErrorCode.none)
            got, response = decode_response(await read_frame(reader), 18, 3)
            assert (got, response.error_code) == (2, ErrorCode.none)
            payload = await read_frame(reader)
            assert payload[:4] == struct.pack(">i", 3)
            assert payload.endswith(content) and len(payload) == 4 + 1 + 2 + REGION
            got, _ = decode_response(await read_frame(reader), 12, 4)
            assert got == 4
            assert seen == [big, f"region:{REGION}", "after"]
            (connection,) = server.connections
            assert isinstance(connection._transport, TlsTransport)
            writer.close()
            await wait_for(lambda: not server.connections, "the connection closed")

    run(test)


def test_a_client_that_does_not_read_holds_a_bounded_queue(
        ca: trustme.CA, region_file: tuple[int, bytes]) -> None:
    """Back-pressure: while the client reads nothing, the writer waits for the drain and
    the transport holds at most its high-water mark and a chunk; then it all arrives."""
    fd, content = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, _):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=client_context(ca),
                server_hostname="127.0.0.1", limit=64 * 1024)
            writer.transport.pause_reading()
            writer.write(request_frame(_heartbeat(f"region:{REGION}"), 7))
            await wait_for(lambda: any(c._transport for c in server.connections),
                           "the connection, past its handshake")
            (connection,) = server.connections
            transport = connection._transport
            assert isinstance(transport, TlsTransport)
            await wait_for(lambda: transport.get_write_buffer_size() > 0, "a queue")
            sizes = []
            for _ in range(20):
                sizes.append(transport.get_write_buffer_size())
                await asyncio.sleep(0.01)
            # encrypted records: a chunk's TLS overhead is under 1 %
            assert max(sizes) <= (TLS_WRITE_BUFFER_BYTES + TLS_CHUNK_BYTES) * 1.01
            writer.transport.resume_reading()
            payload = await read_frame(reader)
            assert payload.endswith(content)
            writer.close()

    run(test)


def test_close_notify_with_the_end_of_the_handshake(ca: trustme.CA,
                                                    region_file: tuple[int, bytes]) -> None:
    """A client that closes (close_notify, then FIN) as soon as its handshake is done: the
    connection closes and the broker goes on serving."""
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, _):
            loop = asyncio.get_running_loop()

            def hit_and_run() -> None:
                with socket.create_connection(("127.0.0.1", server.port)) as raw:
                    tls = client_context(ca).wrap_socket(raw, server_hostname="127.0.0.1")
                    tls.unwrap()  # sends close_notify

            for _ in range(5):
                await loop.run_in_executor(None, hit_and_run)
            await wait_for(lambda: not server.connections, "the connections closed")
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=client_context(ca),
                server_hostname="127.0.0.1")
            writer.write(request_frame(_api_versions_v3(), 1))
            got, response = decode_response(await read_frame(reader), 18, 3)
            assert (got, response.error_code) == (1, ErrorCode.none)
            writer.close()

    run(test)


def test_a_client_hanging_up_mid_handshake_is_no_failed_authentication(
        ca: trustme.CA, region_file: tuple[int, bytes]) -> None:
    """A client that sends its ClientHello and closes before the handshake ends (a probe,
    a client that gave up) is a disconnection, as in Kafka, not a failed authentication;
    a client speaking plaintext to the TLS port is one."""
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, _):
            loop = asyncio.get_running_loop()

            def hello_and_hang_up() -> None:
                incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
                session = client_context(ca).wrap_bio(incoming, outgoing,
                                                      server_hostname="127.0.0.1")
                with contextlib.suppress(ssl.SSLWantReadError):
                    session.do_handshake()
                with socket.create_connection(("127.0.0.1", server.port)) as raw:
                    raw.sendall(outgoing.read())  # the ClientHello, then FIN
                    raw.shutdown(socket.SHUT_WR)
                    while raw.recv(65536):  # the server's flight, until it closes
                        pass

            def plaintext() -> None:
                with socket.create_connection(("127.0.0.1", server.port)) as raw:
                    raw.sendall(request_frame(_api_versions_v3(), 1))
                    while raw.recv(65536):
                        pass

            await loop.run_in_executor(None, hello_and_hang_up)
            await wait_for(lambda: not server.connections, "the connection closed")
            assert server.security.stats.failed == 0
            await loop.run_in_executor(None, plaintext)
            await wait_for(lambda: server.security.stats.failed == 1,
                           "the plaintext client counted")

    run(test)


def test_a_silent_client_is_dropped_after_the_handshake_timeout(
        ca: trustme.CA, region_file: tuple[int, bytes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client that connects and never starts its handshake is closed after the
    timeout, counted as a failed authentication."""
    monkeypatch.setattr(acceptor, "TLS_HANDSHAKE_TIMEOUT_S", 0.3)
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            started = time.monotonic()
            assert await reader.read() == b""  # closed by the broker
            assert time.monotonic() - started < 5
            assert server.security.stats.failed == 1
            writer.close()

    run(test)


def test_a_client_closing_with_requests_in_flight_does_not_break_the_broker(
        ca: trustme.CA, region_file: tuple[int, bytes]) -> None:
    """A client that asks for a large response and closes without reading it: the
    broker's writes fail or are dropped, the connection goes, others are served."""
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, _):
            for _ in range(3):
                _, writer = await asyncio.open_connection(
                    "127.0.0.1", server.port, ssl=client_context(ca),
                    server_hostname="127.0.0.1")
                writer.write(request_frame(_heartbeat(f"region:{REGION}"), 1))
                await writer.drain()
                writer.transport.abort()
            await wait_for(lambda: not server.connections, "the connections closed")
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=client_context(ca),
                server_hostname="127.0.0.1")
            writer.write(request_frame(_heartbeat("still-here"), 2))
            got, _ = decode_response(await read_frame(reader), 12, 4)
            assert got == 2
            writer.close()

    run(test)


def test_a_closed_connection_whose_peer_does_not_read_is_aborted(
        ca: trustme.CA, region_file: tuple[int, bytes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Closing sends what is queued first, but not forever: a peer that never reads
    again is dropped after CLOSE_TIMEOUT_S (here the connection closes for idleness in the
    middle of a large response)."""
    monkeypatch.setattr(tls_transport, "CLOSE_TIMEOUT_S", 0.3)
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd, NetworkConfig(connections_max_idle_ms=300)) as (
                server, _):
            _, writer = await asyncio.open_connection(
                "127.0.0.1", server.port, ssl=client_context(ca),
                server_hostname="127.0.0.1")
            writer.transport.pause_reading()
            writer.write(request_frame(_heartbeat(f"region:{REGION}"), 1))
            await wait_for(lambda: any(c._transport for c in server.connections),
                           "the connection, past its handshake")
            await wait_for(lambda: not server.connections, "the connection aborted")
            writer.transport.abort()

    run(test)


# -- large reads decrypted off the event loop ------------------------------------------------

BIG = 1_000_000  # a request of this size comes in reads past OFFLOAD_BYTES


def _decryptor(server: KafkaServer) -> TlsDecryptor:
    decryptor = server._decryptor
    assert decryptor is not None
    return decryptor


@contextlib.contextmanager
def decryptor_held(server: KafkaServer) -> Iterator[threading.Event]:
    """Keep the listener's decryptor thread busy until the event is set (at the latest
    when the block ends): decryptions submitted meanwhile stay in flight."""
    gate = threading.Event()
    started = threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(TIMEOUT)

    assert _decryptor(server).submit(hold)
    assert started.wait(TIMEOUT)
    try:
        yield gate
    finally:
        gate.set()


async def tls_connection(ca: trustme.CA, server: KafkaServer, limit: int = 2 ** 16,
                         ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, TlsTransport]:
    """A client connection, and the server's transport of it."""
    before = set(server.connections)
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", server.port, ssl=client_context(ca), server_hostname="127.0.0.1",
        limit=limit)
    await wait_for(lambda: any(c._transport for c in server.connections - before),
                   "the connection, past its handshake")
    (connection,) = server.connections - before
    transport = connection._transport
    assert isinstance(transport, TlsTransport)
    return reader, writer, transport


async def closed_by_server(reader: asyncio.StreamReader) -> None:
    """The server closed: its close_notify and FIN, or a reset (an abort with the
    client's request unread in the server's socket)."""
    with contextlib.suppress(ConnectionResetError):
        assert await reader.read() == b""


def test_large_requests_are_decrypted_by_the_decryptor_thread_small_ones_inline(
        ca: trustme.CA, region_file: tuple[int, bytes],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Pipelined 1 MB requests are decrypted on the listener's decryptor thread (reads of
    OFFLOAD_BYTES and more), small requests on their own at once on the loop; every
    request is answered, in order, whatever thread decrypted it."""
    fd, _ = region_file
    threads: list[str] = []
    off_loop = TlsTransport._decrypt_off_loop

    def recording(self: TlsTransport, *args: Any) -> None:
        threads.append(threading.current_thread().name)
        off_loop(self, *args)

    monkeypatch.setattr(TlsTransport, "_decrypt_off_loop", recording)

    async def test() -> None:
        async with tls_server(ca, fd) as (server, seen):
            reader, writer, _ = await tls_connection(ca, server)
            writer.write(request_frame(_api_versions_v3(), 1))
            got, response = decode_response(await read_frame(reader), 18, 3)
            assert (got, response.error_code) == (1, ErrorCode.none)
            assert threads == []  # a small request: decrypted inline
            frames = [request_frame(_heartbeat(f"{i}" * BIG if i % 3 else f"small{i}"),
                                    100 + i) for i in range(12)]
            writer.write(b"".join(frames))
            for i in range(12):
                got, response = decode_response(await read_frame(reader), 12, 4)
                assert (got, response.error_code) == (100 + i, ErrorCode.none)
            assert seen == [f"{i}" * BIG if i % 3 else f"small{i}" for i in range(12)]
            assert threads and set(threads) == {f"tls-decryptor-{server.security.name}"}
            writer.close()

    run(test)


def test_responses_written_during_a_decryption_are_sent_after_it_in_order(
        ca: trustme.CA, region_file: tuple[int, bytes]) -> None:
    """While a large request is being decrypted off the loop, the session is the
    thread's: a response written meanwhile (a 5 MB file region, in chunks) is kept,
    counts in the write buffer (pausing the writer past the high-water mark), and goes
    out whole, before the answer to the request being decrypted."""
    fd, content = region_file

    async def test() -> None:
        events = {"go": asyncio.Event()}
        async with tls_server(ca, fd, events=events) as (server, seen):
            reader, writer, transport = await tls_connection(ca, server)
            writer.write(request_frame(_heartbeat("wait:go"), 1))
            await wait_for(lambda: seen == ["wait:go"], "the first request dispatched")
            with decryptor_held(server) as gate:
                writer.write(request_frame(_heartbeat("b" * BIG), 2))
                await wait_for(lambda: transport._decrypting, "a decryption in flight")
                events["go"].set()  # the response is written while the thread decrypts
                await wait_for(lambda: transport._deferred_bytes > 0, "a deferred write")
                await wait_for(lambda: transport._writing_paused,
                               "the writer paused by the deferred bytes")
                assert transport.get_write_buffer_size() >= transport._deferred_bytes
                gate.set()
                payload = await read_frame(reader)
            assert payload[:4] == struct.pack(">i", 1) and payload.endswith(content)
            got, response = decode_response(await read_frame(reader), 12, 4)
            assert (got, response.error_code) == (2, ErrorCode.none)
            assert seen == ["wait:go", "b" * BIG]
            assert transport.get_write_buffer_size() == 0
            writer.close()

    run(test)


def test_reading_stops_while_a_decryption_holds_a_full_backlog(
        ca: trustme.CA, region_file: tuple[int, bytes]) -> None:
    """Memory stays bounded: while the thread decrypts, what arrives waits as ciphertext
    up to BACKLOG_BYTES (and one read more), then the transport stops reading; once the
    decryption is done, everything is read, decrypted and answered."""
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, seen):
            reader, writer, transport = await tls_connection(ca, server)
            with decryptor_held(server) as gate:
                writer.write(b"".join(request_frame(_heartbeat(f"{i}" * BIG), i)
                                      for i in range(8)))
                await wait_for(lambda: transport._decrypting, "a decryption in flight")
                await wait_for(lambda: not transport._reading, "reading stopped")
                assert BACKLOG_BYTES <= transport._backlog_bytes < BACKLOG_BYTES + RECEIVE_BYTES
                gate.set()
                for i in range(8):
                    got, response = decode_response(await read_frame(reader), 12, 4)
                    assert (got, response.error_code) == (i, ErrorCode.none)
            assert seen == [f"{i}" * BIG for i in range(8)]
            assert transport._reading and not transport._backlog
            writer.close()

    run(test)


@pytest.mark.parametrize("how", ["close", "abort"])
def test_the_broker_closing_a_connection_mid_decryption(
        ca: trustme.CA, region_file: tuple[int, bytes], how: str) -> None:
    """The broker closes (or aborts) a connection while its request is being decrypted
    off the loop: a close waits for the decryption, drops its plaintext and sends the
    close_notify; an abort closes the socket at once and the thread's answer is dropped.
    The listener serves the next connection."""
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, seen):
            reader, writer, transport = await tls_connection(ca, server)
            (connection,) = server.connections
            with decryptor_held(server):
                writer.write(request_frame(_heartbeat("c" * BIG), 1))
                await wait_for(lambda: transport._decrypting, "a decryption in flight")
                if how == "close":
                    connection.close("closed by the test")
                    await asyncio.sleep(0.05)
                    assert server.connections  # the close waits for the decryption
                else:
                    connection.abort()
            await closed_by_server(reader)
            await wait_for(lambda: not server.connections, "the connection gone")
            assert seen == []
            writer.close()
            reader, writer, _ = await tls_connection(ca, server)
            writer.write(request_frame(_heartbeat("d" * BIG), 2))
            got, _ = decode_response(await read_frame(reader), 12, 4)
            assert got == 2
            writer.close()

    run(test)


class BioClient:
    """A blocking TLS client over an ``SSLObject`` and a raw socket: it can send its
    close_notify and FIN without waiting for the server's (``SSLSocket.unwrap`` waits)."""

    def __init__(self, ca: trustme.CA, port: int) -> None:
        self.raw = socket.create_connection(("127.0.0.1", port))
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.session = client_context(ca).wrap_bio(self.incoming, self.outgoing,
                                                   server_hostname="127.0.0.1")
        while True:
            try:
                self.session.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.raw.sendall(self.outgoing.read())
                self.incoming.write(self.raw.recv(65536))
        self.raw.sendall(self.outgoing.read())

    def send(self, data: bytes) -> None:
        self.session.write(data)
        self.raw.sendall(self.outgoing.read())

    def hang_up(self) -> None:
        """close_notify, then FIN."""
        with contextlib.suppress(ssl.SSLWantReadError):
            self.session.unwrap()
        self.raw.sendall(self.outgoing.read())
        self.raw.shutdown(socket.SHUT_WR)

    def reset(self) -> None:
        self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.raw.close()


def _unread(sock: socket.socket) -> int:
    """Bytes waiting in ``sock``'s receive queue."""
    return struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0" * 4))[0]


@pytest.mark.parametrize("how", ["close_notify", "reset"])
def test_a_client_hanging_up_mid_decryption(
        ca: trustme.CA, region_file: tuple[int, bytes], how: str) -> None:
    """A client sends a large request and hangs up while the broker's thread decrypts
    it: cleanly (close_notify and FIN, both behind the request: the request, received
    whole, is still decrypted and handled, then the end of the stream closes the
    connection) or abortively (a reset: the connection fails). Either way the connection
    goes and the broker serves the next one."""
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, seen):
            loop = asyncio.get_running_loop()
            client = await loop.run_in_executor(None, BioClient, ca, server.port)
            await wait_for(lambda: any(c._transport for c in server.connections),
                           "the connection, past its handshake")
            (connection,) = server.connections
            transport = connection._transport
            assert isinstance(transport, TlsTransport)
            # the request waits in the socket: the first read takes OFFLOAD_BYTES or
            # more; what follows it (and the hang-up) fits in the backlog
            transport.pause_reading()
            request = request_frame(_heartbeat("e" * 200_000), 1)
            sent = loop.run_in_executor(None, client.send, request)
            await wait_for(lambda: _unread(transport._sock) > OFFLOAD_BYTES,
                           "the request in the server's socket")
            with decryptor_held(server):
                transport.resume_reading()
                await wait_for(lambda: transport._decrypting, "a decryption in flight")
                await sent
                if how == "close_notify":
                    client.hang_up()
                    await wait_for(lambda: transport._eof_pending,
                                   "the end of the stream, behind the decryption")
                    assert server.connections
                else:
                    client.reset()
                    await wait_for(lambda: not server.connections, "the connection gone")
            await wait_for(lambda: not server.connections, "the connection gone")
            if how == "close_notify":
                assert seen == ["e" * 200_000]
            client.raw.close()
            reader, writer, _ = await tls_connection(ca, server)
            writer.write(request_frame(_heartbeat("f" * BIG), 2))
            got, _ = decode_response(await read_frame(reader), 12, 4)
            assert got == 2
            writer.close()

    run(test)


def test_shutdown_with_a_decryption_in_flight_stops_the_thread(
        ca: trustme.CA, region_file: tuple[int, bytes]) -> None:
    """The server stops while a connection's decryption is in flight: its connections
    are aborted, the thread finishes the jobs it has and ends; nothing hangs."""
    fd, _ = region_file

    async def test() -> None:
        async with tls_server(ca, fd) as (server, _):
            reader, writer, transport = await tls_connection(ca, server)
            decryptor = _decryptor(server)
            thread = decryptor._thread
            assert thread is not None and thread.is_alive()
            with decryptor_held(server) as gate:
                writer.write(request_frame(_heartbeat("g" * BIG), 1))
                await wait_for(lambda: transport._decrypting, "a decryption in flight")
                threading.Timer(0.2, gate.set).start()  # while stop() joins the thread
                started = time.monotonic()
                await server.stop(timeout=0.1)
                assert time.monotonic() - started < 5
            assert not thread.is_alive()
            assert server._decryptor is None
            assert not decryptor.submit(lambda: None)  # stopped: the caller decrypts
            await closed_by_server(reader)
            writer.close()

    run(test)


def test_offload_threshold_is_a_large_read() -> None:
    """The threshold and bounds keep their relation: a read of the full receive size is
    decrypted off the loop, and the backlog holds at least one such read."""
    assert OFFLOAD_BYTES <= RECEIVE_BYTES <= BACKLOG_BYTES


def test_the_readers_limits_hold_large_requests_decrypted_off_the_loop(
        ca: trustme.CA, region_file: tuple[int, bytes]) -> None:
    """``queued.max.requests`` = 1 and a ``queued.max.request.bytes`` pool under two
    requests: the reader pauses the transport after every large request; what the thread
    decrypted meanwhile waits in the frame decoder, the ciphertext behind it in the
    backlog, and every request is answered, in order."""
    fd, _ = region_file

    async def test() -> None:
        config = NetworkConfig(queued_max_requests=1,
                               queued_max_request_bytes=BIG + BIG // 2)
        async with tls_server(ca, fd, config) as (server, seen):
            reader, writer, transport = await tls_connection(ca, server)
            writer.write(b"".join(request_frame(_heartbeat(f"{i}" * BIG), i)
                                  for i in range(6)))
            for i in range(6):
                got, response = decode_response(await read_frame(reader), 12, 4)
                assert (got, response.error_code) == (i, ErrorCode.none)
            assert seen == [f"{i}" * BIG for i in range(6)]
            assert not transport._backlog and not transport._decrypting
            writer.close()

    run(test)
