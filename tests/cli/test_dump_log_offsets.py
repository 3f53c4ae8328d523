"""``odradek dump-log --offsets-decoder`` on a ``__consumer_offsets`` segment written by the
broker's log: offset commits, a classic group and KIP-848's consumer group records."""

from __future__ import annotations

import argparse
import io
import json
import os
import struct
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.record.legacy_records import LegacyRecordBatchBuilder  # type: ignore[import-untyped]

from odradek.cli import _segment_dump, dump_log
from odradek.cli._offsets_decoder import parse_offsets_record
from odradek.coordinator.consumer_group_records import (
    MEMBER_STATE_UNREVOKED_PARTITIONS,
    TopicMetadata,
)
from odradek.coordinator.consumer_group_replay import (
    ConsumerGroupRecord,
    ConsumerGroupReplayer,
    ConsumerGroupSnapshot,
    MemberSnapshot,
    encode_record,
    records_for_change,
)
from odradek.coordinator.group_protocol import encode_assignment
from odradek.coordinator.group_records import (
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadataValue,
    OffsetCommitKey,
    OffsetCommitValue,
    RecordFormatError,
)
from odradek.records.batch import iter_records
from odradek.records.builder import BatchBuilder
from odradek.storage import LogConfig, PartitionLog

T0 = 1_700_000_000_000
FOO = uuid.UUID(bytes=bytes(range(16)))  # Kafka prints it AAECAwQFBgcICQoLDA0ODw
FOO_TEXT = "AAECAwQFBgcICQoLDA0ODw"


def _group(epoch: int, members: dict[str, MemberSnapshot],
           target: dict[str, dict[uuid.UUID, frozenset[int]]]) -> ConsumerGroupSnapshot:
    return ConsumerGroupSnapshot(
        "cg", group_epoch=epoch, subscription_metadata={"foo": TopicMetadata(FOO, "foo", 2)},
        members=members, target_assignment=target, assignment_epoch=epoch,
    )


def _member(member_id: str, **kw: Any) -> MemberSnapshot:
    return MemberSnapshot(member_id, client_id="rdkafka", client_host="/127.0.0.1",
                          subscribed_topic_names=("foo",), rebalance_timeout_ms=300_000,
                          server_assignor="uniform", **kw)


FIRST = _group(1, {"m1": _member("m1", member_epoch=1, assigned={FOO: frozenset({0, 1})})},
               {"m1": {FOO: frozenset({0, 1})}})
SECOND = _group(2, {
    "m1": _member("m1", member_epoch=1, state=MEMBER_STATE_UNREVOKED_PARTITIONS,
                  assigned={FOO: frozenset({0})}, pending_revocation={FOO: frozenset({1})}),
    "m2": _member("m2", member_epoch=2, previous_member_epoch=0, state=2),
}, {"m1": {FOO: frozenset({0})}, "m2": {FOO: frozenset({1})}})
THIRD = _group(3, {"m2": _member("m2", member_epoch=3, previous_member_epoch=2,
                                 assigned={FOO: frozenset({0, 1})})},
               {"m2": {FOO: frozenset({0, 1})}})


def _subscription(*topics: str) -> bytes:
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)


def _append(log: PartitionLog, records: list[tuple[bytes, bytes | None]]) -> None:
    """One batch per change, as the coordinator appends them."""
    builder = BatchBuilder()
    for i, (key, value) in enumerate(records):
        builder.append(key, value, T0 + i)
    log.append_as_leader(builder.build(), leader_epoch=0)


def _consumer_records(records: list[ConsumerGroupRecord]) -> list[tuple[bytes, bytes | None]]:
    return [encode_record(r) for r in records]


