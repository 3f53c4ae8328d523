"""Size-delimited framing of the Kafka wire protocol (sans-I/O).

Every Kafka request and response is ``int32 size`` (big-endian, bytes that follow) then
``size`` bytes. Follows Kafka's ``NetworkReceive``: the size prefix is checked against
``socket.request.max.bytes`` *before* any buffer for the frame is allocated, and a
negative size is an ``InvalidReceiveException``. Both are fatal for the connection.

Use it h11-style::

    decoder = FrameDecoder(max_frame_size=config.socket_request_max_bytes)
    decoder.receive_data(chunk)
    while (frame := decoder.next_frame()) is not None:
        handle(frame)

or ``frames = decoder.feed(chunk)`` to get every complete frame at once. Bytes of a frame
that is still incomplete stay buffered; a caller that wants to stop consuming (read
backpressure) simply stops calling :meth:`FrameDecoder.next_frame`.
"""

from __future__ import annotations

import struct
from typing import Final

from odradek.protocol.errors import FrameTooLargeError, InvalidFrameSizeError

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "SIZE_PREFIX", "FrameDecoder", "frame"]

DEFAULT_MAX_FRAME_SIZE: Final = 104_857_600
"""Kafka's default ``socket.request.max.bytes`` (100 MiB): caps what one size prefix may
make us buffer, so a hostile or confused peer cannot claim gigabytes of memory."""

SIZE_PREFIX: Final = struct.Struct(">i")
"""The 4-byte big-endian signed size that precedes every frame."""

_HINTS: Final = (
    (b"GET ", " (looks like an HTTP request: wrong port?)"),
    (b"POST", " (looks like an HTTP request: wrong port?)"),
    (b"\x16\x03", " (looks like a TLS handshake on a plaintext listener)"),
)


def _hint(prefix: bytes) -> str:
    for start, hint in _HINTS:
        if prefix.startswith(start):
            return hint
    return ""


def frame(payload: bytes) -> bytes:
    """``payload`` with its size prefix (for tests and small encoders)."""
    return SIZE_PREFIX.pack(len(payload)) + payload


class FrameDecoder:
    """Turns a byte stream into complete frames (payloads without their size prefix)."""

    __slots__ = ("_buffer", "_max_frame_size", "_pos")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError("max_frame_size must be >= 0")
        self._max_frame_size = max_frame_size
        self._buffer = bytearray()
        self._pos = 0  # start of the first unconsumed byte in _buffer

    @property
    def max_frame_size(self) -> int:
        return self._max_frame_size

    @property
    def buffered(self) -> int:
        """Bytes received but not yet returned as frames."""
        return len(self._buffer) - self._pos

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Buffer ``data``; validates the size prefix of the next frame once it is known."""
        if self._pos:
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data
        self._check_next_size()

    def next_frame(self) -> bytes | None:
        """The next complete frame, or ``None`` when more data is needed.

        Raises :class:`InvalidFrameSizeError` / :class:`FrameTooLargeError`; after that the
        decoder (like the connection) is unusable.
        """
        buf = self._buffer
        pos = self._pos
        if len(buf) - pos < 4:
            return None
        (size,) = SIZE_PREFIX.unpack_from(buf, pos)
        self._validate(size, pos)
        end = pos + 4 + size
        if len(buf) < end:
            return None
        payload = bytes(buf[pos + 4 : end])
        self._pos = end
        if end == len(buf):
            buf.clear()
            self._pos = 0
        return payload

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        """Buffer ``data`` and return every frame it completes."""
        self.receive_data(data)
        frames: list[bytes] = []
        while (payload := self.next_frame()) is not None:
            frames.append(payload)
        return frames

    def _check_next_size(self) -> None:
        if len(self._buffer) - self._pos >= 4:
            (size,) = SIZE_PREFIX.unpack_from(self._buffer, self._pos)
            self._validate(size, self._pos)

    def _validate(self, size: int, pos: int) -> None:
        if size < 0:
            raise InvalidFrameSizeError(f"invalid negative frame size {size}")
        if size > self._max_frame_size:
            raise FrameTooLargeError(
                size, self._max_frame_size, _hint(bytes(self._buffer[pos : pos + 4]))
            )
