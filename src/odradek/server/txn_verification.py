"""Verification of transactional appends by partition leaders (KIP-890's first part,
Kafka's ``AddPartitionsToTxnManager`` and ``ReplicaManager``'s error translation).

How it works: before a leader appends the first transactional batch of a producer on a
partition (the producer has no transaction open there at that epoch), it asks the
transaction coordinator of the request's transactional id whether the partition is in
the producer's ongoing transaction: AddPartitionsToTxn v4 with ``verify_only``, all the
request's unverified partitions in one transaction entry, sent to the leader of the id's
``__transaction_state`` partition over the inter-broker listener (the connections of
server/txn_markers.py); on the coordinator itself the coordinator is asked directly. The
answer is bounded by ``request.timeout.ms`` (Kafka's default, 30 s). A partition the
coordinator does not have in the transaction is refused with INVALID_TXN_STATE, so a
produce retried after its transaction ended cannot open a transaction no coordinator will
ever end (a hanging transaction).

The coordinator's answers are translated as Kafka does for Produce up to v11: PRODUCER_FENCED
becomes INVALID_PRODUCER_EPOCH; a coordinator that cannot answer (no leader for its
partition, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS, a lost
connection or a timeout) becomes NOT_ENOUGH_REPLICAS, retriable and without a metadata
refresh; CLUSTER_AUTHORIZATION_FAILED (the broker may not ask) becomes INVALID_TXN_STATE.

TxnOffsetCommit is verified the same way (Kafka 3.6+): the group's ``__consumer_offsets``
partition must be in the producer's ongoing transaction before the group coordinator
appends the transactional offset batch there (server/handlers/transactions.py), so a
TxnOffsetCommit arriving after its transaction ended cannot open a transaction on
``__consumer_offsets`` that pins its last stable offset; its errors are translated by
:func:`translate_offset_commit`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.add_partitions_to_txn.v4 import request as aptt_v4
from kio.schema.types import ProducerId, TopicName, TransactionalId
from kio.static.primitive import i16, i32, i64

from odradek.coordinator.transaction_state import TopicPartition
from odradek.protocol.errors import ErrorCode

if TYPE_CHECKING:
    from odradek.coordinator.transaction_coordinator import TransactionCoordinator
    from odradek.server.txn_markers import TxnMarkerSender

__all__ = ["TxnVerifier", "translate", "translate_offset_commit"]

log = logging.getLogger(__name__)

# Kafka's request.timeout.ms default: how long the coordinator's answer may take.
REQUEST_TIMEOUT_S = 30.0

_NOT_ADDED = "Partition was not added to the transaction"
# Errors of a coordinator that could not answer: retriable for the producer.
_UNAVAILABLE = frozenset({
    ErrorCode.network_exception, ErrorCode.coordinator_load_in_progress,
    ErrorCode.coordinator_not_available, ErrorCode.not_coordinator,
    ErrorCode.concurrent_transactions,
})


def translate_offset_commit(code: ErrorCode) -> ErrorCode:
    """TxnOffsetCommit's error for its ``__consumer_offsets`` partition when the
    coordinator did not verify it (Kafka's ``maybeConvertOffsetCommitError`` after the
    verification): PRODUCER_FENCED becomes INVALID_PRODUCER_EPOCH; a coordinator that
    could not be asked, or a transaction ending meanwhile (CONCURRENT_TRANSACTIONS, which
    a TxnOffsetCommit client does not retry), COORDINATOR_LOAD_IN_PROGRESS, retried on
    the same coordinator; CLUSTER_AUTHORIZATION_FAILED INVALID_TXN_STATE; the others
    (INVALID_TXN_STATE, INVALID_PRODUCER_ID_MAPPING, NOT_COORDINATOR, ...) as they are."""
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch
    if code in (ErrorCode.network_exception, ErrorCode.concurrent_transactions):
        return ErrorCode.coordinator_load_in_progress
    if code == ErrorCode.cluster_authorization_failed:
        return ErrorCode.invalid_txn_state
    return code


def translate(code: ErrorCode) -> tuple[ErrorCode, str | None]:
    """The producer's error for a partition the coordinator did not verify, with the
    message Kafka gives (None: the error's own)."""
    if code == ErrorCode.producer_fenced:
        return ErrorCode.invalid_producer_epoch, None
    if code in (ErrorCode.invalid_txn_state, ErrorCode.cluster_authorization_failed):
        return ErrorCode.invalid_txn_state, _NOT_ADDED
    if code in _UNAVAILABLE:
        return ErrorCode.not_enough_replicas, (
            "Unable to verify the partition has been added to the transaction. "
            f"Underlying error: {code.name.upper()}")
    return code, None


class TxnVerifier:
    def __init__(
        self,
        broker_id: int,
        coordinator: Callable[[], TransactionCoordinator | None],
        links: TxnMarkerSender,
    ) -> None:
        self.broker_id = broker_id
        self._coordinator = coordinator
        self._links = links

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, tuple[ErrorCode, str | None]]:
        """The refused partitions with the producer's error (empty: all verified)."""
        answers = await self.ask(transactional_id, producer_id, producer_epoch, partitions)
        return {tp: translate(error) for tp, error in answers.items()
                if error != ErrorCode.none}

    async def ask(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> dict[TopicPartition, ErrorCode]:
        """The coordinator's answer per partition, untranslated (NETWORK_EXCEPTION: it
        could not be asked); each caller translates it for its own request."""
        coordinator = self._coordinator()
        leader = None
        if coordinator is not None and coordinator.topic.exists():
            leader = coordinator.topic.leader_of(coordinator.partition_for(transactional_id))
        if coordinator is None or leader is None:
            # No __transaction_state yet, or no leader for the id's partition.
            return dict.fromkeys(partitions, ErrorCode.coordinator_not_available)
        if leader == self.broker_id:
            code, results = coordinator.verify_partitions(
                transactional_id, producer_id, producer_epoch, partitions)
        else:
            code, results = await self._ask(leader, transactional_id, producer_id,
                                            producer_epoch, partitions)
        if code != ErrorCode.none:
            return dict.fromkeys(partitions, code)
        return {tp: results.get(tp, ErrorCode.invalid_txn_state) for tp in partitions}

    async def _ask(
        self, leader: int, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Sequence[TopicPartition],
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        by_topic: dict[str, list[int]] = {}
        for topic, index in partitions:
            by_topic.setdefault(topic, []).append(index)
        m = aptt_v4
        request = m.AddPartitionsToTxnRequest(transactions=(m.AddPartitionsToTxnTransaction(
            transactional_id=TransactionalId(transactional_id),
            producer_id=ProducerId(i64(producer_id)), producer_epoch=i16(producer_epoch),
            verify_only=True,
            topics=tuple(m.AddPartitionsToTxnTopic(
                name=TopicName(topic), partitions=tuple(i32(p) for p in indexes))
                for topic, indexes in by_topic.items()),
        ),))
        try:
            conn = await asyncio.wait_for(self._links.connection(leader), REQUEST_TIMEOUT_S)
            response: Any = await asyncio.wait_for(conn.send(request), REQUEST_TIMEOUT_S)
        except Exception as exc:  # lost connection, timeout, broker gone
            log.warning("verifying %s with coordinator %d failed: %s", transactional_id,
                        leader, exc)
            await self._links.drop(leader)
            return ErrorCode.network_exception, {}
        top = ErrorCode(response.error_code)
        if top != ErrorCode.none:
            return top, {}
        results: dict[TopicPartition, ErrorCode] = {}
        for txn in response.results_by_transaction:
            for topic in txn.topic_results:
                for p in topic.results_by_partition:
                    results[(str(topic.name), int(p.partition_index))] = ErrorCode(
                        p.partition_error_code)
        # A partition the answer left out was not verified.
        return ErrorCode.none, {tp: results.get(tp, ErrorCode.invalid_txn_state)
                                for tp in partitions}