@pytest.fixture(scope="module")
def segment(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("offsets")
    log = PartitionLog(root / "__consumer_offsets-0", LogConfig.build({}, {}),
                       time_ms=lambda: T0)
    _append(log, [
        (OffsetCommitKey("classic", "foo", 0).encode(),
         OffsetCommitValue(42, 3, "meta", T0).encode()),
        (GroupMetadataKey("classic").encode(), GroupMetadataValue(
            "consumer", 1, "range", "c-1", T0, (MemberMetadataValue(
                "c-1", None, "kafka-python", "/10.0.0.1", 300_000, 10_000,
                _subscription("foo"), encode_assignment({"foo": [0, 1]})),),
        ).encode()),
    ])
    _append(log, _consumer_records(records_for_change(None, FIRST)))
    _append(log, _consumer_records(records_for_change(FIRST, SECOND)))
    _append(log, _consumer_records(records_for_change(SECOND, THIRD)))
    _append(log, [
        (OffsetCommitKey("cg", "foo", 1).encode(), None),  # a deleted offset
        (struct.pack(">h", 11) + b"\x00\x02sg", b"\x00\x00\x00"),  # a share group's
        (struct.pack(">h", 5) + b"\x00\x02cg", b"\x00\x00"),  # member key cut short
    ])
    log.close()
    return root / "__consumer_offsets-0" / f"{0:020d}.log"


def _run(*argv: str) -> tuple[int, list[str]]:
    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers(dest="command", required=True)
    dump_log.add_parser(subparsers)
    args = parser.parse_args(["dump-log", *argv])
    out = io.StringIO()
    code = args.func(args, out)
    return code, out.getvalue().splitlines()


def _decoded(lines: list[str]) -> list[tuple[str, str | None]]:
    out = []
    for line in lines:
        if line.startswith("| offset:"):
            rest = line.split(" key: ", 1)[1]
            key, _, payload = rest.partition(" payload: ")
            out.append((key, payload or None))
    return out


def test_consumer_group_records_are_decoded(segment: Path) -> None:
    code, lines = _run("--files", str(segment), "--offsets-decoder")
    assert code == 0
    decoded = _decoded(lines)
    # the classic batch, the six records of FIRST, a join (7), a leave (7), the last batch
    assert len(decoded) == 2 + 6 + 7 + 7 + 3
    keys = [json.loads(k)["type"] if k.startswith("{") else k for k, _ in decoded]
    assert keys[:8] == ["1", "2", "5", "4", "3", "7", "6", "8"]
    member, partitions, epoch, target, target_epoch, current = decoded[2:8]
    assert member == (
        '{"type":"5","data":{"groupId":"cg","memberId":"m1"}}',
        '{"version":"0","data":{"instanceId":null,"rackId":null,"clientId":"rdkafka",'
        '"clientHost":"/127.0.0.1","subscribedTopicNames":["foo"],"subscribedTopicRegex":'
        'null,"rebalanceTimeoutMs":300000,"serverAssignor":"uniform"}}',
    )
    assert partitions == (
        '{"type":"4","data":{"groupId":"cg"}}',
        '{"version":"0","data":{"topics":[{"topicId":"' + FOO_TEXT + '","topicName":"foo",'
        '"numPartitions":2,"partitionMetadata":[]}]}}',
    )
    assert epoch == ('{"type":"3","data":{"groupId":"cg"}}',
                     '{"version":"0","data":{"epoch":1}}')
    assert target == (
        '{"type":"7","data":{"groupId":"cg","memberId":"m1"}}',
        '{"version":"0","data":{"topicPartitions":[{"topicId":"' + FOO_TEXT + '",'
        '"partitions":[0,1]}]}}',
    )
    assert target_epoch == ('{"type":"6","data":{"groupId":"cg"}}',
                            '{"version":"0","data":{"assignmentEpoch":1}}')
    assert current == (
        '{"type":"8","data":{"groupId":"cg","memberId":"m1"}}',
        '{"version":"0","data":{"memberEpoch":1,"previousMemberEpoch":0,"state":0,'
        '"assignedPartitions":[{"topicId":"' + FOO_TEXT + '","partitions":[0,1]}],'
        '"partitionsPendingRevocation":[]}}',
    )
    # the leave: m1's tombstones first
    leave = decoded[15:22]
    assert leave[:3] == [
        ('{"type":"8","data":{"groupId":"cg","memberId":"m1"}}', "<DELETE>"),
        ('{"type":"7","data":{"groupId":"cg","memberId":"m1"}}', "<DELETE>"),
        ('{"type":"5","data":{"groupId":"cg","memberId":"m1"}}', "<DELETE>"),
    ]


def test_classic_records_and_errors_are_decoded_as_kafkas(segment: Path) -> None:
    _, lines = _run("--files", str(segment), "--offsets-decoder")
    decoded = _decoded(lines)
    assert decoded[0] == (
        '{"type":"1","data":{"group":"classic","topic":"foo","partition":0}}',
        '{"version":"3","data":{"offset":42,"leaderEpoch":3,"metadata":"meta",'
        '"commitTimestamp":1700000000000}}',
    )
    key, payload = decoded[1]
    assert key == '{"type":"2","data":{"group":"classic"}}'
    assert payload is not None
    member = json.loads(payload)["data"]["members"][0]
    assert member["subscription"] == {"topics": ["foo"], "userData": None}
    assert member["assignment"]["assignedPartitions"] == [{"topic": "foo", "partitions": [0, 1]}]
    assert decoded[-3] == ('{"type":"1","data":{"group":"cg","topic":"foo","partition":1}}',
                           "<DELETE>")
    assert decoded[-2] == ("Unknown record type 11 at offset 23, skipping.", None)
    error_key, error_payload = decoded[-1]
    assert error_key.startswith("Error at offset 24, skipping. key of record type 5: ends early")
    assert error_payload is None


def test_without_the_decoder_records_print_raw(segment: Path) -> None:
    code, lines = _run("--files", str(segment), "--print-data-log")
    assert code == 0
    assert not any('"type":"5"' in line for line in lines)


def test_the_segment_replays_into_the_last_snapshot(segment: Path) -> None:
    """What a coordinator taking the partition over would load from this segment."""
    replayer = ConsumerGroupReplayer()
    fd = os.open(segment, os.O_RDONLY)
    try:
        walk = _segment_dump.LogWalk()
        for batch in _segment_dump.iter_log_batches(fd, os.fstat(fd).st_size, walk):
            assert isinstance(batch, _segment_dump.BatchRead) and batch.data is not None
            for record in iter_records(batch.data):
                assert record.key is not None
                if record.offset == 24:  # the member key cut short
                    with pytest.raises(RecordFormatError, match="ends early"):
                        replayer.replay_bytes(record.key, record.value)
                else:
                    replayer.replay_bytes(record.key, record.value)
    finally:
        os.close(fd)
    assert replayer.groups == {"cg": THIRD}


def test_missing_key() -> None:
    assert parse_offsets_record(7, None, b"x") == (
        "Failed to decode message at offset 7 using offset topic decoder (message had a "
        "missing key)", None)


def test_entry_point(segment: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "odradek.cli.dump_log", "--files", str(segment),
         "--offsets-decoder"],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert '{"type":"6","data":{"groupId":"cg"}} payload: {"version":"0","data":' \
        '{"assignmentEpoch":3}}' in proc.stdout


def test_v1_messages_of_an_old_kafka_are_decoded(tmp_path: Path) -> None:
    """A __consumer_offsets segment left by a Kafka before 0.11: message format v1, an
    offset commit with an expire timestamp (value version 1) and its tombstone."""
    builder = LegacyRecordBatchBuilder(1, 0, 1 << 20)
    key = OffsetCommitKey("old", "foo", 3).encode()
    value = OffsetCommitValue(9, -1, "", T0, T0 + 86_400_000).encode()
    builder.append(0, T0, key, value)
    builder.append(1, T0, key, None)
    path = tmp_path / "__consumer_offsets-0" / f"{0:020d}.log"
    path.parent.mkdir()
    path.write_bytes(bytes(builder.build()))
    code, lines = _run("--files", str(path), "--offsets-decoder")
    assert code == 0
    assert lines[2].startswith("offset: 0 position: 0 isvalid: true ")
    assert lines[2].endswith(
        ' key: {"type":"1","data":{"group":"old","topic":"foo","partition":3}} payload: '
        '{"version":"1","data":{"offset":9,"metadata":"","commitTimestamp":1700000000000,'
        '"expireTimestamp":1700086400000}}'
    )
    assert lines[3].endswith(
        ' key: {"type":"1","data":{"group":"old","topic":"foo","partition":3}} payload: '
        "<DELETE>"
    )
