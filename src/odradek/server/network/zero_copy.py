"""Zero-copy file regions on a plaintext connection: ``sendfile`` with one writer
registration per region.

How it works: Kafka's ``FileRecords.writeTo`` (``PlaintextTransportLayer.transferFrom``,
i.e. ``FileChannel.transferTo``: ``sendfile``) sends what the socket takes and leaves the
rest for when the selector next reports the channel writable, its ``OP_WRITE`` interest
kept while the send is incomplete. asyncio's ``loop.sendfile`` pauses the transport's
reading and waits for its buffer to empty once a region, and each time the socket's
buffer is full removes and adds its writer again (two ``epoll_ctl`` calls and a new
handle, about 45 Python calls a turn); with Kafka's 100 KB ``socket.send.buffer.bytes``
an 8 MiB answer takes tens of turns, and those turns were most of a large Fetch's
Python calls.

:meth:`RegionSender.send` sends a region, and the bytes gathered before it (earlier
answers, the response's size prefix and header), as Kafka does: ``os.writev`` and
``os.sendfile`` at once on the connection's socket, which usually takes part of it; for
the rest, one writer on a duplicate of the socket's descriptor, kept until the region is
out, whose callback sends again each time the socket has room. A send that moves fewer
bytes than asked means the socket's buffer is full, so the sender waits for room
instead of trying again at once. The duplicate is there because asyncio lets no one but
the transport watch the transport's own descriptor; it is closed once the region is out,
or when the response writer is cancelled (the connection closed), so the socket never
outlives the connection. The caller uses it only while the transport's own buffer is
empty, so bytes keep their order; only the response writer writes to a connection. A
file ``sendfile`` cannot read from (refused before any of the region is sent) is left
to the caller, which copies it, as ``loop.sendfile``'s fallback did.
"""

from __future__ import annotations

import asyncio
import errno
import os
from collections.abc import Sequence
from typing import Final

from odradek.protocol.send import FileRegion

__all__ = ["RegionSender", "ShortRegionError", "region_sender"]

# os.writev takes at most IOV_MAX (1,024 on Linux) buffers: more are joined first.
_MAX_BUFFERS: Final = 512
# sendfile's answers for a file it cannot send from (asyncio's loop.sendfile gives up on
# the same ones): the writer copies the region instead.
_UNAVAILABLE: Final = frozenset({errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ESPIPE})


class ShortRegionError(Exception):
    """The file ended before the region did: the size prefix promised more bytes than
    the file had, so the stream is unframed."""


class _Progress:
    """What is left of one ``send``: buffers, then the region."""

    __slots__ = ("file_fd", "left", "pending", "position", "size")

    def __init__(self, pending: list[memoryview], region: FileRegion) -> None:
        self.pending = pending
        self.file_fd = region.fd
        self.position = region.position
        self.left = self.size = region.size

    def advance(self, fd: int) -> bool:
        """Send as much as the socket takes now; True once everything is sent."""
        pending = self.pending
        if pending:
            try:
                n = os.writev(fd, pending)
            except BlockingIOError:
                return False
            if n < sum(map(len, pending)):
                _trim(pending, n)
                return False  # the socket's buffer is full: wait for room
            pending.clear()
        left = self.left
        while left:
            try:
                n = os.sendfile(fd, self.file_fd, self.position, left)
            except BlockingIOError:
                return False
            except OSError as e:
                if e.errno in _UNAVAILABLE and left == self.size:  # nothing of it sent
                    raise asyncio.SendfileNotAvailableError(str(e)) from e
                raise
            if n == 0:
                raise ShortRegionError(f"file region short by {left} bytes")
            self.position += n
            left = self.left = left - n
            if left:
                return False  # likewise
        return True


def _trim(pending: list[memoryview], n: int) -> None:
    """Drop the first ``n`` bytes of ``pending``."""
    while n:
        first = pending[0]
        if len(first) > n:
            pending[0] = first[n:]
            return
        n -= len(first)
        del pending[0]


class RegionSender:
    """Sends file regions on one plaintext connection's socket (see the module's
    header)."""

    __slots__ = ("_fd", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int) -> None:
        self._loop = loop
        self._fd = fd

    async def send(self, before: Sequence[bytes | bytearray | memoryview],
                   region: FileRegion) -> None:
        """Send ``before``, then ``region``; raises OSError (the socket or the file
        failed), :class:`ShortRegionError`, or ``asyncio.SendfileNotAvailableError``
        (the file cannot be sent from: ``before`` is sent, nothing of the region)."""
        if len(before) > _MAX_BUFFERS:
            before = [b"".join(before)]
        progress = _Progress([memoryview(b) for b in before if len(b)], region)
        if progress.advance(self._fd):
            return
        loop = self._loop
        dup = os.dup(self._fd)
        done: asyncio.Future[None] = loop.create_future()

        def on_writable() -> None:
            try:
                if not progress.advance(dup):
                    return
            except (OSError, ShortRegionError) as e:
                loop.remove_writer(dup)
                done.set_exception(e)
                return
            loop.remove_writer(dup)
            done.set_result(None)

        try:
            loop.add_writer(dup, on_writable)
            await done
        finally:
            loop.remove_writer(dup)
            os.close(dup)


def region_sender(loop: asyncio.AbstractEventLoop,
                  transport: asyncio.BaseTransport) -> RegionSender | None:
    """A :class:`RegionSender` for ``transport``'s socket, or None where ``loop.sendfile``
    stays the way (not asyncio's own selector loop with its own ``sendfile``: another
    loop, or one that replaces it; not a socket transport)."""
    if not isinstance(loop, asyncio.SelectorEventLoop):
        return None
    if type(loop).sendfile is not asyncio.SelectorEventLoop.sendfile:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None:
        return None
    return RegionSender(loop, sock.fileno())
