"""The replica fetcher's sans-I/O parts: whole batches of a cut response, where a
follower's log stops agreeing with its leader's (KIP-101 / KIP-279), and the follower's
side of a fetch session (KIP-227) against the leader's session cache. The fetcher itself
runs against real brokers in tests/interop/test_replication.py and test_faults.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kio.schema.errors import ErrorCode

from odradek.cluster.partition import Partition, PartitionState
from odradek.cluster.replica_fetcher import (
    FetchSessionHandler,
    Position,
    ReplicaFetcher,
    complete_batches,
)
from odradek.server.fetch_session import CachedPartition, ContextKind, FetchSessionCache
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


class Leader:
    """The leader's session cache, answering what :class:`FetchSessionHandler` builds."""

    def __init__(self) -> None:
        self.cache = FetchSessionCache()
        self.named: list[list[TopicPartition]] = []

    def fetch(self, handler: FetchSessionHandler,
              wanted: dict[TopicPartition, Position]) -> tuple[bool, ContextKind]:
        full, named, forgotten = handler.build(wanted)
        self.named.append(named)
        parts = [CachedPartition(tp.topic, None, tp.partition, wanted[tp][0], wanted[tp][4])
                 for tp in named]
        context = self.cache.new_context(handler.session_id, handler.epoch, parts,
                                         [(tp.topic, tp.partition) for tp in forgotten],
                                         False, 0)
        session_id = 0
        if context.kind is ContextKind.FULL:
            created = self.cache.maybe_create(True, False, parts, 0)
            session_id = created.id if created is not None else 0
        elif context.session is not None:
            session_id = context.session.id
        ok = handler.handle(full, wanted, context.error, session_id)
        return ok, context.kind


def positions(offsets: dict[int, int]) -> dict[TopicPartition, Position]:
    return {TopicPartition("t", p): (o, 3, 3, 0, 1048576) for p, o in offsets.items()}


def test_an_idle_follower_names_no_partition_once_its_session_is_open() -> None:
    leader, handler = Leader(), FetchSessionHandler()
    wanted = positions({p: 10 for p in range(100)})
    assert leader.fetch(handler, wanted) == (True, ContextKind.FULL)
    assert len(leader.named[-1]) == 100 and handler.session_id != 0 and handler.epoch == 1
    for epoch in (2, 3):
        assert leader.fetch(handler, wanted) == (True, ContextKind.INCREMENTAL)
        assert leader.named[-1] == [] and handler.epoch == epoch
    # one partition appended: only it is named; the session still reads every partition
    wanted = positions({**{p: 10 for p in range(100)}, 7: 12})
    assert leader.fetch(handler, wanted) == (True, ContextKind.INCREMENTAL)
    assert leader.named[-1] == [TopicPartition("t", 7)]
    session = leader.cache.get(handler.session_id)
    assert session is not None and len(session.partitions) == 100
    assert session.partitions[("t", 7)].fetch_offset == 12
    # a partition backing off leaves the session, and comes back named
    del wanted[TopicPartition("t", 3)]
    assert leader.fetch(handler, wanted) == (True, ContextKind.INCREMENTAL)
    assert len(session.partitions) == 99
    wanted = positions({**{p: 10 for p in range(100)}, 7: 12})
    leader.fetch(handler, wanted)
    assert leader.named[-1] == [TopicPartition("t", 3)] and len(session.partitions) == 100


def test_a_lost_session_starts_a_new_full_one() -> None:
    leader, handler = Leader(), FetchSessionHandler()
    wanted = positions({0: 1, 1: 1})
    leader.fetch(handler, wanted)
    old = handler.session_id
    leader.cache.remove(old)  # the leader restarted, or evicted it
    assert leader.fetch(handler, wanted) == (False, ContextKind.ERROR)
    assert leader.fetch(handler, wanted) == (True, ContextKind.FULL)
    assert handler.session_id not in (0, old) and len(leader.named[-1]) == 2
    # an epoch the leader did not see (a lost exchange): INVALID_FETCH_SESSION_EPOCH, then
    # a new session
    handler.epoch += 1
    assert leader.fetch(handler, wanted) == (False, ContextKind.ERROR)
    assert leader.fetch(handler, wanted)[1] is ContextKind.FULL


def test_no_session_from_a_full_cache_means_full_fetches() -> None:
    leader, handler = Leader(), FetchSessionHandler()
    leader.cache.max_slots = 0
    wanted = positions({0: 1})
    for _ in range(2):
        assert leader.fetch(handler, wanted) == (True, ContextKind.FULL)
        assert handler.session_id == 0 and leader.named[-1] == [TopicPartition("t", 0)]
    assert not handler.handle(True, wanted, ErrorCode.fetch_session_id_not_found, 0)
