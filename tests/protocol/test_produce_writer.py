"""The Produce response writer is byte-identical to kio's encoding, every version."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.protocol.codec import encode_body
from odradek.protocol.produce_writer import (
    MAX_VERSION,
    MIN_VERSION,
    PartitionResult,
    write_produce_response,
)
from odradek.server.handlers._entities import make, nested, response_module

_CODES = [ErrorCode.none, ErrorCode.corrupt_message, ErrorCode.unknown_topic_or_partition,
          ErrorCode.message_too_large, ErrorCode.invalid_timestamp]

partition = st.builds(
    PartitionResult,
    index=st.integers(0, 2**31 - 1),
    error_code=st.sampled_from([int(c.value) for c in _CODES]),
    base_offset=st.integers(-1, 2**62),
    log_append_time_ms=st.one_of(st.just(-1), st.integers(0, 2**41)),
    log_start_offset=st.integers(-1, 2**62),
    error_message=st.one_of(st.none(), st.text(max_size=40)),
    record_errors=st.lists(st.tuples(st.integers(0, 2**31 - 1),
                                     st.one_of(st.none(), st.text(max_size=20))),
                           max_size=3).map(tuple),
)
topics = st.lists(
    st.tuples(st.text(min_size=1, max_size=30), st.lists(partition, max_size=5)), max_size=4
)


def ms_to_datetime(ms: int) -> datetime.datetime | None:
    """kio's view of an int64 milliseconds field: None for -1."""
    if ms < 0:
        return None
    return datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)


def _kio(version: int, data: list[tuple[str, list[PartitionResult]]], throttle: int) -> bytes:
    m = response_module("produce", version)
    responses = tuple(
        make(m.TopicProduceResponse, name=name, partition_responses=tuple(
            make(m.PartitionProduceResponse, index=p.index, error_code=ErrorCode(p.error_code),
                 base_offset=p.base_offset,
                 log_append_time=ms_to_datetime(p.log_append_time_ms),
                 log_start_offset=p.log_start_offset, record_errors=tuple(
                     nested(m, "BatchIndexAndErrorMessage", batch_index=i,
                            batch_index_error_message=message)
                     for i, message in p.record_errors),
                 error_message=p.error_message,
                 current_leader=nested(m, "LeaderIdAndEpoch", leader_id=-1, leader_epoch=-1))
            for p in parts))
        for name, parts in data
    )
    return encode_body(make(m.ProduceResponse, responses=responses,
                            throttle_time=datetime.timedelta(milliseconds=throttle),
                            node_endpoints=()))


@pytest.mark.parametrize("version", range(MIN_VERSION, MAX_VERSION + 1))
@settings(max_examples=60, deadline=None)
@given(data=topics, throttle=st.integers(0, 10_000))
def test_byte_identical_to_kio(
    version: int, data: list[tuple[str, list[PartitionResult]]], throttle: int
) -> None:
    assert write_produce_response(version, data, throttle) == _kio(version, data, throttle)


@pytest.mark.parametrize("version", [9, 11])
@pytest.mark.parametrize("count", [126, 127, 130])
def test_lengths_past_one_varint_byte(version: int, count: int) -> None:
    """Compact lengths and counts are one byte up to 126 and written inline: the names
    and partition counts around that edge still match kio."""
    data = [("n" * count, [PartitionResult(i, 0, i) for i in range(count)]),
            ("é" * count, [PartitionResult(0, 0, 1)])]
    assert write_produce_response(version, data, 0) == _kio(version, data, 0)
    many = [(f"t{i}", [PartitionResult(0, 0, i)]) for i in range(count)]
    assert write_produce_response(version, many, 0) == _kio(version, many, 0)


def test_rejects_versions_it_does_not_know() -> None:
    with pytest.raises(ValueError):
        write_produce_response(12, [])
