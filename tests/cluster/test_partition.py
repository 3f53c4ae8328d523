"""Partition (odradek.cluster.partition): leadership checks, acks=all against
min.insync.replicas, and the high watermark, over a real log of a real LogManager."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cluster.errors import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
)
from odradek.cluster.partition import Partition, PartitionState, leader_epoch_error
from odradek.records.builder import BatchBuilder
from odradek.storage import LogManager, TopicPartition
from odradek.storage.config import LogConfig
from tests.storage._util import make_batch

ME = 1
ALONE = PartitionState(ME, 3, (ME,), (ME,))
WITH_FOLLOWER = PartitionState(ME, 3, (ME, 2), (ME, 2))


@pytest.fixture
def log_manager(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path / "logs"])
    manager.startup()
    yield manager
    manager.shutdown()


def _partition(
    log_manager: LogManager, state: PartitionState, moved: list[int] | None = None,
    **config: str,
) -> Partition:
    log = log_manager.get_or_create_log(TopicPartition("t", 0), LogConfig.build({}, config))

    def on_high_watermark(p: Partition, _nbytes: int) -> None:
        if moved is not None:
            moved.append(p.high_watermark)

    return Partition(ME, log, state, on_high_watermark)


def test_leader_epoch_error() -> None:
    assert leader_epoch_error(-1, 5) is None
    assert leader_epoch_error(5, 5) is None
    assert leader_epoch_error(4, 5) == "FENCED_LEADER_EPOCH"
    assert leader_epoch_error(6, 5) == "UNKNOWN_LEADER_EPOCH"


def test_check_leader(log_manager: LogManager) -> None:
    partition = _partition(log_manager, ALONE)
    assert partition.is_leader and partition.leader_epoch == 3
    partition.check_leader()
    partition.check_leader(3)
    with pytest.raises(FencedLeaderEpochError) as fenced:
        partition.check_leader(2)
    assert fenced.value.kafka_error == "FENCED_LEADER_EPOCH"
    with pytest.raises(UnknownLeaderEpochError) as unknown:
        partition.check_leader(4)
    assert unknown.value.kafka_error == "UNKNOWN_LEADER_EPOCH"


def test_check_leader_when_another_broker_leads(log_manager: LogManager) -> None:
    partition = _partition(log_manager, PartitionState(2, 3, (2, ME), (2, ME)))
    assert not partition.is_leader
    for epoch in (-1, 3):
        with pytest.raises(NotLeaderOrFollowerError) as caught:
            partition.check_leader(epoch)
        assert caught.value.kafka_error == "NOT_LEADER_OR_FOLLOWER"
    # The epoch is checked first, as Kafka's checkCurrentLeaderEpoch.
    with pytest.raises(FencedLeaderEpochError):
        partition.check_leader(2)
    partition.update_state(PartitionState(-1, 4, (), (2, ME)))
    with pytest.raises(NotLeaderOrFollowerError):
        partition.check_leader()


def test_append_stamps_the_leader_epoch(log_manager: LogManager) -> None:
    partition = _partition(log_manager, ALONE)
    info = partition.append_records_as_leader(make_batch(3))
    assert (info.first_offset, info.last_offset) == (0, 2)
    assert partition.log.leader_epoch_cache.latest_epoch == 3


def test_acks_all_below_min_insync_replicas_refused_before_writing(
    log_manager: LogManager,
) -> None:
    partition = _partition(log_manager, ALONE, **{"min.insync.replicas": "2"})
    with pytest.raises(NotEnoughReplicasError) as caught:
        partition.append_records_as_leader(make_batch(), acks=-1)
    assert caught.value.kafka_error == "NOT_ENOUGH_REPLICAS"
    assert partition.log.log_end_offset == 0
    # acks=1 and acks=0 do not need the ISR.
    partition.append_records_as_leader(make_batch(), acks=1)
    partition.append_records_as_leader(make_batch(), acks=0)
    assert partition.log.log_end_offset == 2
    partition.update_state(WITH_FOLLOWER)  # the ISR is large enough again
    partition.append_records_as_leader(make_batch(), acks=-1)
    assert partition.log.log_end_offset == 3


def test_high_watermark_follows_a_leader_alone(log_manager: LogManager) -> None:
    moved: list[int] = []
    partition = _partition(log_manager, ALONE, moved)
    assert partition.log.high_watermark_managed
    assert partition.high_watermark == 0 and moved == []
    partition.append_records_as_leader(make_batch(2))
    assert partition.high_watermark == 2
    partition.append_records_as_leader(make_batch(3))
    assert partition.high_watermark == 5
    assert moved == [2, 5]


def test_high_watermark_waits_for_followers(log_manager: LogManager) -> None:
    """With followers in the ISR their positions are unknown until they fetch: the high
    watermark stays where it is."""
    moved: list[int] = []
    partition = _partition(log_manager, WITH_FOLLOWER, moved)
    partition.append_records_as_leader(make_batch(4))
    assert partition.high_watermark == 0 and moved == []
    assert not partition.maybe_increment_high_watermark()
    # The follower leaves the ISR: the leader alone moves it to its log end.
    partition.update_state(ALONE)
    assert partition.high_watermark == 4 and moved == [4]


def test_high_watermark_of_a_follower_does_not_move(log_manager: LogManager) -> None:
    partition = _partition(log_manager, PartitionState(2, 0, (2,), (2, ME)))
    partition.log.append_as_leader(make_batch(2))  # as a follower's fetcher would write
    assert partition.high_watermark == 0


def test_high_watermark_never_moves_back(log_manager: LogManager) -> None:
    partition = _partition(log_manager, ALONE)
    partition.append_records_as_leader(make_batch(5))
    assert partition.high_watermark == 5
    partition.update_state(WITH_FOLLOWER)
    partition.append_records_as_leader(make_batch(1))
    assert partition.high_watermark == 5
    assert not partition.maybe_increment_high_watermark()
    partition.update_state(ALONE)
    assert partition.high_watermark == 6


def test_restore_high_watermark_clamped(log_manager: LogManager) -> None:
    partition = _partition(log_manager, WITH_FOLLOWER)
    partition.log.truncate_fully_and_start_at(10)
    for _ in range(3):
        partition.append_records_as_leader(make_batch())
    assert (partition.log.log_start_offset, partition.log.log_end_offset) == (10, 13)
    partition.restore_high_watermark(11)
    assert partition.high_watermark == 11
    partition.restore_high_watermark(2)
    assert partition.high_watermark == 10  # not below the log start
    partition.restore_high_watermark(99)
    assert partition.high_watermark == 13  # not past the log end


def test_restore_then_a_leader_alone_moves_to_its_log_end(log_manager: LogManager) -> None:
    partition = _partition(log_manager, WITH_FOLLOWER)
    partition.append_records_as_leader(make_batch(4))
    partition.update_state(PartitionState(ME, 3, (ME,), (ME, 2)))
    partition.restore_high_watermark(1)
    assert partition.high_watermark == 4


def test_read_below_the_high_watermark_for_consumers(log_manager: LogManager) -> None:
    partition = _partition(log_manager, ALONE)
    partition.append_records_as_leader(make_batch(2))
    partition.update_state(WITH_FOLLOWER)
    partition.append_records_as_leader(make_batch(3))
    assert partition.high_watermark == 2
    consumer = partition.read(0, 1 << 20, min_one_message=True)
    follower = partition.read(0, 1 << 20, min_one_message=True, follower=True)
    assert 0 < consumer.size < follower.size
    assert consumer.high_watermark == 2 and consumer.log_end_offset == 5
    assert partition.read(2, 1 << 20, min_one_message=True).size == 0
    assert partition.read(2, 1 << 20, min_one_message=True, follower=True).size > 0


def test_repr(log_manager: LogManager) -> None:
    assert repr(_partition(log_manager, WITH_FOLLOWER)) == (
        "Partition(t-0, leader=1, leader_epoch=3, isr=[1, 2])"
    )


# -- followers, seen from the leader (replication) -------------------------------------
THREE = PartitionState(ME, 3, (ME, 2, 3), (ME, 2, 3))


def test_high_watermark_is_the_smallest_log_end_offset_over_the_isr(
    log_manager: LogManager,
) -> None:
    moved: list[int] = []
    partition = _partition(log_manager, THREE, moved)
    partition.append_records_as_leader(make_batch(10))
    assert partition.high_watermark == 0
    assert not partition.update_follower_fetch_state(2, 6, now=1000)  # 3 still unknown
    assert partition.update_follower_fetch_state(3, 4, now=1000)
    assert partition.high_watermark == 4
    assert partition.update_follower_fetch_state(3, 10, now=1001)
    assert partition.high_watermark == 6
    assert partition.update_follower_fetch_state(2, 10, now=1002)
    assert partition.high_watermark == 10 and moved == [4, 6, 10]
    # a follower fetching from an older offset never moves it back
    assert not partition.update_follower_fetch_state(2, 3, now=1003)
    assert partition.high_watermark == 10


def test_follower_caught_up_time_and_isr_shrink(log_manager: LogManager) -> None:
    partition = _partition(log_manager, THREE)
    partition.make_leader(now=0)
    partition.append_records_as_leader(make_batch(5))
    partition.update_follower_fetch_state(2, 5, now=100)  # at the log end: caught up now
    partition.update_follower_fetch_state(3, 2, now=100)  # behind
    # becoming leader counted the ISR as caught up at that time (0)
    assert partition.out_of_sync_replicas(now=90, max_lag_ms=100) == []
    assert partition.out_of_sync_replicas(now=150, max_lag_ms=100) == [3]
    partition.update_follower_fetch_state(3, 5, now=260)  # at the log end now
    assert partition.out_of_sync_replicas(now=300, max_lag_ms=100) == [2]
    partition.append_records_as_leader(make_batch(5))
    # 3 fetches from where the log ended at its previous fetch (5): it was caught up at
    # that previous fetch (260), not now
    partition.update_follower_fetch_state(3, 5, now=400)
    assert 3 not in partition.out_of_sync_replicas(now=350, max_lag_ms=100)
    assert partition.out_of_sync_replicas(now=400, max_lag_ms=100) == [2, 3]


def test_a_follower_joins_the_isr_once_at_the_high_watermark(log_manager: LogManager) -> None:
    state = PartitionState(ME, 3, (ME, 2), (ME, 2, 3))
    partition = _partition(log_manager, state)
    partition.append_records_as_leader(make_batch(8))
    partition.update_follower_fetch_state(2, 8, now=10)
    assert partition.high_watermark == 8
    partition.update_follower_fetch_state(3, 5, now=10)
    assert not partition.expand_candidate(3)
    partition.update_follower_fetch_state(3, 8, now=20)
    assert partition.expand_candidate(3)
    assert not partition.expand_candidate(2)  # in already
    # while the expansion is being written the new member counts for the high watermark
    partition.pending_isr = (ME, 2, 3)
    partition.append_records_as_leader(make_batch(2))
    partition.update_follower_fetch_state(2, 10, now=30)
    assert partition.high_watermark == 8
    partition.update_follower_fetch_state(3, 10, now=30)
    assert partition.high_watermark == 10


def test_a_follower_joins_the_isr_only_past_the_known_start_of_the_leadership(
    log_manager: LogManager,
) -> None:
    """Kafka's isFollowerInSync: at the high watermark is not enough, the follower must
    also have reached where this leadership began, and that offset must be known. The
    partition keeps it; the epoch cache's entry is not asked (a cache cleared, as a full
    truncation or a damaged checkpoint leaves it, knew no start and let anyone in)."""
    partition = _partition(log_manager, PartitionState(2, 3, (2, ME), (2, ME, 3)))
    partition.log.append_as_leader(make_batch(10), leader_epoch=3)
    partition.update_follower_high_watermark(5)
    partition.update_state(PartitionState(ME, 4, (ME, 2), (2, ME, 3)))
    assert partition.leader_epoch_start_offset == 10 and partition.high_watermark == 5
    partition.log.leader_epoch_cache.clear()
    partition.update_follower_fetch_state(3, 5, now=10)  # at the high watermark
    assert not partition.expand_candidate(3)  # but not at the start of the leadership
    partition.update_follower_fetch_state(3, 10, now=20)
    assert partition.expand_candidate(3)
    partition.leader_epoch_start_offset = None  # unknown: nobody joins
    assert not partition.expand_candidate(3)


def test_becoming_leader_records_the_epoch_at_the_log_end(log_manager: LogManager) -> None:
    follower = _partition(log_manager, PartitionState(2, 4, (2, ME), (2, ME)))
    follower.log.append_as_leader(make_batch(3), leader_epoch=4)
    follower.update_follower_high_watermark(10)
    assert follower.high_watermark == 3  # bounded by its own log end
    follower.update_state(PartitionState(ME, 5, (ME,), (2, ME)))
    cache = follower.log.leader_epoch_cache
    assert cache.entries[-1] == (5, 3)
    assert cache.end_offset_for(4, follower.log.log_end_offset) == (4, 3)
    assert follower.high_watermark == 3


def test_a_new_leader_lags_its_epoch_start_until_the_isr_has_fetched(
    log_manager: LogManager,
) -> None:
    """A follower learns the leader's high watermark one fetch late: elected, it does not
    know where the committed records end until its ISR fetches from it (KIP-207)."""
    follower = _partition(log_manager, PartitionState(2, 4, (2, ME), (2, ME)))
    follower.log.append_as_leader(make_batch(5), leader_epoch=4)
    follower.update_follower_high_watermark(2)
    assert not follower.high_watermark_lags_epoch_start()  # only a leader can lag
    follower.update_state(PartitionState(ME, 5, (ME, 2), (2, ME)))
    assert follower.leader_epoch_start_offset == 5
    assert follower.high_watermark == 2 and follower.high_watermark_lags_epoch_start()
    follower.update_follower_fetch_state(2, 4, now=10)
    assert follower.high_watermark == 4 and follower.high_watermark_lags_epoch_start()
    follower.update_follower_fetch_state(2, 5, now=20)
    assert follower.high_watermark == 5 and not follower.high_watermark_lags_epoch_start()
    follower.update_state(PartitionState(2, 6, (2, ME), (2, ME)))
    assert follower.leader_epoch_start_offset is None


def test_a_leader_alone_never_lags(log_manager: LogManager) -> None:
    partition = _partition(log_manager, ALONE)
    partition.append_records_as_leader(make_batch(3))
    assert partition.leader_epoch_start_offset == 0
    assert not partition.high_watermark_lags_epoch_start()
    partition.update_state(PartitionState(ME, 4, (ME,), (ME,)))
    assert partition.leader_epoch_start_offset == 3
    assert not partition.high_watermark_lags_epoch_start()


def test_an_older_state_never_replaces_a_newer_one(log_manager: LogManager) -> None:
    """Q38 (issue 48): the leader's own ISR writes land in its state at once, the
    notifications of them later, each with the state read when it was handled. A state
    read between two writes of the leader and applied after the second (ISR [1, 2] at
    partition epoch 6, after [1, 2, 3] at 7) must not take the third replica out of the
    ISR the high watermark counts: ZooKeeper lists it, so the controller may elect it, and
    an acks=all record past its log end would be acknowledged and lost. Kafka skips a
    state older than the one it has (``Partition.makeLeader``: the leader epoch, then the
    partition epoch)."""
    partition = _partition(log_manager, PartitionState(ME, 3, (ME,), (ME, 2, 3), 5))
    partition.append_records_as_leader(make_batch(10))
    partition.update_state(PartitionState(ME, 3, (ME, 2), (ME, 2, 3), 6))  # 2 joined
    partition.update_state(PartitionState(ME, 3, (ME, 2, 3), (ME, 2, 3), 7))  # 3 joined
    partition.update_follower_fetch_state(2, 10, 0)
    partition.update_follower_fetch_state(3, 10, 0)
    partition.append_records_as_leader(make_batch(5))
    partition.update_follower_fetch_state(3, 10, 1)  # 3 is behind: still at 10
    # the notification of the state at 6, read before 7 was written, handled now
    assert not partition.update_state(PartitionState(ME, 3, (ME, 2), (ME, 2, 3), 6))
    assert partition.state.isr == (ME, 2, 3) and partition.state.partition_epoch == 7
    partition.update_follower_fetch_state(2, 15, 2)  # 2 caught up
    assert partition.high_watermark == 10  # 3 still holds it
    # and an older leader epoch is skipped too
    assert not partition.update_state(PartitionState(2, 2, (2, 3), (ME, 2, 3), 9))
    assert partition.is_leader and partition.leader_epoch == 3
    # a newer state is taken: a controller's ISR shrink at the same epoch, a new epoch
    assert partition.update_state(PartitionState(ME, 3, (ME, 2), (ME, 2, 3), 8))
    assert partition.high_watermark == 15
    assert partition.update_state(PartitionState(3, 4, (3, 2), (ME, 2, 3), 9))
    assert not partition.is_leader


# -- the high watermark lets the producer state forget replicated transactions (issue 46)
def _transaction(partition: Partition, pid: int) -> int:
    """A one-record transaction of ``pid`` and its commit marker; the marker's offset."""
    builder = BatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0,
                           is_transactional=True)
    builder.append(b"k", b"v", 1_700_000_000_000)
    partition.append_records_as_leader(builder.build())
    return partition.append_control_as_leader(pid, 0, True, 0).first_offset


