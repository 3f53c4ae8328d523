"""FrameDecoder (odradek.protocol.framing): partial feeds, limits, bad sizes."""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.protocol.errors import FrameTooLargeError, InvalidFrameSizeError
from odradek.protocol.framing import DEFAULT_MAX_FRAME_SIZE, FrameDecoder, frame


def test_default_limit_is_kafkas() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 104_857_600
    assert FrameDecoder().max_frame_size == DEFAULT_MAX_FRAME_SIZE


def test_byte_by_byte() -> None:
    stream = frame(b"hello") + frame(b"") + frame(b"world!")
    decoder = FrameDecoder()
    out: list[bytes] = []
    for i in range(len(stream)):
        out += decoder.feed(stream[i : i + 1])
    assert out == [b"hello", b"", b"world!"]
    assert decoder.buffered == 0


def test_many_frames_in_one_feed_and_a_partial_tail() -> None:
    decoder = FrameDecoder()
    stream = frame(b"a") + frame(b"bb") + frame(b"ccc")
    assert decoder.feed(stream + frame(b"dddd")[:5]) == [b"a", b"bb", b"ccc"]
    assert decoder.buffered == 5
    assert decoder.feed(frame(b"dddd")[5:]) == [b"dddd"]


def test_next_frame_lets_the_caller_stop_consuming() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(frame(b"1") + frame(b"2"))
    assert decoder.next_frame() == b"1"
    decoder.receive_data(frame(b"3"))
    assert decoder.next_frame() == b"2"
    assert decoder.next_frame() == b"3"
    assert decoder.next_frame() is None


def test_exact_limit_is_accepted() -> None:
    decoder = FrameDecoder(max_frame_size=8)
    assert decoder.feed(frame(b"x" * 8)) == [b"x" * 8]


def test_oversize_rejected_from_the_prefix_alone() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    # Only the size prefix arrives: the error must come before any payload is buffered.
    with pytest.raises(FrameTooLargeError) as info:
        decoder.receive_data(struct.pack(">i", 1025))
    assert info.value.size == 1025
    assert info.value.max_size == 1024


def test_oversize_detected_after_earlier_frames() -> None:
    decoder = FrameDecoder(max_frame_size=16)
    decoder.receive_data(frame(b"ok") + struct.pack(">i", 2**31 - 1))
    assert decoder.next_frame() == b"ok"
    with pytest.raises(FrameTooLargeError):
        decoder.next_frame()


def test_oversize_split_prefix() -> None:
    decoder = FrameDecoder(max_frame_size=16)
    decoder.receive_data(b"\x00\x00")
    with pytest.raises(FrameTooLargeError):
        decoder.receive_data(b"\x01\x00")


def test_negative_size() -> None:
    decoder = FrameDecoder()
    with pytest.raises(InvalidFrameSizeError, match="negative"):
        decoder.feed(struct.pack(">i", -1))


def test_http_hint() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLargeError, match="HTTP"):
        decoder.feed(b"GET / HTTP/1.1\r\n")


def test_invalid_limit() -> None:
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_size=-1)


@settings(max_examples=200, deadline=None)
@given(
    payloads=st.lists(st.binary(max_size=300), max_size=12),
    cuts=st.lists(st.integers(0, 4000), max_size=20),
    tail=st.binary(max_size=3),
)
def test_any_chunking_gives_the_frames_back(
    payloads: list[bytes], cuts: list[int], tail: bytes
) -> None:
    """Frames come back whole and in order however the stream is cut into chunks (the
    decoder keeps the chunks and joins a frame only once it is complete)."""
    stream = b"".join(frame(p) for p in payloads) + tail
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    decoder = FrameDecoder()
    out: list[bytes] = []
    for start, end in itertools.pairwise(bounds):
        out += decoder.feed(stream[start:end])
        assert decoder.buffered == end - len(b"".join(frame(p) for p in out))
    assert out == payloads
    assert decoder.buffered == len(tail)


def test_a_reused_receive_buffer_does_not_change_buffered_bytes() -> None:
    decoder = FrameDecoder()
    chunk = bytearray(frame(b"abcdef")[:7])
    decoder.receive_data(chunk)
    chunk[:] = b"\xff" * len(chunk)  # the caller reuses its buffer
    decoder.receive_data(memoryview(frame(b"abcdef")[7:]))
    assert decoder.next_frame() == b"abcdef"
