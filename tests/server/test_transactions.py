"""The transaction coordinator's APIs over a real socket with hand-built kio requests:
FindCoordinator key type TRANSACTION, InitProducerId with a transactional id,
AddPartitionsToTxn (v0-3 and the batched v4), AddOffsetsToTxn, EndTxn, TxnOffsetCommit
and OffsetFetch's ``require_stable``, each bad input with Kafka's error code."""

from __future__ import annotations

import asyncio
import datetime
import time
import uuid
from collections.abc import Iterator

import pytest
from kio.schema.errors import ErrorCode

from odradek.coordinator.transaction_state import TransactionState
from odradek.protocol.api_keys import ApiKey
from odradek.records.batch import iter_batches
from odradek.records.control import read_end_txn_marker
from odradek.server.metrics import snapshot
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests.server._requests import TIMEOUT, add_partitions, end_txn, init, new_id, one, req


@pytest.fixture(scope="module")
def rb() -> Iterator[RunningBroker]:
    with running_broker(overrides={"transaction.max.timeout.ms": "120000",
                                   "group.initial.rebalance.delay.ms": "0"}) as broker:
        yield broker


def new_topic(rb: RunningBroker, partitions: int = 2) -> str:
    name = f"txn-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, name, partitions, 1, {})
    return name


def test_find_coordinator_for_a_transactional_id(rb: RunningBroker) -> None:
    m = req("find_coordinator", 4)
    response = one(rb, m.FindCoordinatorRequest(key_type=1, coordinator_keys=(new_id(), "")))
    found, empty = response.coordinators
    assert found.error_code == ErrorCode.none and found.node_id == rb.broker.broker_id
    assert found.port == rb.port
    assert empty.error_code == ErrorCode.invalid_request
    assert rb.broker.metadata.get("__transaction_state") is not None
    m1 = req("find_coordinator", 1)
    response = one(rb, m1.FindCoordinatorRequest(key=new_id(), key_type=1))
    assert response.error_code == ErrorCode.none and response.node_id == rb.broker.broker_id


def test_init_producer_id_new_id_then_epoch_bumps(rb: RunningBroker) -> None:
    txn_id = new_id()
    first = init(rb, txn_id)
    assert first.error_code == ErrorCode.none and first.producer_epoch == 0
    second = init(rb, txn_id, version=0)
    assert (second.error_code, second.producer_id, second.producer_epoch) == (
        ErrorCode.none, first.producer_id, 1)
    # KIP-360: the current id and epoch bump it; a stale epoch is fenced
    third = init(rb, txn_id, producer_id=first.producer_id, epoch=1)
    assert (third.error_code, third.producer_epoch) == (ErrorCode.none, 2)
    assert init(rb, txn_id, producer_id=first.producer_id, epoch=0).error_code == (
        ErrorCode.producer_fenced)
    assert init(rb, txn_id, version=3, producer_id=first.producer_id, epoch=0).error_code == (
        ErrorCode.invalid_producer_epoch)
    # one of producer id and epoch without the other
    assert init(rb, txn_id, producer_id=first.producer_id).error_code == (
        ErrorCode.invalid_request)


def test_init_producer_id_bad_timeouts(rb: RunningBroker) -> None:
    assert init(rb, new_id(), timeout=datetime.timedelta(seconds=121)).error_code == (
        ErrorCode.invalid_transaction_timeout)
    assert init(rb, new_id(), timeout=datetime.timedelta(0)).error_code == (
        ErrorCode.invalid_transaction_timeout)
    assert init(rb, "").error_code == ErrorCode.invalid_request


