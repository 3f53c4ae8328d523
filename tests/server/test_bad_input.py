"""Bad input against a real broker: each gets the precise Kafka error code or a clean close,
and other connections keep working."""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import struct
import time
import uuid

import pytest
from kio.schema.errors import ErrorCode

from odradek.client.admin import Admin
from odradek.client.connection import BrokerConnection, request_class
from odradek.protocol.primitives import uvarint
from odradek.records.batch import CRC_OFFSET
from odradek.records.builder import build_batch
from odradek.testing import RunningBroker


def _raw(broker: RunningBroker, payload: bytes, read: bool = True) -> bytes:
    """Send raw bytes on a fresh socket; return what the broker sends before closing."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
        s.sendall(payload)
        if not read:
            return b""
        s.shutdown(socket.SHUT_WR)
        chunks = []
        while True:
            try:
                data = s.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not data:
                break
            chunks.append(data)
        return b"".join(chunks)


def _still_serving(broker: RunningBroker) -> None:
    async def check() -> None:
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            topics = await Admin(conn).metadata([])
            assert topics == []
        finally:
            await conn.close()

    asyncio.run(check())


def _header(api_key: int, version: int, correlation_id: int = 7) -> bytes:
    client = b"bad-input"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client


def test_truncated_frame_is_closed(shared_broker: RunningBroker) -> None:
    # Size says 100 bytes, only 10 arrive, then EOF: closed without an answer.
    assert _raw(shared_broker, struct.pack(">i", 100) + b"x" * 10) == b""
    _still_serving(shared_broker)


def test_oversized_frame_is_closed_before_allocation(shared_broker: RunningBroker) -> None:
    assert _raw(shared_broker, struct.pack(">i", 2_000_000_000) + b"\0" * 8) == b""
    assert _raw(shared_broker, struct.pack(">i", -5)) == b""
    _still_serving(shared_broker)


def test_unknown_api_key_is_closed(shared_broker: RunningBroker) -> None:
    body = _header(9999, 0)
    assert _raw(shared_broker, struct.pack(">i", len(body)) + body) == b""
    _still_serving(shared_broker)


def test_unsupported_version_is_closed_but_api_versions_answers(
    shared_broker: RunningBroker,
) -> None:
    body = _header(3, 99)  # Metadata v99
    assert _raw(shared_broker, struct.pack(">i", len(body)) + body) == b""
    body = _header(18, 99) + b"\0"  # ApiVersions v99 (header v2): the v0 error response
    answer = _raw(shared_broker, struct.pack(">i", len(body)) + body)
    size, correlation_id, error = struct.unpack_from(">iih", answer)
    assert size == len(answer) - 4
    assert correlation_id == 7
    assert error == ErrorCode.unsupported_version.value
    _still_serving(shared_broker)



@pytest.mark.parametrize("count", [2**32 - 1, 2**31, 10**6])
def test_an_array_declaring_more_elements_than_bytes_is_closed(
    shared_broker: RunningBroker, count: int
) -> None:
    """A 35-byte Metadata v12 request whose topic array claims 2^32 elements made kio's
    native reader reserve 34 GB and Rust abort the broker (SIGABRT). Now the connection
    is closed and the broker goes on serving."""
    length = uvarint(count + 1)  # compact arrays store length + 1
    payload = _header(3, 12) + b"\x00" + length + bytes(20)
    assert _raw(shared_broker, struct.pack(">i", len(payload)) + payload) == b""
    _still_serving(shared_broker)


def _api_versions_answered(broker: RunningBroker, deadline_s: float) -> bool:
    """Whether an ApiVersions v0 on a fresh connection is answered within the deadline."""
    body = _header(18, 0)
    with socket.create_connection(("127.0.0.1", broker.port), timeout=deadline_s) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        try:
            (size,) = struct.unpack(">i", s.recv(4))
        except (TimeoutError, struct.error):
            return False
        return size > 0


def test_a_25_byte_count_inflated_request_is_refused_at_once(
    shared_broker: RunningBroker,
) -> None:
    """OffsetForLeaderEpoch v0 (transcoded by hand to v2) whose one topic ``t`` declares
    2,147,483,647 partitions: 25 bytes on the wire. Its transcoder used to loop two
    billion times on the event loop; now the count is refused against the 0 bytes that
    remain, the connection is closed, and another connection is answered meanwhile."""
    request = (
        struct.pack(">hhih", 23, 0, 7, -1)  # OffsetForLeaderEpoch v0, null client id
        + bytes.fromhex("00000001" "0001" "74" "7fffffff")
    )
    frame = struct.pack(">i", len(request)) + request
    assert len(frame) == 25
    with socket.create_connection(("127.0.0.1", shared_broker.port), timeout=10) as hostile:
        hostile.sendall(frame)  # left open: the broker must not wait for it to close
        assert _api_versions_answered(shared_broker, deadline_s=5)
        assert hostile.recv(65536) == b""  # closed by the broker, nothing answered
    _still_serving(shared_broker)


def test_a_null_the_schema_forbids_is_closed_with_a_reason(
    odradek_broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """OffsetCommit v8 with ``topics`` null (compact length 0) reached the handler as None
    (TypeError); Kafka fails the parse ("non-nullable field topics was serialized as
    null") and closes the connection, and so do we. (A broker of its own: the first
    rejection of a cause from a host is the one logged in full.)"""
    body = (
        uvarint(2) + b"g" + struct.pack(">i", 1) + uvarint(2) + b"m"
        + b"\x00"  # group_instance_id: null, which it may be
        + b"\x00"  # topics: null, which it may not
        + b"\x00"  # tagged fields
    )
    payload = _header(8, 8) + b"\x00" + body
    with caplog.at_level(logging.INFO, logger="odradek.server.network"):
        assert _raw(odradek_broker, struct.pack(">i", len(payload)) + payload) == b""
        _still_serving(odradek_broker)
    assert any(
        "non-nullable field topics was serialized as null" in r.getMessage()
        for r in caplog.records
    )


def test_disconnect_mid_request(shared_broker: RunningBroker) -> None:
    batch = build_batch([(b"k", b"v" * 1000)], timestamp=int(time.time() * 1000))
    _raw(shared_broker, struct.pack(">i", 5000) + _header(0, 9) + batch[:100], read=False)
    _still_serving(shared_broker)


def _produce(
    broker: RunningBroker, topic: str, partition: int, records: bytes, acks: int = 1
) -> tuple[ErrorCode, str | None]:
    async def go() -> tuple[ErrorCode, str | None]:
        conn = await BrokerConnection.open(broker.bootstrap)
        try:
            cls = request_class("produce", 9, "ProduceRequest")
            topic_cls = request_class("produce", 9, "TopicProduceData")
            part_cls = request_class("produce", 9, "PartitionProduceData")
            response = await conn.send(cls(
                transactional_id=None, acks=acks, timeout=datetime.timedelta(seconds=5),
                topic_data=(topic_cls(name=topic, partition_data=(
                    part_cls(index=partition, records=records),)),),
            ))
            p = response.responses[0].partition_responses[0]
            return ErrorCode(p.error_code), p.error_message
        finally:
            await conn.close()

    return asyncio.run(go())


@pytest.fixture
def topic(shared_broker: RunningBroker) -> str:
    name = f"bad-{uuid.uuid4().hex[:8]}"
    shared_broker.call(shared_broker.broker.metadata.create_topic, name, 1, 1, {})
    return name


def _log_end(broker: RunningBroker, topic: str) -> int:
    log = broker.broker.get_log(topic, 0)
    assert log is not None
    return log.log_end_offset


def test_a_produce_pipelined_before_a_bad_frame_is_answered(
    shared_broker: RunningBroker, topic: str
) -> None:
    """A Produce (acks=1) and a frame with an unknown API key in one write: the Produce
    is answered before the connection closes. It used to be appended and left
    unanswered, so the client's retry wrote it twice."""
    from tests.protocol.wire import decode_response, request_frame

    cls = request_class("produce", 9, "ProduceRequest")
    topic_cls = request_class("produce", 9, "TopicProduceData")
    part_cls = request_class("produce", 9, "PartitionProduceData")
    batch = build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    produce = cls(
        transactional_id=None, acks=1, timeout=datetime.timedelta(seconds=5),
        topic_data=(topic_cls(name=topic, partition_data=(
            part_cls(index=0, records=batch),)),),
    )
    unknown = _header(9999, 0, correlation_id=43)
    answer = _raw(
        shared_broker,
        request_frame(produce, 42) + struct.pack(">i", len(unknown)) + unknown,
    )
    (size,) = struct.unpack_from(">i", answer)
    assert size == len(answer) - 4, "exactly one answer, then the close"
    correlation_id, response = decode_response(answer[4:], 0, 9)
    assert correlation_id == 42
    partition = response.responses[0].partition_responses[0]
    assert partition.error_code == ErrorCode.none and partition.base_offset == 0
    assert _log_end(shared_broker, topic) == 1
    _still_serving(shared_broker)


