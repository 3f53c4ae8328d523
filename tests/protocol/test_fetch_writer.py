"""The Fetch response writer is byte-identical to kio's encoding, for every version 4-17."""

from __future__ import annotations

import datetime
import os
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from odradek.protocol.codec import encode_body
from odradek.protocol.fetch_writer import (
    FetchPartition,
    FetchTopic,
    NodeEndpoint,
    materialize,
    write_fetch_response,
)
from odradek.protocol.send import FileRegion
from odradek.server.handlers._entities import make, response_module

VERSIONS = range(4, 18)
RECORDS = bytes(range(256)) * 3 + b"tail"


@pytest.fixture(scope="module")
def fd() -> Iterator[int]:
    with tempfile.TemporaryFile() as f:
        f.write(b"x" * 100 + RECORDS + b"y" * 50)
        f.flush()
        yield f.fileno()


def _records_bytes(records: FileRegion | bytes | None) -> bytes | None:
    if isinstance(records, FileRegion):
        return os.pread(records.fd, records.size, records.position)
    return records


def _kio(version: int, topics: list[FetchTopic], error_code: int, session_id: int,
         throttle: int, endpoints: tuple[NodeEndpoint, ...]) -> bytes:
    m = response_module("fetch", version)
    responses = []
    for t in topics:
        parts = []
        for p in t.partitions:
            aborted = None if p.aborted_transactions is None else tuple(
                make(m.AbortedTransaction, producer_id=pid, first_offset=first)
                for pid, first in p.aborted_transactions
            )
            kw: dict[str, Any] = {}
            if version >= 12:
                kw = {
                    "diverging_epoch": m.EpochEndOffset(
                        epoch=p.diverging_epoch[0], end_offset=p.diverging_epoch[1]),
                    "current_leader": m.LeaderIdAndEpoch(
                        leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]),
                    "snapshot_id": m.SnapshotId(
                        end_offset=p.snapshot_id[0], epoch=p.snapshot_id[1]),
                }
            parts.append(make(
                m.PartitionData, partition_index=p.partition_index,
                error_code=ErrorCode(p.error_code), high_watermark=p.high_watermark,
                last_stable_offset=p.last_stable_offset, log_start_offset=p.log_start_offset,
                aborted_transactions=aborted, preferred_read_replica=p.preferred_read_replica,
                records=_records_bytes(p.records), **kw,
            ))
        responses.append(make(m.FetchableTopicResponse, topic=t.name, topic_id=t.topic_id,
                              partitions=tuple(parts)))
    kio_endpoints = tuple(
        m.NodeEndpoint(node_id=e.node_id, host=e.host, port=e.port, rack=e.rack)
        for e in endpoints
    ) if version >= 16 else ()
    entity = make(m.FetchResponse, throttle_time=datetime.timedelta(milliseconds=throttle),
                  error_code=ErrorCode(error_code), session_id=session_id,
                  responses=tuple(responses), node_endpoints=kio_endpoints)
    return encode_body(entity)


def _scenarios(fd: int) -> list[tuple[str, list[FetchTopic], dict[str, Any]]]:
    region = FileRegion(fd, 100, len(RECORDS))
    tid1, tid2 = uuid.uuid4(), uuid.uuid4()
    return [
        ("empty", [], {}),
        ("one-region", [FetchTopic("t", tid1, [FetchPartition(0, 0, 10, 10, 0, region)])], {}),
        ("many", [
            FetchTopic("alpha", tid1, [
                FetchPartition(0, 0, 1000, 990, 5, region, aborted_transactions=[]),
                FetchPartition(1, 0, 7, 7, 0, b""),
                FetchPartition(2, ErrorCode.offset_out_of_range.value, 7, 7, 0, None),
                FetchPartition(3, 0, 2**40, 2**40, 2**39, FileRegion(fd, 0, 0)),
            ]),
            FetchTopic("béta-ünicode", tid2, [
                FetchPartition(9, 0, 5, 5, 0, b"inline-bytes",
                               aborted_transactions=[(1234, 5), (2**50, 99)]),
                FetchPartition(2**31 - 1, ErrorCode.unknown_topic_or_partition.value),
                FetchPartition(4, 0, 11, 11, 0, FileRegion(fd, 0, 100),
                               preferred_read_replica=3),
            ]),
        ], {"error_code": 0, "session_id": 123456, "throttle_time_ms": 17}),
        ("tagged", [
            FetchTopic("t" * 200, tid1, [
                FetchPartition(0, 0, 10, 10, 0, region, diverging_epoch=(3, 77)),
                FetchPartition(1, 0, 10, 10, 0, region, current_leader=(2, 9)),
                FetchPartition(2, 0, 10, 10, 0, b"", snapshot_id=(500, 4)),
                FetchPartition(3, 0, 10, 10, 0, b"z" * 300, diverging_epoch=(1, -1),
                               current_leader=(-1, 0), snapshot_id=(0, 0)),
                FetchPartition(4, 0, 10, 10, 0, None, diverging_epoch=(-1, -1)),
            ]),
        ], {}),
        ("session-error", [], {"error_code": ErrorCode.invalid_fetch_session_epoch.value}),
        # compact counts of 127 and more take two bytes (one byte is written inline)
        ("counts-past-one-byte", [
            FetchTopic("many-partitions", tid1, [
                FetchPartition(i, 0, 1, 1, 0, b"", aborted_transactions=[(i, 0)] * i)
                for i in range(125, 130)] + [FetchPartition(i, 0, 1, 1, 0, b"")
                                             for i in range(125)]),
            *(FetchTopic(f"t{i}", uuid.UUID(int=i + 1), [FetchPartition(0)])
              for i in range(126)),
        ], {}),
        ("endpoints", [FetchTopic("t", tid1, [FetchPartition(
            0, ErrorCode.not_leader_or_follower.value, current_leader=(1, 5))])],
         {"node_endpoints": (NodeEndpoint(1, "host-a", 9092, None),
                             NodeEndpoint(2, "h" * 130, 19092, "rack-1"))}),
    ]


@pytest.mark.parametrize("version", VERSIONS)
def test_byte_identical_to_kio(fd: int, version: int) -> None:
    for name, topics, kw in _scenarios(fd):
        send = write_fetch_response(version, topics, **kw)
        ours = materialize(send)
        theirs = _kio(version, topics, kw.get("error_code", 0), kw.get("session_id", 0),
                      kw.get("throttle_time_ms", 0), kw.get("node_endpoints", ()))
        assert ours == theirs, f"v{version} {name}"
        assert send.size == len(ours)


def test_records_are_file_regions_not_copies(fd: int) -> None:
    region = FileRegion(fd, 100, len(RECORDS))
    topics = [FetchTopic("t", uuid.uuid4(), [FetchPartition(p, 0, 1, 1, 0, region)
                                             for p in range(3)])]
    for version in VERSIONS:
        send = write_fetch_response(version, topics)
        regions = [p for p in send.parts if isinstance(p, FileRegion)]
        assert regions == [region] * 3
        # fields around the regions are coalesced: one buffer between two regions (and
        # one after the last for the tagged fields of flexible versions)
        assert len(send.parts) == (7 if version >= 12 else 6)


def test_version_bounds() -> None:
    with pytest.raises(ValueError):
        write_fetch_response(3, [])
    with pytest.raises(ValueError):
        write_fetch_response(18, [])
    with pytest.raises(ValueError):
        write_fetch_response(12, [FetchTopic(None, uuid.uuid4(), [])])
