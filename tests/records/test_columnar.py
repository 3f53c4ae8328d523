"""The column builders: the C one and the Python one give identical buffers, equal to what
iter_records decodes, and refuse the same malformed input without crashing."""

from __future__ import annotations

import itertools
import struct
from array import array

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.records import columnar
from odradek.records.batch import (
    RECORDS_OFFSET,
    BatchHeader,
    InvalidRecordError,
    Record,
    iter_records,
)
from odradek.records.builder import BatchBuilder
from odradek.records.columnar import (
    AbortedFilter,
    BinaryBuffers,
    ColumnBuilder,
    Columns,
    add_batches,
    new_builder,
)
from odradek.records.compression import CompressionType
from odradek.records.control import build_end_txn_marker
from odradek.records.varint import encode_varint

KINDS = ("native", "python")


def builder(kind: str, headers: bool = True) -> ColumnBuilder:
    return new_builder(headers, native=kind == "native")


def test_native_builder_is_built() -> None:
    # setup.py builds it on every machine with a C compiler, this one included; without it
    # the reader falls back to Python at ~100x the cost, which must not pass unnoticed.
    assert columnar.native_available()


def _binary(buffers: BinaryBuffers) -> list[bytes | None]:
    validity, offsets_raw, data, _nulls = buffers
    offsets = array("i")
    offsets.frombytes(offsets_raw)
    return [
        bytes(data[offsets[i]:offsets[i + 1]]) if validity[i >> 3] >> (i & 7) & 1 else None
        for i in range(len(offsets) - 1)
    ]


def _rows(cols: Columns) -> list[Record]:
    rows, off_raw, ts_raw, _types, key, value, headers = cols
    offsets, stamps = array("q"), array("q")
    offsets.frombytes(off_raw)
    stamps.frombytes(ts_raw)
    keys, values = _binary(key), _binary(value)
    assert len(offsets) == len(stamps) == len(keys) == len(values) == rows
    per_row: list[tuple[tuple[str, bytes | None], ...]] = [()] * rows
    if headers is not None:
        list_buffers, _count, hkey, hvalue = headers
        lists = array("i")
        lists.frombytes(list_buffers[1])
        # null exactly where a record has no headers, as Spark's Kafka source gives
        valid = [bool(list_buffers[0][i >> 3] >> (i & 7) & 1) for i in range(rows)]
        assert valid == [lists[i + 1] > lists[i] for i in range(rows)]
        assert list_buffers[3] == valid.count(False)
        hkeys, hvalues = _binary(hkey), _binary(hvalue)
        per_row = [
            tuple((k.decode(), v) for k, v in zip(
                hkeys[lists[i]:lists[i + 1]], hvalues[lists[i]:lists[i + 1]], strict=True)
                  if k is not None)
            for i in range(rows)
        ]
    return [
        Record(offsets[i], stamps[i], keys[i], values[i], per_row[i])  # type: ignore[arg-type]
        for i in range(rows)
    ]


_bytes = st.none() | st.binary(max_size=40)
_record = st.tuples(
    _bytes, _bytes, st.integers(-(2**40), 2**40),
    st.lists(st.tuples(st.text(max_size=8), _bytes), max_size=3),
)


@st.composite
def batches(draw: st.DrawFn) -> list[bytes]:
    out = []
    base = draw(st.integers(0, 2**40))
    for _ in range(draw(st.integers(1, 4))):
        b = BatchBuilder(
            base_offset=base,
            compression=draw(st.sampled_from(list(CompressionType))),
            timestamp_type=draw(st.sampled_from([0, 1])),
        )
        delta = -1
        for key, value, ts, headers in draw(st.lists(_record, min_size=1, max_size=12)):
            delta += draw(st.integers(1, 3))  # gaps, as compaction leaves them
            b.append(key, value, ts, headers, offset_delta=delta)
        out.append(b.build())
        base += delta + 1 + draw(st.integers(0, 5))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.integers(-5, 2**40 + 80), st.integers(0, 60))
def test_builders_match_iter_records(data: list[bytes], lo: int, width: int) -> None:
    hi = lo + width if width else 2**62
    expected = []
    for batch in data:
        header = BatchHeader.parse(batch)
        for r in iter_records(batch):
            if lo <= r.offset < hi:
                ts = header.max_timestamp if header.attributes & 0x08 else r.timestamp
                expected.append(Record(r.offset, ts, r.key, r.value, r.headers))
    buf = b"".join(data)
    results = []
    for kind in KINDS:
        b = builder(kind)
        added = add_batches(b, buf, lo, hi)
        assert added.rows == len(expected)
        assert added.next_offset == BatchHeader.parse(data[-1]).next_offset
        assert added.complete_bytes == len(buf)
        cols = b.finish()
        assert _rows(cols) == expected
        results.append(cols)
        assert b.rows == 0  # finish starts afresh
    assert results[0] == results[1], "the C and Python builders disagree"


@pytest.mark.parametrize("kind", KINDS)
def test_without_headers_and_partial_tail(kind: str) -> None:
    b = BatchBuilder(base_offset=10)
    b.append(b"k", b"v", 5, [("h", b"x")])
    batch = b.build()
    cols = builder(kind, headers=False)
    added = add_batches(cols, batch + batch[:30], 0, 100)  # a fetch cut mid-batch
    assert (added.rows, added.next_offset, added.complete_bytes) == (1, 11, len(batch))
    out = cols.finish()
    assert out[0] == 1 and out[6] is None
    assert struct.unpack("<q", out[1]) == (10,)