def test_add_partitions_bad_input(rb: RunningBroker) -> None:
    topic = new_topic(rb)
    # an unknown transactional id
    assert add_partitions(rb, new_id(), 5, 0, {topic: [0]}) == {
        (topic, 0): ErrorCode.invalid_producer_id_mapping}
    txn_id = new_id()
    r = init(rb, txn_id)
    pid, epoch = r.producer_id, r.producer_epoch
    # a wrong epoch: PRODUCER_FENCED from v2, INVALID_PRODUCER_EPOCH before
    assert add_partitions(rb, txn_id, pid, epoch + 1, {topic: [0]}) == {
        (topic, 0): ErrorCode.producer_fenced}
    assert add_partitions(rb, txn_id, pid, epoch + 1, {topic: [0]}, version=1) == {
        (topic, 0): ErrorCode.invalid_producer_epoch}
    # a wrong producer id
    assert add_partitions(rb, txn_id, pid + 1, epoch, {topic: [0]}) == {
        (topic, 0): ErrorCode.invalid_producer_id_mapping}
    # an unknown topic or partition: the others are not attempted
    assert add_partitions(rb, txn_id, pid, epoch, {topic: [0, 9], "no-such": [0]}) == {
        (topic, 0): ErrorCode.operation_not_attempted,
        (topic, 9): ErrorCode.unknown_topic_or_partition,
        ("no-such", 0): ErrorCode.unknown_topic_or_partition}
    assert add_partitions(rb, txn_id, pid, epoch, {topic: [0, 1]}) == {
        (topic, 0): ErrorCode.none, (topic, 1): ErrorCode.none}
    coordinator = rb.broker.transaction_coordinator
    assert coordinator.txns[txn_id].state is TransactionState.ONGOING


def test_add_partitions_v4_batched_verify_only(rb: RunningBroker) -> None:
    topic = new_topic(rb)
    txn_id = new_id()
    r = init(rb, txn_id)
    add_partitions(rb, txn_id, r.producer_id, r.producer_epoch, {topic: [0]})
    m = req("add_partitions_to_txn", 4)
    response = one(rb, m.AddPartitionsToTxnRequest(transactions=(
        m.AddPartitionsToTxnTransaction(
            transactional_id=txn_id, producer_id=r.producer_id,
            producer_epoch=r.producer_epoch, verify_only=True,
            topics=(m.AddPartitionsToTxnTopic(name=topic, partitions=(0, 1)),)),
        m.AddPartitionsToTxnTransaction(
            transactional_id=new_id(), producer_id=1, producer_epoch=0, verify_only=True,
            topics=(m.AddPartitionsToTxnTopic(name=topic, partitions=(0,)),)),
    )))
    assert response.error_code == ErrorCode.none
    verified, unknown = response.results_by_transaction
    assert {p.partition_index: p.partition_error_code
            for t in verified.topic_results for p in t.results_by_partition} == {
        0: ErrorCode.none, 1: ErrorCode.invalid_txn_state}
    assert [p.partition_error_code for t in unknown.topic_results
            for p in t.results_by_partition] == [ErrorCode.invalid_producer_id_mapping]


def test_end_txn_bad_input(rb: RunningBroker) -> None:
    assert end_txn(rb, new_id(), 5, 0, commit=True) == ErrorCode.invalid_producer_id_mapping
    txn_id = new_id()
    r = init(rb, txn_id)
    # no transaction to end
    assert end_txn(rb, txn_id, r.producer_id, r.producer_epoch, commit=True) == (
        ErrorCode.invalid_txn_state)
    assert end_txn(rb, txn_id, r.producer_id, r.producer_epoch + 3, commit=False) == (
        ErrorCode.producer_fenced)
    assert end_txn(rb, txn_id, r.producer_id, r.producer_epoch + 3, commit=False,
                   version=1) == ErrorCode.invalid_producer_epoch


