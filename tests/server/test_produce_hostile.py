"""Produce requests a hostile client with Write on topics may send, over a real socket
(issue 47, items 3 and 4): a transactional batch without a transactional id, records
slipped into another transactional id's open transaction, appends to the internal topics
and AddPartitionsToTxn naming them. Each gets Kafka's answer, with nothing appended."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import Iterator
from typing import Any

import pytest
from kio.schema.produce.v9 import request as produce_v9
from kio.static.primitive import i32Timedelta

from odradek.protocol.errors import ErrorCode
from odradek.server.handlers import produce as produce_handler
from odradek.testing import RunningBroker, running_broker
from tests.server._raw_client import TxnClient, batch, txn_batch
from tests.server._raw_client import new_topic as raw_new_topic
from tests.server._requests import add_partitions, begin, end_txn, one, req


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker() as broker:
        yield broker


@pytest.fixture
def client(rb: RunningBroker) -> Iterator[TxnClient]:
    c = TxnClient(rb.port)
    yield c
    c.close()


def new_topic(rb: RunningBroker) -> str:
    return raw_new_topic(rb, "hostile")


def log_end(client: TxnClient, topic: str) -> int:
    return int(client.fetch(topic, read_committed=False).high_watermark)


def produce_many(client: TxnClient, topic: str, records: bytes, index: int = 0,
                 transactional_id: str | None = None) -> Any:
    m = produce_v9
    response = client.call(m.ProduceRequest(
        transactional_id=transactional_id, acks=-1,  # type: ignore[arg-type]
        timeout=i32Timedelta.parse(datetime.timedelta(seconds=10)),
        topic_data=(m.TopicProduceData(name=topic, partition_data=(  # type: ignore[arg-type]
            m.PartitionProduceData(index=index, records=records),)),),  # type: ignore[arg-type]
    ))
    return response.responses[0].partition_responses[0]


# -- item 3: transactional batches without their transactional id --------------------------
def test_a_transactional_batch_without_a_transactional_id_is_refused(
    rb: RunningBroker, client: TxnClient
) -> None:
    """Any producer id, epoch 0, no transactional id and no authorizer: Kafka refuses the
    request whole; nothing is appended and read_committed consumers are not stalled."""
    topic = new_topic(rb)
    answer = client.produce(topic, txn_batch(424242, 0, 0, 3))
    assert answer.error_code == ErrorCode.transactional_id_authorization_failed
    assert log_end(client, topic) == 0
    # hidden behind a plain batch in the same partition's records: refused the same
    hidden = batch(-1, -1, -1, 2) + txn_batch(424243, 0, 0, 1)
    answer = client.produce(topic, hidden)
    assert answer.error_code == ErrorCode.transactional_id_authorization_failed
    assert log_end(client, topic) == 0
    # a plain batch goes in, and the last stable offset follows it
    assert client.produce(topic, batch(-1, -1, -1, 2)).error_code == ErrorCode.none
    assert client.fetch(topic).last_stable_offset == 2


def test_a_truncated_transactional_batch_is_corrupt_not_a_missing_transactional_id(
    rb: RunningBroker, client: TxnClient
) -> None:
    """A batch cut short, even before its attributes, is not a batch (Kafka's record
    iterator does not return it, and neither does the append's): the partition is
    CORRUPT_MESSAGE, not the whole request TRANSACTIONAL_ID_AUTHORIZATION_FAILED."""
    topic = new_topic(rb)
    whole = txn_batch(424244, 0, 0, 2)
    for cut in (1, 12, 17, 22, 23, 40, len(whole) - 1):
        answer = client.produce(topic, whole[:cut])
        assert answer.error_code == ErrorCode.corrupt_message, cut
    # a whole plain batch, then a truncated transactional one
    answer = client.produce(topic, batch(-1, -1, -1, 1) + whole[:-1])
    assert answer.error_code == ErrorCode.corrupt_message
    assert log_end(client, topic) == 0
    assert client.produce(topic, whole).error_code == (
        ErrorCode.transactional_id_authorization_failed)


def test_records_cannot_join_another_transactional_ids_open_transaction(
    rb: RunningBroker, client: TxnClient
) -> None:
    """The victim's producer id and epoch are public (DescribeProducers); the attacker
    may write its own transactional id and the topic, and names its own id: the
    coordinator does not have that producer id for it."""
    topic = new_topic(rb)
    victim, pid, epoch = begin(rb)
    attacker, _, _ = begin(rb)
    assert add_partitions(rb, victim, pid, epoch, {topic: [0]}) == {
        (topic, 0): ErrorCode.none}
    first = client.produce(topic, txn_batch(pid, epoch, 0, 2), transactional_id=victim)
    assert first.error_code == ErrorCode.none
    forged = client.produce(topic, txn_batch(pid, epoch, 2, 1, tag="forged"),
                            transactional_id=attacker)
    assert forged.error_code == ErrorCode.invalid_producer_id_mapping
    assert log_end(client, topic) == 2
    # the victim's transaction goes on and commits
    second = client.produce(topic, txn_batch(pid, epoch, 2, 1), transactional_id=victim)
    assert second.error_code == ErrorCode.none and second.base_offset == 2
    assert end_txn(rb, victim, pid, epoch, commit=True) == ErrorCode.none


def test_a_leader_that_forgot_the_producer_asks_the_coordinator_again(
    rb: RunningBroker, client: TxnClient
) -> None:
    """As after a restart or a leader change: the open transaction's next batch is
    verified once more, and appended."""
    topic = new_topic(rb)
    txn_id, pid, epoch = begin(rb)
    assert add_partitions(rb, txn_id, pid, epoch, {topic: [0]}) == {
        (topic, 0): ErrorCode.none}
    assert client.produce(topic, txn_batch(pid, epoch, 0), transactional_id=txn_id
                          ).error_code == ErrorCode.none
    rb.call(produce_handler._BINDINGS.clear)
    again = client.produce(topic, txn_batch(pid, epoch, 1), transactional_id=txn_id)
    assert again.error_code == ErrorCode.none and again.base_offset == 1
    assert end_txn(rb, txn_id, pid, epoch, commit=True) == ErrorCode.none


# -- item 4: the internal topics ---------------------------------------------------------
def _commit_offset(rb: RunningBroker, group: str, topic: str, offset: int) -> ErrorCode:
    m = req("offset_commit", 8)
    response = one(rb, m.OffsetCommitRequest(
        group_id=group, generation_id_or_member_epoch=-1, member_id="",
        group_instance_id=None, topics=(m.OffsetCommitRequestTopic(name=topic, partitions=(
            m.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset,
                                           committed_leader_epoch=-1,
                                           committed_metadata=""),)),)))
    return ErrorCode(response.topics[0].partitions[0].error_code)


def test_clients_cannot_append_to_the_internal_topics(
    rb: RunningBroker, client: TxnClient
) -> None:
    topic = new_topic(rb)
    begin(rb)  # __transaction_state exists
    assert _commit_offset(rb, "hostile-group", topic, 1) == ErrorCode.none  # and offsets
    for internal in ("__consumer_offsets", "__transaction_state"):
        before = log_end(client, internal)
        answer = produce_many(client, internal, batch(-1, -1, -1, 1))
        assert answer.error_code == ErrorCode.invalid_topic_exception, internal
        assert answer.error_message == f"Cannot append to internal topic {internal}"
        assert log_end(client, internal) == before
    # the coordinators still append by their own path
    assert _commit_offset(rb, "hostile-group", topic, 2) == ErrorCode.none
    begin(rb)


def test_add_partitions_to_txn_leaves_the_internal_topics_out(rb: RunningBroker) -> None:
    """Kafka's KafkaApis: an internal topic is never among the authorized ones
    (TOPIC_AUTHORIZATION_FAILED, authorizer or not), the others OPERATION_NOT_ATTEMPTED."""
    topic = new_topic(rb)
    txn_id, pid, epoch = begin(rb)
    assert add_partitions(rb, txn_id, pid, epoch, {topic: [0], "__transaction_state": [0]}) == {
        (topic, 0): ErrorCode.operation_not_attempted,
        ("__transaction_state", 0): ErrorCode.topic_authorization_failed,
    }


def test_a_marker_landing_while_a_forgotten_producer_is_asked_refuses_the_append(
    rb: RunningBroker, client: TxnClient
) -> None:
    """The leader forgot the producer (a restart, a leader change, 10,000 others since):
    its open transaction's next batch waits for the coordinator's answer. If the
    transaction ends and its marker lands in that wait, the batch would open a
    transaction no coordinator knows of (a hanging one, pinning the last stable offset):
    it is refused with INVALID_TXN_STATE, as a first batch is (the verification guard)."""
    topic = new_topic(rb)
    txn_id, pid, epoch = begin(rb)
    assert add_partitions(rb, txn_id, pid, epoch, {topic: [0]}) == {
        (topic, 0): ErrorCode.none}
    assert client.produce(topic, txn_batch(pid, epoch, 0), transactional_id=txn_id
                          ).error_code == ErrorCode.none
    rb.call(produce_handler._BINDINGS.clear)
    services = rb.broker.services
    verifier = services.txn_verifier
    coordinator = services.transaction_coordinator
    assert verifier is not None and coordinator is not None
    state = rb.call(lambda: services.replica_manager.leader_partition(topic, 0)
                    .log.producer_state)
    answer = verifier.verify

    async def answered_then_aborted(*args: Any) -> Any:
        found = await answer(*args)  # NONE: the partition is in the open transaction
        assert await coordinator.end_txn(txn_id, pid, epoch, False) == ErrorCode.none
        deadline = asyncio.get_running_loop().time() + 20
        while state.has_ongoing_txn(pid, epoch):  # the abort marker lands meanwhile
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.01)
        return found

    rb.call(setattr, verifier, "verify", answered_then_aborted)
    try:
        late = client.produce(topic, txn_batch(pid, epoch, 1, tag="late"),
                              transactional_id=txn_id)
    finally:
        rb.call(delattr, verifier, "verify")
    assert late.error_code == ErrorCode.invalid_txn_state
    fetched = client.fetch(topic)
    assert fetched.last_stable_offset == fetched.high_watermark == 2  # batch, marker
