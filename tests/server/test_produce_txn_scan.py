"""The transactional-bit scan of a Produce request without a transactional id (issue 47,
item 3): the C scan (``_columnar.transactional_batch_in``), which the handler uses, and its
Python twin (``produce._has_transactional_batch``) give the same answer on real batches,
on message sets of magic 0/1, and on every cut and corruption of their headers."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.produce_reader import TopicProduceData
from odradek.records import _columnar
from odradek.records.batch import ATTRIBUTES_OFFSET, LENGTH_OFFSET, MAGIC_OFFSET
from odradek.records.builder import BatchBuilder
from odradek.server.handlers import produce

native = _columnar.transactional_batch_in
python = produce._has_transactional_batch


def v2(transactional: bool, records: int = 1, control: bool = False) -> bytes:
    builder = BatchBuilder(producer_id=7 if transactional else -1, producer_epoch=0,
                           base_sequence=0 if transactional else -1,
                           is_transactional=transactional, is_control=control)
    for i in range(records):
        builder.append(b"k", b"v%d" % i, 1_700_000_000_000)
    return builder.build()


def legacy(magic: int, attributes: int) -> bytes:
    """A message set of one magic 0/1 message: offset, size, crc, magic, attributes, ...
    (its attributes byte where a v2 batch's CRC is: never a transactional bit)."""
    body = struct.pack(">bb", magic, attributes) + (b"\0" * 8 if magic else b"") + (
        struct.pack(">ii", -1, 3) + b"abc")
    message = struct.pack(">I", 0) + body
    return struct.pack(">qi", 0, len(message)) + message


def request(*partitions: bytes | memoryview | None) -> tuple[TopicProduceData, ...]:
    # bytes as well as the reader's memoryviews: the scan takes any buffer
    return (TopicProduceData("t", tuple(enumerate(partitions))),)  # type: ignore[arg-type]


def both(topic_data: tuple[TopicProduceData, ...]) -> bool:
    found = native(topic_data)
    assert found is python(topic_data)
    return found


def test_the_handler_scans_in_c() -> None:
    # setup.py builds the extension on every machine with a C compiler, this one included
    assert produce._transactional_batch_in is native


@pytest.mark.parametrize(("records", "expected"), [
    ((v2(False),), False),
    ((v2(True),), True),
    ((v2(False) + v2(True, 3),), True),  # the second batch of a partition counts too
    ((v2(False), None, v2(True)), True),  # the third partition
    ((None, b""), False),
    ((legacy(0, 0x10), legacy(1, 0x30)), False),  # magic 0/1: no transactional bit
    ((v2(False, control=True),), False),  # the control bit alone is not it
    ((v2(False) + v2(True)[:30],), False),  # cut short: the append refuses it
    ((v2(True)[:22],), False),  # not even a header
])
def test_real_batches(records: tuple[bytes | None, ...], expected: bool) -> None:
    assert both(request(*records)) is expected
    # as the request reader hands them over: views of the (writable) frame
    views = tuple(None if r is None else memoryview(bytearray(r)) for r in records)
    assert both(request(*views)) is expected


def test_several_topics() -> None:
    plain = TopicProduceData("a", ((0, memoryview(v2(False))),))
    txn = TopicProduceData("b", ((3, None), (4, memoryview(v2(True)))))
    assert both((plain,)) is False
    assert both((plain, txn)) is True
    assert both(()) is False


def test_a_length_past_the_records_or_not_positive_ends_the_scan() -> None:
    plain, txn = v2(False), v2(True)
    # the plain batch's length: negative, 0, or one byte past the records
    for length in (-1, 0, len(plain) + len(txn) - 11, 2**31 - 1, -(2**31)):
        bad = bytearray(plain)
        struct.pack_into(">i", bad, LENGTH_OFFSET, length)
        assert both(request(bytes(bad) + txn)) is False, length
    assert both(request(plain + txn)) is True


@st.composite
def headers(draw: st.DrawFn) -> bytes:
    """Batches whose length, magic and attributes are drawn, with filler after them."""
    out = bytearray()
    for _ in range(draw(st.integers(0, 4))):
        body = bytearray(draw(st.binary(min_size=11, max_size=40)))
        length = draw(st.one_of(st.just(len(body)), st.integers(-3, 60)))
        head = bytearray(12)
        struct.pack_into(">qi", head, 0, 0, length)
        batch = head + body
        batch[MAGIC_OFFSET] = draw(st.integers(0, 255))
        struct.pack_into(">h", batch, ATTRIBUTES_OFFSET, draw(st.integers(-(2**15), 2**15 - 1)))
        out += batch
    cut = draw(st.integers(0, len(out)))
    return bytes(out[:cut] if draw(st.booleans()) else out)


@given(st.lists(st.one_of(st.none(), headers()), max_size=4))
@settings(max_examples=400, deadline=None)
def test_c_and_python_agree(partitions: list[bytes | None]) -> None:
    both(request(*partitions))
    both(request(*(None if p is None else memoryview(p) for p in partitions)))
