"""Delayed requests of one transaction reaching the next one of the same producer epoch
(KAFKA-17754, found by the Jepsen analysis of Bufstream): the exposure that Transactions V2
(KIP-890 part 2, Kafka 4.0: a new producer epoch for every transaction) closes. Odradek
serves the protocol before V2 (EndTxn v0-4, Produce v0-11), where a transaction's requests
carry nothing that tells them from the next transaction's, as in Kafka 3.9. These tests pin
what Odradek does, which is what Kafka 3.9 does (docs/compatibility.md, "Transactions V2"):

- a Produce of transaction N delayed until N is committed and N+1 has added the partition
  is verified against N+1 and written into it (before N+1 added the partition, KIP-890
  part 1's verification refuses it: ``test_txn_verification.py``);
- an EndTxn of N delayed until N+1 is ongoing ends N+1: Kafka 3.9's ``endTransaction``
  takes an Ongoing transaction of the same epoch to PrepareCommit or PrepareAbort
  whichever request asks.

Raw requests over a real socket, the coordinator's side with hand-built InitProducerId,
AddPartitionsToTxn and EndTxn, as a client's retries and a slow network would order
them."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from odradek.protocol.errors import ErrorCode
from odradek.records.batch import iter_batches, iter_records
from odradek.records.control import read_end_txn_marker
from odradek.testing import RunningBroker, running_broker
from tests._deadlines import expired
from tests.server._raw_client import TxnClient, txn_batch
from tests.server._requests import add_partitions, end_txn, init, new_id

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


def begin(rb: RunningBroker) -> tuple[str, str, int, int]:
    """A fresh topic and transactional id: (topic, id, producer id, epoch)."""
    topic = f"late-{uuid.uuid4().hex[:8]}"
    rb.call(rb.broker.metadata.create_topic, topic, 1, 1, {})
    txn_id = new_id()
    response = init(rb, txn_id)
    assert response.error_code == ErrorCode.none
    return topic, txn_id, int(response.producer_id), int(response.producer_epoch)


def add(rb: RunningBroker, txn_id: str, pid: int, epoch: int, topic: str) -> None:
    """AddPartitionsToTxn of partition 0, retried while the previous transaction's markers
    are still being written (CONCURRENT_TRANSACTIONS, as a client retries)."""
    started = time.monotonic()
    while (answer := add_partitions(rb, txn_id, pid, epoch, {topic: [0]})) == {
            (topic, 0): ErrorCode.concurrent_transactions}:
        assert not expired(started, DEADLINE), answer
        time.sleep(0.02)
    assert answer == {(topic, 0): ErrorCode.none}


def transactions(client: TxnClient, topic: str) -> list[tuple[bool, list[str]]]:
    """Partition 0's transactions once none is open: (committed, values) per marker, in
    log order."""
    started = time.monotonic()
    while (part := client.fetch(topic, read_committed=False)).last_stable_offset != \
            part.high_watermark:
        assert not expired(started, DEADLINE), part
        time.sleep(0.02)
    data = bytes(part.records or b"")
    found: list[tuple[bool, list[str]]] = []
    pending: list[str] = []
    for header in iter_batches(data):
        batch = data[header.position: header.position + header.size]
        if header.is_control:
            marker = read_end_txn_marker(batch)
            assert marker is not None
            found.append((marker.committed, pending))
            pending = []
        else:
            pending.extend(bytes(r.value or b"").decode() for r in iter_records(batch))
    assert not pending
    return found


def test_a_delayed_produce_of_a_committed_transaction_lands_in_the_next(
    rb: RunningBroker, client: TxnClient
) -> None:
    topic, txn_id, pid, epoch = begin(rb)
    # transaction N: its first batch is written, its second is held up on the way
    add(rb, txn_id, pid, epoch, topic)
    on_time = client.produce(topic, txn_batch(pid, epoch, 0, tag="N"), transactional_id=txn_id)
    assert on_time.error_code == ErrorCode.none
    delayed = txn_batch(pid, epoch, 1, tag="N")
    assert end_txn(rb, txn_id, pid, epoch, commit=True) == ErrorCode.none
    # transaction N+1, same producer epoch, adds the partition again
    add(rb, txn_id, pid, epoch, topic)
    # N's delayed batch arrives: verified against N+1, in sequence, written into N+1
    late = client.produce(topic, delayed, transactional_id=txn_id)
    assert late.error_code == ErrorCode.none
    assert late.base_offset == 2  # after N's record (0) and its commit marker (1)
    own = client.produce(topic, txn_batch(pid, epoch, 2, tag="N+1"), transactional_id=txn_id)
    assert own.error_code == ErrorCode.none
    assert end_txn(rb, txn_id, pid, epoch, commit=False) == ErrorCode.none
    # The exposure: N committed only its first record; its second went with N+1, and
    # N+1's abort took it out. With a commit of N+1 it would be committed in N+1 instead.
    assert transactions(client, topic) == [(True, ["N-0"]), (False, ["N-1", "N+1-2"])]


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_delayed_end_txn_of_the_previous_transaction_ends_the_next(
    rb: RunningBroker, client: TxnClient, commit: bool
) -> None:
    topic, txn_id, pid, epoch = begin(rb)
    # transaction N: the client's EndTxn is held up; its retry ends N
    add(rb, txn_id, pid, epoch, topic)
    assert client.produce(topic, txn_batch(pid, epoch, 0, tag="N"),
                          transactional_id=txn_id).error_code == ErrorCode.none
    assert end_txn(rb, txn_id, pid, epoch, commit=commit) == ErrorCode.none
    # transaction N+1 writes a first record
    add(rb, txn_id, pid, epoch, topic)
    assert client.produce(topic, txn_batch(pid, epoch, 1, tag="N+1"),
                          transactional_id=txn_id).error_code == ErrorCode.none
    # N's first EndTxn arrives: same epoch, N+1 ongoing, so it ends N+1 (as Kafka 3.9)
    assert end_txn(rb, txn_id, pid, epoch, commit=commit) == ErrorCode.none
    # N+1's next record: its partition is no longer in a transaction, refused (KIP-890
    # part 1), nothing written
    refused = client.produce(topic, txn_batch(pid, epoch, 2, tag="N+1"),
                             transactional_id=txn_id)
    assert refused.error_code == ErrorCode.invalid_txn_state
    # The client, failed, ends N+1 the other way: refused, N+1 already ended
    assert end_txn(rb, txn_id, pid, epoch, commit=not commit) == ErrorCode.invalid_txn_state
    assert transactions(client, topic) == [(commit, ["N-0"]), (commit, ["N+1-1"])]
