"""The writer's own sendfile loop (odradek.server.network.zero_copy) over real TCP
sockets: what it sends, in order, while the reader is slower than the socket."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from odradek.protocol.send import FileRegion
from odradek.server.network import zero_copy
from odradek.server.network.zero_copy import RegionSender, ShortRegionError, region_sender

TIMEOUT = 20.0
REGION = bytes(range(256)) * 16 * 1024  # 4 MiB: many times the socket's buffers


@pytest.fixture
def region_file() -> Iterator[int]:
    fd, path = tempfile.mkstemp()
    os.unlink(path)
    os.write(fd, b"head" + REGION + b"tail")
    yield fd
    os.close(fd)


async def _connected() -> tuple[asyncio.Server, asyncio.Transport, socket.socket]:
    """A server-side transport (asyncio's, on a small send buffer, as the broker sets
    it) and the client's blocking socket."""
    made: asyncio.Future[asyncio.Transport] = asyncio.get_running_loop().create_future()

    async def accepted(_r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        made.set_result(w.transport)  # type: ignore[arg-type]

    server = await asyncio.start_server(accepted, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
    transport = await asyncio.wait_for(made, TIMEOUT)
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF,
                                                 100 * 1024)
    return server, transport, client


@dataclass
class _Session:
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    client: socket.socket
    sender: RegionSender


@contextlib.asynccontextmanager
async def _session() -> AsyncIterator[_Session]:
    """A connection (:func:`_connected`) and the sender on its transport; closed after."""
    server, transport, client = await _connected()
    loop = asyncio.get_running_loop()
    sender = region_sender(loop, transport)
    assert sender is not None
    try:
        yield _Session(loop, transport, client, sender)
    finally:
        transport.close()
        client.close()
        server.close()
        await server.wait_closed()


def _read(client: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = client.recv(min(n - len(out), 32 * 1024))
        if not chunk:
            break
        out += chunk
    return bytes(out)


def _fds(s: _Session) -> set[str]:
    """The descriptors open on the session's broker-side socket (it and the sender's
    duplicates): only these, since other tests of the worker may leave threads that open
    and close descriptors of their own meanwhile (whole run Q32)."""
    target = os.readlink(f"/proc/self/fd/{s.transport.get_extra_info('socket').fileno()}")
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # closed since it was listed
            if os.readlink(f"/proc/self/fd/{fd}") == target:
                out.add(fd)
    return out


def test_the_buffers_then_the_region_arrive_whole_and_in_order(region_file: int) -> None:
    """More buffers than one writev takes, then a region that fills the socket many times
    over: the sender waits for room (its one writer) and every byte arrives, in order;
    the duplicate descriptor is gone afterwards."""
    before = [bytes([i % 251]) * 7 for i in range(zero_copy._MAX_BUFFERS + 88)]
    expected = b"".join(before) + REGION

    async def test() -> None:
        async with _session() as s:
            loop, client, sender = s.loop, s.client, s.sender
            fds = _fds(s)
            reading = loop.run_in_executor(None, _read, client, len(expected))
            waits = 0
            real_add = loop.add_writer

            def counting(*args: Any) -> None:
                nonlocal waits
                waits += 1
                real_add(*args)

            loop.add_writer = counting  # type: ignore[method-assign]
            try:
                await sender.send(before, FileRegion(region_file, 4, len(REGION)))
            finally:
                del loop.add_writer
            got = await asyncio.wait_for(reading, TIMEOUT)
            assert got == expected
            assert waits == 1  # one registration for the whole region
            assert _fds(s) == fds

    asyncio.run(asyncio.wait_for(test(), TIMEOUT))


def test_a_region_past_the_end_of_its_file_is_an_error(region_file: int) -> None:
    async def test() -> None:
        async with _session() as s:
            loop, client, sender = s.loop, s.client, s.sender
            fds = _fds(s)
            size = os.fstat(region_file).st_size
            reading = loop.run_in_executor(None, _read, client, size)
            with pytest.raises(ShortRegionError):
                await sender.send([b"x"], FileRegion(region_file, 0, size + 1000))
            assert await asyncio.wait_for(reading, TIMEOUT) != b""
            assert _fds(s) == fds

    asyncio.run(asyncio.wait_for(test(), TIMEOUT))


def test_a_cancelled_send_stops_watching_and_closes_its_descriptor(region_file: int) -> None:
    """The connection closed while the client reads nothing: the writer is cancelled, and
    the socket is not kept open by the sender's duplicate descriptor."""
    async def test() -> None:
        async with _session() as s:
            loop, transport, client, sender = s.loop, s.transport, s.client, s.sender
            fds = _fds(s)
            task = loop.create_task(sender.send([], FileRegion(region_file, 4, len(REGION))))
            while _fds(s) == fds:  # the sender waits for room on its duplicate
                await asyncio.sleep(0.01)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert _fds(s) == fds
            transport.close()
            # the client sees the end of the stream: nothing else holds the socket open
            got = await asyncio.wait_for(loop.run_in_executor(None, _read, client, 1 << 30),
                                         TIMEOUT)
            assert REGION.startswith(got)

    asyncio.run(asyncio.wait_for(test(), TIMEOUT))


def test_a_file_sendfile_cannot_read_is_left_to_the_caller() -> None:
    """sendfile refuses the descriptor (a pipe here): the bytes before the region are
    sent, nothing of the region, and the caller is told so (the writer copies it)."""
    async def test() -> None:
        async with _session() as s:
            loop, client, sender = s.loop, s.client, s.sender
            read_end, write_end = os.pipe()
            try:
                with pytest.raises(asyncio.SendfileNotAvailableError):
                    await sender.send([b"head"], FileRegion(read_end, 0, 100_000))
                assert await loop.run_in_executor(None, _read, client, 4) == b"head"
            finally:
                os.close(read_end)
                os.close(write_end)

    asyncio.run(asyncio.wait_for(test(), TIMEOUT))


def test_a_loop_that_replaces_sendfile_keeps_it() -> None:
    """Where the loop brings its own ``sendfile`` (a bench's copying loop, say), or the
    transport has no socket, the writer keeps ``loop.sendfile``."""
    class CopyingLoop(asyncio.SelectorEventLoop):
        async def sendfile(self, *args: Any, **kwargs: Any) -> int:  # type: ignore[override]
            raise NotImplementedError

    class NoSocket(asyncio.Transport):
        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return default

    loop = CopyingLoop()
    try:
        assert region_sender(loop, NoSocket()) is None
        with socket.socket() as sock:
            transport = NoSocket()
            transport.get_extra_info = (  # type: ignore[method-assign]
                lambda name, default=None: sock if name == "socket" else default)
            assert region_sender(loop, transport) is None
            plain = asyncio.SelectorEventLoop()
            try:
                assert isinstance(region_sender(plain, transport), RegionSender)
            finally:
                plain.close()
    finally:
        loop.close()
