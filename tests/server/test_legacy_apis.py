"""The API versions of old clients (Produce v0-2, Fetch v0-3, ListOffsets v0) against a real
broker over a real socket. Requests and responses are encoded and decoded by kafka-python's
old protocol classes (kafka.protocol.old) and its legacy record code: an implementation
independent of ours."""

from __future__ import annotations

import socket
import struct
import time
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import pytest
from kafka.protocol.old.commit import (
    OffsetCommitRequest_v0,
    OffsetCommitRequest_v1,
    OffsetCommitResponse_v0,
    OffsetCommitResponse_v1,
    OffsetFetchRequest_v0,
    OffsetFetchRequest_v1,
    OffsetFetchResponse_v0,
    OffsetFetchResponse_v1,
)
from kafka.protocol.old.fetch import (
    FetchRequest_v0,
    FetchRequest_v1,
    FetchRequest_v2,
    FetchRequest_v3,
    FetchResponse_v0,
    FetchResponse_v1,
    FetchResponse_v2,
    FetchResponse_v3,
)
from kafka.protocol.old.list_offsets import ListOffsetsRequest_v0, ListOffsetsResponse_v0
from kafka.protocol.old.produce import (
    ProduceRequest_v0,
    ProduceRequest_v1,
    ProduceRequest_v2,
    ProduceResponse_v0,
    ProduceResponse_v1,
    ProduceResponse_v2,
)
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

from odradek.protocol.api_keys import ApiKey
from odradek.records.builder import BatchBuilder
from odradek.records.compression import CompressionType, compress
from odradek.testing import RunningBroker
from tests._deadlines import expired

PRODUCE = {0: (ProduceRequest_v0, ProduceResponse_v0), 1: (ProduceRequest_v1, ProduceResponse_v1),
           2: (ProduceRequest_v2, ProduceResponse_v2)}
FETCH = {0: (FetchRequest_v0, FetchResponse_v0), 1: (FetchRequest_v1, FetchResponse_v1),
         2: (FetchRequest_v2, FetchResponse_v2), 3: (FetchRequest_v3, FetchResponse_v3)}
CODECS = [0, 1, 2, 3]  # none, gzip, snappy, lz4: what message formats v0/v1 know


