"""A transactional id's state machine as data (Kafka's ``TransactionMetadata``, KIP-98).

Sans-I/O: no asyncio, no disk, no clock. The transaction coordinator (a later piece) owns
the locks, the timers, the ``__transaction_state`` writes and the markers; it changes a
transactional id only through this module, in two steps as Kafka's
``TransactionStateManager.appendTransactionToLog`` does:

1. **prepare** — a ``prepare_*`` method checks the move against the table
   (:data:`VALID_PREVIOUS_STATES`, Kafka's ``validPreviousStates``), records it as the
   *pending state* and returns the target as an immutable :class:`TxnTransitMetadata`
   (Kafka's ``TxnTransitMetadata``), which the coordinator writes to the log;
2. **complete** — once the record is durable, :meth:`TransactionMetadata.complete_transition_to`
   checks the transit against the current metadata (same producer, epoch equal, bumped or
   reset with a new producer id, partitions only growing while Ongoing...) and adopts it;
   a failed write calls :meth:`TransactionMetadata.cancel_pending_transition` instead.

A transactional id with a pending state refuses any other move: the coordinator answers
CONCURRENT_TRANSACTIONS and the client retries (KIP-98).

The states (the byte is what ``__transaction_state`` stores, the name what
DescribeTransactions reports):

- **Empty** (0) — no transaction; InitProducerId bumps the epoch here. AddPartitionsToTxn
  or AddOffsetsToTxn starts one (Ongoing).
- **Ongoing** (1) — partitions were added; EndTxn moves to PrepareCommit or PrepareAbort.
  An InitProducerId from a new incarnation fences the old one: PrepareEpochFence, then an
  abort with the bumped epoch.
- **PrepareCommit** (2) / **PrepareAbort** (3) — the decision is in the log; the
  coordinator writes the markers to every partition, then completes.
- **CompleteCommit** (4) / **CompleteAbort** (5) — markers written; the id may start the
  next transaction or expire.
- **Dead** (6) — the id expired (``transactional.id.expiration.ms``) and is about to be
  removed: the coordinator writes a tombstone, never a Dead record.
- **PrepareEpochFence** (7) — only ever a *pending* state: the epoch bump of a fence,
  which the coordinator turns into PrepareAbort at once.

The coordinator's decisions for each request are here too, as pure functions that raise
the Kafka error the client gets or return the transit to write (Kafka's
``TransactionCoordinator.prepareInitProducerIdTransit`` and the checks of
``handleAddPartitionsToTransaction`` / ``endTransaction``):
:func:`check_transaction_timeout`, :func:`prepare_init_producer_id`,
:func:`prepare_add_partitions`, :func:`prepare_end_txn` and, once the decision is in the
log, :func:`prepare_complete_txn` before the markers are sent.
InitProducerId follows KIP-360: a producer that sends its current id and epoch after a
recoverable error gets the epoch bumped (a retry with the previous epoch gets the same
answer again), and when the epoch is exhausted (``Short.MAX_VALUE - 1``, kept below the
maximum so a fence can always bump once more) the id is rotated to a new producer id with
epoch 0. Epoch mismatches raise :class:`ProducerFencedError`; request versions older than
KIP-588 (InitProducerId before v4, AddPartitionsToTxn, AddOffsetsToTxn and EndTxn before
v2) know only INVALID_PRODUCER_EPOCH, which the handlers will answer instead.

What is not here: Transactions V2 (KIP-890's second part, an epoch bump on every EndTxn)
— ``client_transaction_version`` is carried and stored but always 0; the
``previous_producer_id`` / ``next_producer_id`` fields follow Kafka's Transactions V1
meaning (the producer id before the last move; no next id).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from odradek.storage.errors import ApiError

__all__ = [
    "MAX_PRODUCER_EPOCH",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "VALID_PREVIOUS_STATES",
    "ConcurrentTransactionsError",
    "IllegalTransactionTransitionError",
    "InvalidProducerEpochError",
    "InvalidProducerIdMappingError",
    "InvalidTransactionTimeoutError",
    "InvalidTxnStateError",
    "ProducerFencedError",
    "TopicPartition",
    "TransactionMetadata",
    "TransactionResult",
    "TransactionState",
    "TxnTransitMetadata",
    "check_transaction_timeout",
    "is_epoch_exhausted",
    "prepare_add_partitions",
    "prepare_complete_txn",
    "prepare_end_txn",
    "prepare_init_producer_id",
]

# RecordBatch.NO_PRODUCER_ID / NO_PRODUCER_EPOCH: "none" in every Kafka record and request.
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Producer epochs are int16 (Java's Short.MAX_VALUE).
MAX_PRODUCER_EPOCH = (1 << 15) - 1

TopicPartition = tuple[str, int]


class TransactionState(enum.Enum):
    """A transactional id's state; the value is the name Kafka reports
    (DescribeTransactions, ListTransactions' filter)."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"

    @property
    def id(self) -> int:
        """The byte ``__transaction_state`` stores (``TransactionStatus``)."""
        return _STATE_IDS[self]

    @classmethod
    def from_id(cls, state_id: int) -> TransactionState:
        state = _STATES_BY_ID.get(state_id)
        if state is None:
            raise ValueError(f"unknown transaction state id {state_id}")
        return state

    @classmethod
    def parse(cls, text: str) -> TransactionState | None:
        """The state named ``text`` (exact, as Kafka's ``fromName``), or None."""
        for state in cls:
            if state.value == text:
                return state
        return None

    @property
    def is_expiration_allowed(self) -> bool:
        """Whether an id resting in this state may expire (Kafka's ``isExpirationAllowed``)."""
        return self in _EXPIRABLE


_EM, _ON, _PC, _PA, _CC, _CA, _DE, _PF = (
    TransactionState.EMPTY,
    TransactionState.ONGOING,
    TransactionState.PREPARE_COMMIT,
    TransactionState.PREPARE_ABORT,
    TransactionState.COMPLETE_COMMIT,
    TransactionState.COMPLETE_ABORT,
    TransactionState.DEAD,
    TransactionState.PREPARE_EPOCH_FENCE,
)

_STATE_IDS: dict[TransactionState, int] = {
    _EM: 0, _ON: 1, _PC: 2, _PA: 3, _CC: 4, _CA: 5, _DE: 6, _PF: 7,
}
_STATES_BY_ID = {state_id: state for state, state_id in _STATE_IDS.items()}

#: target state -> the states it may be entered from
VALID_PREVIOUS_STATES: dict[TransactionState, frozenset[TransactionState]] = {
    _EM: frozenset({_EM, _CC, _CA}),
    _ON: frozenset({_ON, _EM, _CC, _CA}),
    _PC: frozenset({_ON}),
    _PA: frozenset({_ON, _PF}),
    _CC: frozenset({_PC}),
    _CA: frozenset({_PA}),
    _DE: frozenset({_EM, _CC, _CA}),
    _PF: frozenset({_ON}),
}

_EXPIRABLE = frozenset({_EM, _CC, _CA})


class TransactionResult(enum.Enum):
    """What EndTxn asks for (Kafka's ``TransactionResult``)."""

    ABORT = False
    COMMIT = True


# -- errors ----------------------------------------------------------------------------


class IllegalTransactionTransitionError(RuntimeError):
    """The coordinator tried a move the rules do not allow (a programming error; Kafka
    throws IllegalStateException and answers UNKNOWN_SERVER_ERROR)."""


class ConcurrentTransactionsError(ApiError):
    """Another move of this id is in progress, or its markers are still being written."""

    kafka_error = "CONCURRENT_TRANSACTIONS"


class InvalidTxnStateError(ApiError):
    """The request does not fit the transaction's state (commit after abort, EndTxn
    with no transaction)."""

    kafka_error = "INVALID_TXN_STATE"


class ProducerFencedError(ApiError):
    """A newer incarnation of the producer has a higher epoch (KIP-588)."""

    kafka_error = "PRODUCER_FENCED"


class InvalidProducerEpochError(ApiError):
    """The epoch is not the current one: what request versions older than KIP-588 answer
    instead of PRODUCER_FENCED; the handlers will convert."""

    kafka_error = "INVALID_PRODUCER_EPOCH"


class InvalidProducerIdMappingError(ApiError):
    """The transactional id is unknown, or held by another producer id."""

    kafka_error = "INVALID_PRODUCER_ID_MAPPING"


class InvalidTransactionTimeoutError(ApiError):
    """``transaction.timeout.ms`` is not positive or above ``transaction.max.timeout.ms``."""

    kafka_error = "INVALID_TRANSACTION_TIMEOUT"


def is_epoch_exhausted(producer_epoch: int) -> bool:
    """No epoch may be handed to a client past ``Short.MAX_VALUE - 1``: the coordinator
    keeps one to fence the last incarnation (Kafka's ``isEpochExhausted``)."""
    return producer_epoch >= MAX_PRODUCER_EPOCH - 1


# -- the metadata ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TxnTransitMetadata:
    """The target of a prepared move: what is written to ``__transaction_state`` and,
    once written, adopted (Kafka's ``TxnTransitMetadata``)."""

    producer_id: int
    previous_producer_id: int
    next_producer_id: int
    producer_epoch: int
    last_producer_epoch: int
    txn_timeout_ms: int
    state: TransactionState
    topic_partitions: frozenset[TopicPartition]
    txn_start_timestamp: int
    txn_last_update_timestamp: int
    client_transaction_version: int = 0


@dataclass(slots=True)
class TransactionMetadata:
    """One transactional id in the coordinator's memory (Kafka's ``TransactionMetadata``).

    Fields change only through :meth:`complete_transition_to`; ``pending_state`` is set
    by the ``prepare_*`` methods and cleared by completing or cancelling the move.
    """

    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    next_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    txn_timeout_ms: int = 60000
    state: TransactionState = TransactionState.EMPTY
    topic_partitions: set[TopicPartition] = field(default_factory=set)
    txn_start_timestamp: int = -1
    txn_last_update_timestamp: int = -1
    client_transaction_version: int = 0
    pending_state: TransactionState | None = None
    # A fence whose epoch bump may not have reached the log: the next fence does not bump
    # again (the bumped epoch was never returned to a client).
    has_failed_epoch_fence: bool = False
    # The pending PrepareAbort is a fence's: the epoch above is already the bumped one.
    pending_epoch_fence: bool = False

    @classmethod
    def new(
        cls, transactional_id: str, producer_id: int, txn_timeout_ms: int, timestamp: int
    ) -> TransactionMetadata:
        """A first-seen id: Empty with no epoch yet, so InitProducerId bumps it to 0."""
        return cls(transactional_id, producer_id, txn_timeout_ms=txn_timeout_ms,
                   txn_last_update_timestamp=timestamp)

    @property
    def pending_transition_in_progress(self) -> bool:
        return self.pending_state is not None

    @property
    def is_producer_epoch_exhausted(self) -> bool:
        return is_epoch_exhausted(self.producer_epoch)

    @property
    def has_pending_transaction(self) -> bool:
        return self.state in (_ON, _PA, _PC)

    def current(self) -> TxnTransitMetadata:
        """The metadata as it is, as a transit (Kafka's ``prepareNoTransit``): no move."""
        return TxnTransitMetadata(
            self.producer_id, self.previous_producer_id, self.next_producer_id,
            self.producer_epoch, self.last_producer_epoch, self.txn_timeout_ms, self.state,
            frozenset(self.topic_partitions), self.txn_start_timestamp,
            self.txn_last_update_timestamp, self.client_transaction_version,
        )

    # -- prepare ------------------------------------------------------------------------

    def prepare_transition_to(
        self,
        state: TransactionState,
        *,
        producer_id: int | None = None,
        producer_epoch: int | None = None,
        last_producer_epoch: int | None = None,
        txn_timeout_ms: int | None = None,
        topic_partitions: Iterable[TopicPartition] | None = None,
        txn_start_timestamp: int | None = None,
        update_timestamp: int | None = None,
    ) -> TxnTransitMetadata:
        """Check the move to ``state`` and record it as pending; an omitted field keeps
        its current value (Kafka's ``prepareTransitionTo``)."""
        if self.pending_state is not None:
            raise IllegalTransactionTransitionError(
                f"transactional id {self.transactional_id!r}: preparing a move to "
                f"{state.value} while {self.pending_state.value} is pending")
        new_producer_id = self.producer_id if producer_id is None else producer_id
        new_epoch = self.producer_epoch if producer_epoch is None else producer_epoch
        if new_producer_id < 0:
            raise IllegalTransactionTransitionError(f"illegal producer id {new_producer_id}")
        # A new id's epoch stays -1 until InitProducerId; only Dead may keep it there.
        if state is not _DE and new_epoch < 0:
            raise IllegalTransactionTransitionError(f"illegal producer epoch {new_epoch}")
        if self.state not in VALID_PREVIOUS_STATES[state]:
            raise IllegalTransactionTransitionError(
                f"transactional id {self.transactional_id!r} cannot move from "
                f"{self.state.value} to {state.value}")
        transit = TxnTransitMetadata(
            producer_id=new_producer_id,
            previous_producer_id=self.producer_id,
            next_producer_id=self.next_producer_id,
            producer_epoch=new_epoch,
            last_producer_epoch=(self.last_producer_epoch if last_producer_epoch is None
                                 else last_producer_epoch),
            txn_timeout_ms=self.txn_timeout_ms if txn_timeout_ms is None else txn_timeout_ms,
            state=state,
            topic_partitions=frozenset(self.topic_partitions if topic_partitions is None
                                       else topic_partitions),
            txn_start_timestamp=(self.txn_start_timestamp if txn_start_timestamp is None
                                 else txn_start_timestamp),
            txn_last_update_timestamp=(self.txn_last_update_timestamp
                                       if update_timestamp is None else update_timestamp),
            client_transaction_version=self.client_transaction_version,
        )
        self.pending_state = state
        return transit

    def prepare_fence_producer_epoch(self) -> TxnTransitMetadata:
        """Bump the epoch to fence the running incarnation before aborting its
        transaction (pending PrepareEpochFence; Kafka's ``prepareFenceProducerEpoch``).
        After a failed fence the epoch is not bumped twice, so a fence that failed at
        Short.MAX_VALUE is tried again at it (Kafka checks the overflow first and leaves
        such an id stuck in Ongoing: every InitProducerId and the timeout's abort fail)."""
        if self.producer_epoch == MAX_PRODUCER_EPOCH and not self.has_failed_epoch_fence:
            raise IllegalTransactionTransitionError(
                "cannot fence a producer at epoch Short.MAX_VALUE: it would overflow")
        bumped = (self.producer_epoch if self.has_failed_epoch_fence
                  else self.producer_epoch + 1)
        return self.prepare_transition_to(
            _PF, producer_epoch=bumped, last_producer_epoch=NO_PRODUCER_EPOCH)

    def prepare_increment_producer_epoch(
        self, txn_timeout_ms: int, expected_producer_epoch: int | None, update_timestamp: int
    ) -> TxnTransitMetadata:
        """InitProducerId on a resting id: bump the epoch (Kafka's
        ``prepareIncrementProducerEpoch``, with KIP-360's expected epoch).

        - no expected epoch (a new incarnation): bump, forget the last epoch;
        - expected == current (or no epoch yet): a producer recovering from an error; bump
          and remember the current one as last;
        - expected == last: a retry of a bump that succeeded; answer the same epoch again;
        - anything else: a fenced producer (:class:`ProducerFencedError`).
        """
        if self.is_producer_epoch_exhausted:
            raise IllegalTransactionTransitionError(
                f"producer id {self.producer_id} has no epochs left: rotate it")
        bumped = self.producer_epoch + 1
        if expected_producer_epoch is None:
            epoch, last = bumped, NO_PRODUCER_EPOCH
        elif (self.producer_epoch == NO_PRODUCER_EPOCH
              or expected_producer_epoch == self.producer_epoch):
            epoch, last = bumped, self.producer_epoch
        elif expected_producer_epoch == self.last_producer_epoch:
            epoch, last = self.producer_epoch, self.last_producer_epoch
        else:
            raise ProducerFencedError(
                f"expected producer epoch {expected_producer_epoch} is neither the current "
                f"epoch {self.producer_epoch} nor the previous {self.last_producer_epoch}")
        return self.prepare_transition_to(
            _EM, producer_epoch=epoch, last_producer_epoch=last, txn_timeout_ms=txn_timeout_ms,
            topic_partitions=(), txn_start_timestamp=-1, update_timestamp=update_timestamp)

    def prepare_producer_id_rotation(
        self, new_producer_id: int, txn_timeout_ms: int, update_timestamp: int,
        record_last_epoch: bool,
    ) -> TxnTransitMetadata:
        """The epoch is exhausted: continue with a new producer id at epoch 0 (Kafka's
        ``prepareProducerIdRotation``). ``record_last_epoch`` keeps the old epoch as last,
        so a KIP-360 retry of this call can be recognised."""
        if self.has_pending_transaction:
            raise IllegalTransactionTransitionError(
                "cannot rotate the producer id while a transaction is still pending")
        return self.prepare_transition_to(
            _EM, producer_id=new_producer_id, producer_epoch=0,
            last_producer_epoch=self.producer_epoch if record_last_epoch else NO_PRODUCER_EPOCH,
            txn_timeout_ms=txn_timeout_ms, topic_partitions=(), txn_start_timestamp=-1,
            update_timestamp=update_timestamp)

    def prepare_add_partitions(
        self, partitions: Iterable[TopicPartition], update_timestamp: int
    ) -> TxnTransitMetadata:
        """Ongoing with the partitions added; the first ones start the transaction's clock
        (Kafka's ``prepareAddPartitions``)."""
        start = update_timestamp if self.state in (_EM, _CA, _CC) else self.txn_start_timestamp
        return self.prepare_transition_to(
            _ON, topic_partitions=self.topic_partitions.union(partitions),
            txn_start_timestamp=start, update_timestamp=update_timestamp)

    def prepare_abort_or_commit(
        self, state: TransactionState, update_timestamp: int
    ) -> TxnTransitMetadata:
        """PrepareCommit or PrepareAbort, same producer and partitions (Kafka's
        ``prepareAbortOrCommit``, Transactions V1)."""
        if state not in (_PC, _PA):
            raise IllegalTransactionTransitionError(f"{state.value} is not a decision")
        return self.prepare_transition_to(state, update_timestamp=update_timestamp)

    def prepare_complete(self, update_timestamp: int) -> TxnTransitMetadata:
        """Every marker is written: CompleteCommit or CompleteAbort, no partitions (Kafka's
        ``prepareComplete``). The decision is in the log, so a failed fence is over."""
        self.has_failed_epoch_fence = False
        state = _CC if self.state is _PC else _CA
        return self.prepare_transition_to(
            state, topic_partitions=(), update_timestamp=update_timestamp)

    def prepare_dead(self) -> TxnTransitMetadata:
        """The id expires: the coordinator writes a tombstone, then forgets it (Kafka's
        ``prepareDead``)."""
        return self.prepare_transition_to(_DE, topic_partitions=())

    # -- complete -----------------------------------------------------------------------

    def complete_transition_to(self, transit: TxnTransitMetadata) -> None:
        """Adopt ``transit`` once its record is in the log (Kafka's
        ``completeTransitionTo``). It must be the pending move, and:

        - Empty (InitProducerId): the epoch is the same, bumped by one, or 0 with a new
          producer id; no partitions, no start time;
        - Ongoing (AddPartitions): same producer and epoch, partitions only grow, same
          timeout;
        - PrepareCommit / PrepareAbort (EndTxn): same producer, epoch, partitions,
          timeout and start time;
        - CompleteCommit / CompleteAbort (markers written): same producer, epoch and
          timeout, a start time;
        - PrepareEpochFence and Dead are never completed (the fence becomes an abort, the
          dead id is removed).
        """
        to_state = self.pending_state
        if to_state is None:
            raise IllegalTransactionTransitionError(
                f"transactional id {self.transactional_id!r} completing a move that was "
                "never prepared")
        if to_state is not transit.state:
            self._refuse(transit)
        same_producer = (transit.producer_id == self.producer_id
                         and transit.producer_epoch == self.producer_epoch)
        if to_state is _EM:
            bumped = (transit.producer_epoch == self.producer_epoch + 1
                      or (transit.producer_epoch == 0 and transit.producer_id != self.producer_id))
            if ((transit.producer_epoch != self.producer_epoch and not bumped)
                    or transit.topic_partitions or transit.txn_start_timestamp != -1):
                self._refuse(transit)
        elif to_state is _ON:
            if (not same_producer or not self.topic_partitions <= transit.topic_partitions
                    or transit.txn_timeout_ms != self.txn_timeout_ms):
                self._refuse(transit)
        elif to_state in (_PC, _PA):
            if (not same_producer or set(transit.topic_partitions) != self.topic_partitions
                    or transit.txn_timeout_ms != self.txn_timeout_ms
                    or transit.txn_start_timestamp != self.txn_start_timestamp):
                self._refuse(transit)
        elif to_state in (_CC, _CA):
            if (not same_producer or transit.txn_timeout_ms != self.txn_timeout_ms
                    or transit.txn_start_timestamp == -1):
                self._refuse(transit)
        elif to_state is _PF:
            self._refuse(transit)
        else:
            raise IllegalTransactionTransitionError(
                f"transactional id {self.transactional_id!r} cannot complete a move to Dead: "
                "an expired id is removed, not stored")
        self.producer_id = transit.producer_id
        self.previous_producer_id = transit.previous_producer_id
        self.next_producer_id = transit.next_producer_id
        self.producer_epoch = transit.producer_epoch
        self.last_producer_epoch = transit.last_producer_epoch
        self.txn_timeout_ms = transit.txn_timeout_ms
        self.topic_partitions = set(transit.topic_partitions)
        self.txn_start_timestamp = transit.txn_start_timestamp
        self.txn_last_update_timestamp = transit.txn_last_update_timestamp
        self.client_transaction_version = transit.client_transaction_version
        self.pending_state = None
        self.pending_epoch_fence = False
        self.state = to_state

    def cancel_pending_transition(self) -> None:
        """The record of the pending move could not be written: forget the move. A
        failed fence (its abort carried the bumped epoch, now kept in memory though maybe
        not in the log) is remembered so the next fence does not bump the epoch again."""
        if self.pending_state is _PF or self.pending_epoch_fence:
            self.has_failed_epoch_fence = True
        self.pending_state = None
        self.pending_epoch_fence = False

    def _refuse(self, transit: TxnTransitMetadata) -> None:
        raise IllegalTransactionTransitionError(
            f"transactional id {self.transactional_id!r} in {self.state.value} cannot adopt "
            f"{transit}: unexpected metadata")


# -- the coordinator's rules -----------------------------------------------------------


def check_transaction_timeout(txn_timeout_ms: int, max_timeout_ms: int) -> None:
    """InitProducerId's ``transaction.timeout.ms`` must be positive and at most the
    broker's ``transaction.max.timeout.ms`` (Kafka's ``validateTransactionTimeoutMs``)."""
    if txn_timeout_ms <= 0 or txn_timeout_ms > max_timeout_ms:
        raise InvalidTransactionTimeoutError(
            f"transaction timeout {txn_timeout_ms} ms is not in 1..{max_timeout_ms} ms "
            "(transaction.max.timeout.ms)")


def prepare_init_producer_id(
    metadata: TransactionMetadata,
    txn_timeout_ms: int,
    update_timestamp: int,
    allocate_producer_id: Callable[[], int],
    expected: tuple[int, int] | None = None,
) -> TxnTransitMetadata:
    """InitProducerId for a known transactional id (Kafka's
    ``prepareInitProducerIdTransit``); ``expected`` is KIP-360's (producer id, epoch).

    Returns the transit to write (its producer id and epoch are the answer once it is
    in the log). When it is a PrepareEpochFence (an Ongoing transaction
    left by the previous incarnation) the coordinator aborts that transaction with
    :func:`prepare_end_txn` (``from_client=False``) and answers CONCURRENT_TRANSACTIONS,
    so the client retries and gets a second bump once the abort completed.
    """
    if metadata.pending_transition_in_progress:
        raise ConcurrentTransactionsError(
            f"transactional id {metadata.transactional_id!r} is changing state")
    if expected is not None and not _is_valid_producer_id(metadata, *expected):
        raise ProducerFencedError(
            f"producer id {expected[0]} epoch {expected[1]} is not the current producer "
            f"{metadata.producer_id} of {metadata.transactional_id!r}")
    state = metadata.state
    if state in (_PC, _PA):
        raise ConcurrentTransactionsError(
            f"transactional id {metadata.transactional_id!r} is completing a transaction")
    if state is _ON:
        return metadata.prepare_fence_producer_epoch()
    if state in (_EM, _CC, _CA):
        if metadata.is_producer_epoch_exhausted and (
                expected is None or expected[1] == metadata.producer_epoch):
            return metadata.prepare_producer_id_rotation(
                allocate_producer_id(), txn_timeout_ms, update_timestamp,
                record_last_epoch=expected is not None)
        return metadata.prepare_increment_producer_epoch(
            txn_timeout_ms, None if expected is None else expected[1], update_timestamp)
    raise IllegalTransactionTransitionError(
        f"InitProducerId found {metadata.transactional_id!r} in {state.value}")


def _check_producer(metadata: TransactionMetadata, producer_id: int, producer_epoch: int,
                    *, exact_epoch: bool) -> None:
    """Raise INVALID_PRODUCER_ID_MAPPING for a producer id not the id's, PRODUCER_FENCED
    for an epoch other than the current one (``exact_epoch``) or older than it."""
    if metadata.producer_id != producer_id:
        raise InvalidProducerIdMappingError(
            f"transactional id {metadata.transactional_id!r} belongs to producer id "
            f"{metadata.producer_id}, not {producer_id}")
    if (producer_epoch != metadata.producer_epoch if exact_epoch
            else producer_epoch < metadata.producer_epoch):
        raise ProducerFencedError(
            f"producer epoch {producer_epoch} is not the current {metadata.producer_epoch}")


def _is_valid_producer_id(metadata: TransactionMetadata, producer_id: int, epoch: int) -> bool:
    """KIP-360: the id just created (no epoch yet: a producer recovering from
    UNKNOWN_PRODUCER_ID), the current id (its epoch is checked by the bump), or the
    previous one with an exhausted epoch (a retry of a rotation)."""
    return (metadata.producer_epoch == NO_PRODUCER_EPOCH
            or producer_id == metadata.producer_id
            or (producer_id == metadata.previous_producer_id and is_epoch_exhausted(epoch)))


def prepare_add_partitions(
    metadata: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    partitions: Iterable[TopicPartition],
    update_timestamp: int,
) -> TxnTransitMetadata | None:
    """AddPartitionsToTxn / AddOffsetsToTxn (Kafka's
    ``handleAddPartitionsToTransaction``): the transit to write, or None when every
    partition is already in the Ongoing transaction (answered at once, nothing written)."""
    wanted = frozenset(partitions)
    _check_producer(metadata, producer_id, producer_epoch, exact_epoch=True)
    if metadata.pending_transition_in_progress or metadata.state in (_PC, _PA):
        raise ConcurrentTransactionsError(
            f"transactional id {metadata.transactional_id!r} is changing state")
    if metadata.state is _ON and wanted <= metadata.topic_partitions:
        return None
    return metadata.prepare_add_partitions(wanted, update_timestamp)


def prepare_end_txn(
    metadata: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    update_timestamp: int,
    from_client: bool = True,
) -> TxnTransitMetadata | None:
    """EndTxn, or the coordinator's own abort (a fence, a timeout: ``from_client`` False,
    which may carry a higher epoch) — Kafka's ``endTransaction``.

    Returns the PrepareCommit / PrepareAbort transit to write, or None when the request
    is a retry of a transaction already completed the same way (answered NONE). A retry
    while its markers are still being written gets CONCURRENT_TRANSACTIONS; the opposite
    decision, or no transaction at all, INVALID_TXN_STATE.
    """
    # Clients must send the current epoch; the coordinator's own abort may be ahead.
    _check_producer(metadata, producer_id, producer_epoch, exact_epoch=from_client)
    # Only the coordinator's own abort may take over a pending fence. (Kafka lets a
    # client's EndTxn through here too: its commit then fails the pending-state check and
    # its abort would be written with the old, unfenced epoch; we answer it as concurrent.)
    if metadata.pending_state is not None and (from_client or metadata.pending_state is not _PF):
        raise ConcurrentTransactionsError(
            f"transactional id {metadata.transactional_id!r} is changing state")
    commit = result is TransactionResult.COMMIT
    state = metadata.state
    if state is _ON:
        target = _PC if commit else _PA
        if target is _PA and metadata.pending_state is _PF:
            # The fence's bumped epoch goes into the abort record itself (and stays in
            # memory even if that write fails, as in Kafka).
            metadata.pending_state = None
            metadata.producer_epoch = producer_epoch
            metadata.last_producer_epoch = NO_PRODUCER_EPOCH
            transit = metadata.prepare_abort_or_commit(target, update_timestamp)
            metadata.pending_epoch_fence = True
            return transit
        return metadata.prepare_abort_or_commit(target, update_timestamp)
    if (state is _CC and commit) or (state is _CA and not commit):
        return None
    if (state is _PC and commit) or (state is _PA and not commit):
        raise ConcurrentTransactionsError(
            f"transactional id {metadata.transactional_id!r} is still writing its markers")
    if state in (_EM, _CC, _CA, _PC, _PA):
        raise InvalidTxnStateError(
            f"transactional id {metadata.transactional_id!r} cannot "
            f"{'commit' if commit else 'abort'} in state {state.value}")
    raise IllegalTransactionTransitionError(
        f"EndTxn found {metadata.transactional_id!r} in {state.value}")


def prepare_complete_txn(
    metadata: TransactionMetadata,
    producer_id: int,
    producer_epoch: int,
    result: TransactionResult,
    update_timestamp: int,
) -> TxnTransitMetadata:
    """The PrepareCommit / PrepareAbort record is in the log: check that nothing moved
    meanwhile and prepare the completion the markers lead to (the second half of Kafka's
    ``endTransaction``). The client is answered NONE when this returns; the coordinator
    writes the markers, then the transit."""
    _check_producer(metadata, producer_id, producer_epoch, exact_epoch=True)
    if metadata.pending_transition_in_progress:
        raise ConcurrentTransactionsError(
            f"transactional id {metadata.transactional_id!r} is changing state")
    expected = _PC if result is TransactionResult.COMMIT else _PA
    if metadata.state is expected:
        return metadata.prepare_complete(update_timestamp)
    if metadata.state in (_EM, _ON, _CC, _CA, _PC, _PA):
        raise InvalidTxnStateError(
            f"transactional id {metadata.transactional_id!r} is {metadata.state.value}, "
            f"not {expected.value}")
    raise IllegalTransactionTransitionError(
        f"EndTxn found {metadata.transactional_id!r} in {metadata.state.value}")
