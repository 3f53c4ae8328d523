"""KIP-890's first part for TxnOffsetCommit over a real socket (Kafka 3.6+): the group
coordinator appends a transactional offset commit only if the transaction coordinator
has the group's ``__consumer_offsets`` partition in the producer's ongoing transaction.
A TxnOffsetCommit arriving after its transaction ended is refused and writes nothing, so
it cannot open a transaction on ``__consumer_offsets`` that pins the partition's last
stable offset. One ``__consumer_offsets`` partition, so a raw fetch of partition 0 sees
the group's."""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from odradek.coordinator.offsets_topic import OFFSETS_TOPIC
from odradek.protocol.errors import ErrorCode
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests.server._raw_client import TxnClient
from tests.server._raw_client import new_topic as raw_new_topic
from tests.server._requests import begin, end_txn, init, new_id, one, req

DEADLINE = 20.0
OVERRIDES = {"offsets.topic.num.partitions": "1", "transaction.max.timeout.ms": "120000"}


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(OVERRIDES) as broker:
        yield broker


@pytest.fixture
def client(rb: RunningBroker) -> Iterator[TxnClient]:
    c = TxnClient(rb.port)
    yield c
    c.close()


def new_topic(rb: RunningBroker) -> str:
    return raw_new_topic(rb, "tov")


def add_offsets(rb: RunningBroker, txn_id: str, pid: int, epoch: int, group: str) -> Any:
    m = req("add_offsets_to_txn", 3)
    return one(rb, m.AddOffsetsToTxnRequest(
        transactional_id=txn_id, producer_id=pid, producer_epoch=epoch,
        group_id=group)).error_code


def txn_commit(rb: RunningBroker, txn_id: str, pid: int, epoch: int, group: str,
               topic: str, offset: int) -> Any:
    """TxnOffsetCommit v3 of ``offset`` for ``topic``-0; its error code."""
    t = req("txn_offset_commit", 3)
    response = one(rb, t.TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group, producer_id=pid, producer_epoch=epoch,
        generation_id=-1, member_id="", group_instance_id=None, topics=(
            t.TxnOffsetCommitRequestTopic(name=topic, partitions=(
                t.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=offset, committed_leader_epoch=-1,
                    committed_metadata=""),)),)))
    [part] = response.topics[0].partitions
    return part.error_code


def committed(rb: RunningBroker, group: str, topic: str) -> tuple[Any, int]:
    """OffsetFetch with ``require_stable`` of ``topic``-0: (error, offset)."""
    f = req("offset_fetch", 7)
    [part] = one(rb, f.OffsetFetchRequest(group_id=group, topics=(
        f.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),),
        require_stable=True)).topics[0].partitions
    return part.error_code, int(part.committed_offset)


def offsets_partition(client: TxnClient) -> tuple[int, int]:
    """(high watermark, last stable offset) of the one ``__consumer_offsets`` partition."""
    fetched = client.fetch(OFFSETS_TOPIC, read_committed=False)
    assert fetched.error_code == ErrorCode.none
    return int(fetched.high_watermark), int(fetched.last_stable_offset)


def committed_transaction(rb: RunningBroker, client: TxnClient
                          ) -> tuple[str, int, int, str, str]:
    """A transaction that committed offset 5 of a new topic for a new group, its marker
    on ``__consumer_offsets``: (txn id, pid, epoch, group, topic)."""
    topic, group = new_topic(rb), f"g-{uuid.uuid4().hex[:6]}"
    txn_id, pid, epoch = begin(rb)
    assert add_offsets(rb, txn_id, pid, epoch, group) == ErrorCode.none
    assert txn_commit(rb, txn_id, pid, epoch, group, topic, 5) == ErrorCode.none
    assert end_txn(rb, txn_id, pid, epoch, commit=True) == ErrorCode.none
    started = time.monotonic()
    while committed(rb, group, topic) != (ErrorCode.none, 5):
        assert not expired(started, DEADLINE), committed(rb, group, topic)
        time.sleep(0.02)
    started = time.monotonic()
    while (marks := offsets_partition(client))[0] != marks[1]:
        assert not expired(started, DEADLINE), marks
        time.sleep(0.02)
    return txn_id, pid, epoch, group, topic


def test_a_late_txn_offset_commit_is_refused_and_pins_nothing(
    rb: RunningBroker, client: TxnClient
) -> None:
    txn_id, pid, epoch, group, topic = committed_transaction(rb, client)
    before = offsets_partition(client)
    # a TxnOffsetCommit of the ended transaction arrives late, with the same epoch
    assert txn_commit(rb, txn_id, pid, epoch, group, topic, 9) == ErrorCode.invalid_txn_state
    assert offsets_partition(client) == before  # nothing written, the LSO not held back
    assert committed(rb, group, topic) == (ErrorCode.none, 5)  # not UNSTABLE_OFFSET_COMMIT
    # the producer's next transaction commits offsets as before
    assert add_offsets(rb, txn_id, pid, epoch, group) == ErrorCode.none
    assert txn_commit(rb, txn_id, pid, epoch, group, topic, 7) == ErrorCode.none
    assert committed(rb, group, topic) == (ErrorCode.unstable_offset_commit, -1)
    assert end_txn(rb, txn_id, pid, epoch, commit=True) == ErrorCode.none
    started = time.monotonic()
    while committed(rb, group, topic) != (ErrorCode.none, 7):
        assert not expired(started, DEADLINE), committed(rb, group, topic)
        time.sleep(0.02)


def test_a_fenced_producer_is_invalid_producer_epoch(
    rb: RunningBroker, client: TxnClient
) -> None:
    txn_id, pid, epoch, group, topic = committed_transaction(rb, client)
    assert int(init(rb, txn_id).producer_epoch) == epoch + 1
    before = offsets_partition(client)
    assert txn_commit(rb, txn_id, pid, epoch, group, topic, 9) == (
        ErrorCode.invalid_producer_epoch)
    assert offsets_partition(client) == before


def test_a_producer_id_not_the_transactional_ids(
    rb: RunningBroker, client: TxnClient, caplog: pytest.LogCaptureFixture
) -> None:
    txn_id, pid, epoch, group, topic = committed_transaction(rb, client)
    before = offsets_partition(client)
    with caplog.at_level(logging.WARNING):
        for bogus in (pid + 1000, 123456789):
            assert txn_commit(rb, txn_id, bogus, 0, group, topic, 9) == (
                ErrorCode.invalid_producer_id_mapping)
        assert txn_commit(rb, new_id(), pid, epoch, group, topic, 9) == (
            ErrorCode.invalid_producer_id_mapping)
    assert offsets_partition(client) == before
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []


def test_without_verification_a_fenced_epoch_is_answered_not_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With ``transaction.partition.verification.enable=false`` the partition's producer
    state still refuses an epoch older than the producer's last: the client gets
    INVALID_PRODUCER_EPOCH, and the broker logs no error for a client's bad request."""
    overrides = {**OVERRIDES, "transaction.partition.verification.enable": "false"}
    with running_broker(overrides) as plain:
        topic, group, txn_id = new_topic(plain), f"g-{uuid.uuid4().hex[:6]}", new_id()
        pid = 424242
        assert txn_commit(plain, txn_id, pid, 3, group, topic, 1) == ErrorCode.none
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                assert txn_commit(plain, txn_id, pid, 1, group, topic, 2) == (
                    ErrorCode.invalid_producer_epoch)
        assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