def test_bad_crc_is_corrupt_message_and_nothing_written(
    shared_broker: RunningBroker, topic: str
) -> None:
    batch = bytearray(build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000)))
    batch[CRC_OFFSET] ^= 0xFF
    code, message = _produce(shared_broker, topic, 0, bytes(batch))
    assert code == ErrorCode.corrupt_message
    assert message and "CRC" in message
    assert _log_end(shared_broker, topic) == 0


def test_acks_5_is_invalid_required_acks(shared_broker: RunningBroker, topic: str) -> None:
    batch = build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    code, _ = _produce(shared_broker, topic, 0, batch, acks=5)
    assert code == ErrorCode.invalid_required_acks
    assert _log_end(shared_broker, topic) == 0


def test_acks_all_below_min_insync_replicas(shared_broker: RunningBroker) -> None:
    name = f"isr-{uuid.uuid4().hex[:8]}"
    shared_broker.call(shared_broker.broker.metadata.create_topic, name, 1, 1,
                       {"min.insync.replicas": "2"})
    batch = build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    code, message = _produce(shared_broker, name, 0, batch, acks=-1)
    assert code == ErrorCode.not_enough_replicas
    assert message == "ISR of 1 is below min.insync.replicas=2"
    assert _log_end(shared_broker, name) == 0
    assert _produce(shared_broker, name, 0, batch, acks=1) == (ErrorCode.none, None)
    assert _log_end(shared_broker, name) == 1