def test_a_lone_leaders_high_watermark_forgets_each_transaction_at_once(
    log_manager: LogManager,
) -> None:
    partition = _partition(log_manager, ALONE)
    state = partition.log.producer_state
    for pid in (1000, 1001, 1002):
        marker = _transaction(partition, pid)
        assert partition.high_watermark == marker + 1  # the lone leader's step moved it
        assert state.unreplicated == {}


def test_a_leaders_high_watermark_forgets_a_transaction_once_it_passes_the_marker(
    log_manager: LogManager,
) -> None:
    partition = _partition(log_manager, WITH_FOLLOWER)
    state = partition.log.producer_state
    marker = _transaction(partition, 1000)
    assert partition.update_follower_fetch_state(2, marker, now=1000)  # short of it
    assert state.unreplicated == {0: (1000, marker)}
    assert partition.update_follower_fetch_state(2, marker + 1, now=1001)
    assert state.unreplicated == {}


def test_a_followers_high_watermark_forgets_the_transactions_it_passes(
    log_manager: LogManager, tmp_path: Path,
) -> None:
    leader_manager = LogManager([tmp_path / "leader"])
    leader_manager.startup()
    try:
        leader = _partition(leader_manager, ALONE)
        marker = _transaction(leader, 1000)
        follower = _partition(log_manager, PartitionState(2, 3, (ME, 2), (ME, 2)))
        while follower.log.log_end_offset < leader.log.log_end_offset:
            follower.log.append_as_follower(
                leader.log.read(follower.log.log_end_offset, 1 << 20).read())
        state = follower.log.producer_state
        follower.update_follower_high_watermark(marker)
        assert state.unreplicated == {0: (1000, marker)}
        follower.update_follower_high_watermark(marker + 1)
        assert state.unreplicated == {}
    finally:
        leader_manager.shutdown()
