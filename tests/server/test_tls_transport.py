"""The broker's own TLS transport (odradek.server.network.tls_transport) over real sockets.

A :class:`KafkaServer` with an SSL listener (certificates from trustme) serves ApiVersions
and a test Heartbeat whose ``group_id`` says what to answer ("region:N": a response
carrying an N-byte file region, anything else answered at once); the clients are
asyncio's and Python's own TLS sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import socket
import ssl
import struct
import tempfile
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
from odradek.server.network.tls_transport import TlsTransport
from odradek.server.network.writer import TLS_CHUNK_BYTES, TLS_WRITE_BUFFER_BYTES
from tests._deadlines import describe, expired
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
                     ) -> AsyncIterator[tuple[KafkaServer, list[str]]]:
    seen: list[str] = []

    async def handler(ctx: RequestContext, request: Any) -> Any:
        action = request.group_id
        seen.append(action)
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
    started = time.monotonic()
    while not condition():
        if expired(started, timeout):
            raise AssertionError(f"not within {describe(started, timeout)}: {what}")
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
