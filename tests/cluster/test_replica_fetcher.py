"""The replica fetcher's sans-I/O parts: whole batches of a cut response, and where a
follower's log stops agreeing with its leader's (KIP-101 / KIP-279). The fetcher itself
runs against real brokers in tests/interop/test_replication.py and test_faults.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cluster.partition import Partition, PartitionState
from odradek.cluster.replica_fetcher import ReplicaFetcher, complete_batches
from odradek.storage import LogManager, TopicPartition
from odradek.storage.config import LogConfig
from tests.storage._util import make_batch


@pytest.fixture
def log_manager(tmp_path: Path) -> Iterator[LogManager]:
    manager = LogManager([tmp_path / "logs"])
    manager.startup()
    yield manager
    manager.shutdown()


def test_complete_batches_drops_a_partial_last_batch() -> None:
    one, two = make_batch(3), make_batch(2, seed=1)
    assert bytes(complete_batches(one + two)) == one + two
    assert bytes(complete_batches(one + two[:-1])) == one
    assert bytes(complete_batches(one[:11])) == b""
    assert bytes(complete_batches(b"")) == b""


def _follower(log_manager: LogManager, epochs: list[tuple[int, int]]) -> Partition:
    """A follower of broker 2 whose log holds ``count`` records per ``(epoch, count)``."""
    log = log_manager.get_or_create_log(TopicPartition("t", 0), LogConfig.build({}, {}))
    for epoch, count in epochs:
        log.append_as_leader(make_batch(count), leader_epoch=epoch)
    return Partition(1, log, PartitionState(2, 9, (2, 1), (2, 1)))


def test_truncation_to_the_leaders_end_of_the_same_epoch(log_manager: LogManager) -> None:
    follower = _follower(log_manager, [(1, 5), (3, 5)])  # epoch 3 at 5..9
    # the leader has epoch 3 too, but it ended at 7 there
    assert ReplicaFetcher._truncation_offset(follower, 3, 3, 7) == 7
    # the leader's log goes further than ours: keep everything
    assert ReplicaFetcher._truncation_offset(follower, 3, 3, 12) == 10


def test_truncation_when_the_leader_never_had_our_epoch(log_manager: LogManager) -> None:
    follower = _follower(log_manager, [(1, 5), (3, 5)])
    # the leader's newest epoch at or below 3 is 1, ending at 6 in its log: ours ended at 5
    assert ReplicaFetcher._truncation_offset(follower, 3, 1, 6) == 5
    assert ReplicaFetcher._truncation_offset(follower, 3, 1, 4) == 4


def test_truncation_when_the_leader_knows_no_epoch(log_manager: LogManager) -> None:
    follower = _follower(log_manager, [(1, 5)])
    follower.update_follower_high_watermark(3)
    assert ReplicaFetcher._truncation_offset(follower, 1, -1, -1) == 3
