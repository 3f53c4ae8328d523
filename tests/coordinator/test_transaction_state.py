"""The transaction state table and TransactionMetadata's moves
(odradek.coordinator.transaction_state): one test per rule of Kafka's TransactionMetadata
and TransactionCoordinator."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from kio.schema.errors import ErrorCode

from odradek.coordinator.transaction_records import TransactionLogValue, decode_value
from odradek.coordinator.transaction_state import (
    MAX_PRODUCER_EPOCH,
    NO_PRODUCER_EPOCH,
    VALID_PREVIOUS_STATES,
    ConcurrentTransactionsError,
    IllegalTransactionTransitionError,
    InvalidProducerEpochError,
    InvalidProducerIdMappingError,
    InvalidTransactionTimeoutError,
    InvalidTxnStateError,
    ProducerFencedError,
    TransactionMetadata,
    TransactionResult,
    TransactionState,
    TxnTransitMetadata,
    check_transaction_timeout,
    is_epoch_exhausted,
    prepare_add_partitions,
    prepare_complete_txn,
    prepare_end_txn,
    prepare_init_producer_id,
)
from odradek.storage.errors import ApiError

EM, ON, PC, PA, CC, CA, DE, PF = (
    TransactionState.EMPTY, TransactionState.ONGOING, TransactionState.PREPARE_COMMIT,
    TransactionState.PREPARE_ABORT, TransactionState.COMPLETE_COMMIT,
    TransactionState.COMPLETE_ABORT, TransactionState.DEAD, TransactionState.PREPARE_EPOCH_FENCE,
)
COMMIT, ABORT = TransactionResult.COMMIT, TransactionResult.ABORT

# (from, to) pairs Kafka's validPreviousStates allows
ALLOWED = {
    (EM, EM), (CC, EM), (CA, EM),
    (ON, ON), (EM, ON), (CC, ON), (CA, ON),
    (ON, PC),
    (ON, PA), (PF, PA),
    (PC, CC),
    (PA, CA),
    (EM, DE), (CA, DE), (CC, DE),
    (ON, PF),
}

PID = 1000
NEW_PID = 2000
T0 = 1_700_000_000_000
TP = ("orders", 0)
TP2 = ("orders", 1)


def meta(
    state: TransactionState = EM, epoch: int = 5, last_epoch: int = NO_PRODUCER_EPOCH,
    partitions: frozenset[tuple[str, int]] = frozenset(), start: int = -1,
) -> TransactionMetadata:
    if state in (ON, PC, PA) and not partitions:
        partitions = frozenset({TP})
    if state in (ON, PC, PA, CC, CA) and start == -1:
        start = T0
    return TransactionMetadata(
        "txn-1", PID, producer_epoch=epoch, last_producer_epoch=last_epoch,
        txn_timeout_ms=60000, state=state, topic_partitions=set(partitions),
        txn_start_timestamp=start, txn_last_update_timestamp=T0,
    )


def no_new_id() -> int:
    raise AssertionError("no new producer id expected")


def prepare_and_complete(m: TransactionMetadata, transit: TxnTransitMetadata) -> None:
    m.complete_transition_to(transit)
    assert m.pending_state is None


# -- the table -------------------------------------------------------------------------


@pytest.mark.parametrize(("current", "target"), list(itertools.product(TransactionState, repeat=2)))
def test_transition_table_matches_kafka(
    current: TransactionState, target: TransactionState
) -> None:
    m = meta(current)
    if (current, target) in ALLOWED:
        transit = m.prepare_transition_to(target)
        assert transit.state is target and m.pending_state is target
    else:
        with pytest.raises(IllegalTransactionTransitionError):
            m.prepare_transition_to(target)
        assert m.pending_state is None


def test_every_state_is_in_the_table() -> None:
    assert set(VALID_PREVIOUS_STATES) == set(TransactionState)


def test_state_ids_and_names_are_kafkas() -> None:
    assert [(s.id, s.value) for s in TransactionState] == [
        (0, "Empty"), (1, "Ongoing"), (2, "PrepareCommit"), (3, "PrepareAbort"),
        (4, "CompleteCommit"), (5, "CompleteAbort"), (6, "Dead"), (7, "PrepareEpochFence"),
    ]
    assert all(TransactionState.from_id(s.id) is s for s in TransactionState)
    assert TransactionState.parse("PrepareCommit") is PC
    assert TransactionState.parse("nope") is None
    with pytest.raises(ValueError, match="unknown transaction state id 8"):
        TransactionState.from_id(8)


def test_only_resting_states_may_expire() -> None:
    assert {s for s in TransactionState if s.is_expiration_allowed} == {EM, CC, CA}


def test_epoch_exhaustion_keeps_one_epoch_for_fencing() -> None:
    assert not is_epoch_exhausted(MAX_PRODUCER_EPOCH - 2)
    assert is_epoch_exhausted(MAX_PRODUCER_EPOCH - 1)
    assert is_epoch_exhausted(MAX_PRODUCER_EPOCH)


def test_a_second_prepare_while_one_is_pending_is_refused() -> None:
    m = meta(EM)
    m.prepare_add_partitions({TP}, T0 + 1)
    with pytest.raises(IllegalTransactionTransitionError, match="pending"):
        m.prepare_add_partitions({TP2}, T0 + 2)


def test_prepare_refuses_a_negative_producer_id_or_epoch() -> None:
    with pytest.raises(IllegalTransactionTransitionError, match="producer id"):
        meta(EM).prepare_transition_to(EM, producer_id=-1)
    with pytest.raises(IllegalTransactionTransitionError, match="epoch"):
        meta(EM).prepare_transition_to(EM, producer_epoch=-1)


# -- InitProducerId --------------------------------------------------------------------


def test_init_producer_id_on_a_new_id_starts_at_epoch_zero() -> None:
    m = TransactionMetadata.new("txn-1", PID, 30000, T0)
    assert (m.state, m.producer_epoch) == (EM, NO_PRODUCER_EPOCH)
    transit = prepare_init_producer_id(m, 30000, T0 + 1, no_new_id)
    assert (transit.producer_id, transit.producer_epoch, transit.last_producer_epoch) == (
        PID, 0, NO_PRODUCER_EPOCH)
    prepare_and_complete(m, transit)
    assert (m.state, m.producer_epoch, m.txn_last_update_timestamp) == (EM, 0, T0 + 1)


@pytest.mark.parametrize("state", [EM, CC, CA])
def test_init_producer_id_on_a_resting_id_bumps_the_epoch(state: TransactionState) -> None:
    m = meta(state, epoch=5, last_epoch=4)
    transit = prepare_init_producer_id(m, 45000, T0 + 1, no_new_id)
    assert transit.state is EM
    assert (transit.producer_id, transit.producer_epoch) == (PID, 6)
    assert transit.last_producer_epoch == NO_PRODUCER_EPOCH  # a new incarnation
    assert transit.txn_timeout_ms == 45000
    assert transit.topic_partitions == frozenset() and transit.txn_start_timestamp == -1
    prepare_and_complete(m, transit)
    assert (m.state, m.producer_epoch, m.txn_timeout_ms) == (EM, 6, 45000)


def test_init_producer_id_with_an_ongoing_transaction_fences_then_aborts() -> None:
    m = meta(ON, epoch=5, partitions=frozenset({TP, TP2}))
    fence = prepare_init_producer_id(m, 60000, T0 + 1, no_new_id)
    assert fence.state is PF and m.pending_state is PF
    assert (fence.producer_epoch, fence.last_producer_epoch) == (6, NO_PRODUCER_EPOCH)
    # the coordinator aborts with the fenced epoch; the client gets CONCURRENT_TRANSACTIONS
    abort = prepare_end_txn(m, PID, fence.producer_epoch, ABORT, T0 + 2, from_client=False)
    assert abort is not None and abort.state is PA
    assert (abort.producer_epoch, abort.last_producer_epoch) == (6, NO_PRODUCER_EPOCH)
    assert abort.topic_partitions == {TP, TP2}
    prepare_and_complete(m, abort)
    prepare_and_complete(m, m.prepare_complete(T0 + 3))
    assert (m.state, m.producer_epoch, m.topic_partitions) == (CA, 6, set())
    # the client's retry bumps a second time
    retry = prepare_init_producer_id(m, 60000, T0 + 4, no_new_id)
    assert (retry.state, retry.producer_epoch) == (EM, 7)


def test_the_old_incarnation_is_fenced_after_the_fence() -> None:
    m = meta(ON, epoch=5)
    fence = prepare_init_producer_id(m, 60000, T0 + 1, no_new_id)
    abort = prepare_end_txn(m, PID, fence.producer_epoch, ABORT, T0 + 2, from_client=False)
    assert abort is not None
    prepare_and_complete(m, abort)
    with pytest.raises(ProducerFencedError):
        prepare_end_txn(m, PID, 5, COMMIT, T0 + 3)
    with pytest.raises(ProducerFencedError):
        prepare_add_partitions(m, PID, 5, {TP}, T0 + 3)


def test_a_client_end_txn_during_a_fence_is_concurrent() -> None:
    m = meta(ON, epoch=5)
    prepare_init_producer_id(m, 60000, T0 + 1, no_new_id)
    with pytest.raises(ConcurrentTransactionsError):
        prepare_end_txn(m, PID, 5, COMMIT, T0 + 2)


def test_a_failed_fence_does_not_bump_twice() -> None:
    m = meta(ON, epoch=5)
    fence = m.prepare_fence_producer_epoch()
    assert fence.producer_epoch == 6
    m.cancel_pending_transition()  # the write failed
    assert m.has_failed_epoch_fence and m.pending_state is None
    assert m.prepare_fence_producer_epoch().producer_epoch == 5
    m.pending_state = None
    m.state = PA
    m.prepare_complete(T0 + 1)
    assert not m.has_failed_epoch_fence


def test_a_failed_write_of_the_fences_abort_does_not_bump_twice() -> None:
    m = meta(ON, epoch=5)
    fence = prepare_init_producer_id(m, 60000, T0 + 1, no_new_id)
    abort = prepare_end_txn(m, PID, fence.producer_epoch, ABORT, T0 + 2, from_client=False)
    assert abort is not None and abort.producer_epoch == 6
    m.cancel_pending_transition()  # the abort record was not written
    assert m.has_failed_epoch_fence and m.producer_epoch == 6 and m.state is ON
    again = prepare_init_producer_id(m, 60000, T0 + 3, no_new_id)
    assert again.state is PF and again.producer_epoch == 6
    abort = prepare_end_txn(m, PID, again.producer_epoch, ABORT, T0 + 4, from_client=False)
    assert abort is not None
    prepare_and_complete(m, abort)
    assert not m.pending_epoch_fence
    prepare_and_complete(m, m.prepare_complete(T0 + 5))
    assert not m.has_failed_epoch_fence and (m.state, m.producer_epoch) == (CA, 6)


def test_a_fence_cannot_overflow_the_epoch() -> None:
    with pytest.raises(IllegalTransactionTransitionError, match="overflow"):
        meta(ON, epoch=MAX_PRODUCER_EPOCH).prepare_fence_producer_epoch()


@pytest.mark.parametrize("state", [PC, PA])
def test_init_producer_id_while_markers_are_written_is_concurrent(state: TransactionState) -> None:
    with pytest.raises(ConcurrentTransactionsError):
        prepare_init_producer_id(meta(state), 60000, T0 + 1, no_new_id)


def test_init_producer_id_during_another_move_is_concurrent() -> None:
    m = meta(EM)
    m.prepare_add_partitions({TP}, T0 + 1)
    with pytest.raises(ConcurrentTransactionsError):
        prepare_init_producer_id(m, 60000, T0 + 2, no_new_id)


def test_kip360_bump_with_the_current_epoch_remembers_it() -> None:
    m = meta(EM, epoch=5)
    transit = prepare_init_producer_id(m, 60000, T0 + 1, no_new_id, expected=(PID, 5))
    assert (transit.producer_epoch, transit.last_producer_epoch) == (6, 5)
    prepare_and_complete(m, transit)
    # the response was lost: the producer retries with its old epoch, same answer
    retry = prepare_init_producer_id(m, 60000, T0 + 2, no_new_id, expected=(PID, 5))
    assert (retry.producer_epoch, retry.last_producer_epoch) == (6, 5)


def test_kip360_bump_with_a_stale_epoch_is_fenced() -> None:
    m = meta(EM, epoch=7, last_epoch=6)
    with pytest.raises(ProducerFencedError):
        prepare_init_producer_id(m, 60000, T0 + 1, no_new_id, expected=(PID, 3))
    assert m.pending_state is None


def test_kip360_bump_with_another_producer_id_is_fenced() -> None:
    m = meta(EM, epoch=7)
    with pytest.raises(ProducerFencedError):
        prepare_init_producer_id(m, 60000, T0 + 1, no_new_id, expected=(PID + 1, 7))


def test_kip360_on_an_id_without_an_epoch_accepts_any_producer() -> None:
    m = TransactionMetadata.new("txn-1", PID, 60000, T0)
    transit = prepare_init_producer_id(m, 60000, T0 + 1, no_new_id, expected=(PID + 9, 3))
    assert (transit.producer_id, transit.producer_epoch) == (PID, 0)


def test_epoch_exhaustion_rotates_to_a_new_producer_id() -> None:
    m = meta(CC, epoch=MAX_PRODUCER_EPOCH - 1)
    transit = prepare_init_producer_id(m, 60000, T0 + 1, lambda: NEW_PID)
    assert (transit.producer_id, transit.producer_epoch) == (NEW_PID, 0)
    assert transit.last_producer_epoch == NO_PRODUCER_EPOCH
    assert transit.previous_producer_id == PID
    prepare_and_complete(m, transit)
    assert (m.producer_id, m.producer_epoch, m.previous_producer_id) == (NEW_PID, 0, PID)


def test_epoch_exhaustion_with_kip360_keeps_the_last_epoch_for_retries() -> None:
    m = meta(EM, epoch=MAX_PRODUCER_EPOCH - 1)
    expected = (PID, MAX_PRODUCER_EPOCH - 1)
    transit = prepare_init_producer_id(m, 60000, T0 + 1, lambda: NEW_PID, expected=expected)
    assert (transit.producer_id, transit.producer_epoch) == (NEW_PID, 0)
    assert transit.last_producer_epoch == MAX_PRODUCER_EPOCH - 1
    prepare_and_complete(m, transit)
    # a retry with the old id and exhausted epoch gets the same new id and epoch
    retry = prepare_init_producer_id(m, 60000, T0 + 2, no_new_id, expected=expected)
    assert (retry.producer_id, retry.producer_epoch) == (NEW_PID, 0)


def test_a_fence_may_use_the_last_epoch_and_the_retry_rotates() -> None:
    m = meta(ON, epoch=MAX_PRODUCER_EPOCH - 1)  # the last epoch a client may hold
    fence = prepare_init_producer_id(m, 60000, T0 + 1, no_new_id)
    assert fence.producer_epoch == MAX_PRODUCER_EPOCH
    abort = prepare_end_txn(m, PID, fence.producer_epoch, ABORT, T0 + 2, from_client=False)
    assert abort is not None
    prepare_and_complete(m, abort)
    prepare_and_complete(m, m.prepare_complete(T0 + 3))
    retry = prepare_init_producer_id(m, 60000, T0 + 4, lambda: NEW_PID)
    assert (retry.producer_id, retry.producer_epoch) == (NEW_PID, 0)


def test_an_exhausted_epoch_is_never_bumped() -> None:
    with pytest.raises(IllegalTransactionTransitionError, match="no epochs left"):
        meta(EM, epoch=MAX_PRODUCER_EPOCH - 1).prepare_increment_producer_epoch(
            60000, None, T0)


def test_rotation_is_refused_with_a_pending_transaction() -> None:
    with pytest.raises(IllegalTransactionTransitionError, match="rotate"):
        meta(ON).prepare_producer_id_rotation(NEW_PID, 60000, T0, record_last_epoch=False)


# -- AddPartitionsToTxn ----------------------------------------------------------------


@pytest.mark.parametrize("state", [EM, CC, CA])
def test_add_partitions_starts_a_transaction(state: TransactionState) -> None:
    m = meta(state)
    transit = prepare_add_partitions(m, PID, 5, {TP}, T0 + 10)
    assert transit is not None and transit.state is ON
    assert transit.topic_partitions == {TP} and transit.txn_start_timestamp == T0 + 10
    prepare_and_complete(m, transit)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (ON, {TP}, T0 + 10)


def test_add_partitions_to_an_ongoing_transaction_keeps_its_start() -> None:
    m = meta(ON, partitions=frozenset({TP}), start=T0)
    transit = prepare_add_partitions(m, PID, 5, {TP2}, T0 + 10)
    assert transit is not None
    assert transit.topic_partitions == {TP, TP2} and transit.txn_start_timestamp == T0
    assert transit.txn_last_update_timestamp == T0 + 10
    prepare_and_complete(m, transit)
    assert m.topic_partitions == {TP, TP2}


def test_add_partitions_already_in_the_transaction_writes_nothing() -> None:
    m = meta(ON, partitions=frozenset({TP, TP2}))
    assert prepare_add_partitions(m, PID, 5, {TP}, T0 + 10) is None
    assert m.pending_state is None


def test_add_partitions_with_another_producer_id_is_invalid_mapping() -> None:
    with pytest.raises(InvalidProducerIdMappingError):
        prepare_add_partitions(meta(ON), PID + 1, 5, {TP2}, T0)


def test_add_partitions_with_an_old_epoch_is_fenced() -> None:
    with pytest.raises(ProducerFencedError):
        prepare_add_partitions(meta(ON, epoch=5), PID, 4, {TP2}, T0)


@pytest.mark.parametrize("state", [PC, PA])
def test_add_partitions_while_markers_are_written_is_concurrent(state: TransactionState) -> None:
    with pytest.raises(ConcurrentTransactionsError):
        prepare_add_partitions(meta(state), PID, 5, {TP2}, T0)


def test_add_partitions_during_another_move_is_concurrent() -> None:
    m = meta(ON)
    prepare_end_txn(m, PID, 5, COMMIT, T0 + 1)
    with pytest.raises(ConcurrentTransactionsError):
        prepare_add_partitions(m, PID, 5, {TP2}, T0 + 2)


# -- EndTxn ----------------------------------------------------------------------------


@pytest.mark.parametrize(("result", "prepared", "completed"), [
    (COMMIT, PC, CC), (ABORT, PA, CA),
])
def test_end_txn_from_ongoing(
    result: TransactionResult, prepared: TransactionState, completed: TransactionState,
) -> None:
    m = meta(ON, partitions=frozenset({TP, TP2}), start=T0)
    transit = prepare_end_txn(m, PID, 5, result, T0 + 20)
    assert transit is not None and transit.state is prepared
    assert (transit.producer_id, transit.producer_epoch) == (PID, 5)
    assert transit.topic_partitions == {TP, TP2} and transit.txn_start_timestamp == T0
    prepare_and_complete(m, transit)
    assert m.state is prepared and m.topic_partitions == {TP, TP2}
    done = m.prepare_complete(T0 + 30)
    assert done.state is completed and done.topic_partitions == frozenset()
    prepare_and_complete(m, done)
    assert (m.state, m.topic_partitions, m.txn_start_timestamp) == (completed, set(), T0)


@pytest.mark.parametrize(("state", "result", "answer"), [
    (CC, COMMIT, None),
    (CA, ABORT, None),
    (PC, COMMIT, ConcurrentTransactionsError),
    (PA, ABORT, ConcurrentTransactionsError),
    (CC, ABORT, InvalidTxnStateError),
    (CA, COMMIT, InvalidTxnStateError),
    (PC, ABORT, InvalidTxnStateError),
    (PA, COMMIT, InvalidTxnStateError),
    (EM, COMMIT, InvalidTxnStateError),
    (EM, ABORT, InvalidTxnStateError),
])
def test_end_txn_retries_and_mismatches(
    state: TransactionState, result: TransactionResult, answer: type[Exception] | None,
) -> None:
    m = meta(state)
    if answer is None:
        assert prepare_end_txn(m, PID, 5, result, T0 + 1) is None
    else:
        with pytest.raises(answer):
            prepare_end_txn(m, PID, 5, result, T0 + 1)
    assert m.pending_state is None


def test_end_txn_with_another_producer_id_is_invalid_mapping() -> None:
    with pytest.raises(InvalidProducerIdMappingError):
        prepare_end_txn(meta(ON), PID + 1, 5, COMMIT, T0)


@pytest.mark.parametrize("epoch", [4, 6])
def test_end_txn_from_a_client_needs_the_exact_epoch(epoch: int) -> None:
    with pytest.raises(ProducerFencedError):
        prepare_end_txn(meta(ON, epoch=5), PID, epoch, COMMIT, T0)


def test_the_coordinators_abort_may_not_carry_an_older_epoch() -> None:
    with pytest.raises(ProducerFencedError):
        prepare_end_txn(meta(ON, epoch=5), PID, 4, ABORT, T0, from_client=False)


def test_end_txn_during_another_move_is_concurrent() -> None:
    m = meta(ON)
    prepare_add_partitions(m, PID, 5, {TP2}, T0 + 1)
    with pytest.raises(ConcurrentTransactionsError):
        prepare_end_txn(m, PID, 5, COMMIT, T0 + 2)


# -- Dead, completion checks, cancel ---------------------------------------------------


@pytest.mark.parametrize("state", [EM, CC, CA])
def test_a_resting_id_may_expire(state: TransactionState) -> None:
    transit = meta(state).prepare_dead()
    assert transit.state is DE and transit.topic_partitions == frozenset()


def test_a_never_initialised_id_may_expire_without_an_epoch() -> None:
    m = TransactionMetadata.new("txn-1", PID, 60000, T0)
    assert m.prepare_dead().producer_epoch == NO_PRODUCER_EPOCH


def test_an_ongoing_transaction_may_not_expire() -> None:
    with pytest.raises(IllegalTransactionTransitionError):
        meta(ON).prepare_dead()


def test_dead_is_never_completed() -> None:
    m = meta(EM)
    with pytest.raises(IllegalTransactionTransitionError, match="Dead"):
        m.complete_transition_to(m.prepare_dead())


def test_a_fence_is_never_completed() -> None:
    m = meta(ON)
    with pytest.raises(IllegalTransactionTransitionError):
        m.complete_transition_to(m.prepare_fence_producer_epoch())


def test_complete_without_a_prepared_move_is_refused() -> None:
    m = meta(EM)
    with pytest.raises(IllegalTransactionTransitionError, match="never prepared"):
        m.complete_transition_to(m.current())


def test_complete_with_another_target_is_refused() -> None:
    m = meta(EM)
    transit = m.prepare_add_partitions({TP}, T0 + 1)
    with pytest.raises(IllegalTransactionTransitionError):
        m.complete_transition_to(TxnTransitMetadata(
            PID, PID, -1, 5, -1, 60000, EM, frozenset(), -1, T0 + 1))
    assert m.pending_state is ON and transit.state is ON


def test_complete_refuses_an_epoch_jump() -> None:
    m = meta(EM, epoch=5)
    m.prepare_transition_to(EM, producer_epoch=7)
    with pytest.raises(IllegalTransactionTransitionError, match="unexpected metadata"):
        m.complete_transition_to(TxnTransitMetadata(
            PID, PID, -1, 7, -1, 60000, EM, frozenset(), -1, T0 + 1))


def test_complete_refuses_partitions_that_shrink_while_ongoing() -> None:
    m = meta(ON, partitions=frozenset({TP, TP2}))
    m.prepare_add_partitions({TP}, T0 + 1)
    with pytest.raises(IllegalTransactionTransitionError):
        m.complete_transition_to(TxnTransitMetadata(
            PID, PID, -1, 5, -1, 60000, ON, frozenset({TP}), T0, T0 + 1))


def test_complete_refuses_a_decision_with_other_partitions() -> None:
    m = meta(ON, partitions=frozenset({TP}))
    m.prepare_abort_or_commit(PC, T0 + 1)
    with pytest.raises(IllegalTransactionTransitionError):
        m.complete_transition_to(TxnTransitMetadata(
            PID, PID, -1, 5, -1, 60000, PC, frozenset({TP, TP2}), T0, T0 + 1))


def test_complete_refuses_completion_without_a_start_time() -> None:
    m = meta(PC)
    m.prepare_complete(T0 + 1)
    with pytest.raises(IllegalTransactionTransitionError):
        m.complete_transition_to(TxnTransitMetadata(
            PID, PID, -1, 5, -1, 60000, CC, frozenset(), -1, T0 + 1))


def test_prepare_abort_or_commit_takes_only_a_decision() -> None:
    with pytest.raises(IllegalTransactionTransitionError):
        meta(ON).prepare_abort_or_commit(CC, T0)


def test_cancel_forgets_the_pending_move() -> None:
    m = meta(EM)
    m.prepare_add_partitions({TP}, T0 + 1)
    m.cancel_pending_transition()
    assert m.pending_state is None and m.state is EM and m.topic_partitions == set()
    assert not m.has_failed_epoch_fence


# -- after the decision is in the log --------------------------------------------------


@pytest.mark.parametrize(("result", "prepared", "completed"), [
    (COMMIT, PC, CC), (ABORT, PA, CA),
])
def test_complete_txn_after_the_decision(
    result: TransactionResult, prepared: TransactionState, completed: TransactionState,
) -> None:
    m = meta(prepared)
    transit = prepare_complete_txn(m, PID, 5, result, T0 + 40)
    assert transit.state is completed and transit.txn_last_update_timestamp == T0 + 40
    prepare_and_complete(m, transit)
    assert m.state is completed


@pytest.mark.parametrize(("state", "result", "error", "pid", "epoch"), [
    (PC, COMMIT, InvalidProducerIdMappingError, PID + 1, 5),
    (PC, COMMIT, ProducerFencedError, PID, 6),
    (PC, ABORT, InvalidTxnStateError, PID, 5),
    (PA, COMMIT, InvalidTxnStateError, PID, 5),
    (ON, COMMIT, InvalidTxnStateError, PID, 5),
    (CC, COMMIT, InvalidTxnStateError, PID, 5),
])
def test_complete_txn_refuses_what_moved_meanwhile(
    state: TransactionState, result: TransactionResult, error: type[Exception], pid: int,
    epoch: int,
) -> None:
    with pytest.raises(error):
        prepare_complete_txn(meta(state), pid, epoch, result, T0)


def test_complete_txn_during_another_move_is_concurrent() -> None:
    m = meta(PC)
    m.prepare_complete(T0 + 1)
    with pytest.raises(ConcurrentTransactionsError):
        prepare_complete_txn(m, PID, 5, COMMIT, T0 + 2)


# -- timeouts and error codes ----------------------------------------------------------


@pytest.mark.parametrize("timeout", [0, -1, 900_001])
def test_transaction_timeout_out_of_bounds_is_refused(timeout: int) -> None:
    with pytest.raises(InvalidTransactionTimeoutError):
        check_transaction_timeout(timeout, 900_000)


def test_transaction_timeout_up_to_the_maximum_is_accepted() -> None:
    check_transaction_timeout(1, 900_000)
    check_transaction_timeout(900_000, 900_000)


@pytest.mark.parametrize(("error", "code"), [
    (ConcurrentTransactionsError, 51),
    (InvalidTxnStateError, 48),
    (ProducerFencedError, 90),
    (InvalidProducerEpochError, 47),
    (InvalidProducerIdMappingError, 49),
    (InvalidTransactionTimeoutError, 50),
])
def test_errors_carry_kafkas_codes(error: type[ApiError], code: int) -> None:
    # the server's mapping (server/handlers/_errors.code_of) looks the name up in kio
    assert int(ErrorCode[error.kafka_error.lower()]) == code


# -- a random coordinator: every prepared move completes, encodes and keeps the invariants --

OPS = st.lists(st.one_of(
    st.tuples(st.just("init"), st.booleans()),  # with KIP-360's expected id and epoch?
    st.tuples(st.just("add"), st.sets(st.sampled_from([TP, TP2, ("t", 9)]), min_size=1)),
    st.tuples(st.just("end"), st.sampled_from([COMMIT, ABORT])),
    st.tuples(st.just("markers"), st.just(None)),
    st.tuples(st.just("expire"), st.just(None)),
), max_size=40)
# whether the record of each prepared move is written (mostly) or its write fails
WRITES = st.lists(st.sampled_from([True, True, True, False]), min_size=40, max_size=40)


@settings(max_examples=300, deadline=None)
@given(ops=OPS, writes=WRITES,
       start_epoch=st.sampled_from([NO_PRODUCER_EPOCH, 3, MAX_PRODUCER_EPOCH - 3]))
# a whole run's find: a fence whose write failed at Short.MAX_VALUE, then a new
# incarnation's InitProducerId (Kafka's check order leaves the id stuck there)
@example(ops=[("init", False), ("init", False), ("markers", None), ("add", {("orders", 0)}),
              ("init", False), ("init", False)],
         writes=[True, True, True, True, False, True], start_epoch=MAX_PRODUCER_EPOCH - 3)
def test_random_requests_keep_the_invariants(
    ops: list[tuple[str, object]], writes: list[bool], start_epoch: int
) -> None:
    m = meta(EM, epoch=start_epoch)
    ids = iter(range(NEW_PID, NEW_PID + 1000))
    client = (PID, max(start_epoch, 0))
    pending: TxnTransitMetadata | None = None
    decided: TransactionResult | None = None
    now = T0
    for (op, arg), written in zip(ops, writes, strict=False):
        now += 1
        before = (m.producer_id, m.producer_epoch)
        try:
            if op == "init":
                transit = prepare_init_producer_id(
                    m, 60000, now, lambda: next(ids), expected=client if arg else None)
                if transit.state is PF:
                    abort = prepare_end_txn(m, transit.producer_id, transit.producer_epoch,
                                            ABORT, now, from_client=False)
                    assert abort is not None and abort.state is PA
                    transit, decided = abort, ABORT
                pending = transit
            elif op == "add":
                assert isinstance(arg, set)
                pending = prepare_add_partitions(m, *client, arg, now) or pending
            elif op == "end":
                assert isinstance(arg, TransactionResult)
                decision = prepare_end_txn(m, *client, arg, now)
                if decision is not None:
                    pending, decided = decision, arg
            elif op == "markers" and decided is not None and m.state in (PC, PA):
                pending = prepare_complete_txn(m, m.producer_id, m.producer_epoch, decided, now)
            elif op == "expire" and m.pending_state is None and m.state.is_expiration_allowed:
                assert m.prepare_dead().state is DE
                m.cancel_pending_transition()  # expiry is a tombstone, never completed
        except (ConcurrentTransactionsError, InvalidTxnStateError, ProducerFencedError,
                InvalidProducerIdMappingError):
            pass
        except IllegalTransactionTransitionError:
            # Kafka's own dead end: KIP-360 with an epoch a fence moved past exhaustion
            assert op == "init" and arg and m.is_producer_epoch_exhausted
        if pending is not None:
            value = TransactionLogValue.from_transit(pending)
            assert decode_value(value.encode(1)) == value
            if written:
                m.complete_transition_to(pending)
                if pending.state is EM:
                    client = (pending.producer_id, pending.producer_epoch)
            else:
                m.cancel_pending_transition()
            pending = None
        # invariants
        if m.state in (EM, CC, CA):
            assert not m.topic_partitions
        else:
            assert m.topic_partitions and m.txn_start_timestamp != -1
        if m.producer_id == before[0]:
            assert m.producer_epoch >= before[1]
        else:
            assert m.producer_epoch == 0 and m.previous_producer_id == before[0]
        assert m.producer_epoch <= MAX_PRODUCER_EPOCH
        assert m.pending_state is None
