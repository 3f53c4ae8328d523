"""KIP-890's first part over a real socket: a partition leader appends a producer's first
transactional batch on a partition only if the transaction coordinator has the partition
in the producer's ongoing transaction (``transaction.partition.verification.enable``,
true by default). Raw Produce requests; the coordinator's side with hand-built
InitProducerId, AddPartitionsToTxn and EndTxn requests."""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i32Timedelta

from odradek.protocol.errors import ErrorCode
from odradek.records.batch import iter_batches
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests.server._raw_client import TxnClient, txn_batch
from tests.server._requests import add_partitions, begin, end_txn, init, new_id

DEADLINE = 20.0


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


@pytest.fixture
def client(rb: RunningBroker) -> Iterator[TxnClient]:
    c = TxnClient(rb.port)
    yield c
    c.close()


def new_topic(rb: RunningBroker, partitions: int = 1) -> str:
    name = f"ver-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, name, partitions, 1, {})
    return name


def log_end(client: TxnClient, topic: str) -> int:
    return int(client.fetch(topic, read_committed=False).high_watermark)


def values(client: TxnClient, topic: str) -> list[int]:
    """The base offsets of the data batches of partition 0 (markers left out)."""
    records = client.fetch(topic, read_committed=False).records
    return [h.base_offset for h in iter_batches(records or b"") if not h.is_control]


def test_a_partition_never_added_is_refused(rb: RunningBroker, client: TxnClient) -> None:
    topic = new_topic(rb)
    txn_id, pid, epoch = begin(rb)
    answer = client.produce(topic, txn_batch(pid, epoch, 0, 3), transactional_id=txn_id)
    assert answer.error_code == ErrorCode.invalid_txn_state
    assert answer.error_message == "Partition was not added to the transaction"
    assert log_end(client, topic) == 0
    assert values(client, topic) == []
    # the producer's first batch, now with the partition in the transaction
    assert add_partitions(rb, txn_id, pid, epoch, {topic: [0]}) == {
        (topic, 0): ErrorCode.none}
    answer = client.produce(topic, txn_batch(pid, epoch, 0, 3), transactional_id=txn_id)
    assert answer.error_code == ErrorCode.none and answer.base_offset == 0
    # its transaction is open here now: the next batch is not verified again
    answer = client.produce(topic, txn_batch(pid, epoch, 3, 2), transactional_id=txn_id)
    assert answer.error_code == ErrorCode.none and answer.base_offset == 3
    assert end_txn(rb, txn_id, pid, epoch, commit=True) == ErrorCode.none


def test_a_late_retry_after_the_commit_cannot_hang_a_transaction(
    rb: RunningBroker, client: TxnClient
) -> None:
    topic = new_topic(rb)
    txn_id, pid, epoch = begin(rb)
    assert add_partitions(rb, txn_id, pid, epoch, {topic: [0]}) == {
        (topic, 0): ErrorCode.none}
    first = client.produce(topic, txn_batch(pid, epoch, 0, 2), transactional_id=txn_id)
    assert first.error_code == ErrorCode.none
    assert end_txn(rb, txn_id, pid, epoch, commit=True) == ErrorCode.none
    started = time.monotonic()
    while (fetched := client.fetch(topic)).last_stable_offset != 3:  # the marker at 2
        assert not expired(started, DEADLINE), fetched
        time.sleep(0.02)
    # a batch of the ended transaction arrives late (a retry): refused, nothing written
    late = client.produce(topic, txn_batch(pid, epoch, 2, 1), transactional_id=txn_id)
    assert late.error_code == ErrorCode.invalid_txn_state
    assert log_end(client, topic) == 3
    assert client.fetch(topic).last_stable_offset == 3  # no transaction left open


def test_a_fenced_epoch_is_invalid_producer_epoch(rb: RunningBroker, client: TxnClient) -> None:
    topic = new_topic(rb)
    txn_id, pid, epoch = begin(rb)
    bumped = init(rb, txn_id)
    assert int(bumped.producer_epoch) == epoch + 1
    answer = client.produce(topic, txn_batch(pid, epoch, 0), transactional_id=txn_id)
    assert answer.error_code == ErrorCode.invalid_producer_epoch
    assert log_end(client, topic) == 0


def test_an_unknown_transactional_id(rb: RunningBroker, client: TxnClient) -> None:
    topic = new_topic(rb)
    _, pid, epoch = begin(rb)
    answer = client.produce(topic, txn_batch(pid, epoch, 0), transactional_id=new_id())
    assert answer.error_code == ErrorCode.invalid_producer_id_mapping
    assert log_end(client, topic) == 0


def produce_two(client: TxnClient, topic: str, txn_id: str, first: bytes, second: bytes
                ) -> list[Any]:
    m = produce_v9
    response = client.call(m.ProduceRequest(
        transactional_id=txn_id, acks=-1,  # type: ignore[arg-type]
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
            m.PartitionProduceData(index=0, records=first),  # type: ignore[arg-type]
            m.PartitionProduceData(index=1, records=second),  # type: ignore[arg-type]
        )),),
    ))
    return sorted(response.responses[0].partition_responses, key=lambda p: p.index)


def test_one_question_for_several_partitions(rb: RunningBroker, client: TxnClient) -> None:
    topic = new_topic(rb, partitions=2)
    txn_id, pid, epoch = begin(rb)
    assert add_partitions(rb, txn_id, pid, epoch, {topic: [1]}) == {
        (topic, 1): ErrorCode.none}
    p0, p1 = produce_two(client, topic, txn_id, txn_batch(pid, epoch, 0),
                         txn_batch(pid, epoch, 0))
    assert p0.error_code == ErrorCode.invalid_txn_state
    assert p1.error_code == ErrorCode.none


def test_batches_of_two_producers_in_one_request(rb: RunningBroker, client: TxnClient) -> None:
    topic = new_topic(rb, partitions=2)
    txn_id, pid, epoch = begin(rb)
    _, other, other_epoch = begin(rb)
    answers = produce_two(client, topic, txn_id, txn_batch(pid, epoch, 0),
                          txn_batch(other, other_epoch, 0))
    assert [a.error_code for a in answers] == [ErrorCode.invalid_producer_id_mapping] * 2


def test_plain_and_idempotent_produce_are_not_verified(
    rb: RunningBroker, client: TxnClient
) -> None:
    topic = new_topic(rb)
    pid, epoch = client.init_producer_id()
    assert client.produce(topic, txn_batch(-1, -1, -1)).error_code == ErrorCode.none
    idempotent = txn_batch(pid, epoch, 0, transactional=False)
    assert client.produce(topic, idempotent).error_code == ErrorCode.none


def test_no_coordinator_yet_is_retriable() -> None:
    """A broker whose ``__transaction_state`` does not exist yet cannot verify: the
    producer gets NOT_ENOUGH_REPLICAS, which it retries."""
    with running_broker() as fresh:
        topic = new_topic(fresh)
        c = TxnClient(fresh.port)
        try:
            answer = c.produce(topic, txn_batch(1000, 0, 0), transactional_id=new_id())
            assert answer.error_code == ErrorCode.not_enough_replicas
            assert "COORDINATOR_NOT_AVAILABLE" in answer.error_message
            assert log_end(c, topic) == 0
        finally:
            c.close()


def test_verification_can_be_turned_off() -> None:
    with running_broker({"transaction.partition.verification.enable": "false"}) as plain:
        topic = new_topic(plain)
        c = TxnClient(plain.port)
        try:
            answer = c.produce(topic, txn_batch(1000, 0, 0), transactional_id=new_id())
            assert answer.error_code == ErrorCode.none
        finally:
            c.close()
