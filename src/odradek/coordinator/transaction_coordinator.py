"""The transaction coordinator (Kafka's ``TransactionCoordinator``, ``TransactionStateManager``
and ``TransactionMarkerChannelManager``, KIP-98).

How it works:

- **Ownership.** A transactional id belongs to partition
  ``abs(String.hashCode(id)) % transaction.state.log.num.partitions`` of the compacted
  ``__transaction_state`` topic (created on first use, as ``__consumer_offsets``, with
  ``transaction.state.log.replication.factor`` replicas and ``min.insync.replicas`` =
  ``transaction.state.log.min.isr``); this broker coordinates it while it leads that
  partition. On election the partition is replayed (the last value per id wins, a
  tombstone removes it) in steps of ``LOAD_STEP_RECORDS`` records, the event loop running
  between them, and its ids cached with the partition's leader epoch as the
  *coordinator epoch*; on resignation, or when that epoch moves, they are dropped (a
  load under way is cancelled).
  Requests for a partition led elsewhere get NOT_COORDINATOR, while it loads
  COORDINATOR_LOAD_IN_PROGRESS. This bookkeeping is
  :class:`~odradek.coordinator.internal_topic_coordinator.InternalTopicCoordinator`'s,
  shared with the group coordinator.
- **Moves.** Every change of an id goes through :mod:`~odradek.coordinator.transaction_state`:
  the rules there prepare a transit (the id is then *pending*, other requests get
  CONCURRENT_TRANSACTIONS), the transit is appended to the id's partition and awaited until
  the ISR holds it (acks=all, Kafka's ``appendTransactionToLog``), and only then adopted; a
  failed write cancels it. A write whose partition changed leader meanwhile is
  NOT_COORDINATOR.
- **Ending a transaction.** EndTxn writes PrepareCommit or PrepareAbort and answers the
  client; a task then sends WriteTxnMarkers to the leader of every partition of the
  transaction (``send_markers``: the inter-broker connection, this broker itself
  included), retrying what failed with the leaders looked up again each round (a leader
  moved), dropping partitions of deleted topics, until every marker is written; then it
  writes CompleteCommit or CompleteAbort. A coordinator that loads a Prepare* state (the
  previous one died mid-way) resumes the markers the same way. The task stops when this
  broker stops coordinating the id.
- **Fencing.** InitProducerId on an id with an Ongoing transaction bumps the epoch
  (PrepareEpochFence) and aborts that transaction with the new epoch, answering
  CONCURRENT_TRANSACTIONS until the abort completed; the client retries and gets a second
  bump. A transaction older than its ``transaction.timeout.ms`` is aborted the same way
  every ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, so the producer
  that opened it is fenced. Ids resting (Empty, CompleteCommit, CompleteAbort) longer than
  ``transactional.id.expiration.ms`` are tombstoned every
  ``transaction.remove.expired.transaction.cleanup.interval.ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

from odradek.clock import now_ms
from odradek.cluster.loop_owned import loop_dict
from odradek.coordinator.internal_topic_coordinator import (
    APPEND_ERRORS,
    CoordinatorPartitions,
    InternalTopicCoordinator,
    append_error,
)
from odradek.coordinator.offsets_topic import OffsetsTopic
from odradek.coordinator.transaction_records import (
    TRANSACTION_STATE_TOPIC,
    TransactionLogFormatError,
    TransactionLogKey,
    TransactionLogValue,
    decode_key,
    decode_value,
    partition_for,
    tombstone,
)
from odradek.coordinator.transaction_state import (
    TopicPartition,
    TransactionMetadata,
    TransactionResult,
    TransactionState,
    TxnTransitMetadata,
    check_transaction_timeout,
    prepare_add_partitions,
    prepare_end_txn,
    prepare_init_producer_id,
)
from odradek.protocol.errors import ErrorCode
from odradek.storage.errors import ApiError
from odradek.text import plural

__all__ = [
    "TRANSACTION_STATE_TOPIC",
    "InitProducerIdResult",
    "SendMarkers",
    "TransactionConfig",
    "TransactionCoordinator",
    "TxnMarker",
]

log = logging.getLogger(__name__)

# Records of __transaction_state replayed per step of a load before the event loop runs
# again: a few milliseconds of decoding, so a large partition loads without stalling the
# broker (Kafka loads on a scheduler thread; requests meanwhile get
# COORDINATOR_LOAD_IN_PROGRESS).
LOAD_STEP_RECORDS = 2000
# Back-off between rounds of markers that could not all be written.
MARKER_RETRY_MIN_S = 0.05
MARKER_RETRY_MAX_S = 1.0

_PC, _PA, _ON = (TransactionState.PREPARE_COMMIT, TransactionState.PREPARE_ABORT,
                 TransactionState.ONGOING)
# A transaction that is ending (or being fenced, to be aborted): verification waits.
_ENDING = frozenset({_PC, _PA, TransactionState.PREPARE_EPOCH_FENCE})


@dataclass(frozen=True, slots=True)
class TransactionConfig:
    """The broker configs the coordinator reads (Kafka's ``TransactionConfig``)."""

    num_partitions: int = 50  # transaction.state.log.num.partitions
    replication_factor: int = 3  # transaction.state.log.replication.factor
    min_isr: int = 2  # transaction.state.log.min.isr
    segment_bytes: int = 104857600  # transaction.state.log.segment.bytes
    load_buffer_size: int = 5242880  # transaction.state.log.load.buffer.size
    max_timeout_ms: int = 900000  # transaction.max.timeout.ms
    id_expiration_ms: int = 604800000  # transactional.id.expiration.ms
    abort_interval_ms: int = 10000  # transaction.abort.timed.out.transaction.cleanup.interval.ms
    remove_expired_interval_ms: int = 3600000  # ...remove.expired.transaction.cleanup...

    @classmethod
    def from_broker(cls, values: Mapping[str, Any]) -> TransactionConfig:
        return cls(
            num_partitions=int(values["transaction.state.log.num.partitions"]),
            replication_factor=int(values["transaction.state.log.replication.factor"]),
            min_isr=int(values["transaction.state.log.min.isr"]),
            segment_bytes=int(values["transaction.state.log.segment.bytes"]),
            load_buffer_size=int(values["transaction.state.log.load.buffer.size"]),
            max_timeout_ms=int(values["transaction.max.timeout.ms"]),
            id_expiration_ms=int(values["transactional.id.expiration.ms"]),
            abort_interval_ms=int(
                values["transaction.abort.timed.out.transaction.cleanup.interval.ms"]),
            remove_expired_interval_ms=int(
                values["transaction.remove.expired.transaction.cleanup.interval.ms"]),
        )


class TxnMarker(NamedTuple):
    """One WriteTxnMarkers entry for one partition leader."""

    producer_id: int
    producer_epoch: int
    commit: bool
    coordinator_epoch: int
    partitions: tuple[TopicPartition, ...]


#: Send ``marker`` to broker ``leader``; the error per partition (a partition missing from
#: the answer, or an exception, is retried).
SendMarkers = Callable[[int, TxnMarker], Awaitable[Mapping[TopicPartition, ErrorCode]]]


class InitProducerIdResult(NamedTuple):
    error: ErrorCode
    producer_id: int = -1
    producer_epoch: int = -1


# Errors of a marker that mean "try again" (the leader moved or is not ready).
_MARKER_RETRIABLE = frozenset({
    ErrorCode.not_leader_or_follower, ErrorCode.leader_not_available,
    ErrorCode.not_enough_replicas, ErrorCode.not_enough_replicas_after_append,
    ErrorCode.request_timed_out, ErrorCode.kafka_storage_error,
    ErrorCode.unknown_topic_or_partition, ErrorCode.network_exception,
    ErrorCode.coordinator_load_in_progress, ErrorCode.unknown_server_error,
})

# Errors of a marker that mean this coordinator is behind: it stops sending.
_MARKER_FENCED = frozenset({
    ErrorCode.transaction_coordinator_fenced, ErrorCode.invalid_producer_epoch,
})


# A transaction asks for its id's partition several times (each request, each write,
# each marker round): the hash is remembered, as Java's String remembers its hashCode.
_partition_for = functools.lru_cache(maxsize=65536)(partition_for)


def api_error_code(exc: ApiError) -> ErrorCode:
    return ErrorCode[exc.kafka_error.lower()]


class _Replay:
    """The replay of one ``__transaction_state`` partition, advanced in steps: the last
    value per transactional id wins, a tombstone removes it."""

    def __init__(self, partition: int, records: Iterator[tuple[bytes, bytes | None]]
                 ) -> None:
        self.partition = partition
        self._records = records
        self._values: dict[str, TransactionLogValue | None] = {}

    def step(self, budget: int) -> bool:
        """Replay up to ``budget`` more records; True once the partition's end is reached."""
        values = self._values
        for replayed, (raw_key, raw_value) in enumerate(self._records, 1):
            try:
                key = decode_key(raw_key)
                if key is not None:
                    values[key.transactional_id] = decode_value(raw_value)
            except TransactionLogFormatError as exc:
                log.warning("skipping an unreadable record of %s-%d: %s",
                            TRANSACTION_STATE_TOPIC, self.partition, exc)
            if replayed >= budget:
                return False
        return True

    def result(self) -> dict[str, TransactionMetadata]:
        return {txn_id: value.to_metadata(txn_id)
                for txn_id, value in self._values.items() if value is not None}


class TransactionCoordinator(InternalTopicCoordinator):
    LOADED_NOUN = "transactional id"
    RELOAD_ON_NEW_EPOCH = True

    def __init__(
        self,
        topic: OffsetsTopic,
        config: TransactionConfig | None = None,
        allocate_producer_id: Callable[[], Awaitable[int]] | None = None,
        time_ms: Callable[[], int] = now_ms,
    ) -> None:
        super().__init__(topic, CoordinatorPartitions())
        self.config = config or TransactionConfig()
        self.time_ms = time_ms
        self.allocate_producer_id = allocate_producer_id
        self.txns: dict[str, TransactionMetadata] = loop_dict()  # the loop's (docs: Threads)
        self._completions: dict[str, asyncio.Task[None]] = {}
        self._loads: dict[int, asyncio.Task[None]] = {}  # partitions loading in steps
        self._timers: list[asyncio.Task[None]] = []
        # Set by the broker: NONE once the ISR of a __transaction_state partition holds
        # what was appended to it, else the error (None: nothing to wait for).
        self.wait_replicated: Callable[[int], Awaitable[ErrorCode]] | None = None
        # Set by the broker: WriteTxnMarkers to a partition leader.
        self.send_markers: SendMarkers | None = None
        # The leader of a partition (None: none now); -1 / missing topic drops it.
        self.partition_leader: Callable[[TopicPartition], int | None] = self._leader
        self.partition_exists: Callable[[TopicPartition], bool] = self._exists

    # ================================================================ life cycle
    def startup(self) -> None:
        """Load the partitions led here and start the timeout and expiration timers (on
        the running event loop, if any)."""
        super().startup()
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timers = [
            asyncio.create_task(self._every(self.config.abort_interval_ms,
                                            self.abort_timed_out_transactions)),
            asyncio.create_task(self._every(self.config.remove_expired_interval_ms,
                                            self.remove_expired_transactional_ids)),
        ]

    def shutdown(self) -> None:
        for timer in self._timers:
            timer.cancel()
        self._timers = []
        super().shutdown()

    async def _every(self, interval_ms: int, fn: Callable[[], Awaitable[int]]) -> None:
        while True:
            await asyncio.sleep(interval_ms / 1000)
            try:
                await fn()
            except Exception:
                log.exception("transaction coordinator task %s failed", fn.__name__)

    # ================================================================ partitions
    def partition_for(self, transactional_id: str) -> int:
        return _partition_for(transactional_id, self.topic.partition_count)

    def cached_count(self) -> int:
        return len(self.txns)

    def _epoch(self, partition: int) -> int:
        """The coordinator epoch ``partition`` is owned at, -1 when it is not."""
        epoch = self.partitions.epoch_of(partition)
        return -1 if epoch is None else epoch

    def on_elected(self, partition: int) -> None:
        """Replay ``partition`` and own its ids; resume the markers of transactions the
        previous coordinator left in PrepareCommit / PrepareAbort. The replay runs in
        steps of :data:`LOAD_STEP_RECORDS` records: a partition that takes more than one
        step goes on in a task on the event loop (its ids answer
        COORDINATOR_LOAD_IN_PROGRESS meanwhile), so a large ``__transaction_state`` does
        not stall the broker; without a running loop it is replayed at once."""
        epoch = self.topic.leader_epoch(partition)
        replay = _Replay(partition, self.topic.replay(partition))
        self.partitions.start_loading(partition, epoch)
        try:
            done = replay.step(LOAD_STEP_RECORDS)
            if not done:
                try:
                    loop = asyncio.get_running_loop()
                except RuntimeError:
                    while not replay.step(LOAD_STEP_RECORDS):
                        pass
                else:
                    self._loads[partition] = loop.create_task(
                        self._load_in_steps(replay, epoch))
                    return
        except Exception:
            self.partitions.stop_loading(partition)
            raise
        self._adopt(partition, epoch, replay)

    async def _load_in_steps(self, replay: _Replay, epoch: int) -> None:
        partition = replay.partition
        started = time.monotonic()
        try:
            while True:
                await asyncio.sleep(0)  # let requests and replication run between steps
                if replay.step(LOAD_STEP_RECORDS):
                    break
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("loading %s-%d failed", TRANSACTION_STATE_TOPIC, partition)
            if self._loads.get(partition) is asyncio.current_task():
                del self._loads[partition]
                self.partitions.stop_loading(partition)
            return
        if self._loads.get(partition) is not asyncio.current_task():
            return  # resigned meanwhile
        del self._loads[partition]
        loaded = self._adopt(partition, epoch, replay)
        log.info("loaded %s from %s-%d in %.0f ms", plural(loaded, self.LOADED_NOUN),
                 TRANSACTION_STATE_TOPIC, partition, (time.monotonic() - started) * 1000)

    def _adopt(self, partition: int, epoch: int, replay: _Replay) -> int:
        """Own the replayed partition; returns how many ids it holds."""
        loaded = replay.result()
        self.partitions.finish_loading(partition)
        self.txns.update(loaded)
        for metadata in loaded.values():
            if metadata.state in (_PC, _PA):
                self._start_completion(metadata, epoch)
        return len(loaded)

    def on_resigned(self, partition: int) -> None:
        """Stop coordinating ``partition``: forget its ids and stop their markers (the
        new coordinator resumes them from the log)."""
        self.partitions.unload(partition)
        self.partitions.stop_loading(partition)
        load = self._loads.pop(partition, None)
        if load is not None:
            load.cancel()
        for txn_id in [t for t in self.txns if self.partition_for(t) == partition]:
            del self.txns[txn_id]
            task = self._completions.pop(txn_id, None)
            if task is not None:
                task.cancel()

    def check(self, transactional_id: str | None) -> ErrorCode:
        """NONE when this broker coordinates the id now (Kafka's ``getTransactionState``
        preconditions)."""
        if not transactional_id:
            return ErrorCode.invalid_request
        return self.check_coordinator(transactional_id)

    # ================================================================ writes
    async def _write(
        self, transactional_id: str, transit: TxnTransitMetadata | None
    ) -> ErrorCode:
        """Append the transit (None: a tombstone) and wait until the ISR has it."""
        partition = self.partition_for(transactional_id)
        epoch = self.partitions.epoch_of(partition)
        if epoch is None:
            return ErrorCode.not_coordinator
        if transit is None:
            key, value = tombstone(transactional_id)
        else:
            key = TransactionLogKey(transactional_id).encode()
            value = TransactionLogValue.from_transit(transit).encode()
        try:
            self.topic.append(partition, [(key, value)], self.time_ms())
        except Exception as exc:
            return append_error(exc, APPEND_ERRORS, self.topic.name,
                                f"transactional id {transactional_id}")
        if self.wait_replicated is not None:
            error = await self.wait_replicated(partition)
            if error == ErrorCode.request_timed_out:
                return ErrorCode.coordinator_not_available
            if error != ErrorCode.none:
                return error
        if self.partitions.epoch_of(partition) != epoch:
            return ErrorCode.not_coordinator
        return ErrorCode.none

    async def _apply(self, metadata: TransactionMetadata, transit: TxnTransitMetadata
                     ) -> ErrorCode:
        """Write a prepared transit and adopt it, or cancel it."""
        error = await self._write(metadata.transactional_id, transit)
        if self.txns.get(metadata.transactional_id) is not metadata:
            return ErrorCode.not_coordinator  # unloaded meanwhile
        if error != ErrorCode.none:
            metadata.cancel_pending_transition()
            return error
        metadata.complete_transition_to(transit)
        return ErrorCode.none

    # ================================================================ requests
    async def init_producer_id(
        self, transactional_id: str, txn_timeout_ms: int,
        expected: tuple[int, int] | None = None,
    ) -> InitProducerIdResult:
        """InitProducerId with a transactional id (Kafka's ``handleInitProducerId``);
        ``expected`` is KIP-360's (producer id, epoch) of a v3+ request."""
        if not transactional_id:
            return InitProducerIdResult(ErrorCode.invalid_request)
        try:
            check_transaction_timeout(txn_timeout_ms, self.config.max_timeout_ms)
        except ApiError as exc:
            return InitProducerIdResult(api_error_code(exc))
        error = self.check(transactional_id)
        if error != ErrorCode.none:
            return InitProducerIdResult(error)
        partition = self.partition_for(transactional_id)
        coordinator_epoch = self.partitions.epoch_of(partition)
        metadata = self.txns.get(transactional_id)
        if metadata is None:
            producer_id = await self._new_producer_id()
            if self.partitions.epoch_of(partition) != coordinator_epoch:
                # unloaded (or reloaded) while the id was allocated: leave no entry
                return InitProducerIdResult(ErrorCode.not_coordinator)
            metadata = self.txns.get(transactional_id)  # raced with another first call
            if metadata is None:
                metadata = TransactionMetadata.new(
                    transactional_id, producer_id, txn_timeout_ms, self.time_ms())
                self.txns[transactional_id] = metadata
        if metadata.is_producer_epoch_exhausted:
            spare = await self._new_producer_id()
            if self.txns.get(transactional_id) is not metadata:
                return InitProducerIdResult(ErrorCode.not_coordinator)
        else:
            spare = -1
        try:
            transit = prepare_init_producer_id(
                metadata, txn_timeout_ms, self.time_ms(), lambda: spare, expected)
        except ApiError as exc:
            return InitProducerIdResult(api_error_code(exc))
        if metadata.pending_state is TransactionState.PREPARE_EPOCH_FENCE:
            # The previous incarnation left a transaction open: abort it with the bumped
            # epoch; the client retries until that completed.
            error = await self._end(metadata, metadata.producer_id, transit.producer_epoch,
                                    TransactionResult.ABORT, from_client=False)
            return InitProducerIdResult(
                ErrorCode.concurrent_transactions if error == ErrorCode.none else error)
        error = await self._apply(metadata, transit)
        if error != ErrorCode.none:
            return InitProducerIdResult(error)
        log.debug("transactional id %s: producer id %d epoch %d", transactional_id,
                  transit.producer_id, transit.producer_epoch)
        return InitProducerIdResult(ErrorCode.none, transit.producer_id, transit.producer_epoch)

    async def _new_producer_id(self) -> int:
        if self.allocate_producer_id is None:
            raise RuntimeError("no producer id allocator")
        return await self.allocate_producer_id()

    async def add_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> ErrorCode:
        """AddPartitionsToTxn and AddOffsetsToTxn (``__consumer_offsets`` partition of the
        group): Kafka's ``handleAddPartitionsToTransaction``. PRODUCER_FENCED is the
        handler's to downgrade for old versions."""
        error = self.check(transactional_id)
        if error != ErrorCode.none:
            return error
        metadata = self.txns.get(transactional_id)
        if metadata is None:
            return ErrorCode.invalid_producer_id_mapping
        try:
            transit = prepare_add_partitions(metadata, producer_id, producer_epoch,
                                             partitions, self.time_ms())
        except ApiError as exc:
            return api_error_code(exc)
        if transit is None:
            return ErrorCode.none
        return await self._apply(metadata, transit)

    def verify_partitions(
        self, transactional_id: str, producer_id: int, producer_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> tuple[ErrorCode, dict[TopicPartition, ErrorCode]]:
        """AddPartitionsToTxn v4's ``verify_only`` (KIP-890, Kafka's
        ``handleVerifyPartitionsInTransaction``): NONE per partition already in the
        transaction, INVALID_TXN_STATE for the others, whatever is being written for other
        partitions meanwhile (the leader's append checks its verification guard again).
        While the transaction ends (PrepareCommit / PrepareAbort, written or being
        written, or an epoch fence being written) the whole answer is
        CONCURRENT_TRANSACTIONS, retriable: whether a late batch still belongs to the
        transaction is not known yet."""
        error = self.check(transactional_id)
        if error != ErrorCode.none:
            return error, {}
        metadata = self.txns.get(transactional_id)
        if metadata is None or metadata.producer_id != producer_id:
            return ErrorCode.invalid_producer_id_mapping, {}
        if metadata.producer_epoch != producer_epoch:
            return ErrorCode.producer_fenced, {}
        if metadata.state in _ENDING or metadata.pending_state in _ENDING:
            return ErrorCode.concurrent_transactions, {}
        added = metadata.topic_partitions if metadata.state is _ON else frozenset()
        return ErrorCode.none, {
            tp: ErrorCode.none if tp in added else ErrorCode.invalid_txn_state
            for tp in partitions
        }

    async def end_txn(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> ErrorCode:
        """EndTxn: write the decision, answer, then write the markers in the background."""
        error = self.check(transactional_id)
        if error != ErrorCode.none:
            return error
        metadata = self.txns.get(transactional_id)
        if metadata is None:
            return ErrorCode.invalid_producer_id_mapping
        result = TransactionResult.COMMIT if commit else TransactionResult.ABORT
        return await self._end(metadata, producer_id, producer_epoch, result, from_client=True)

    async def _end(
        self, metadata: TransactionMetadata, producer_id: int, producer_epoch: int,
        result: TransactionResult, from_client: bool,
    ) -> ErrorCode:
        try:
            transit = prepare_end_txn(metadata, producer_id, producer_epoch, result,
                                      self.time_ms(), from_client=from_client)
        except ApiError as exc:
            if metadata.pending_state is TransactionState.PREPARE_EPOCH_FENCE:
                metadata.cancel_pending_transition()
            return api_error_code(exc)
        if transit is None:
            return ErrorCode.none  # a retry of a transaction completed the same way
        error = await self._apply(metadata, transit)
        if error != ErrorCode.none:
            return error
        partition = self.partition_for(metadata.transactional_id)
        self._start_completion(metadata, self._epoch(partition))
        return ErrorCode.none

    # ================================================================ markers
    def _start_completion(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # loaded before the loop runs: startup resumes it
        txn_id = metadata.transactional_id
        previous = self._completions.get(txn_id)
        if previous is not None and not previous.done():
            return
        task = loop.create_task(self._complete(metadata, coordinator_epoch))
        self._completions[txn_id] = task
        task.add_done_callback(lambda t: self._completions.pop(txn_id, None)
                               if self._completions.get(txn_id) is t else None)

    def resume_completions(self) -> None:
        """Start the markers of every loaded Prepare* transaction not being completed."""
        for metadata in list(self.txns.values()):
            if metadata.state in (_PC, _PA) and metadata.pending_state is None:
                partition = self.partition_for(metadata.transactional_id)
                self._start_completion(metadata, self._epoch(partition))

    def _still_mine(self, metadata: TransactionMetadata, coordinator_epoch: int) -> bool:
        partition = self.partition_for(metadata.transactional_id)
        return (self._active and self.partitions.epoch_of(partition) == coordinator_epoch
                and self.txns.get(metadata.transactional_id) is metadata)

    async def _complete(self, metadata: TransactionMetadata, coordinator_epoch: int) -> None:
        """Write every marker of the Prepare* transaction, then its Complete* state."""
        commit = metadata.state is _PC
        producer_id, producer_epoch = metadata.producer_id, metadata.producer_epoch
        remaining = set(metadata.topic_partitions)
        backoff = MARKER_RETRY_MIN_S
        # Let the answer to EndTxn leave first: the task was created while EndTxn was
        # handled, so its first step would run before the connection's writer.
        await asyncio.sleep(0)
        while True:
            if not self._still_mine(metadata, coordinator_epoch):
                return
            remaining = {tp for tp in remaining if self.partition_exists(tp)}
            if not remaining:
                break
            by_leader: dict[int, list[TopicPartition]] = {}
            for tp in sorted(remaining):
                leader = self.partition_leader(tp)
                if leader is not None and leader >= 0:
                    by_leader.setdefault(leader, []).append(tp)
            if by_leader:
                sends = [self._send(leader, TxnMarker(producer_id, producer_epoch, commit,
                                                      coordinator_epoch, tuple(tps)))
                         for leader, tps in by_leader.items()]
                answers = ([await sends[0]] if len(sends) == 1
                           else await asyncio.gather(*sends))
                for answer in answers:
                    for tp, error in answer.items():
                        if error == ErrorCode.none:
                            remaining.discard(tp)
                        elif error in _MARKER_FENCED:
                            # another coordinator (or producer epoch) is ahead: stop, as
                            # Kafka's TransactionMarkerRequestCompletionHandler aborts
                            # sending; the current coordinator completes it
                            log.warning("marker of %s for %s-%d: %s; no longer sending",
                                        metadata.transactional_id, tp[0], tp[1], error.name)
                            return
                        elif error not in _MARKER_RETRIABLE:
                            log.warning("marker of %s for %s-%d: %s; retrying",
                                        metadata.transactional_id, tp[0], tp[1], error.name)
            if remaining:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, MARKER_RETRY_MAX_S)
        # every marker is written: CompleteCommit / CompleteAbort
        while self._still_mine(metadata, coordinator_epoch):
            if metadata.pending_state is None and metadata.state in (_PC, _PA):
                transit = metadata.prepare_complete(self.time_ms())
                error = await self._apply(metadata, transit)
                if error == ErrorCode.none:
                    log.debug("transactional id %s: %s", metadata.transactional_id,
                              metadata.state.value)
                    return
                if error == ErrorCode.not_coordinator:
                    return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, MARKER_RETRY_MAX_S)

    async def _send(self, leader: int, marker: TxnMarker) -> Mapping[TopicPartition, ErrorCode]:
        if self.send_markers is None:
            return {}
        try:
            return await self.send_markers(leader, marker)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("WriteTxnMarkers to broker %d failed: %s; retrying", leader, exc)
            return {}

    def _leader(self, tp: TopicPartition) -> int | None:
        metadata = self.topic.metadata
        if metadata.get(tp[0]) is None:
            return None
        leader = metadata.partition_state(tp[0], tp[1]).leader
        return leader if leader >= 0 else None

    def _exists(self, tp: TopicPartition) -> bool:
        info = self.topic.metadata.get(tp[0])
        return info is not None and tp[1] in info.partitions

    # ================================================================ timers
    async def abort_timed_out_transactions(self) -> int:
        """Abort, with an epoch bump, every Ongoing transaction older than its timeout
        (Kafka's ``abortTimedOutTransactions``); returns how many were started."""
        now = self.time_ms()
        aborted = 0
        for metadata in list(self.txns.values()):
            if (metadata.state is not _ON or metadata.pending_state is not None
                    or metadata.txn_start_timestamp + metadata.txn_timeout_ms > now):
                continue
            if not self.partitions.is_owned(self.partition_for(metadata.transactional_id)):
                continue
            log.info("aborting the transaction of %s: older than its timeout of %d ms",
                     metadata.transactional_id, metadata.txn_timeout_ms)
            fence = metadata.prepare_fence_producer_epoch()
            error = await self._end(metadata, metadata.producer_id, fence.producer_epoch,
                                    TransactionResult.ABORT, from_client=False)
            if error == ErrorCode.none:
                aborted += 1
        return aborted

    async def remove_expired_transactional_ids(self) -> int:
        """Tombstone ids resting longer than ``transactional.id.expiration.ms`` (Kafka's
        ``removeExpiredTransactionalIds``); returns how many were removed."""
        now = self.time_ms()
        removed = 0
        for metadata in list(self.txns.values()):
            if (not metadata.state.is_expiration_allowed or metadata.pending_state is not None
                    or metadata.txn_last_update_timestamp + self.config.id_expiration_ms > now):
                continue
            if not self.partitions.is_owned(self.partition_for(metadata.transactional_id)):
                continue
            metadata.prepare_dead()
            error = await self._write(metadata.transactional_id, None)
            if error != ErrorCode.none:
                metadata.cancel_pending_transition()
                continue
            if self.txns.get(metadata.transactional_id) is metadata:
                del self.txns[metadata.transactional_id]
                removed += 1
                log.info("transactional id %s expired", metadata.transactional_id)
        return removed

    # ================================================================ admin
    def describe(self, transactional_id: str) -> tuple[ErrorCode, TransactionMetadata | None]:
        error = self.check(transactional_id)
        if error != ErrorCode.none:
            return error, None
        metadata = self.txns.get(transactional_id)
        if metadata is None:
            return ErrorCode.transactional_id_not_found, None
        return ErrorCode.none, metadata

    def list_transactions(self) -> tuple[ErrorCode, list[TransactionMetadata]]:
        error = self.check_listing()
        if error != ErrorCode.none:
            return error, []
        return ErrorCode.none, sorted(self.txns.values(), key=lambda m: m.transactional_id)

    async def wait_completions(self) -> None:
        """Wait for the marker tasks running now (tests)."""
        for task in list(self._completions.values()):
            with contextlib.suppress(asyncio.CancelledError):
                await task