@pytest.mark.parametrize("kind", KINDS)
def test_control_batches_are_skipped(kind: str) -> None:
    control = BatchBuilder(base_offset=0, is_control=True, is_transactional=True)
    control.append(b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00", 1)
    data = BatchBuilder(base_offset=1)
    data.append(None, b"v", 1)
    cols = builder(kind)
    added = add_batches(cols, control.build() + data.build(), 0, 100)
    assert (added.rows, added.next_offset) == (1, 2)


def _txn_batch(offset: int, pid: int, values: list[bytes]) -> bytes:
    b = BatchBuilder(base_offset=offset, producer_id=pid, producer_epoch=0, base_sequence=0,
                     is_transactional=pid >= 0)
    for v in values:
        b.append(None, v, 1)
    return b.build()


def _marker(offset: int, pid: int, committed: bool) -> bytes:
    marker = build_end_txn_marker(pid, 0, committed, 0, 1)
    return struct.pack(">q", offset) + marker[8:]  # the CRC does not cover the base offset


@pytest.mark.parametrize("kind", KINDS)
def test_aborted_transactions_are_dropped_whole(kind: str) -> None:
    # offsets: 0-1 p7 (aborted), 2 plain, 3-4 p8 (committed), 5-6 p7 (aborted), 7 abort p7,
    # 8 commit p8, 9 p7 again (a new transaction, committed), 10 commit p7
    data = b"".join([
        _txn_batch(0, 7, [b"a0", b"a1"]), _txn_batch(2, -1, [b"plain"]),
        _txn_batch(3, 8, [b"c0", b"c1"]), _txn_batch(5, 7, [b"a2", b"a3"]),
        _marker(7, 7, committed=False), _marker(8, 8, committed=True),
        _txn_batch(9, 7, [b"n0"]), _marker(10, 7, committed=True),
    ])

    def values(lo: int, aborted: list[tuple[int, int]] | None) -> tuple[list[bytes], int]:
        cols = builder(kind, headers=False)
        added = add_batches(cols, data, lo, 100,
                            aborted=None if aborted is None else AbortedFilter(aborted))
        rows, _, _, _, _, (_, offsets, raw, _), _ = cols.finish()
        ends = struct.unpack(f"<{rows + 1}i", bytes(offsets))
        raw = bytes(raw)
        return [raw[a:b] for a, b in itertools.pairwise(ends)], added.next_offset

    assert values(0, None) == (
        [b"a0", b"a1", b"plain", b"c0", b"c1", b"a2", b"a3", b"n0"], 11)
    assert values(0, [(7, 0)]) == ([b"plain", b"c0", b"c1", b"n0"], 11)
    # a fetch from inside the aborted transaction: the broker still names it (first
    # offset 0 < the fetch offset)
    assert values(5, [(7, 0)]) == ([b"n0"], 11)
    assert values(9, []) == ([b"n0"], 11)


def _records_section(batch: bytes) -> bytes:
    return batch[RECORDS_OFFSET:]


def _one_record(body: bytes) -> bytes:
    return encode_varint(len(body)) + body


MALFORMED = {
    "record length past the end": encode_varint(100) + b"\x00" * 10,
    "record length below the minimum": _one_record(b"\x00\x00\x00\x00\x00"),
    "varint too long": b"\xff\xff\xff\xff\xff\xff",
    "varint runs past the end": b"\x80",
    "negative header count": _one_record(b"\x00\x00\x00\x01\x01" + encode_varint(-2)),
    "null header key": _one_record(b"\x00\x00\x00\x01\x01\x02\x01\x01"),
    "fields shorter than the record": _one_record(b"\x00\x00\x00\x01\x01\x00\x00"),
    "field past its record": _one_record(b"\x00\x00\x00" + encode_varint(50) + b"\x00\x00"),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_records_are_refused_and_nothing_is_kept(kind: str, case: str) -> None:
    good = BatchBuilder(base_offset=0)
    good.append(b"k", b"v", 1, [("a", b"b")])
    cols = builder(kind)
    assert cols.add(_records_section(good.build()), 1, 0, 1, 1, 0, 0, 10) == 1
    before = builder(kind)
    before.add(_records_section(good.build()), 1, 0, 1, 1, 0, 0, 10)
    with pytest.raises(ValueError):
        cols.add(MALFORMED[case], 1, 5, 0, 0, 0, 0, 10)
    # the failed add left the builder exactly as it was
    assert cols.finish() == before.finish()


@pytest.mark.parametrize("kind", KINDS)
def test_bytes_after_the_last_record_and_missing_records(kind: str) -> None:
    b = BatchBuilder()
    b.append(None, b"v", 1)
    section = _records_section(b.build())
    with pytest.raises(ValueError, match="remain"):
        builder(kind).add(section + b"\x00", 1, 0, 0, 0, 0, 0, 10)
    with pytest.raises(ValueError):
        builder(kind).add(section, 2, 0, 0, 0, 0, 0, 10)


def test_corrupt_batch_is_invalid_record_error() -> None:
    b = BatchBuilder()
    b.append(None, b"value", 1)
    batch = bytearray(b.build())
    batch[-1] ^= 0xFF
    with pytest.raises(InvalidRecordError, match="CRC"):
        add_batches(builder("native"), bytes(batch), 0, 10)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.integers(-1, 20))
def test_garbage_never_crashes_and_both_agree(data: bytes, count: int) -> None:
    outcomes = []
    for kind in KINDS:
        b = builder(kind)
        try:
            b.add(data, count, 0, 0, 0, 0, -(2**63), 2**63 - 1)
            outcomes.append(b.finish())
        except (ValueError, OverflowError):
            outcomes.append(None)
    if outcomes[0] is not None and outcomes[1] is not None:
        # header keys that are not UTF-8 are replaced by the Python decoder only
        assert outcomes[0][:6] == outcomes[1][:6]
    else:
        assert outcomes[0] is None and outcomes[1] is None
