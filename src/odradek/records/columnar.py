"""Record batches decoded into column buffers, in the memory layout of Apache Arrow.

How it works: a reader of many records (the Spark connector) does not want one Python
object per record. :func:`add_batches` walks the v2 batches of a fetched buffer,
validates each (size, magic, CRC32C), skips control batches, decompresses when the codec
says so, and hands the records section to a column builder, which appends each record
with ``lo <= offset < hi`` to growable buffers: int64 offsets and timestamps, int32
timestamp types, and for key, value and headers the validity bitmap / int32 offsets / data
triple of Arrow's binary layout (headers as list<struct<key: string, value: binary>>).
Under read_committed an :class:`AbortedFilter` (built from a Fetch answer's
aborted_transactions) drops the batches of aborted transactions whole, by Kafka's
consumer rule (``CompletedFetch`` in the Java client): a transaction of producer P that
began at offset F is aborted from the first batch of P ending at or after F until P's
abort marker.
:meth:`finish` returns the buffers (memoryviews of the C builder's own memory, or
``bytes``), which ``pyarrow.Array.from_buffers`` wraps without copying.

The builder is native (``_columnar.c``, compiled at install) when the extension was
built, and pure Python otherwise (``PyColumnBuilder``, built on
:func:`odradek.records.batch.decode_records`, over 100x slower). Both give identical
buffers and follow the rules of Kafka's ``DefaultRecord.readFrom``; the tests hold them to
each other. Nothing here does I/O.
"""

from __future__ import annotations

import sys
from array import array
from dataclasses import dataclass
from typing import Protocol

from odradek.records.batch import (
    BatchHeader,
    InvalidRecordError,
    decode_records,
    iter_batches,
    records_payload,
    validate_batch,
)
from odradek.records.compression import DEFAULT_MAX_DECOMPRESSED
from odradek.records.control import ControlType, read_end_txn_marker

__all__ = [
    "AbortedFilter",
    "BinaryBuffers",
    "Blob",
    "ColumnBuilder",
    "Columns",
    "HeaderBuffers",
    "PyColumnBuilder",
    "add_batches",
    "native_available",
    "new_builder",
]

# The C builder hands over its own memory as read-only memoryviews; the Python one, bytes.
Blob = bytes | memoryview
BinaryBuffers = tuple[Blob, Blob, Blob, int]  # validity, int32 offsets, data, null count
# The list (validity: null when a record has no headers, as Spark's Kafka source gives;
# int32 offsets into the headers; null count), the header count, keys, values.
HeaderBuffers = tuple[BinaryBuffers, int, BinaryBuffers, BinaryBuffers]
# rows, int64 offsets, int64 timestamps (ms), int32 timestamp types, key, value, headers
Columns = tuple[int, Blob, Blob, Blob, BinaryBuffers, BinaryBuffers, HeaderBuffers | None]

_NativeBuilder: type[_native.ColumnBuilder] | None
try:
    from odradek.records import _columnar as _native
except ImportError:  # no C compiler at install time: the pure-Python builder serves
    _NativeBuilder = None
else:
    _NativeBuilder = _native.ColumnBuilder


class ColumnBuilder(Protocol):
    @property
    def rows(self) -> int: ...

    @property
    def nbytes(self) -> int: ...

    def add(
        self, records: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
        max_timestamp: int, timestamp_type: int, lo: int, hi: int,
    ) -> int: ...

    def finish(self) -> Columns: ...


def native_available() -> bool:
    return _NativeBuilder is not None


def new_builder(headers: bool, native: bool | None = None) -> ColumnBuilder:
    """A builder; ``native=None`` takes the C one when it was built."""
    if native is None:
        native = _NativeBuilder is not None
    if native:
        if _NativeBuilder is None:
            raise RuntimeError("odradek.records._columnar was not built (no C compiler?)")
        builder: ColumnBuilder = _NativeBuilder(headers=headers)
        return builder
    return PyColumnBuilder(headers)


class _Binary:
    __slots__ = ("data", "nulls", "offsets", "validity")

    def __init__(self) -> None:
        self.validity = bytearray()
        self.offsets = array("i", [0])
        self.data = bytearray()
        self.nulls = 0

    def _entry(self, valid: bool, end: int) -> None:
        """One more entry: its validity bit, and ``end`` as its closing offset."""
        i = len(self.offsets) - 1
        if not i & 7:
            self.validity.append(0)
        if valid:
            self.validity[i >> 3] |= 1 << (i & 7)
        else:
            self.nulls += 1
        self.offsets.append(end)

    def append_list(self, end: int) -> None:
        """One list entry ending at child index ``end`` (null when empty)."""
        self._entry(end != self.offsets[-1], end)

    def append(self, value: bytes | None) -> None:
        if value is not None:
            self.data += value
        self._entry(value is not None, len(self.data))

    def buffers(self) -> BinaryBuffers:
        return bytes(self.validity), _native_bytes(self.offsets), bytes(self.data), self.nulls


def _native_bytes(a: array[int]) -> bytes:
    # Arrow buffers are little-endian on every platform it supports.
    if sys.byteorder != "little":
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


