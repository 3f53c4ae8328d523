"""Pre-encoded response bodies: a list of buffers and file regions (zero copy).

Follows Kafka's ``Send`` / ``MultiRecordsSend`` / ``FileRecords.writeTo``: a Fetch response
is mostly record bytes already sitting in segment files, so the fetch writer emits the
response body as a sequence of in-memory chunks (the encoded fields around the records)
and :class:`FileRegion` s (``fd``, ``position``, ``size``). The network layer writes the
chunks and hands each region to ``os.sendfile`` on plain TCP (falling back to reads
elsewhere, e.g. TLS).

A :class:`Send` is the response *body* only: the network layer prepends the size prefix
and the response header (it knows the correlation id and header version). ``size`` is
computed once, at construction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

__all__ = ["Chunk", "FileRegion", "Send"]


@dataclass(frozen=True, slots=True)
class FileRegion:
    """``size`` bytes of the open file ``fd`` starting at ``position``.

    The fd must stay open until the response has been written (the caller owns it).
    ``loop.sendfile`` moves the fd's file offset (it seeks past what it sent, and the
    TLS fallback reads through the offset), so do all other I/O on that fd positionally
    (``os.pread`` / ``os.pwrite``, or ``O_APPEND`` writes), or give fetches their own fd.
    """

    fd: int
    position: int
    size: int

    def __post_init__(self) -> None:
        if self.position < 0 or self.size < 0:
            raise ValueError(f"invalid file region {self}")


Chunk = bytes | bytearray | memoryview | FileRegion


@dataclass(frozen=True, slots=True)
class Send:
    """A response body as an ordered sequence of buffers and file regions, and the
    response's top-level error code (0 for none, or a response without one), which the
    request metrics count as kio responses' ``error_code``. ``size`` and
    ``has_file_regions`` (whether the writer must read or sendfile some of it) are
    computed once, at construction: a body of one buffer (every Produce answer) without a
    walk over its parts."""

    parts: tuple[Chunk, ...]
    size: int = field(init=False)
    has_file_regions: bool = field(init=False)
    error_code: int = 0

    def __init__(self, parts: Iterable[Chunk], error_code: int = 0) -> None:
        parts = tuple(parts)
        if len(parts) == 1 and type(parts[0]) is bytes:
            size, regions = len(parts[0]), False
        else:  # one pass, per part (a few a partition), never per record
            size, regions = 0, False
            for part in parts:
                if isinstance(part, FileRegion):
                    size += part.size
                    regions = True
                elif isinstance(part, memoryview):
                    size += part.nbytes
                else:
                    size += len(part)
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "size", size)
        object.__setattr__(self, "has_file_regions", regions)
        object.__setattr__(self, "error_code", error_code)