def test_txn_offset_commit_is_unstable_until_the_transaction_ends(rb: RunningBroker) -> None:
    topic, group, txn_id = new_topic(rb), f"g-{uuid.uuid4().hex[:6]}", new_id()
    r = init(rb, txn_id)
    m = req("add_offsets_to_txn", 3)
    response = one(rb, m.AddOffsetsToTxnRequest(
        transactional_id=txn_id, producer_id=r.producer_id, producer_epoch=r.producer_epoch,
        group_id=group))
    assert response.error_code == ErrorCode.none
    coordinator = rb.broker.transaction_coordinator
    offsets_partition = rb.broker.group_coordinator.partition_for(group)
    assert ("__consumer_offsets", offsets_partition) in coordinator.txns[txn_id].topic_partitions
    t = req("txn_offset_commit", 3)
    response = one(rb, t.TxnOffsetCommitRequest(
        transactional_id=txn_id, group_id=group, producer_id=r.producer_id,
        producer_epoch=r.producer_epoch, generation_id=-1, member_id="",
        group_instance_id=None, topics=(
            t.TxnOffsetCommitRequestTopic(name=topic, partitions=(
                t.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=17, committed_leader_epoch=-1,
                    committed_metadata="m"),)),
            t.TxnOffsetCommitRequestTopic(name="no-such", partitions=(
                t.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=1, committed_leader_epoch=-1,
                    committed_metadata=None),)))))
    assert [(tp.name, p.error_code) for tp in response.topics for p in tp.partitions] == [
        (topic, ErrorCode.none), ("no-such", ErrorCode.unknown_topic_or_partition)]
    f = req("offset_fetch", 7)
    fetch = f.OffsetFetchRequest(group_id=group, topics=(
        f.OffsetFetchRequestTopic(name=topic, partition_indexes=(0,)),), require_stable=True)
    [part] = one(rb, fetch).topics[0].partitions
    assert (part.error_code, part.committed_offset) == (ErrorCode.unstable_offset_commit, -1)
    # without require_stable the pending offset is simply not there yet
    [part] = one(rb, f.OffsetFetchRequest(group_id=group, topics=fetch.topics,
                                          require_stable=False)).topics[0].partitions
    assert (part.error_code, part.committed_offset) == (ErrorCode.none, -1)
    # the commit marker on the group's partition makes it committed
    rb.call(rb.broker.group_coordinator.on_txn_marker, offsets_partition, r.producer_id, True)
    [part] = one(rb, fetch).topics[0].partitions
    assert (part.error_code, part.committed_offset) == (ErrorCode.none, 17)


def test_end_txn_writes_the_decision(rb: RunningBroker) -> None:
    topic, txn_id = new_topic(rb), new_id()
    r = init(rb, txn_id)
    add_partitions(rb, txn_id, r.producer_id, r.producer_epoch, {topic: [0, 1]})
    assert end_txn(rb, txn_id, r.producer_id, r.producer_epoch, commit=True) == ErrorCode.none
    state = rb.broker.transaction_coordinator.txns[txn_id].state
    assert state in (TransactionState.PREPARE_COMMIT, TransactionState.COMPLETE_COMMIT)
    # the opposite decision is refused whatever stage the commit is at
    assert end_txn(rb, txn_id, r.producer_id, r.producer_epoch, commit=False) == (
        ErrorCode.invalid_txn_state)


def test_markers_for_partitions_led_here_are_written_in_process() -> None:
    """The coordinator writes the markers of the partitions its own broker leads without a
    WriteTxnMarkers request, and has written them, and CompleteCommit, before it reads
    the client's next request: the next transaction starts without
    CONCURRENT_TRANSACTIONS."""
    with running_broker(overrides={"metrics.listener": "http://127.0.0.1:0"}) as rb:
        topic, txn_id = new_topic(rb), new_id()
        r = init(rb, txn_id)
        pid, epoch = int(r.producer_id), int(r.producer_epoch)
        for commit in (True, False, True):
            assert add_partitions(rb, txn_id, pid, epoch, {topic: [0, 1]}) == {
                (topic, 0): ErrorCode.none, (topic, 1): ErrorCode.none}
            assert end_txn(rb, txn_id, pid, epoch, commit=commit) == ErrorCode.none
        state = rb.call(lambda: rb.broker.transaction_coordinator.txns[txn_id].state)
        assert state is TransactionState.COMPLETE_COMMIT
        for partition in (0, 1):
            partition_log = rb.broker.get_log(topic, partition)
            assert partition_log is not None
            data = partition_log.read(0, 1 << 20).read()
            found = []
            for header in iter_batches(data):
                marker = read_end_txn_marker(
                    data[header.position: header.position + header.size])
                assert marker is not None and header.producer_id == pid
                found.append(marker.committed)
            assert found == [True, False, True]
        served = {api for (api, _version), _count in rb.call(snapshot, rb.broker).requests}
        assert ApiKey.END_TXN in served and ApiKey.WRITE_TXN_MARKERS not in served