class OldClient:
    """One connection speaking request header v1 / response header v0, as 0.9 clients."""

    def __init__(self, broker: RunningBroker) -> None:
        self.sock = socket.create_connection(("127.0.0.1", broker.port), timeout=30)
        self.correlation = 0

    def call(self, request: Any, response_cls: Any) -> Any:
        self.correlation += 1
        request.with_header(correlation_id=self.correlation, client_id="old-client")
        self.sock.sendall(request.encode(header=True, framed=True))
        size = struct.unpack(">i", self._read(4))[0]
        data = self._read(size)
        (correlation,) = struct.unpack(">i", data[:4])
        assert correlation == self.correlation
        return response_cls.decode(data[4:])

    def _read(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("closed by the broker")
            out += chunk
        return bytes(out)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def client(shared_broker: RunningBroker) -> Iterator[OldClient]:
    c = OldClient(shared_broker)
    yield c
    c.close()


@pytest.fixture
def topic(shared_broker: RunningBroker) -> str:
    name = f"legacy-{uuid.uuid4().hex[:8]}"
    shared_broker.call(shared_broker.broker.metadata.create_topic, name, 1, 1, {})
    started = time.monotonic()
    while shared_broker.broker.get_log(name, 0) is None:
        assert not expired(started, 30), "log not created"
        time.sleep(0.02)
    return name


def message_set(magic: int, codec: int, values: list[bytes], timestamp: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, codec, 1 << 24)
    for i, value in enumerate(values):
        builder.append(i, timestamp + i, b"key-%d" % i, value)
    return bytes(builder.build())


def produce(client: OldClient, version: int, topic: str, records: bytes) -> tuple[int, int]:
    request_cls, response_cls = PRODUCE[version]
    response = client.call(request_cls(required_acks=1, timeout=5000,
                                       topics=[(topic, [(0, records)])]), response_cls)
    (_, [(index, error, base_offset, *_)]) = response.topics[0]
    assert index == 0
    return error, base_offset


def fetch(client: OldClient, version: int, topic: str, offset: int = 0,
          max_bytes: int = 1 << 20) -> tuple[int, int, list[Any]]:
    request_cls, response_cls = FETCH[version]
    args: list[Any] = [-1, 100, 1]
    if version == 3:
        args.append(50 << 20)
    args.append([(topic, [(0, offset, max_bytes)])])
    response = client.call(request_cls(*args), response_cls)
    (_, [(index, error, high_watermark, records)]) = response.topics[0]
    assert index == 0
    out = []
    memory = MemoryRecords(records)
    while memory.has_next():
        batch = memory.next_batch()
        if batch is None:
            break
        assert batch.magic == (0 if version <= 1 else 1)
        for record in batch:
            assert record.validate_crc()
            out.append(record)
    return error, high_watermark, out


def log_end(broker: RunningBroker, topic: str) -> int:
    log = broker.broker.get_log(topic, 0)
    assert log is not None
    return int(log.log_end_offset)


@pytest.mark.parametrize("version", [0, 1, 2])
@pytest.mark.parametrize("codec", CODECS)
def test_old_produce_then_old_fetch(client: OldClient, topic: str, version: int,
                                    codec: int) -> None:
    magic = 0 if version < 2 else 1
    now = int(time.time() * 1000)
    for round_ in range(2):
        values = [b"value %d-%d" % (round_, i) * 10 for i in range(5)]
        error, base = produce(client, version, topic, message_set(magic, codec, values, now))
        assert (error, base) == (0, round_ * 5)
    for fetch_version in range(4):
        error, high_watermark, records = fetch(client, fetch_version, topic)
        assert (error, high_watermark) == (0, 10)
        assert [r.offset for r in records] == list(range(10))
        assert [r.value for r in records] == [
            b"value %d-%d" % (r, i) * 10 for r in range(2) for i in range(5)]
        assert [r.key for r in records] == [b"key-%d" % i for _ in range(2) for i in range(5)]
        if fetch_version >= 2:
            expected = [now + i for _ in range(2) for i in range(5)] if magic else [-1] * 10
            assert [r.timestamp for r in records] == expected
    # from an offset in the middle of a batch
    assert [r.offset for r in fetch(client, 3, topic, offset=7)[2]] == [7, 8, 9]


def test_modern_batches_are_down_converted_headers_dropped(
    shared_broker: RunningBroker, client: OldClient, topic: str
) -> None:
    log = shared_broker.broker.get_log(topic, 0)
    for codec in (CompressionType.NONE, CompressionType.GZIP, CompressionType.LZ4):
        builder = BatchBuilder(compression=codec)
        for i in range(3):
            builder.append(b"k", b"v%d" % i, 1_700_000_000_000 + i, headers=[("h", b"x")])
        shared_broker.call(log.append_as_leader, builder.build())
    error, _, records = fetch(client, 2, topic)
    assert error == 0
    assert [(r.offset, r.value, r.timestamp) for r in records] == [
        (3 * b + i, b"v%d" % i, 1_700_000_000_000 + i) for b in range(3) for i in range(3)]
    assert all(r.headers == [] for r in records)
    error, _, records = fetch(client, 0, topic, offset=4)
    assert [r.offset for r in records] == [4, 5, 6, 7, 8]


def test_zstd_cannot_be_read_by_old_fetchers(
    shared_broker: RunningBroker, client: OldClient, topic: str
) -> None:
    builder = BatchBuilder(compression=CompressionType.ZSTD)
    builder.append(None, b"z", int(time.time() * 1000))
    shared_broker.call(shared_broker.broker.get_log(topic, 0).append_as_leader, builder.build())
    error, _, records = fetch(client, 3, topic)
    assert error == 76 and records == []  # UNSUPPORTED_COMPRESSION_TYPE, as Kafka


def test_v0_2_partition_limit_is_hard(client: OldClient, topic: str) -> None:
    produce(client, 2, topic, message_set(1, 0, [b"x" * 500]))
    request_cls, response_cls = FETCH[1]
    response = client.call(request_cls(-1, 100, 1, [(topic, [(0, 0, 100)])]), response_cls)
    records = response.topics[0][1][0][3]
    assert len(records) == 100  # the first message, cut: the old client reports it


def _wrapper(magic: int, codec: int, value: bytes | None) -> bytes:
    body = struct.pack(">bb", magic, codec)
    if magic == 1:
        body += struct.pack(">q", 0)
    body += b"\xff\xff\xff\xff"
    body += b"\xff\xff\xff\xff" if value is None else struct.pack(">i", len(value)) + value
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", 0, len(message)) + message


BAD = {
    "bad crc": (lambda: bytes(message_set(1, 0, [b"a", b"b"])[:-1] + b"\x00"), 2),
    "wrapper in wrapper": (
        lambda: _wrapper(1, 1, compress(CompressionType.GZIP, message_set(1, 1, [b"a"]))), 87),
    "truncated inner message": (
        lambda: _wrapper(0, 1, compress(CompressionType.GZIP, message_set(0, 0, [b"a"])[:-3])),
        2),
    "truncated message set": (lambda: message_set(1, 0, [b"a", b"bbbb"])[:-2], 2),
    "inner magic differs": (
        lambda: _wrapper(1, 2, compress(CompressionType.SNAPPY, message_set(0, 0, [b"a"]))), 87),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_message_sets_are_refused_nothing_stored(
    shared_broker: RunningBroker, client: OldClient, topic: str, case: str
) -> None:
    make, expected = BAD[case]
    produce(client, 2, topic, message_set(1, 0, [b"ok"]))
    error, _ = produce(client, 2, topic, make())
    assert error == expected
    assert log_end(shared_broker, topic) == 1
    # the same connection goes on: the broker answers the next request
    assert produce(client, 1, topic, message_set(0, 0, [b"ok2"])) == (0, 1)


def test_wrong_inner_offsets_are_reassigned(client: OldClient, topic: str) -> None:
    builder = LegacyRecordBatchBuilder(1, 1, 1 << 20)
    for offset in (5, 2, 9):
        builder.append(offset, 1, None, b"v%d" % offset)
    assert produce(client, 2, topic, bytes(builder.build())) == (0, 0)
    assert [(r.offset, r.value) for r in fetch(client, 2, topic)[2]] == [
        (0, b"v5"), (1, b"v2"), (2, b"v9")]


def test_list_offsets_v0(shared_broker: RunningBroker, client: OldClient, topic: str) -> None:
    def offsets(timestamp: int, count: int) -> tuple[int, list[int]]:
        response = client.call(ListOffsetsRequest_v0(-1, [(topic, [(0, timestamp, count)])]),
                               ListOffsetsResponse_v0)
        (_, [(_, error, found)]) = response.topics[0]
        return error, list(found)

    assert offsets(-1, 1) == (0, [0])
    assert offsets(-2, 1) == (0, [0])
    produce(client, 0, topic, message_set(0, 0, [b"a", b"b", b"c"]))
    assert offsets(-1, 1) == (0, [3])
    assert offsets(-1, 5) == (0, [3, 0])  # the log end, then the segment's base offset
    assert offsets(-2, 5) == (0, [0])
    assert offsets(0, 5) == (0, [])  # nothing modified at or before 1970
    response = client.call(ListOffsetsRequest_v0(-1, [("no-such-topic-x", [(0, -1, 1)])]),
                           ListOffsetsResponse_v0)
    assert response.topics[0][1][0][1] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_api_versions_advertise_the_old_versions(shared_broker: RunningBroker) -> None:
    table = {r.api_key: (r.min_version, r.max_version)
             for r in shared_broker.broker.registry.supported_versions()}
    assert table[int(ApiKey.PRODUCE)][0] == 0
    assert table[int(ApiKey.FETCH)][0] == 0
    assert table[int(ApiKey.LIST_OFFSETS)][0] == 0
    assert table[int(ApiKey.OFFSET_COMMIT)][0] == 0
    assert table[int(ApiKey.OFFSET_FETCH)][0] == 0


def test_v0_messages_without_timestamp_pass_the_timestamp_bounds(
    shared_broker: RunningBroker, client: OldClient
) -> None:
    """Kafka does not check NO_TIMESTAMP (-1) against message.timestamp.before.max.ms."""
    name = f"legacy-bounded-{uuid.uuid4().hex[:8]}"
    shared_broker.call(shared_broker.broker.metadata.create_topic, name, 1, 1,
                       {"message.timestamp.before.max.ms": "3600000"})
    started = time.monotonic()
    while shared_broker.broker.get_log(name, 0) is None:
        assert not expired(started, 30), "log not created"
        time.sleep(0.02)
    assert produce(client, 0, name, message_set(0, 0, [b"a", b"b"])) == (0, 0)
    # a v1 message a year old is still refused: INVALID_TIMESTAMP
    old = int(time.time() * 1000) - 365 * 86_400_000
    assert produce(client, 2, name, message_set(1, 0, [b"c"], old))[0] == 32


def test_offset_commit_v0_keeps_offsets_the_old_way(
    shared_broker: RunningBroker, client: OldClient, topic: str
) -> None:
    """v0 writes /consumers/<group>/offsets/<topic>/<partition> (ZooKeeper in Kafka's ZK
    mode), read back by OffsetFetch v0; the group coordinator's offsets are apart."""
    group = f"zk-{uuid.uuid4().hex[:8]}"

    def fetch_v0(partitions: list[int]) -> list[tuple[int, int, int]]:
        response = client.call(OffsetFetchRequest_v0(group, [(topic, partitions)]),
                               OffsetFetchResponse_v0)
        return [(p[0], p[1], p[3]) for p in response.topics[0][1]]

    assert fetch_v0([0]) == [(0, -1, 0)]  # nothing committed: -1, no error
    response = client.call(OffsetCommitRequest_v0(group, [(topic, [(0, 42, "meta"),
                                                                   (7, 1, "")])]),
                           OffsetCommitResponse_v0)
    assert list(response.topics[0][1]) == [(0, 0), (7, 3)]  # partition 7 does not exist
    assert fetch_v0([0, 7]) == [(0, 42, 0), (7, -1, 3)]
    node = shared_broker.broker.metadata.store.get(f"/consumers/{group}/offsets/{topic}/0")
    assert node is not None and node.data == b"42"
    # again: the node is updated
    client.call(OffsetCommitRequest_v0(group, [(topic, [(0, 43, "")])]),
                OffsetCommitResponse_v0)
    assert fetch_v0([0]) == [(0, 43, 0)]
    # the coordinator (OffsetFetch v1) has none of it, as with Kafka
    response = client.call(OffsetFetchRequest_v1(group, [(topic, [0])]), OffsetFetchResponse_v1)
    assert response.topics[0][1][0][1] == -1


def test_offset_commit_v1_goes_to_the_group_coordinator(
    client: OldClient, topic: str
) -> None:
    group = f"v1-{uuid.uuid4().hex[:8]}"
    response = client.call(
        OffsetCommitRequest_v1(group, -1, "", [(topic, [(0, 17, -1, "m")])]),
        OffsetCommitResponse_v1)
    assert list(response.topics[0][1]) == [(0, 0)]
    fetched = client.call(OffsetFetchRequest_v1(group, [(topic, [0])]), OffsetFetchResponse_v1)
    assert tuple(fetched.topics[0][1][0]) == (0, 17, "m", 0)
    # a wrong generation of a group with no members: ILLEGAL_GENERATION
    response = client.call(
        OffsetCommitRequest_v1(group, 5, "nobody", [(topic, [(0, 18, -1, "")])]),
        OffsetCommitResponse_v1)
    assert response.topics[0][1][0][1] in (22, 25)  # ILLEGAL_GENERATION / UNKNOWN_MEMBER_ID


@pytest.mark.parametrize("version", [0, 1])
def test_create_topics_v0_1_and_delete_topics_v0(
    shared_broker: RunningBroker, client: OldClient, version: int
) -> None:
    from kafka.protocol.old.admin import (
        CreateTopicsRequest_v0,
        CreateTopicsRequest_v1,
        CreateTopicsResponse_v0,
        CreateTopicsResponse_v1,
        DeleteTopicsRequest_v0,
        DeleteTopicsResponse_v0,
    )

    name = f"legacy-admin-{uuid.uuid4().hex[:8]}"
    topics = [(name, 2, 1, [], [("cleanup.policy", "compact")]),
              ("bad/name", 1, 1, [], [])]
    if version == 0:
        response = client.call(CreateTopicsRequest_v0(topics, 30000), CreateTopicsResponse_v0)
        assert list(response.topics) == [(name, 0), ("bad/name", 17)]  # INVALID_TOPIC_EXCEPTION
    else:
        # validate_only first: nothing created
        response = client.call(CreateTopicsRequest_v1(topics[:1], 30000, True),
                               CreateTopicsResponse_v1)
        assert list(response.topics) == [(name, 0, None)]
        assert shared_broker.broker.metadata.get(name) is None
        response = client.call(CreateTopicsRequest_v1(topics, 30000, False),
                               CreateTopicsResponse_v1)
        assert [tuple(t)[:2] for t in response.topics] == [(name, 0), ("bad/name", 17)]
        assert response.topics[1][2]  # the reason, in error_message
    info = shared_broker.broker.metadata.get(name)
    assert info is not None and len(info.partitions) == 2
    response = client.call(DeleteTopicsRequest_v0([name, "no-such-topic-z"], 30000),
                           DeleteTopicsResponse_v0)
    assert list(response.responses) == [(name, 0), ("no-such-topic-z", 3)]
    assert shared_broker.broker.metadata.get(name) is None


@pytest.mark.parametrize("crash", [False, True], ids=["KafkaError", "RuntimeError"])
def test_old_versions_answer_a_failing_handler(shared_broker: RunningBroker, crash: bool) -> None:
    """A handler failing at an old version is answered with that version's layout and the
    error code on every partition (Kafka's getErrorResponse), the connection kept."""
    import asyncio

    from kafka.protocol.old.admin import (
        CreateTopicsRequest_v0,
        CreateTopicsResponse_v0,
        DeleteTopicsRequest_v0,
        DeleteTopicsResponse_v0,
        DescribeConfigsRequest_v0,
        DescribeConfigsResponse_v0,
    )
    from kafka.protocol.old.offset_for_leader_epoch import (
        OffsetForLeaderEpochRequest_v0,
        OffsetForLeaderEpochRequest_v1,
        OffsetForLeaderEpochResponse_v0,
        OffsetForLeaderEpochResponse_v1,
    )

    from tests.server.test_error_responses import RAISED, _raising_registry, serving

    expected = 41 if not crash else -1  # NOT_CONTROLLER (the raised one) / UNKNOWN_SERVER_ERROR
    assert int(RAISED.value) == 41
    cases: list[tuple[Any, Any, Any]] = [
        (ProduceRequest_v0(1, 1000, [("t", [(1, message_set(0, 0, [b"x"]))])]),
         ProduceResponse_v0, lambda r: [p[1] for t in r.topics for p in t[1]]),
        (ProduceRequest_v2(1, 1000, [("t", [(1, message_set(1, 0, [b"x"]))])]),
         ProduceResponse_v2, lambda r: [p[1] for t in r.topics for p in t[1]]),
        (FetchRequest_v0(-1, 10, 1, [("t", [(1, 0, 100)])]), FetchResponse_v0,
         lambda r: [p[1] for t in r.topics for p in t[1]]),
        (FetchRequest_v3(-1, 10, 1, 100, [("t", [(1, 0, 100)])]), FetchResponse_v3,
         lambda r: [p[1] for t in r.topics for p in t[1]]),
        (ListOffsetsRequest_v0(-1, [("t", [(1, -1, 1)])]), ListOffsetsResponse_v0,
         lambda r: [p[1] for t in r.topics for p in t[1]]),
        (OffsetCommitRequest_v0("g", [("t", [(1, 5, "")])]), OffsetCommitResponse_v0,
         lambda r: [p[1] for t in r.topics for p in t[1]]),
        (OffsetCommitRequest_v1("g", -1, "", [("t", [(1, 5, -1, "")])]),
         OffsetCommitResponse_v1, lambda r: [p[1] for t in r.topics for p in t[1]]),
        (OffsetFetchRequest_v0("g", [("t", [1])]), OffsetFetchResponse_v0,
         lambda r: [p[3] for t in r.topics for p in t[1]]),
        (CreateTopicsRequest_v0([("t", 1, 1, [], [])], 1000), CreateTopicsResponse_v0,
         lambda r: [t[1] for t in r.topics]),
        (DeleteTopicsRequest_v0(["t"], 1000), DeleteTopicsResponse_v0,
         lambda r: [t[1] for t in r.responses]),
        (OffsetForLeaderEpochRequest_v0([("t", [(1, 0)])]), OffsetForLeaderEpochResponse_v0,
         lambda r: [p[0] for t in r.topics for p in t[1]]),
        (OffsetForLeaderEpochRequest_v1([("t", [(1, 0)])]), OffsetForLeaderEpochResponse_v1,
         lambda r: [p[0] for t in r.topics for p in t[1]]),
        (DescribeConfigsRequest_v0([(2, "t", None)]), DescribeConfigsResponse_v0,
         lambda r: [t[0] for t in r.resources]),
    ]

    async def run() -> None:
        registry = _raising_registry(shared_broker.broker.registry, crash)
        async with serving(registry) as server:
            loop = asyncio.get_running_loop()
            client = await loop.run_in_executor(None, OldClient.__new__, OldClient)
            client.sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            client.correlation = 0
            try:
                for request, response_cls, codes in cases:
                    response = await loop.run_in_executor(None, client.call, request,
                                                           response_cls)
                    assert codes(response) == [expected], (request, response)
            finally:
                client.close()

    asyncio.run(run())


@pytest.mark.parametrize("version", [0, 1])
def test_offset_for_leader_epoch_v0_1(
    shared_broker: RunningBroker, client: OldClient, topic: str, version: int
) -> None:
    from kafka.protocol.old import offset_for_leader_epoch as old

    produce(client, 2, topic, message_set(1, 0, [b"a", b"b"]))
    request_cls = getattr(old, f"OffsetForLeaderEpochRequest_v{version}")
    response_cls = getattr(old, f"OffsetForLeaderEpochResponse_v{version}")
    response = client.call(request_cls([(topic, [(0, 0)]), ("no-such-topic-q", [(0, 0)])]),
                           response_cls)
    (_, [found]), (_, [missing]) = response.topics
    if version == 0:
        assert tuple(found) == (0, 0, 2)  # error, partition, end offset of epoch 0
        assert missing[0] == 3
    else:
        assert tuple(found) == (0, 0, 0, 2)  # ... with the epoch
        assert missing[0] == 3


def test_a_malformed_old_request_closes_the_connection(shared_broker: RunningBroker) -> None:
    """A truncated OffsetForLeaderEpoch v0 body: closed with a reason, the broker fine."""
    header = struct.pack(">hhih", 23, 0, 1, 1) + b"x"
    body = struct.pack(">i", 1) + struct.pack(">h", 5) + b"to"  # a name cut short
    frame = header + body
    sock = socket.create_connection(("127.0.0.1", shared_broker.port), timeout=30)
    try:
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        assert sock.recv(100) == b""
    finally:
        sock.close()
    again = OldClient(shared_broker)  # the broker goes on serving
    try:
        response = again.call(ListOffsetsRequest_v0(-1, [("no-such-topic-y", [(0, -1, 1)])]),
                              ListOffsetsResponse_v0)
        assert response.topics[0][1][0][1] == 3
    finally:
        again.close()


def test_down_conversion_reads_what_it_can_send(tmp_path: Any) -> None:
    """A Fetch v0-3 reads at most its limit of the log, or the first batch whole when that
    is larger: not the whole region the modern read found."""
    import os

    from odradek.server.handlers.fetch import _read_head
    from odradek.storage.log import FetchDataInfo

    batches = b""
    for size in (3000, 500, 500):
        builder = BatchBuilder(base_offset=len(batches))
        builder.append(None, b"x" * size, 1)
        batches += builder.build()
    path = tmp_path / "log"
    path.write_bytes(batches)
    fd = os.open(path, os.O_RDONLY)
    try:
        info = FetchDataInfo(0, fd, 0, len(batches), 0, 3, 3)
        first = 12 + int.from_bytes(batches[8:12], "big")
        assert _read_head(info, 1000) == batches[:first]  # the first batch, whole
        assert _read_head(info, 3500) == batches[:3500]  # the limit
        assert _read_head(info, 1 << 20) == batches  # all there is
    finally:
        os.close(fd)


def test_describe_configs_v0_answers_is_default_as_v1_answers_the_source(
    shared_broker: RunningBroker, client: OldClient
) -> None:
    """DescribeConfigs v0 (Kafka 0.11's admin tools): v1's answer without synonyms, each
    config's source folded into ``is_default``; a broker resource too."""
    from kafka.protocol.old.admin import (
        DescribeConfigsRequest_v0,
        DescribeConfigsRequest_v1,
        DescribeConfigsResponse_v0,
        DescribeConfigsResponse_v1,
    )

    name = f"legacy-cfg-{uuid.uuid4().hex[:8]}"
    shared_broker.call(shared_broker.broker.metadata.create_topic, name, 1, 1,
                       {"cleanup.policy": "compact"})
    keys = ["cleanup.policy", "retention.ms"]
    v0 = client.call(DescribeConfigsRequest_v0([(2, name, keys)]), DescribeConfigsResponse_v0)
    v1 = client.call(DescribeConfigsRequest_v1([(2, name, keys)], False),
                     DescribeConfigsResponse_v1)
    ((error, _message, rtype, rname, configs),) = v0.resources
    assert (error, rtype, rname) == (0, 2, name)
    by_name = {c[0]: c for c in configs}
    assert by_name["cleanup.policy"] == ("cleanup.policy", "compact", False, False, False)
    assert by_name["retention.ms"][1:] == ("604800000", False, True, False)
    sources = {c[0]: c[3] for c in v1.resources[0][4]}
    assert {k: c[3] for k, c in by_name.items()} == {k: s == 5 for k, s in sources.items()}
    # the broker resource, every key, and an unknown topic's error in v0's layout
    broker = client.call(DescribeConfigsRequest_v0([(4, "0", None), (2, "no-such-cfg", None)]),
                         DescribeConfigsResponse_v0)
    (b_error, _, _, b_name, b_configs), (t_error, t_message, *_rest) = broker.resources
    assert (b_error, b_name) == (0, "0") and len(b_configs) > 300
    assert t_error == 3 and t_message  # UNKNOWN_TOPIC_OR_PARTITION, with the reason
