"""Partition (odradek.cluster.partition): leadership checks, acks=all against
min.insync.replicas, and the high watermark, over a real log of a real LogManager."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cluster.partition import (
    FencedLeaderEpochError,
    NotEnoughReplicasError,
    NotLeaderOrFollowerError,
    Partition,
    PartitionState,
    UnknownLeaderEpochError,
    leader_epoch_error,
)
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

    def on_high_watermark(p: Partition) -> None:
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