def test_acks_all_with_the_default_min_insync_replicas(
    shared_broker: RunningBroker, topic: str
) -> None:
    batch = build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    assert _produce(shared_broker, topic, 0, batch, acks=-1) == (ErrorCode.none, None)
    assert _log_end(shared_broker, topic) == 1


def test_unknown_partition(shared_broker: RunningBroker, topic: str) -> None:
    batch = build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000))
    assert _produce(shared_broker, topic, 7, batch)[0] == ErrorCode.unknown_topic_or_partition
    assert _produce(shared_broker, "no-such-topic-x", 0, batch)[0] == (
        ErrorCode.unknown_topic_or_partition
    )


def test_message_too_large(shared_broker: RunningBroker, topic: str) -> None:
    batch = build_batch([(b"k", b"v" * 2_000_000)], timestamp=int(time.time() * 1000))
    assert _produce(shared_broker, topic, 0, batch)[0] == ErrorCode.message_too_large
    assert _log_end(shared_broker, topic) == 0


def test_timestamp_too_far_in_future(shared_broker: RunningBroker, topic: str) -> None:
    batch = build_batch([(b"k", b"v")], timestamp=int(time.time() * 1000) + 86_400_000)
    assert _produce(shared_broker, topic, 0, batch)[0] == ErrorCode.invalid_timestamp


@pytest.mark.parametrize("name", ["bad name", "a" * 250, "..", "é", ""])
def test_illegal_topic_name(shared_broker: RunningBroker, name: str) -> None:
    async def go() -> None:
        conn = await BrokerConnection.open(shared_broker.bootstrap)
        try:
            cls = request_class("create_topics", 5, "CreateTopicsRequest")
            topic_cls = request_class("create_topics", 5, "CreatableTopic")
            response = await conn.send(cls(
                topics=(topic_cls(name=name, num_partitions=1, replication_factor=1,
                                  assignments=(), configs=()),),
                timeout=datetime.timedelta(seconds=5), validate_only=False))
            assert response.topics[0].error_code == ErrorCode.invalid_topic_exception
            (meta,) = await Admin(conn).metadata([name], auto_create=True)
            assert meta.error in ("invalid_topic_exception", "unknown_topic_or_partition")
        finally:
            await conn.close()

    asyncio.run(go())


def test_topic_collision_on_dot_and_underscore(shared_broker: RunningBroker) -> None:
    base = uuid.uuid4().hex[:6]
    metadata = shared_broker.broker.metadata
    shared_broker.call(metadata.create_topic, f"a.{base}", 1, 1, {})
    with pytest.raises(Exception, match="collides"):
        shared_broker.call(metadata.create_topic, f"a_{base}", 1, 1, {})