class PyColumnBuilder:
    """The pure-Python builder (one Python object per record): the fallback of the C one."""

    def __init__(self, headers: bool = False) -> None:
        self.headers = headers
        self._reset()

    def _reset(self) -> None:
        self._offsets = array("q")
        self._timestamps = array("q")
        self._types = array("i")
        self._key = _Binary()
        self._value = _Binary()
        self._lists = _Binary()
        self._hkey = _Binary()
        self._hvalue = _Binary()

    @property
    def rows(self) -> int:
        return len(self._offsets)

    @property
    def nbytes(self) -> int:
        return (len(self._key.data) + len(self._value.data) + len(self._hkey.data)
                + len(self._hvalue.data) + self.rows * 20)

    def add(
        self, records: bytes | memoryview, count: int, base_offset: int, base_timestamp: int,
        max_timestamp: int, timestamp_type: int, lo: int, hi: int,
    ) -> int:
        if timestamp_type not in (0, 1):
            raise ValueError("timestamp_type must be 0 or 1")
        # Decode the whole section first: a failed add leaves the builder as it was.
        try:
            decoded = [
                r for r in decode_records(records, count, base_offset, base_timestamp,
                                          max_timestamp, timestamp_type == 1)
                if lo <= r.offset < hi
            ]
        except InvalidRecordError as exc:
            raise ValueError(str(exc)) from None
        for r in decoded:
            self._offsets.append(_int64(r.offset))
            self._timestamps.append(_int64(r.timestamp))
            self._types.append(timestamp_type)
            self._key.append(r.key)
            self._value.append(r.value)
            if self.headers:
                for h in r.headers:
                    self._hkey.append(h.key.encode())
                    self._hvalue.append(h.value)
                self._lists.append_list(len(self._hkey.offsets) - 1)
        return len(decoded)

    def finish(self) -> Columns:
        headers: HeaderBuffers | None = None
        if self.headers:
            headers = (self._lists.buffers(), len(self._hkey.offsets) - 1,
                       self._hkey.buffers(), self._hvalue.buffers())
        out: Columns = (
            self.rows, _native_bytes(self._offsets), _native_bytes(self._timestamps),
            _native_bytes(self._types), self._key.buffers(), self._value.buffers(), headers,
        )
        self._reset()
        return out


def _int64(value: int) -> int:
    """Wrap to int64 as Java (and the C builder) do with overflowing varlong sums."""
    return (value + (1 << 63)) % (1 << 64) - (1 << 63)


@dataclass(frozen=True, slots=True)
class Added:
    rows: int
    next_offset: int  # one past the last offset of the last whole batch (-1: none)
    complete_bytes: int  # bytes of ``data`` taken by whole batches


_TS_TYPE = 0x08  # attributes bit 3: LogAppendTime


class AbortedFilter:
    """Which batches of one Fetch answer belong to aborted transactions (read_committed).

    ``aborted`` is the answer's aborted_transactions, (producer id, first offset) pairs.
    Batches must be shown in offset order. One decision per batch, never per record: a
    transaction's records are whole batches of its producer."""

    __slots__ = ("_aborting", "_next", "_pending")

    def __init__(self, aborted: list[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda a: a[1])  # by first offset
        self._next = 0
        self._aborting: set[int] = set()  # producers inside an aborted transaction

    def skip(self, header: BatchHeader, batch: memoryview) -> bool:
        """Whether the batch is left out: a control batch always, a transactional batch
        of a producer inside an aborted transaction."""
        if header.producer_id >= 0:
            pending = self._pending
            while self._next < len(pending) and pending[self._next][1] <= header.last_offset:
                self._aborting.add(pending[self._next][0])
                self._next += 1
            if header.is_control:
                marker = read_end_txn_marker(batch)
                if marker is not None and marker.control_type is ControlType.ABORT:
                    self._aborting.discard(header.producer_id)
                return True
            return header.is_transactional and header.producer_id in self._aborting
        return header.is_control


def add_batches(
    builder: ColumnBuilder, data: bytes | memoryview, lo: int, hi: int,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED, aborted: AbortedFilter | None = None,
) -> Added:
    """Append the records with ``lo <= offset < hi`` of every whole batch in ``data``
    (leaving out, with ``aborted``, the batches of aborted transactions).

    A trailing partial batch (a fetch cut at its byte limit) is left alone. Raises
    :class:`InvalidRecordError` for a batch that breaks the format (CRC, magic, sizes,
    compression, records).
    """
    rows = 0
    next_offset = -1
    end = 0
    for shallow in iter_batches(data):
        header = validate_batch(data, shallow.position, strict_offsets=False)
        end = shallow.position + header.size
        next_offset = header.next_offset
        if header.next_offset <= lo or header.base_offset >= hi:
            if aborted is not None and header.producer_id >= 0:
                aborted.skip(header, memoryview(data)[header.position:end])  # its state
            continue
        batch = memoryview(data)[header.position:end]
        if aborted.skip(header, batch) if aborted is not None else header.is_control:
            continue
        payload = records_payload(batch, max_decompressed)
        try:
            rows += builder.add(
                payload, header.record_count, header.base_offset, header.base_timestamp,
                header.max_timestamp, 1 if header.attributes & _TS_TYPE else 0, lo, hi,
            )
        except ValueError as exc:
            raise InvalidRecordError(
                "record", f"batch at offset {header.base_offset}: {exc}", header.position
            ) from None
    return Added(rows, next_offset, end)