def test_describe_and_list_transactions(rb: RunningBroker) -> None:
    topic, txn_id, idle_id = new_topic(rb), new_id(), new_id()
    r = init(rb, txn_id)
    init(rb, idle_id)
    add_partitions(rb, txn_id, r.producer_id, r.producer_epoch, {topic: [1, 0]})
    d = req("describe_transactions", 0)
    response = one(rb, d.DescribeTransactionsRequest(transactional_ids=(txn_id, "unknown-id")))
    found, unknown = response.transaction_states
    assert (found.error_code, found.transaction_state, found.producer_id,
            found.producer_epoch) == (ErrorCode.none, "Ongoing", r.producer_id, 0)
    assert found.transaction_timeout == TIMEOUT
    assert found.transaction_start_time.timestamp() > 0
    assert [(t.topic, t.partitions) for t in found.topics] == [(topic, (0, 1))]
    assert unknown.error_code == ErrorCode.transactional_id_not_found
    for version in (0, 1):
        lt = req("list_transactions", version)
        response = one(rb, lt.ListTransactionsRequest(
            state_filters=("Ongoing", "Nonsense"), producer_id_filters=()))
        assert response.error_code == ErrorCode.none
        assert response.unknown_state_filters == ("Nonsense",)
        ids = {s.transactional_id: s.transaction_state for s in response.transaction_states}
        assert ids.get(txn_id) == "Ongoing" and idle_id not in ids
        response = one(rb, lt.ListTransactionsRequest(
            state_filters=(), producer_id_filters=(r.producer_id,)))
        assert [s.transactional_id for s in response.transaction_states] == [txn_id]
    lt1 = req("list_transactions", 1)
    response = one(rb, lt1.ListTransactionsRequest(
        state_filters=(), producer_id_filters=(), duration_filter=3_600_000))
    assert txn_id not in {s.transactional_id for s in response.transaction_states}


def test_a_commit_after_the_coordinator_aborted_a_timed_out_transaction(
        rb: RunningBroker) -> None:
    topic, txn_id = new_topic(rb), new_id()
    r = init(rb, txn_id, timeout=datetime.timedelta(milliseconds=1))
    add_partitions(rb, txn_id, r.producer_id, r.producer_epoch, {topic: [0]})
    coordinator = rb.broker.transaction_coordinator
    started = time.monotonic()
    # the timer runs every 10 s here: abort now, once the transaction is past its 1 ms
    while asyncio.run_coroutine_threadsafe(
            coordinator.abort_timed_out_transactions(), rb.loop).result(30) == 0:
        assert not expired(started, 30), "the transaction was never aborted"
    while rb.call(lambda: coordinator.txns[txn_id].state) is not (
            TransactionState.COMPLETE_ABORT):
        assert not expired(started, 30), "the abort did not complete"
        time.sleep(0.01)
    assert end_txn(rb, txn_id, r.producer_id, r.producer_epoch, commit=True) == (
        ErrorCode.producer_fenced)
    assert end_txn(rb, txn_id, r.producer_id, r.producer_epoch, commit=True, version=1) == (
        ErrorCode.invalid_producer_epoch)
    assert add_partitions(rb, txn_id, r.producer_id, r.producer_epoch, {topic: [1]}) == {
        (topic, 1): ErrorCode.producer_fenced}
