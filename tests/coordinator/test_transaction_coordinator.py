"""The transaction coordinator over an in-memory ``__transaction_state`` and fake partition
leaders: InitProducerId, AddPartitionsToTxn, EndTxn, the markers and their retries, the
failover of a coordinator mid-commit, fencing, timeouts and expiration."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from typing import cast

import pytest

from odradek.coordinator.offsets_topic import OffsetsTopic
from odradek.coordinator.transaction_coordinator import (
    LOAD_STEP_RECORDS,
    TransactionConfig,
    TransactionCoordinator,
    TxnMarker,
)
from odradek.coordinator.transaction_records import TransactionLogKey, decode_key, decode_value
from odradek.coordinator.transaction_state import TopicPartition, TransactionState
from odradek.protocol.errors import ErrorCode
from tests.coordinator._offsets_topic import Clock, FakeOffsetsTopic

E = ErrorCode
TXN = "my-txn"
TP0, TP1, TP2 = ("out", 0), ("out", 1), ("other", 0)


class FakeTopic(FakeOffsetsTopic):
    def __init__(self) -> None:
        super().__init__()
        self.name = "__transaction_state"
        self.led: set[int] = set(range(self.partition_count))

    def led_partitions(self) -> list[int]:
        return sorted(self.led)

    def states(self, transactional_id: str) -> list[TransactionState | None]:
        """The states written for the id, in order (None: a tombstone)."""
        out: list[TransactionState | None] = []
        for records in self.records.values():
            for key, value in records:
                found = decode_key(key)
                if found is not None and found.transactional_id == transactional_id:
                    decoded = decode_value(value)
                    out.append(None if decoded is None else decoded.state)
        return out


class Leaders:
    """Partition leaders answering WriteTxnMarkers: each call is recorded; ``answers``
    overrides the error of a partition for the next calls; ``gate`` holds every call."""

    def __init__(self) -> None:
        self.leader_of: dict[TopicPartition, int] = {TP0: 1, TP1: 2, TP2: 1}
        self.calls: list[tuple[int, TxnMarker]] = []
        self.answers: dict[TopicPartition, ErrorCode] = {}
        self.gate: asyncio.Event | None = None
        self.written: list[tuple[TopicPartition, int, int, bool]] = []

    async def send(self, leader: int, marker: TxnMarker) -> Mapping[TopicPartition, ErrorCode]:
        self.calls.append((leader, marker))
        if self.gate is not None:
            await self.gate.wait()
        out = {}
        for tp in marker.partitions:
            error = self.answers.get(tp, E.none)
            if self.leader_of.get(tp) != leader:
                error = E.not_leader_or_follower
            if error == E.none:
                self.written.append((tp, marker.producer_id, marker.producer_epoch,
                                     marker.commit))
            out[tp] = error
        return out


def make(topic: FakeTopic, clock: Clock, leaders: Leaders,
         **config: int) -> TransactionCoordinator:
    ids = iter(range(1000, 2000))

    async def allocate() -> int:
        return next(ids)

    coordinator = TransactionCoordinator(
        cast(OffsetsTopic, topic), TransactionConfig(**config), allocate, time_ms=clock)
    coordinator.send_markers = leaders.send
    coordinator.partition_leader = leaders.leader_of.get
    coordinator.partition_exists = lambda tp: tp in leaders.leader_of
    return coordinator


Body = Callable[[TransactionCoordinator, FakeTopic, Clock, Leaders], Awaitable[None]]


def run(body: Body, **config: int) -> None:
    async def main() -> None:
        topic, clock, leaders = FakeTopic(), Clock(), Leaders()
        coordinator = make(topic, clock, leaders, **config)
        coordinator.startup()
        try:
            await body(coordinator, topic, clock, leaders)
        finally:
            coordinator.shutdown()

    asyncio.run(main())


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.005)


async def begin(c: TransactionCoordinator, *partitions: TopicPartition) -> tuple[int, int]:
    result = await c.init_producer_id(TXN, 60000)
    assert result.error == E.none
    assert await c.add_partitions(TXN, result.producer_id, result.producer_epoch,
                                  partitions) == E.none
    return result.producer_id, result.producer_epoch


# -- InitProducerId ---------------------------------------------------------------------


def test_init_producer_id_gives_a_new_id_then_bumps_its_epoch() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        first = await c.init_producer_id(TXN, 60000)
        assert first == (E.none, 1000, 0)
        second = await c.init_producer_id(TXN, 60000)
        assert second == (E.none, 1000, 1)
        assert topic.states(TXN) == [TransactionState.EMPTY, TransactionState.EMPTY]
        # a fresh coordinator loading the partition knows the id at its epoch
        fresh = make(topic, clock, leaders)
        fresh.startup()
        assert fresh.txns[TXN].producer_epoch == 1
        assert await fresh.init_producer_id(TXN, 60000) == (E.none, 1000, 2)
        fresh.shutdown()

    run(body)


def test_init_producer_id_bad_input() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        assert (await c.init_producer_id(TXN, 0)).error == E.invalid_transaction_timeout
        assert (await c.init_producer_id(TXN, 900001)).error == E.invalid_transaction_timeout
        assert (await c.init_producer_id("", 1000)).error == E.invalid_request
        topic.led.discard(c.partition_for(TXN))
        c.refresh_leadership()
        assert (await c.init_producer_id(TXN, 1000)).error == E.not_coordinator

    run(body)


def test_kip_360_expected_epoch_bumps_and_a_stale_one_is_fenced() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = (await c.init_producer_id(TXN, 60000))[1:]
        assert await c.init_producer_id(TXN, 60000, (pid, epoch)) == (E.none, pid, epoch + 1)
        # a retry with the same expected epoch gets the same answer again
        assert await c.init_producer_id(TXN, 60000, (pid, epoch)) == (E.none, pid, epoch + 1)
        assert (await c.init_producer_id(TXN, 60000, (pid, 7))).error == E.producer_fenced
        assert (await c.init_producer_id(TXN, 60000, (pid + 1, 0))).error == (
            E.producer_fenced)

    run(body)


def test_a_failed_write_answers_and_cancels_the_move() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        await c.init_producer_id(TXN, 60000)
        topic.fail_appends = True
        assert (await c.init_producer_id(TXN, 60000)).error == E.not_coordinator
        assert c.txns[TXN].pending_state is None and c.txns[TXN].producer_epoch == 0
        topic.fail_appends = False
        assert await c.init_producer_id(TXN, 60000) == (E.none, 1000, 1)

    run(body)


def test_a_partition_unloaded_while_a_producer_id_is_allocated_leaves_no_entry() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        gate, asked = asyncio.Event(), asyncio.Event()

        async def allocate() -> int:
            asked.set()
            await gate.wait()
            return 7000

        c.allocate_producer_id = allocate
        first = asyncio.create_task(c.init_producer_id(TXN, 60000))
        await asked.wait()
        # the id's partition moves away meanwhile: no entry is left for it
        partition = c.partition_for(TXN)
        topic.led.discard(partition)
        c.refresh_leadership()
        gate.set()
        assert (await first).error == E.not_coordinator
        assert TXN not in c.txns and topic.states(TXN) == []
        assert all(m.transactional_id != TXN for m in c.list_transactions()[1])
        # it comes back: the client's retry gets an id
        topic.led.add(partition)
        c.refresh_leadership()
        assert (await c.init_producer_id(TXN, 60000)).error == E.none

    run(body)


# -- AddPartitionsToTxn -----------------------------------------------------------------


def test_add_partitions_bad_input() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        assert await c.add_partitions(TXN, 1000, 0, [TP0]) == E.invalid_producer_id_mapping
        pid, epoch = (await c.init_producer_id(TXN, 60000))[1:]
        assert await c.add_partitions(TXN, pid + 1, epoch, [TP0]) == (
            E.invalid_producer_id_mapping)
        assert await c.add_partitions(TXN, pid, epoch + 1, [TP0]) == E.producer_fenced
        assert await c.add_partitions(TXN, pid, epoch, [TP0]) == E.none
        assert await c.add_partitions(TXN, pid, epoch, [TP0]) == E.none  # nothing written
        assert topic.states(TXN)[-1] is TransactionState.ONGOING
        assert len(topic.states(TXN)) == 2
        assert c.verify_partitions(TXN, pid, epoch, [TP0, TP1]) == (
            E.none, {TP0: E.none, TP1: E.invalid_txn_state})

    run(body)


def test_verification_answers_for_added_partitions_while_another_is_written() -> None:
    """KIP-890: a partition already in the transaction is verified whatever is being
    written for another one (the append checks again); while the transaction ends the
    answer is CONCURRENT_TRANSACTIONS, retriable, as Kafka's
    ``handleVerifyPartitionsInTransaction``."""
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0)
        gate = asyncio.Event()

        async def replicated(partition: int) -> ErrorCode:
            await gate.wait()
            return E.none

        c.wait_replicated = replicated
        adding = asyncio.create_task(c.add_partitions(TXN, pid, epoch, [TP1]))
        await until(lambda: c.txns[TXN].pending_state is TransactionState.ONGOING)
        assert c.verify_partitions(TXN, pid, epoch, [TP0, TP1]) == (
            E.none, {TP0: E.none, TP1: E.invalid_txn_state})
        gate.set()
        assert await adding == E.none
        assert c.verify_partitions(TXN, pid, epoch, [TP0, TP1]) == (
            E.none, {TP0: E.none, TP1: E.none})
        # the commit is being written, then its markers: not yet known how it ends
        gate.clear()
        leaders.gate = asyncio.Event()
        ending = asyncio.create_task(c.end_txn(TXN, pid, epoch, commit=True))
        await until(lambda: c.txns[TXN].pending_state is TransactionState.PREPARE_COMMIT)
        assert c.verify_partitions(TXN, pid, epoch, [TP0]) == (E.concurrent_transactions, {})
        gate.set()
        assert await ending == E.none
        assert c.txns[TXN].state is TransactionState.PREPARE_COMMIT
        assert c.verify_partitions(TXN, pid, epoch, [TP0]) == (E.concurrent_transactions, {})
        leaders.gate.set()
        await until(lambda: c.txns[TXN].state is TransactionState.COMPLETE_COMMIT)
        # the transaction is over: a late batch of it is refused
        assert c.verify_partitions(TXN, pid, epoch, [TP0, TP1]) == (
            E.none, {TP0: E.invalid_txn_state, TP1: E.invalid_txn_state})

    run(body)


# -- EndTxn and the markers ------------------------------------------------------------


def test_commit_writes_prepare_then_markers_then_complete() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0, TP1, TP2)
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.none
        await until(lambda: c.txns[TXN].state is TransactionState.COMPLETE_COMMIT)
        assert sorted(leaders.written) == sorted(
            (tp, pid, epoch, True) for tp in (TP0, TP1, TP2))
        # one request per leader: broker 1 leads TP0 and TP2
        assert sorted((leader, m.partitions) for leader, m in leaders.calls) == [
            (1, (TP2, TP0)), (2, (TP1,))]
        assert topic.states(TXN)[-2:] == [TransactionState.PREPARE_COMMIT,
                                          TransactionState.COMPLETE_COMMIT]
        assert not c.txns[TXN].topic_partitions
        # a retry of the same commit is answered NONE; an abort now is INVALID_TXN_STATE
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.none
        assert await c.end_txn(TXN, pid, epoch, commit=False) == E.invalid_txn_state

    run(body)


def test_end_txn_bad_input() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        assert await c.end_txn(TXN, 1000, 0, commit=True) == E.invalid_producer_id_mapping
        pid, epoch = (await c.init_producer_id(TXN, 60000))[1:]
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.invalid_txn_state
        await c.add_partitions(TXN, pid, epoch, [TP0])
        assert await c.end_txn(TXN, pid, epoch - 1, commit=True) == E.producer_fenced
        assert await c.end_txn(TXN, pid + 5, epoch, commit=True) == (
            E.invalid_producer_id_mapping)

    run(body)


def test_requests_while_markers_are_written_are_concurrent_transactions() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0)
        leaders.gate = asyncio.Event()
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.none
        await until(lambda: bool(leaders.calls))
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.concurrent_transactions
        assert await c.add_partitions(TXN, pid, epoch, [TP1]) == E.concurrent_transactions
        assert (await c.init_producer_id(TXN, 60000)).error == E.concurrent_transactions
        leaders.gate.set()
        await until(lambda: c.txns[TXN].state is TransactionState.COMPLETE_COMMIT)
        assert await c.add_partitions(TXN, pid, epoch, [TP1]) == E.none

    run(body)


def test_markers_are_retried_until_written_and_follow_a_moved_leader() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0, TP1)
        leaders.answers[TP1] = E.not_enough_replicas
        assert await c.end_txn(TXN, pid, epoch, commit=False) == E.none
        await until(lambda: len(leaders.calls) >= 3)
        assert c.txns[TXN].state is TransactionState.PREPARE_ABORT
        # TP1's leadership moves to broker 3, which can write it
        leaders.leader_of[TP1] = 3
        del leaders.answers[TP1]
        await until(lambda: c.txns[TXN].state is TransactionState.COMPLETE_ABORT)
        assert (TP1, pid, epoch, False) in leaders.written
        assert leaders.calls[-1][0] == 3

    run(body)


def test_a_deleted_topic_needs_no_marker() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0, TP2)
        leaders.gate = asyncio.Event()
        leaders.answers[TP2] = E.unknown_topic_or_partition
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.none
        del leaders.leader_of[TP2]
        leaders.gate.set()
        await until(lambda: c.txns[TXN].state is TransactionState.COMPLETE_COMMIT)

    run(body)


def test_a_new_coordinator_resumes_the_markers_of_a_prepared_commit() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0, TP1)
        leaders.answers[TP1] = E.not_leader_or_follower
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.none
        await until(lambda: len(leaders.calls) >= 2)
        # the coordinator loses its partition: it forgets the id and stops sending
        topic.led.clear()
        c.refresh_leadership()
        assert TXN not in c.txns
        await asyncio.sleep(0)
        sent = len(leaders.calls)
        del leaders.answers[TP1]
        topic.led = {c.partition_for(TXN)}  # another broker leads it now
        fresh = make(topic, clock, leaders)
        fresh.startup()
        try:
            assert fresh.txns[TXN].state is TransactionState.PREPARE_COMMIT
            await until(lambda: fresh.txns[TXN].state is TransactionState.COMPLETE_COMMIT)
            assert (TP1, pid, epoch, True) in leaders.written
            assert len(leaders.calls) > sent
        finally:
            fresh.shutdown()

    run(body)


# -- fencing, timeouts, expiration ------------------------------------------------------


def test_a_new_incarnation_fences_the_open_transaction_of_the_old_one() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0)
        assert (await c.init_producer_id(TXN, 60000)).error == E.concurrent_transactions
        await until(lambda: c.txns[TXN].state is TransactionState.COMPLETE_ABORT)
        assert leaders.written == [(TP0, pid, epoch + 1, False)]
        assert await c.init_producer_id(TXN, 60000) == (E.none, pid, epoch + 2)
        # the zombie's requests are fenced
        assert await c.add_partitions(TXN, pid, epoch, [TP0]) == E.producer_fenced
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.producer_fenced

    run(body)


def test_a_transaction_past_its_timeout_is_aborted_with_a_bumped_epoch() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        result = await c.init_producer_id(TXN, 1000)
        pid, epoch = result.producer_id, result.producer_epoch
        await c.add_partitions(TXN, pid, epoch, [TP0])
        clock.now += 999
        assert await c.abort_timed_out_transactions() == 0
        clock.now += 2
        assert await c.abort_timed_out_transactions() == 1
        await until(lambda: c.txns[TXN].state is TransactionState.COMPLETE_ABORT)
        assert c.txns[TXN].producer_epoch == epoch + 1
        assert leaders.written == [(TP0, pid, epoch + 1, False)]
        # the producer's commit comes too late
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.producer_fenced

    run(body)


def test_idle_transactional_ids_expire() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0)
        clock.now += 10_000
        assert await c.remove_expired_transactional_ids() == 0  # Ongoing never expires
        await c.end_txn(TXN, pid, epoch, commit=True)
        await until(lambda: c.txns[TXN].state is TransactionState.COMPLETE_COMMIT)
        clock.now += 4_999
        assert await c.remove_expired_transactional_ids() == 0
        clock.now += 2
        assert await c.remove_expired_transactional_ids() == 1
        assert TXN not in c.txns and topic.states(TXN)[-1] is None
        fresh = make(topic, clock, leaders)
        fresh.startup()
        assert TXN not in fresh.txns
        fresh.shutdown()
        # the id starts again with a new producer id
        assert (await c.init_producer_id(TXN, 60000)).producer_id != pid

    run(body, id_expiration_ms=5000)


@pytest.mark.parametrize("commit", [True, False])
def test_the_loaded_state_matches_what_was_written(commit: bool) -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0, TP1)
        await c.end_txn(TXN, pid, epoch, commit=commit)
        done = (TransactionState.COMPLETE_COMMIT if commit
                else TransactionState.COMPLETE_ABORT)
        await until(lambda: c.txns[TXN].state is done)
        fresh = make(topic, clock, leaders)
        fresh.startup()
        loaded = fresh.txns[TXN]
        assert (loaded.producer_id, loaded.producer_epoch, loaded.state) == (pid, epoch, done)
        fresh.shutdown()

    run(body)


def test_a_fenced_coordinator_stops_sending_markers() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        pid, epoch = await begin(c, TP0)
        leaders.answers[TP0] = E.transaction_coordinator_fenced
        assert await c.end_txn(TXN, pid, epoch, commit=True) == E.none
        await until(lambda: not c._completions)
        assert len(leaders.calls) == 1
        assert c.txns[TXN].state is TransactionState.PREPARE_COMMIT

    run(body)


# -- loading ------------------------------------------------------------------------------


def _many_ids_before(topic: FakeTopic, partition: int) -> int:
    """Put three steps' worth of ids in front of the partition's records (each a copy of
    its last value); returns how many."""
    _, value = topic.records[partition][-1]
    count = 3 * LOAD_STEP_RECORDS
    topic.records[partition][:0] = [
        (TransactionLogKey(f"many-{i}").encode(), value) for i in range(count)]
    return count


def test_a_large_partition_loads_in_steps_answering_load_in_progress() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        await c.init_producer_id(TXN, 60000)
        count = _many_ids_before(topic, c.partition_for(TXN))
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticking = asyncio.create_task(ticker())
        fresh = make(topic, clock, leaders)
        fresh.startup()
        try:
            assert fresh.check(TXN) == E.coordinator_load_in_progress
            assert (await fresh.init_producer_id(TXN, 60000)).error == (
                E.coordinator_load_in_progress)
            assert fresh.list_transactions()[0] == E.coordinator_load_in_progress
            await until(lambda: fresh.check(TXN) == E.none)
            assert ticks >= 2  # the event loop ran between the steps
            assert len(fresh.txns) == count + 1
            assert await fresh.init_producer_id(TXN, 60000) == (E.none, 1000, 1)
        finally:
            ticking.cancel()
            fresh.shutdown()

    run(body)


def test_a_partition_resigned_while_it_loads_is_not_adopted() -> None:
    async def body(c: TransactionCoordinator, topic: FakeTopic, clock: Clock,
                   leaders: Leaders) -> None:
        await c.init_producer_id(TXN, 60000)
        partition = c.partition_for(TXN)
        _many_ids_before(topic, partition)
        fresh = make(topic, clock, leaders)
        fresh.startup()
        try:
            assert fresh.check(TXN) == E.coordinator_load_in_progress
            topic.led.discard(partition)
            fresh.refresh_leadership()
            assert fresh.check(TXN) == E.not_coordinator
            for _ in range(10):  # as many steps as the load would have taken
                await asyncio.sleep(0)
            assert fresh.check(TXN) == E.not_coordinator and not fresh.txns
            # led again: loaded again, from the start
            topic.led.add(partition)
            fresh.refresh_leadership()
            await until(lambda: fresh.check(TXN) == E.none)
            assert fresh.txns[TXN].producer_id == 1000
        finally:
            fresh.shutdown()

    run(body)
